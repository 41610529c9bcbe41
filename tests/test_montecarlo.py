"""lrsim.montecarlo: seeded estimates agree with the closed forms within stated error."""

import numpy as np
import pytest

from lrsim import montecarlo as mc
from lrsim import theory


@pytest.mark.parametrize("a, c, k", [(0.6, 0.2, 4), (0.8, 0.05, 8), (0.3, 0.5, 2)])
def test_sync_within_five_standard_errors(a, c, k):
    est = mc.simulate_sync(a, c, k, 200_000, seed=7)
    assert abs(est.z(float(theory.f_sync(a, c, k)))) < 5
    assert est.stderr < 0.01


@pytest.mark.parametrize("a, c, k", [(0.6, 0.2, 3), (0.6, 0.2, 5), (0.8, 0.1, 20), (0.5, 0.35, 2)])
def test_async_within_five_standard_errors(a, c, k):
    est = mc.simulate_async(a, c, k, 200_000, seed=11)
    assert abs(est.z(float(theory.f_async(a, c, k)))) < 5


def test_deterministic_case_is_exact():
    est = mc.simulate_async(0.7, 0.3, 1, 1000, seed=0)
    assert est.mean == 1.0 and est.stderr == 0.0
    assert est.z(1.0) == 0.0 and est.z(1.1) == np.inf


def test_ratio_estimate_ci():
    est = mc.ratio_estimate(np.array([1.0, 3.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0, 1.0]))
    assert est.mean == 2.0
    lo, hi = est.ci95
    assert lo < 2.0 < hi


def test_seeds_make_runs_repeatable():
    assert mc.simulate_sync(0.6, 0.1, 4, 1000, seed=3) == mc.simulate_sync(0.6, 0.1, 4, 1000, seed=3)
