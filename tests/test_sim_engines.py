"""lrsim.sim: the two target-server implementations agree, the two engines agree, events are counted."""

import itertools

import pytest

from lrsim.cost.passcost import constant, curve
from lrsim.dists import Constant, LogNormal, Uniform
from lrsim.sim import SimConfig, simulate


def run(**kw):
    return simulate(SimConfig(**kw))


@pytest.mark.parametrize("mode, join, k1, k2, v", list(itertools.product(
    ("sync", "async"), ("iteration", "immediate"), (2, 4), (1, 3), (0.0, 0.0625))))
def test_general_server_equals_fixed_rate_server(mode, join, k1, k2, v):
    # times are binary fractions, so both servers compute them exactly and ties break the same way
    kw = dict(mode=mode, join=join, k1=k1, k2=k2, c2=0.25, step_tokens=Uniform(4, 12), verifier_cost=v,
              alpha1=0.6, c1=0.25, steps=300, seed=3)
    a = run(**kw, target_latency=constant(0.125)).to_dict()
    b = run(**kw, target_latency=curve((1, 64), (0.125, 0.125))).to_dict()  # same T, general server
    for key in ("speedup", "steps", "cycles", "sim_time", "baseline_time", "acceptance_rate", "output_tokens"):
        assert a[key] == pytest.approx(b[key], rel=1e-12), key
    for key in ("target_utilisation", "wasted_target_work"):  # differ only in booking a sequence cut at the end
        assert a[key] == pytest.approx(b[key], rel=0.03), key


@pytest.mark.parametrize("mode, k1, k2, width, tree, tokens, model, latency", [
    ("sync", 4, 1, 1, False, "sampled", Constant(52), None),
    ("sync", 4, 3, 1, False, "sampled", LogNormal(20, 0.6), curve((1, 4, 16), (0.05, 0.06, 0.1))),
    ("sync", 3, 3, 3, False, "mean", Constant(8), None),
    ("sync", 3, 1, 2, True, "sampled", LogNormal(20, 0.6), None),
    ("sync", 1, 3, 1, False, "sampled", Constant(8), None),
    ("sync-per-pair", 4, 2, 1, False, "sampled", LogNormal(20, 0.6), None),
    ("ar", 1, 1, 1, False, "sampled", LogNormal(20, 0.6), None),
    ("ar", 1, 4, 1, False, "sampled", Constant(8), curve((1, 4, 16), (0.05, 0.06, 0.1))),
    ("ar", 1, 4, 1, False, "mean", LogNormal(20, 0.6), None),
])
def test_renewal_engine_reproduces_the_event_engine(mode, k1, k2, width, tree, tokens, model, latency):
    calls = "per_pair" if mode.endswith("-per-pair") else "one"
    kw = dict(mode=mode.removesuffix("-per-pair"), verify_calls=calls, k1=k1, k2=k2, width=width, tree=tree,
              token_model=tokens, step_tokens=model, target_latency=latency,
              join="immediate" if tokens == "mean" else "iteration", alpha1=0.6,
              correlation=0.3, verifier_latency=Uniform(0.0, 0.1), steps=3000, seed=7,
              draft_latency=curve((1, 64), (0.01, 0.02), axis="batch") if width > 1 else None)
    a = run(engine="des", **kw).to_dict()
    b = run(engine="renewal", **kw).to_dict()
    assert (a["engine"], b["engine"]) == ("des", "renewal")
    for key in set(a) - {"config", "events", "wall_seconds", "events_per_second", "engine", "mode"}:
        assert a[key] == (b[key] if b[key] is None else pytest.approx(b[key], rel=1e-9)), key


def test_events_are_counted():
    r = run(mode="async", steps=2000)
    assert r.events > 2000 and r.events_per_second > 0
    assert run(mode="sync", steps=2000).events == 0  # the renewal engine has no events


def test_results_do_not_depend_on_what_ran_before():
    # the fixed-rate server books the sequences still running at the end in admission order, so a run's
    # numbers are the same in a fresh process and after other runs (no set iteration order involved)
    kw = dict(mode="async", alpha1=0.7, c1=0.2, k1=5, join="immediate", steps=2500)
    first = run(**kw).to_dict()
    for seed in range(3):
        run(mode="async", k1=6, steps=500, seed=seed)
    again = run(**kw).to_dict()
    assert {k: v for k, v in first.items() if k not in ("wall_seconds", "events_per_second")} == \
        {k: v for k, v in again.items() if k not in ("wall_seconds", "events_per_second")}
