"""Interval estimates shared by the simulator, the calibration and the reference decoder's benchmark.

- :func:`wilson`: a proportion's Wilson score interval;
- :func:`batch_means`: a ratio of sums over consecutive cycles with its
  batch-means standard error (the simulator's speedup and its interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  #: the standard normal's 97.5% quantile


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval of ``k`` successes out of ``n`` (``(0, 1)`` when ``n = 0``)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    # (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    d = 1 + Z95**2 / n
    mid = (p + Z95**2 / (2 * n)) / d
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / d
    return (max(0.0, mid - half), min(1.0, mid + half))


@dataclass(frozen=True)
class RatioEstimate:
    """A ratio ``R`` with its standard error and 95% interval (``None`` when they cannot be estimated)."""

    ratio: float
    se: float | None
    lo: float | None
    hi: float | None


def batch_means(end: np.ndarray, base: np.ndarray, batches: int) -> RatioEstimate:
    """Ratio ``sum(base) / end[-1]`` and its 95% CI from batch means over consecutive cycles.

    Cycle ``i`` ends at ``end[i]`` and would take ``base[i]`` without
    speculation.  Cycles are grouped into ``B = min(batches, n)`` consecutive
    batches; with batch sums ``b_g`` and durations ``t_g``,
    ``se = sd(b_g - R t_g) / (mean(t_g) sqrt(B))`` (delta method) and the
    interval is ``R +- t_{0.975, B-1} se``.  Fewer than two cycles give no
    standard error and no interval.
    """
    n = len(end)
    R = float(base.sum() / end[-1])
    B = min(batches, n)
    if B < 2:
        return RatioEstimate(R, None, None, None)
    from scipy.special import stdtrit

    edges = np.linspace(0, n, B + 1).astype(int)
    t_end = end[edges[1:] - 1]
    t_g = np.diff(np.concatenate(([0.0], t_end)))  # duration of each batch
    b_g = np.add.reduceat(base, edges[:-1])
    se = float(np.std(b_g - R * t_g, ddof=1) / (t_g.mean() * math.sqrt(B)))
    q = float(stdtrit(B - 1, 0.975))  # Student-t quantile, B - 1 degrees of freedom
    return RatioEstimate(R, se, R - q * se, R + q * se)
