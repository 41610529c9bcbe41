"""Vectorised Monte Carlo of the stochastic models behind Theorems 1 and 2.

Each *stage* (cycle) draws ``X``, the number of drafts accepted before the
first rejection, i.i.d. with ``P(X = x) = alpha^x (1 - alpha)``.  A stage
keeps some steps and costs some time (in units of one target step ``T``);
the speedup over target-only decoding, which makes one step per ``T``, is the
renewal-reward ratio ``sum(steps) / sum(time)``.

- sync LR / token SD, ``k`` parallel positions: steps ``min(X, k-1) + 1``,
  time ``1 + c (k-1)``.
- async LR, App. B, ``k >= ceil(1/c)``: steps ``X + 1``, time ``1 + c X``.
- async LR, App. B, ``k < ceil(1/c)``: steps ``X + 1``,
  time ``ceil((X+1)/k) + c (X mod k)``.

These are the models the theorems state; :mod:`lrsim.sim` (the event
simulator) tests whether the async stage model describes a real pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .theory.forms import draft_limit

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A ratio estimate with its delta-method standard error."""

    mean: float
    stderr: float
    n: int

    @property
    def ci95(self) -> tuple[float, float]:
        return (self.mean - Z95 * self.stderr, self.mean + Z95 * self.stderr)

    def z(self, exact: float) -> float:
        """Standardised distance of ``exact`` from the estimate.

        A deterministic model (``stderr == 0``, e.g. ``k = 1``) must match
        to 1e-12 relative, else the distance is infinite.
        """
        if self.stderr > 0:
            return (self.mean - exact) / self.stderr
        return 0.0 if abs(self.mean - exact) <= 1e-12 * abs(exact) else np.inf


def ratio_estimate(steps: np.ndarray, time: np.ndarray) -> Estimate:
    """``sum(steps)/sum(time)`` with ``se = sd(steps - R time) / (mean(time) sqrt(n))``."""
    n = steps.size
    r = steps.sum() / time.sum()
    resid = steps - r * time
    se = resid.std(ddof=1) / (time.mean() * np.sqrt(n)) if n > 1 else np.inf
    return Estimate(float(r), float(se), int(n))


def accepted_runs(alpha: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of X: numpy's geometric counts trials to the first success,
    so with success probability ``1 - alpha`` it is ``X + 1``."""
    return rng.geometric(1 - alpha, size=n) - 1


def simulate_sync(alpha: float, c: float, k: int, n: int, seed: int | None = None) -> Estimate:
    """Monte Carlo of Theorem 1 (and of token SD's ``g``), ``n`` cycles."""
    x = accepted_runs(alpha, n, np.random.default_rng(seed))
    steps = np.minimum(x, k - 1) + 1.0
    return ratio_estimate(steps, np.full(n, 1 + c * (k - 1)))


def stage_time_async(x: np.ndarray, c: float, k: int) -> np.ndarray:
    """App. B stage duration for ``X = x`` (units of T)."""
    if k >= draft_limit(c):
        return 1 + c * x
    return np.ceil((x + 1) / k) + c * (x % k)


def simulate_async(alpha: float, c: float, k: int, n: int, seed: int | None = None) -> Estimate:
    """Monte Carlo of Theorem 2 (App. B stage model), ``n`` stages."""
    x = accepted_runs(alpha, n, np.random.default_rng(seed))
    return ratio_estimate(x + 1.0, stage_time_async(x, c, k))
