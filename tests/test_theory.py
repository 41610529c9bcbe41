"""lrsim.theory: hand-computed values, properties (hypothesis), agreement with the sympy derivations."""

import functools

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lrsim import theory
from lrsim.theory import symbolic

alphas = st.floats(0.001, 0.999)
costs = st.floats(0.001, 5.0)
depths = st.integers(1, 300)


def test_hand_computed_values():
    # g(0.5, 0.1, 3) = (1 - 0.125) / (0.5 * (1 - 0.1 + 0.3)) = 0.875 / 0.6
    assert theory.g(0.5, 0.1, 3) == pytest.approx(0.875 / 0.6, rel=1e-15)
    assert theory.f_sync(0.5, 0.1, 3) == pytest.approx(0.875 / 0.6, rel=1e-15)
    # S1 = 1 / (1 - a + c a) = 1 / (0.5 + 0.1)
    assert theory.s1(0.5, 0.2) == pytest.approx(1 / 0.6, rel=1e-15)
    # S2(a=.5, c=.2, k=2) by hand from the definition: E[X+1] = 2, E[ceil((X+1)/2)] = 1/(1-a^2) = 4/3,
    # E[X mod 2] = P(X odd) = 1/3, so S2 = 2 / (4/3 + 0.2/3) = 2 / 1.4
    assert theory.s2(0.5, 0.2, 2) == pytest.approx(2 / 1.4, rel=1e-15)
    # async picks S1 once k >= ceil(1/c) = 5
    assert theory.f_async(0.5, 0.2, 4) == theory.s2(0.5, 0.2, 4)
    assert theory.f_async(0.5, 0.2, 5) == theory.s1(0.5, 0.2)
    assert theory.parallel_dim(0.2, 7, "async") == 5
    assert theory.parallel_dim(0.2, 3, "async") == 3
    assert theory.parallel_dim(0.2, 7, "sync") == 7
    assert theory.h(0.5, 0.1, 3, 0.5, 0.2, 2, "sync") == pytest.approx(0.875 / 0.6 * 0.75 / (0.5 * 1.2))


def test_draft_limit_is_robust_to_rounding():
    assert theory.draft_limit(0.2) == 5
    assert theory.draft_limit(0.1) == 10
    assert theory.draft_limit(1 / 3) == 3
    assert theory.draft_limit(0.3) == 4
    assert theory.draft_limit(2.0) == 1


def test_broadcasting_shapes():
    out = theory.h(np.linspace(0.1, 0.9, 3)[:, None], 0.1, np.arange(1, 5), 0.6, 0.05, 2, "async")
    assert out.shape == (3, 4)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: theory.g(1.0, 0.1, 2), "alpha"),
        (lambda: theory.g(0.5, 0.0, 2), "c must"),
        (lambda: theory.g(0.5, 0.1, 2.5), "k must"),
        (lambda: theory.g(0.5, 0.1, 0), "k must"),
        (lambda: theory.f_step(0.5, 0.1, 2, "turbo"), "unknown mode"),
        (lambda: theory.parallel_dim(0.1, 2, "turbo"), "unknown mode"),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@given(alphas, costs, depths)
def test_g_bounded_by_ceiling_and_by_k(a, c, k):
    v = theory.g(a, c, k)
    assert 0 < v <= theory.sd_ceiling(a) * (1 + 1e-12)
    assert v <= k * (1 + 1e-12)


@given(alphas, costs)
def test_one_position_is_no_speedup(a, c):
    assert theory.g(a, c, 1) == pytest.approx(1.0, rel=1e-12)
    assert theory.f_sync(a, c, 1) == pytest.approx(1.0, rel=1e-12)
    assert theory.h(a, c, 1, a, c, 1, "sync") == pytest.approx(1.0, rel=1e-12)
    if c < 1:  # k = 1 < ceil(1/c): S2 regime, one target step per stage
        assert theory.f_async(a, c, 1) == pytest.approx(1.0, rel=1e-12)
        assert theory.h(a, c, 1, a, c, 1, "async") == pytest.approx(1.0, rel=1e-12)


@given(alphas, st.floats(0.001, 0.999), st.integers(1, 200))
def test_async_monotone_in_depth_and_never_worse_than_sync(a, c, k):
    # c < 1: a draft slower than the target (c > 1) makes any lookahead a loss
    assert theory.f_async(a, c, k + 1) >= theory.f_async(a, c, k) * (1 - 1e-12)
    assert theory.f_async(a, c, k) >= theory.f_sync(a, c, k) * (1 - 1e-12)


@given(alphas, st.floats(0.001, 0.999), st.integers(1, 200))
def test_s2_below_s1_in_its_regime(a, c, k):
    if k < theory.draft_limit(c):
        assert theory.s2(a, c, k) <= theory.s1(a, c) * (1 + 1e-12)


@given(st.floats(0.001, 0.99), costs, st.integers(2, 100))
@settings(deadline=None)  # pure arithmetic: a deadline only measures the machine's load (failed once at nice 19)
def test_more_acceptance_is_faster(a, c, k):
    a2 = min(a + 0.005, 0.999)
    assert theory.g(a2, c, k) > theory.g(a, c, k)
    if c < 1:  # at c >= 1 async gives S1 = 1/(1-a+ca): flat in alpha at c = 1
        assert theory.f_async(a2, c, k) > theory.f_async(a, c, k)


@functools.cache
def _derived() -> dict:
    """The derived closed forms as mpmath functions of (alpha, c, k), built once for all examples."""
    return {n: sp.lambdify((symbolic.alpha, symbolic.c, symbolic.k), e, "mpmath")
            for n, e in symbolic.derivations().items() if n in ("g", "f_sync", "S1", "S2")}


@settings(max_examples=200, deadline=None)
@given(alphas, costs, st.integers(1, 60))
def test_theory_matches_symbolic_derivations(a, c, k):
    d = _derived()
    assert theory.g(a, c, k) == pytest.approx(float(d["g"](a, c, k)), rel=1e-9)
    assert theory.f_sync(a, c, k) == pytest.approx(float(d["f_sync"](a, c, k)), rel=1e-9)
    assert theory.s1(a, c) == pytest.approx(float(d["S1"](a, c, k)), rel=1e-9)
    assert theory.s2(a, c, k) == pytest.approx(float(d["S2"](a, c, k)), rel=1e-9)


def test_symbolic_definitions_against_brute_force_sums():
    """The derived expectations equal truncated sums of the geometric law, computed with exact rationals."""
    a, k = sp.Rational(3, 5), 4
    pmf = [a**x * (1 - a) for x in range(400)]
    d = symbolic.derivations()
    sub = {symbolic.alpha: a, symbolic.k: k}
    brute = {
        "E[min(X,k-1)+1]": sum(p * (min(x, k - 1) + 1) for x, p in enumerate(pmf)),
        "E[ceil((X+1)/k)]": sum(p * -(-(x + 1) // k) for x, p in enumerate(pmf)),
        "E[X mod k]": sum(p * (x % k) for x, p in enumerate(pmf)),
    }
    for name, value in brute.items():
        assert float(d[name].subs(sub)) == pytest.approx(float(value), rel=1e-12), name
