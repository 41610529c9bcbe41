"""Prompt-lookup (n-gram) proposer for token-level speculation inside a step.

For the sequence's own ids, take its last ``n`` tokens (``n`` from ``max_n``
down to ``min_n``), find their most recent earlier occurrence, and propose the
up to ``k`` tokens that followed it.  No model is involved, so the draft cost
is ~0 (``c2`` ~ 0 in the theory).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lrsim.errors import InputError
from lrsim.fields import option


@dataclass(frozen=True)
class NgramConfig:
    """Prompt-lookup speculation settings (``k = 0`` disables it)."""

    k: int = option("tokens proposed per target forward pass (0 = off)", 0)
    max_n: int = option("longest n-gram to match (prompt_lookup_max)", 2)
    min_n: int = option("shortest n-gram to match (prompt_lookup_min)", 1)

    def __post_init__(self) -> None:
        if self.k < 0 or self.min_n < 1 or self.max_n < self.min_n:
            raise InputError(f"bad n-gram config k={self.k} min_n={self.min_n} max_n={self.max_n}")


def propose(ids: np.ndarray | list[int], cfg: NgramConfig, limit: int | None = None) -> list[int]:
    """Up to ``min(cfg.k, limit)`` proposed next tokens for the sequence ``ids`` (may be empty)."""
    k = cfg.k if limit is None else min(cfg.k, limit)
    a = np.asarray(ids, dtype=np.int64)
    L = a.size
    if k <= 0 or L < cfg.min_n + 1:
        return []
    for n in range(min(cfg.max_n, L - 1), cfg.min_n - 1, -1):
        pat = a[L - n:]
        # windows starting at 0..L-n-1 (exclude the suffix itself)
        win = np.lib.stride_tricks.sliding_window_view(a[:L - 1], n)
        hits = np.flatnonzero((win == pat).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n  # most recent match; propose what followed it
            return a[start:start + k].tolist()
    return []
