"""Next-token sampling and speculative acceptance on numpy logits (the rules of :mod:`lrref.backends.hf`, without
torch).

Used by backends whose logits are numpy arrays (:mod:`lrref.backends.llamacpp`).
Greedy: keep proposals while each equals the argmax, then the argmax at the
first miss.  Sampled: accept a proposal ``d`` with probability ``p(d)``, else
sample from ``p`` with ``d`` removed and renormalised, which is exact for a
point-mass draft.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Sampling


def probs_from_logits(logits: np.ndarray, s: Sampling) -> np.ndarray:
    """softmax(logits / T) restricted to the top-k tokens and the top-p nucleus, renormalised (rows)."""
    x = logits.astype(np.float64) / s.temperature
    if s.top_k and s.top_k < x.shape[-1]:
        kth = np.partition(x, -s.top_k, axis=-1)[..., -s.top_k:].min(-1, keepdims=True)
        x = np.where(x < kth, -np.inf, x)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if s.top_p < 1.0:
        idx = np.argsort(-p, axis=-1, kind="stable")
        sp = np.take_along_axis(p, idx, -1)
        sp = np.where(np.cumsum(sp, -1) - sp >= s.top_p, 0.0, sp)
        p = np.zeros_like(p)
        np.put_along_axis(p, idx, sp, -1)
        p /= p.sum(-1, keepdims=True)
    return p


def accept_greedy(best: Sequence[int], proposal: Sequence[int]) -> list[int]:
    """Keep proposals while each equals the argmax ``best[j]``; then the argmax at the first miss."""
    out = []
    for j, d in enumerate(proposal):
        if best[j] != d:
            break
        out.append(d)
    out.append(int(best[len(out)]))
    return out


def accept_sampled(probs: np.ndarray, proposal: Sequence[int], rng: np.random.Generator) -> list[int]:
    """Speculative sampling with a point-mass draft (see :func:`lrref.backends.hf_engine.accept_sampled`)."""
    out = []
    for j, d in enumerate(proposal):
        p = probs[j]
        if rng.random() < p[d]:
            out.append(d)
            continue
        r = p.copy()
        r[d] = 0.0
        z = r.sum()
        if z <= 0:
            out.append(d)
            continue
        out.append(int(rng.choice(len(r), p=r / z)))
        return out
    out.append(int(rng.choice(probs.shape[-1], p=probs[len(proposal)])))
    return out
