"""Split a parallel budget ``M`` between step-level (k1) and token-level (k2) speculation.

Problem (paper Sec. 3.3)::

    maximise  h(k1, k2) = f(k1) * g(k2)
    subject to parallel_dim(c1, k1, mode) * k2 <= M,   k1, k2 >= 1 integers.

``k1 = 1`` is pure token SD, ``k2 = 1`` pure LR.  The optimum is exact: for a
single point :func:`plan` enumerates every feasible pair; for many points
:func:`best_split` vectorises the same search with prefix maxima of ``g``.
In async mode every ``k1 >= ceil(1/c1)`` has the same ``f`` (S1) and the same
parallel dimension, so the search stops at ``k1 = ceil(1/c1)`` and reports
that smallest equivalent depth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .errors import InputError
from .theory.forms import MODES, Mode, draft_limit, f_step, g, parallel_dim


@dataclass(frozen=True)
class Config:
    """One (k1, k2) split and what it buys."""

    k1: int
    k2: int
    speedup: float
    f: float
    g: float
    positions: int  #: parallel_dim(c1, k1) * k2: target positions in use


@dataclass
class Plan:
    """The optimum split, the best pure configurations and a ranked table."""

    mode: str
    budget: int
    alpha1: float
    c1: float
    alpha2: float
    c2: float
    best: Config
    pure_token: Config  #: best with k1 = 1
    pure_step: Config  #: best with k2 = 1
    top: list[Config] = field(default_factory=list)

    @property
    def k1(self) -> int:
        return self.best.k1

    @property
    def k2(self) -> int:
        return self.best.k2

    @property
    def speedup(self) -> float:
        return self.best.speedup

    def to_dict(self) -> dict:
        """JSON-ready dict; ``pure_token``/``pure_step`` are speedups, configs beside them."""
        return {
            "mode": self.mode,
            "budget": self.budget,
            "alpha1": self.alpha1,
            "c1": self.c1,
            "alpha2": self.alpha2,
            "c2": self.c2,
            "k1": self.k1,
            "k2": self.k2,
            "speedup": self.speedup,
            "f": self.best.f,
            "g": self.best.g,
            "positions": self.best.positions,
            "pure_token": self.pure_token.speedup,
            "pure_step": self.pure_step.speedup,
            "pure_token_config": asdict(self.pure_token),
            "pure_step_config": asdict(self.pure_step),
            "hybrid_gain": self.speedup / max(self.pure_token.speedup, self.pure_step.speedup),
            "top": [asdict(t) for t in self.top],
        }


def validate(alpha1: float, c1: float, alpha2: float, c2: float, budget: int, mode: str) -> None:
    """Raise :class:`InputError` (a ``ValueError``) with a one-line message for any bad parameter."""
    for name, a in (("alpha1", alpha1), ("alpha2", alpha2)):
        if not (isinstance(a, (int, float)) and 0 < a < 1):
            raise InputError(f"{name} must lie in (0, 1), got {a!r}")
    for name, c in (("c1", c1), ("c2", c2)):
        if not (isinstance(c, (int, float)) and np.isfinite(c) and c > 0):
            raise InputError(f"{name} must be a finite number > 0, got {c!r}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise InputError(f"budget must be an integer >= 1, got {budget!r}")
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def max_depth(c1: float, budget: int, mode: Mode) -> int:
    """Largest k1 worth searching: ``M`` (sync) or ``min(M, ceil(1/c1))`` (async)."""
    return budget if mode == "sync" else int(min(budget, draft_limit(c1)))


def plan(
    alpha1: float, c1: float, alpha2: float, c2: float, budget: int, mode: Mode = "async", top: int = 10
) -> Plan:
    """Exact optimum of ``h(k1, k2)`` under ``parallel_dim * k2 <= budget``.

    Ties go to the configuration using fewer target positions, then to the
    smaller ``k1``.
    """
    validate(alpha1, c1, alpha2, c2, budget, mode)
    k1 = np.arange(1, max_depth(c1, budget, mode) + 1)
    pd = parallel_dim(c1, k1, mode).astype(int)
    cap = budget // pd  # largest k2 for each k1
    k1s = np.repeat(k1, cap)
    k2s = np.concatenate([np.arange(1, m + 1) for m in cap])
    fs = f_step(alpha1, c1, k1s, mode)
    gs = g(alpha2, c2, k2s)
    hs = fs * gs
    pos = np.repeat(pd, cap) * k2s
    order = np.lexsort((k1s, pos, -hs))  # speedup desc, then positions, then k1

    def cfg(i: int) -> Config:
        return Config(int(k1s[i]), int(k2s[i]), float(hs[i]), float(fs[i]), float(gs[i]), int(pos[i]))

    token = [i for i in order if k1s[i] == 1][0]
    step = [i for i in order if k2s[i] == 1][0]
    return Plan(
        mode, int(budget), float(alpha1), float(c1), float(alpha2), float(c2),
        best=cfg(order[0]), pure_token=cfg(token), pure_step=cfg(step),
        top=[cfg(i) for i in order[:top]],
    )


@dataclass
class Split:
    """Vectorised optimum over many parameter points (arrays of one shape)."""

    hybrid: np.ndarray  #: best h with k1 >= 2 and k2 >= 2 (-inf if infeasible)
    pure_token: np.ndarray  #: best h with k1 = 1
    pure_step: np.ndarray  #: best h with k2 = 1
    k1: np.ndarray  #: k1 of the hybrid optimum
    k2: np.ndarray  #: k2 of the hybrid optimum

    @property
    def pure(self) -> np.ndarray:
        return np.maximum(self.pure_token, self.pure_step)

    @property
    def margin(self) -> np.ndarray:
        """``best hybrid / best pure - 1``: > 0 iff a hybrid split is strictly best."""
        return self.hybrid / self.pure - 1


def best_split(
    alpha1: ArrayLike, c1: ArrayLike, alpha2: ArrayLike, c2: ArrayLike, budget: int, mode: Mode,
    chunk: int | None = None,
) -> Split:
    """Best hybrid, pure-token and pure-step speedups for every point, one budget.

    With ``G2[m] = max_{2 <= k2 <= m} g(k2)`` (a prefix maximum) the best
    hybrid is ``max_{k1 >= 2} f(k1) * G2[M // parallel_dim(k1)]``: O(M) work
    per point, no Python loop over points.
    """
    a1, c1_, a2, c2_ = (np.ravel(np.asarray(x, dtype=float)) for x in np.broadcast_arrays(alpha1, c1, alpha2, c2))
    shape = np.broadcast(alpha1, c1, alpha2, c2).shape
    M = int(budget)
    chunk = chunk or max(1, (1 << 22) // max(M, 1))
    out = [np.empty(a1.size) for _ in range(3)] + [np.empty(a1.size, dtype=int) for _ in range(2)]
    ks = np.arange(1, M + 1, dtype=float)
    for s in range(0, a1.size, chunk):
        sl = slice(s, s + chunk)
        gk = g(a2[sl, None], c2_[sl, None], ks)  # (P, M): g(k2), k2 = 1..M
        fk = f_step(a1[sl, None], c1_[sl, None], ks, mode)  # (P, M): f(k1)
        cap = M // parallel_dim(c1_[sl, None], ks, mode).astype(int)  # largest k2 per k1
        token = gk.max(axis=1)
        step = fk.max(axis=1)
        if M >= 2:
            g2 = np.maximum.accumulate(gk[:, 1:], axis=1)  # g2[:, m-2] = max_{2<=k2<=m} g
            ok = (cap >= 2) & (ks >= 2)
            best_g = np.take_along_axis(g2, np.clip(cap - 2, 0, M - 2), axis=1)
            hk = np.where(ok, fk * best_g, -np.inf)
            i1 = hk.argmax(axis=1)
            hyb = hk[np.arange(hk.shape[0]), i1]
            cap1 = cap[np.arange(hk.shape[0]), i1]
            k2_mask = (ks[None, :] >= 2) & (ks[None, :] <= cap1[:, None])
            i2 = np.where(k2_mask, gk, -np.inf).argmax(axis=1)
        else:
            hyb = np.full(gk.shape[0], -np.inf)
            i1 = i2 = np.zeros(gk.shape[0], dtype=int)
        none = np.isneginf(hyb)  # no feasible hybrid: report k1 = k2 = 0
        for arr, val in zip(out, (hyb, token, step, np.where(none, 0, i1 + 1), np.where(none, 0, i2 + 1))):
            arr[sl] = val
    return Split(*(o.reshape(shape) for o in out))
