"""lrsim.planner: exact optimum against brute-force enumeration, pure configs, vectorised search."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lrsim import theory
from lrsim.planner import best_split, plan


def brute(a1, c1, a2, c2, M, mode):
    rows = []
    for k1, k2 in itertools.product(range(1, M + 1), range(1, M + 1)):
        if theory.parallel_dim(c1, k1, mode) * k2 <= M:
            rows.append((float(theory.h(a1, c1, k1, a2, c2, k2, mode)), k1, k2))
    return rows


@settings(max_examples=60, deadline=None)
@given(st.floats(0.05, 0.95), st.floats(0.01, 1.5), st.floats(0.05, 0.95), st.floats(0.01, 1.5),
       st.integers(1, 40), st.sampled_from(["sync", "async"]))
def test_plan_is_the_brute_force_optimum(a1, c1, a2, c2, M, mode):
    p = plan(a1, c1, a2, c2, M, mode)
    rows = brute(a1, c1, a2, c2, M, mode)
    assert p.speedup == pytest.approx(max(r[0] for r in rows), rel=1e-12)
    assert p.pure_token.speedup == pytest.approx(max(r[0] for r in rows if r[1] == 1), rel=1e-12)
    assert p.pure_step.speedup == pytest.approx(max(r[0] for r in rows if r[2] == 1), rel=1e-12)
    assert theory.parallel_dim(c1, p.k1, mode) * p.k2 <= M
    assert p.best.positions <= M
    assert [t.speedup for t in p.top] == sorted((t.speedup for t in p.top), reverse=True)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 0.95), st.floats(0.01, 1.5), st.floats(0.05, 0.95), st.floats(0.01, 1.5),
       st.integers(1, 40), st.sampled_from(["sync", "async"]))
def test_vectorised_split_agrees_with_plan(a1, c1, a2, c2, M, mode):
    s = best_split(a1, c1, a2, c2, M, mode)
    rows = brute(a1, c1, a2, c2, M, mode)
    hyb = [r for r in rows if r[1] >= 2 and r[2] >= 2]
    assert float(s.hybrid) == pytest.approx(max(r[0] for r in hyb), rel=1e-12) if hyb else s.hybrid == -np.inf
    if hyb:
        assert float(theory.h(a1, c1, int(s.k1), a2, c2, int(s.k2), mode)) == pytest.approx(float(s.hybrid), rel=1e-12)
    p = plan(a1, c1, a2, c2, M, mode)
    assert float(s.pure_token) == pytest.approx(p.pure_token.speedup, rel=1e-12)
    assert float(s.pure_step) == pytest.approx(p.pure_step.speedup, rel=1e-12)


def test_budget_one_is_plain_decoding():
    p = plan(0.7, 0.1, 0.7, 0.1, 1, "sync")
    assert (p.k1, p.k2, p.speedup) == (1, 1, 1.0)


def test_known_plan():
    # async, c1 = 0.1 -> ceil(1/c1) = 10; the hybrid (4, 4) fills M = 16
    p = plan(0.6, 0.1, 0.6, 0.05, 16, "async")
    assert (p.k1, p.k2) == (4, 4)
    assert p.speedup == pytest.approx(float(theory.s2(0.6, 0.1, 4) * theory.g(0.6, 0.05, 4)), rel=1e-12)
    assert p.pure_step.k1 == 10  # smallest depth reaching S1
    assert p.pure_step.speedup == pytest.approx(float(theory.s1(0.6, 0.1)))
    d = p.to_dict()
    assert {"k1", "k2", "speedup", "pure_token", "pure_step"} <= d.keys()
    assert d["pure_token"] == p.pure_token.speedup


def test_async_depth_beyond_draft_limit_costs_no_budget():
    p = plan(0.75, 0.25, 0.6, 0.05, 8, "async", top=1000)
    pds = {(t.k1, t.k2): t.positions for t in p.top}
    assert max(k1 for k1, _ in pds) == 4  # search stops at ceil(1/c1)
    assert pds[(4, 2)] == 8


@pytest.mark.parametrize("kwargs, message", [
    (dict(alpha1=1.0), "alpha1"), (dict(c2=0.0), "c2"), (dict(budget=0), "budget"),
    (dict(budget=2.5), "budget"), (dict(mode="fast"), "unknown mode"), (dict(c1=float("inf")), "c1"),
])
def test_plan_rejects_bad_input(kwargs, message):
    args = dict(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=16, mode="sync") | kwargs
    with pytest.raises(ValueError, match=message):
        plan(**args)


def test_best_split_broadcasts():
    s = best_split(np.linspace(0.55, 0.75, 4)[:, None], 0.1, np.linspace(0.55, 0.75, 3)[None, :], 0.05, 16, "async")
    assert s.hybrid.shape == (4, 3) and s.k1.shape == (4, 3)
    assert np.all(s.margin > 0)
