"""Interval estimates shared by the simulator, the calibration and the reference decoder's benchmark.

- :func:`wilson`: a proportion's Wilson score interval;
- :func:`mcnemar_exact`: the exact two-sided McNemar test of paired right/wrong outcomes (a sign test on the
  discordant pairs), :func:`paired_outcomes` counting them, and :func:`paired_difference` the 95% interval of the
  difference of the two accuracies (Newcombe's hybrid score interval for paired proportions);
- :func:`batch_means`: a ratio of sums over consecutive cycles with its
  batch-means standard error (the simulator's speedup and its interval);
- :func:`t_quantile`: Student's t quantile at integer degrees of freedom (exact series, no SciPy to load);
- :func:`ratio_of_means`: the ratio of two independent samples' means with its delta-method interval (the
  calibrated ``c1``).
"""

from __future__ import annotations

import functools
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


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for ``b`` and ``c`` discordant pairs (1 when there are none).

    Under the null each discordant pair falls either way with probability 1/2, so ``min(b, c)`` is
    ``Binomial(b + c, 1/2)``: ``p = min(1, 2 P(X <= min(b, c)))``, computed exactly (e.g. 5 vs 0: 0.0625).
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b}, {c}")
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


@dataclass(frozen=True)
class Paired:
    """Paired right/wrong outcomes of a configuration against a reference on the same items.

    ``lost``: the reference right, this one wrong; ``gained``: the other way; ``n``: items in common;
    ``p_value``: :func:`mcnemar_exact` of ``lost`` and ``gained``.
    """

    n: int
    lost: int
    gained: int
    p_value: float
    both: int = 0  #: items both got right

    @property
    def difference(self) -> float:
        """This configuration's accuracy minus the reference's, on the items in common."""
        return (self.gained - self.lost) / self.n if self.n else 0.0

    def difference_ci(self) -> tuple[float, float]:
        """95% interval of :attr:`difference` (:func:`paired_difference`)."""
        return paired_difference(self.both, self.gained, self.lost, self.n - self.both - self.gained - self.lost)


def paired_outcomes(this: dict, reference: dict) -> Paired:
    """Compare ``item -> right?`` maps on the items both hold (items whose outcome is None are left out)."""
    ids = [i for i in this if i in reference and this[i] is not None and reference[i] is not None]
    lost = sum(1 for i in ids if reference[i] and not this[i])
    gained = sum(1 for i in ids if this[i] and not reference[i])
    both = sum(1 for i in ids if this[i] and reference[i])
    return Paired(len(ids), lost, gained, mcnemar_exact(lost, gained), both)


def paired_difference(both: int, gained: int, lost: int, neither: int) -> tuple[float, float]:
    """95% interval of ``p1 - p2``, two accuracies measured on the same items (Newcombe 1998, method 10: the
    Wilson intervals of both, combined with the correlation of the pairs).

    ``both``: items right in both; ``gained``: right in 1 only; ``lost``: right in 2 only; ``neither``.  With
    ``n`` items, ``p1 = (both + gained)/n``, ``p2 = (both + lost)/n``, ``theta = (gained - lost)/n``, ``(l_i, u_i)``
    the Wilson intervals and ``phi`` the phi coefficient of the 2x2 table (0 when a margin is empty):
    ``theta - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)`` to
    ``theta + sqrt((u1 - p1)^2 - 2 phi (u1 - p1)(p2 - l2) + (p2 - l2)^2)``, clipped to [-1, 1].
    """
    counts = (both, gained, lost, neither)
    if min(counts) < 0:
        raise ValueError(f"counts must be >= 0, got {counts}")
    n = sum(counts)
    if n == 0:
        return (-1.0, 1.0)
    r1, r2 = both + gained, both + lost  # right in 1, right in 2
    p1, p2, theta = r1 / n, r2 / n, (gained - lost) / n
    (l1, u1), (l2, u2) = wilson(r1, n), wilson(r2, n)
    margins = r1 * (n - r1) * r2 * (n - r2)
    phi = (both * neither - gained * lost) / math.sqrt(margins) if margins else 0.0
    lo = theta - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = theta + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return (max(-1.0, lo), min(1.0, hi))


def ratio_of_means(num, den) -> tuple[float | None, tuple[float, float] | None]:
    """``num.mean / den.mean`` and its 95% delta-method interval, for two independent samples given by their
    ``n``, ``mean`` and ``std`` (e.g. :class:`lrsim.prediction.calibrate.Summary`); no interval with fewer than 2 values in
    either, no ratio when ``den.mean`` is not > 0."""
    if num.n < 2 or den.n < 2 or den.mean <= 0:
        return (num.mean / den.mean if den.mean > 0 else None), None
    r = num.mean / den.mean
    # var(r)/r^2 ~ var(num_mean)/num^2 + var(den_mean)/den^2 (independent samples)
    rel = math.sqrt((num.std**2 / num.n) / num.mean**2 + (den.std**2 / den.n) / den.mean**2)
    return r, (r * (1 - Z95 * rel), r * (1 + Z95 * rel))


@dataclass(frozen=True)
class RatioEstimate:
    """A ratio ``R`` with its standard error and 95% interval (``None`` when they cannot be estimated)."""

    ratio: float
    se: float | None
    lo: float | None
    hi: float | None


def t_two_sided(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with ``df`` (an integer >= 1) degrees of freedom, ``t >= 0``.

    Abramowitz & Stegun 26.7.3-4, with ``theta = atan(t / sqrt(df))``, ``c = cos(theta)``:
    odd ``df``: ``(2 / pi) (theta + sin(theta) (c + (2/3) c^3 + (2 4)/(3 5) c^5 + ... up to c^(df-2)))``;
    even ``df``: ``sin(theta) (1 + (1/2) c^2 + (1 3)/(2 4) c^4 + ... up to c^(df-2))``.
    """
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    odd = df % 2
    term = math.cos(theta) if odd else 1.0  # the series' first term: c (odd df) or 1 (even df)
    total = term if df > 1 or not odd else 0.0
    for j in range(1 if odd else 0, df - 3, 2):  # term_{j+2} = term_j (j + 1) / (j + 2) c^2, up to c^(df-2)
        term *= (j + 1) / (j + 2) * c2
        total += term
    if odd:
        return 2 / math.pi * (theta + math.sin(theta) * total)
    return math.sin(theta) * total


@functools.lru_cache(maxsize=256)
def t_quantile(df: int, p: float = 0.975) -> float:
    """Student's t quantile ``t`` with ``P(T <= t) = p`` (``0.5 <= p < 1``, integer ``df >= 1``): bisection on
    :func:`t_two_sided`, to the last few bits of a float."""
    if df < 1 or int(df) != df or not 0.5 <= p < 1:
        raise ValueError(f"t_quantile needs an integer df >= 1 and 0.5 <= p < 1, got df={df!r}, p={p!r}")
    want = 2 * p - 1  # P(|T| <= t) = 2 P(T <= t) - 1
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, int(df)) < want:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if t_two_sided(mid, int(df)) < want else (lo, mid)
    return (lo + hi) / 2


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
    edges = np.linspace(0, n, B + 1).astype(int)
    t_end = end[edges[1:] - 1]
    t_g = np.diff(np.concatenate(([0.0], t_end)))  # duration of each batch
    b_g = np.add.reduceat(base, edges[:-1])
    se = float(np.std(b_g - R * t_g, ddof=1) / (t_g.mean() * math.sqrt(B)))
    q = t_quantile(B - 1)  # Student-t quantile, B - 1 degrees of freedom
    return RatioEstimate(R, se, R - q * se, R + q * se)
