"""lrsim.sim: seeded statistics against the closed forms, the confidence interval and its standard error."""

import numpy as np
import pytest
from scipy.special import stdtrit

from lrsim import theory
from lrsim.sim import SimConfig, accept_probability, simulate

Z = 4.0  # |z| tolerance: a correct model fails one such check with probability ~6e-5


def run(**kw):
    return simulate(SimConfig(**kw))


def z_score(r, exact):
    return (r.speedup - exact) / r.speedup_se


@pytest.mark.parametrize("batches", [32, 8])
def test_standard_error_is_the_one_behind_the_interval(batches):
    r = run(mode="sync", alpha1=0.6, c1=0.2, k1=4, steps=3000, seed=3, batches=batches)
    t = stdtrit(batches - 1, 0.975)  # the interval's Student-t quantile for this batch count
    lo, hi = r.speedup_ci95
    assert r.speedup_se > 0
    assert (lo, hi) == (pytest.approx(r.speedup - t * r.speedup_se, rel=1e-12),
                        pytest.approx(r.speedup + t * r.speedup_se, rel=1e-12))
    assert r.row()["speedup_se"] == r.speedup_se


def test_one_cycle_has_no_standard_error():
    r = run(mode="sync", alpha1=1.0, c1=0.2, k1=3, steps=3)
    assert r.cycles == 1 and r.speedup_se is None and r.speedup_ci95 == (None, None)


@pytest.mark.parametrize("a, c, k", [(0.6, 0.1, 4), (0.8, 0.25, 6), (0.3, 0.05, 2), (0.9, 0.1, 12)])
def test_sync_matches_theorem_1(a, c, k):
    r = run(mode="sync", alpha1=a, c1=c, k1=k, steps=20_000, seed=11)
    assert abs(z_score(r, theory.f_sync(a, c, k))) < Z
    assert r.acceptance_rate == pytest.approx(a, abs=Z * np.sqrt(a * (1 - a) / 8000))


@pytest.mark.parametrize("a, c, k", [(0.7, 0.2, 4), (0.7, 0.2, 5), (0.6, 0.3, 2), (0.8, 0.1, 16)])
def test_async_matches_theorem_2_under_its_assumptions(a, c, k):
    r = run(mode="async", alpha1=a, c1=c, k1=k, join="immediate", steps=20_000, seed=12)
    assert abs(z_score(r, theory.f_async(a, c, k))) < Z


def test_hybrid_is_f_times_g_under_the_papers_assumptions():
    kw = dict(alpha1=0.7, c1=0.15, k1=4, alpha2=0.6, c2=0.05, k2=4, token_model="mean", join="immediate")
    r = run(mode="sync", steps=20_000, seed=13, **kw)
    assert abs(z_score(r, theory.h(0.7, 0.15, 4, 0.6, 0.05, 4, "sync"))) < Z
    assert r.theory_speedup == pytest.approx(float(theory.h(0.7, 0.15, 4, 0.6, 0.05, 4, "sync")))


def test_token_sd_alone_matches_g():
    r = run(mode="ar", alpha2=0.7, c2=0.1, k2=5, steps=20_000, seed=14)
    assert abs(z_score(r, theory.g(0.7, 0.1, 5))) < Z


def test_sampled_token_sd_inside_sync_steps_falls_below_f_times_g():
    # each step stops at its boundary and the batch waits for its slowest step: h = f g is optimistic
    r = run(mode="sync", alpha1=0.7, c1=0.15, k1=4, alpha2=0.6, c2=0.05, k2=4, steps=20_000, seed=15)
    assert r.speedup_ci95[1] < 0.97 * theory.h(0.7, 0.15, 4, 0.6, 0.05, 4, "sync")


@pytest.mark.parametrize("w, rho", [(1, 0.0), (4, 0.0), (4, 0.46), (8, 1.0)])
def test_width_acceptance_model(w, rho):
    p = accept_probability(0.63, w, rho)
    r = run(mode="sync", alpha1=0.63, c1=0.1, k1=3, width=w, correlation=rho, steps=20_000, seed=16)
    n = r.cycles * 1.5  # decisive verdicts per cycle is between 1 and 2
    assert r.acceptance_rate == pytest.approx(p, abs=Z * np.sqrt(p * (1 - p) / n))


def test_ci_covers_the_truth_about_95_percent():
    a, c, k = 0.6, 0.2, 4
    exact = theory.f_sync(a, c, k)
    hits = [lo <= exact <= hi for lo, hi in
            (run(mode="sync", alpha1=a, c1=c, k1=k, steps=2000, seed=s).speedup_ci95 for s in range(60))]
    assert 50 <= sum(hits) <= 60  # Binomial(60, .95): P(< 50) ~ 2e-3


def test_verifier_latency_moves_the_async_plateau_to_ceil_of_1_plus_v_over_c():
    # a verified position frees its look-ahead slot T + v after it started, so the draft stops limiting
    # at k = ceil((1 + v)/c) instead of ceil(1/c): 5 -> 7 for c = .2, v = .4
    def sp(k, v):
        return run(mode="async", alpha1=0.8, c1=0.2, k1=k, verifier_cost=v, join="immediate", steps=4000,
                   seed=17).speedup

    assert sp(5, 0.0) > 1.05 * sp(3, 0.0) and sp(6, 0.0) == pytest.approx(sp(5, 0.0), rel=0.02)
    assert sp(7, 0.4) > 1.05 * sp(5, 0.4) and sp(8, 0.4) == pytest.approx(sp(7, 0.4), rel=0.02)
    assert sp(7, 0.4) < 0.9 * sp(7, 0.0)


def test_t_quantile_matches_scipy_without_loading_it():
    from scipy.stats import t

    from lrsim.stats import t_quantile, t_two_sided

    for df in (1, 2, 3, 4, 7, 19, 29, 30, 99, 250):
        for p in (0.5, 0.9, 0.975, 0.995):
            assert t_quantile(df, p) == pytest.approx(t.ppf(p, df), rel=1e-10, abs=1e-12)
    assert t_quantile(1) == pytest.approx(12.706204736174707, rel=1e-12)  # the Cauchy's: tan(0.475 pi)
    assert t_two_sided(0.0, 5) == 0.0 and t_two_sided(1e9, 6) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="integer df"):
        t_quantile(2.5)
