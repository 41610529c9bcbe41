"""lrsim.sim speed-ups that must not change a number (issue 31): the async loop against the SimPy engine, continued
runs against fresh ones, shared pass streams, the capped geometric draws, shared pass prices, and a plan whose
every number is that of a separate run."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from lrsim.cost.hardware import HardwareSpec as Hardware
from lrsim.cost.passcost import ProfileCost, curve
from lrsim.dists import Constant, LogNormal, Uniform
from lrsim.prediction.compose import Behaviour, plan, predict, run
from lrsim.sim import Continuable, SimConfig, sharing, simulate
from lrsim.sim.async_loop import applies
from lrsim.sim.streams import Passes, capped_geometric
from lrsim.sim.workload import Workload
from lrsim.trace import Setting

CURVE = curve((1, 4, 16), (0.05, 0.06, 0.1))  # batch-dependent: the general target server
DRAFT = curve((1, 64), (0.004, 0.006))
SKIP = {"events", "wall_seconds", "events_per_second"}  # what the two engines count or time differently


def numbers(r, config: bool = True) -> dict:
    """Every result of a run (``config``: with its configuration; the engines compared differ in ``engine``)."""
    return {k: v for k, v in r.to_dict().items() if k not in SKIP and (config or k != "config")}


def profile(name: str, arch: str) -> ProfileCost:
    return ProfileCost.of(name, arch)


CASES = [dict(k1=k1, k2=k2, verifier_latency=v, join=join, step_tokens=st, request_tokens=req)
         for k1, k2, v, join, st, req in itertools.product(
             (1, 2, 5), (1, 3), (None, Uniform(0.0, 0.02)), ("iteration", "immediate"),
             (Constant(52), LogNormal(30, 0.6)), (None, Uniform(40, 400)))
         if not (k1 == 1 and v is not None)]


@pytest.mark.parametrize("kw", CASES[::3] + CASES[1::7])
def test_async_loop_gives_the_event_engines_numbers(kw):
    cfg = SimConfig(mode="async", alpha1=0.6, alpha2=0.6, target_latency=CURVE, draft_latency=DRAFT, steps=700,
                    seed=kw["k1"] + kw["k2"], **kw)
    assert applies(cfg, Workload(cfg), False)  # engine 'auto' takes the loop ...
    assert numbers(simulate(cfg), False) == numbers(simulate(replace(cfg, engine="des")), False)  # SimPy's numbers


@pytest.mark.parametrize("k2, token_model", [(3, "mean"), (4, "sampled")])
def test_async_loop_on_context_aware_profiles_and_the_mean_token_model(k2, token_model):
    target = profile("h100-context-kernel", "qwen2.5-32b")
    draft = profile("h100-context-kernel", "qwen2.5-1.5b")
    cfg = SimConfig(mode="async", k1=2, k2=k2, alpha1=0.5, alpha2=0.7, target_latency=target, draft_latency=draft,
                    prompt_tokens=1024, request_tokens=LogNormal(500, 0.6), step_tokens=LogNormal(52, 0.5),
                    verifier_latency=Constant(0.013), token_model=token_model, join="immediate", steps=600, seed=4)
    assert applies(cfg, Workload(cfg), False)
    assert numbers(simulate(cfg), False) == numbers(simulate(replace(cfg, engine="des")), False)


def test_the_loop_leaves_what_it_does_not_model_to_simpy():
    cfg = SimConfig(mode="async", k1=3, target_latency=CURVE, steps=100)
    for other in (dict(width=2), dict(prefill="last"), dict(engine="des"), dict(target_latency=None)):
        c = replace(cfg, **other)
        assert not applies(c, Workload(c), False)
    assert not applies(cfg, Workload(cfg), True)  # a trace is written by the SimPy engine


@pytest.mark.parametrize("mode, k1, k2, st", [("async", 6, 8, Constant(52)), ("async", 3, 2, LogNormal(40, 0.5)),
                                              ("sync", 5, 3, Constant(52)), ("sync", 4, 1, LogNormal(40, 0.5)),
                                              ("ar", 1, 4, LogNormal(40, 0.5))])
def test_a_continued_run_equals_a_fresh_run_of_that_many_steps(mode, k1, k2, st):
    cfg = SimConfig(mode=mode, k1=k1, k2=k2, alpha1=0.6, alpha2=0.6, step_tokens=st, steps=300, seed=3,
                    target_latency=profile("h100-ctx0-kernel", "qwen2.5-32b"),
                    draft_latency=profile("h100-ctx0-kernel", "qwen2.5-1.5b"), verifier_latency=Uniform(0.0, 0.01))
    c = Continuable(cfg)
    assert c.resumable
    for steps in (300, 301, 900, 2500):
        assert numbers(c.result(steps)) == numbers(simulate(replace(cfg, steps=steps))), steps
    assert numbers(c.result(600)) == numbers(simulate(replace(cfg, steps=600)))  # fewer again: a fresh run


def test_a_configuration_no_engine_continues_is_simulated_afresh():
    cfg = SimConfig(mode="async", k1=3, width=2, target_latency=CURVE, steps=200)
    c = Continuable(cfg)
    assert not c.resumable
    assert numbers(c.result(400)) == numbers(simulate(replace(cfg, steps=400)))


def test_runs_sharing_pass_streams_give_their_own_numbers():
    target, draft = profile("h100-ctx0-kernel", "qwen2.5-32b"), profile("h100-ctx0-kernel", "qwen2.5-1.5b")
    cfgs = [SimConfig(mode=mode, k1=k1, k2=k2, alpha1=0.6, alpha2=0.7, target_latency=target, draft_latency=draft,
                      step_tokens=st, steps=800, seed=5)
            for mode, k1, k2, st in itertools.product(("sync", "async"), (2, 7, 4), (2, 5),
                                                      (Constant(52), LogNormal(40, 0.5)))]
    alone = [numbers(simulate(c)) for c in cfgs]
    with sharing():
        shared = [numbers(simulate(c)) for c in cfgs]
    assert shared == alone


def test_a_stream_whose_lengths_differ_from_the_shared_chain_goes_on_alone():
    def passes(lengths_per_call, share):
        s = Passes(np.random.default_rng(9), 0.6, 4, block=64, share=share)
        return [s.truncated_many(list(ls)) for ls in lengths_per_call] + [s.truncated(30)]

    first = [[52] * 40, [52] * 300]
    other = [[52] * 20 + [17] * 20, [52] * 300]  # differs at step 20, in its first call
    later = [[52] * 40, [52] * 100 + [17] * 200]  # differs in its second call: the first 40 are replayed alone
    alone = passes(first, None), passes(other, None), passes(later, None)
    with sharing():
        assert (passes(first, "key"), passes(other, "key"), passes(later, "key")) == alone


@pytest.mark.parametrize("p, cap", list(itertools.product((1.0, 0.9, 0.5, 0.4, 1 / 3, 0.3, 0.1, 0.02), (1, 2, 5, 8))))
def test_capped_geometric_draws_are_numpys(p, cap):
    fast = capped_geometric(p, cap)(np.random.default_rng(11), 20_000)
    assert np.array_equal(fast, np.minimum(np.random.default_rng(11).geometric(p, size=20_000), cap))


def test_pass_prices_are_shared_by_every_cost_of_one_entry():
    a, b = profile("h100-ctx0-kernel", "qwen2.5-32b"), profile("h100-ctx0-kernel", "qwen2.5-32b")
    assert a is not b and a.seconds(0, 3, 2.5) == b.seconds(0, 3, 2.5)
    scaled = ProfileCost(a.profile, a.arch, a.extrapolation, 0.5)  # a scale is part of the price
    assert scaled.seconds(0, 3, 2.5) == pytest.approx(0.5 * a.seconds(0, 3, 2.5), rel=1e-15)


def test_every_number_of_a_plan_is_that_of_a_separate_run():
    """Screening (with successive halving), refining and the winner's run continue one another and share pass
    streams; each number must still be what a run of its own gives."""
    hw = Hardware("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b")
    b = Behaviour(alpha1=0.6, alpha2=0.6)
    tp = plan(b, hw, budget=16, k2_max=4, steps=2000, bootstrap=0)
    steps = {r["steps"] for r in tp.ranked}
    assert steps <= {250, 500, 1000, 2000} and {250, 1000, 2000} <= steps  # halving: some async rows stopped early
    for r in tp.ranked:
        o = run(b, hw, Setting(r["mode"], r["k1"], r["k2"], r["width"]), r["steps"], 0)
        assert (o.speedup, o.run.peak_positions) == (r["speedup"], r["positions"]), r
    top = tp.ranked[0]
    alone = predict(b, hw, Setting(top["mode"], top["k1"], top["k2"], top["width"]), steps=8000, bootstrap=0)
    assert (alone.speedup, alone.speedup_ci95) == (tp.best.speedup, tp.best.speedup_ci95)
    c = tp.closed_form_choice_simulated
    assert c["simulated_speedup"] == run(b, hw, Setting(c["mode"], c["k1"], c["k2"]), 2000, 0).speedup
