"""lrsim.des: exact simulated times on small deterministic cases, statistics against the closed forms,
the two target-server implementations against each other, and the trace it writes."""

import itertools
import json
from collections import Counter

import numpy as np
import pytest

from lrsim import theory
from lrsim.des import SimConfig, accept_probability, simulate
from lrsim.latency import Constant, ConstantLatency, CurveLatency, LogNormal, Uniform
from lrsim.trace import read_trace

ONE = Constant(1)  # one token per step: a target step is one forward pass of T = 1


def run(**kw):
    return simulate(SimConfig(**kw))


# ----------------------------------------------------------------------------- exact times


ENGINES = pytest.mark.parametrize("engine", ["des", "renewal"])


@ENGINES
def test_sync_cycle_k3_all_accepted_ends_at_1_4(engine):
    # Algorithm 1: drafts at [0, .2], [.2, .4]; the target batch [.4, 1.4]; free verifier
    r = run(mode="sync", alpha1=1.0, c1=0.2, k1=3, steps=3, engine=engine)
    assert r.sim_time == pytest.approx(1.4, abs=1e-12)
    assert (r.steps, r.cycles, r.accepted_per_cycle) == (3, 1, 2.0)
    assert r.speedup == pytest.approx(3 / 1.4, abs=1e-12)


@ENGINES
def test_sync_rejection_keeps_one_target_step_per_cycle(engine):
    r = run(mode="sync", alpha1=0.0, c1=0.2, k1=3, steps=2, engine=engine)
    assert r.sim_time == pytest.approx(2.8, abs=1e-12)  # two cycles of 1.4, one step each
    assert r.steps == 2 and r.acceptance_rate == 0.0
    assert r.wasted_target_work == pytest.approx(2 / 3)  # target steps 1 and 2 followed a rejected draft


@ENGINES
def test_sync_verifier_cost_adds_to_the_cycle(engine):
    r = run(mode="sync", alpha1=1.0, c1=0.2, k1=3, verifier_cost=0.1, steps=6, engine=engine)
    assert r.sim_time == pytest.approx(3.0, abs=1e-12)  # 2 cycles x (0.4 + 1 + 0.1)


@ENGINES
def test_sync_per_pair_verifier_calls_stop_at_the_first_rejection(engine):
    # lrref's sync decoder checks the pairs one after another: all accepted -> 2 calls, all rejected -> 1
    kw = dict(mode="sync", c1=0.2, k1=3, verifier_cost=0.1, verify_calls="per_pair", engine=engine)
    assert run(alpha1=1.0, steps=6, **kw).sim_time == pytest.approx(2 * 1.6, abs=1e-12)  # 0.4 + 1 + 2 x 0.1
    assert run(alpha1=0.0, steps=2, **kw).sim_time == pytest.approx(2 * 1.5, abs=1e-12)  # 0.4 + 1 + 0.1


def test_sync_request_cap_cuts_drafts_and_target_steps():
    # 10-token steps, T = 1 per step (0.1 per pass), drafts 0.02 per token; requests of 25 tokens:
    # drafts 10 + 10, target steps cut to 10, 10, 5 (one batch of 10 passes) -> 25 tokens in 1.4
    kw = dict(mode="sync", alpha1=1.0, c1=0.2, k1=3, step_tokens=Constant(10))
    r = run(request_tokens=Constant(25), steps=6, **kw)
    assert (r.sim_time, r.output_tokens, r.cycles) == (pytest.approx(2.8, abs=1e-12), 50, 2)
    # requests of 15: the second draft is cut to 5 and uses the budget up, so no target step follows it
    r = run(request_tokens=Constant(15), steps=4, **kw)
    assert r.sim_time == pytest.approx(2 * (0.2 + 0.1 + 1.0), abs=1e-12) and r.output_tokens == 30
    uncapped = run(steps=6, **kw)
    assert uncapped.output_tokens == 60 and uncapped.sim_time == pytest.approx(2.8, abs=1e-12)


def test_request_cap_is_refused_where_it_is_not_modelled():
    with pytest.raises(ValueError, match="request_tokens"):
        SimConfig(mode="async", request_tokens=Constant(100))


@ENGINES
def test_sync_batch_dependent_latency(engine):
    # T(1) = 1, T(2) = 1.5 per pass: draft 0.2, then a batch of 2 costs 1.5
    lat = CurveLatency((1, 2), (1.0, 1.5), axis="batch")
    r = run(mode="sync", alpha1=1.0, c1=0.2, k1=2, step_tokens=ONE, target_latency=lat, steps=4, engine=engine)
    assert r.sim_time == pytest.approx(2 * 1.7, abs=1e-12)
    assert r.speedup == pytest.approx(4 / 3.4, abs=1e-12)


def test_async_pipeline_all_accepted_by_hand():
    # k1 = 2, c = .2: targets 0 [0,1], 1 [.2,1.2]; V=1 at 1 -> target 2 [1,2] (draft 2 [1,1.2]); V=2 at 1.2 ->
    # target 3 [1.2, 2.2].  Commits at 1, 1.2, 2, 2.2.
    r = run(mode="async", alpha1=1.0, c1=0.2, k1=2, step_tokens=ONE, join="immediate", steps=4)
    assert r.sim_time == pytest.approx(2.2, abs=1e-12)


def test_async_joins_wait_for_the_iteration_boundary():
    # 4 tokens per step (pass .25), c = .3: target 1 submitted at .3 joins at .5.  Commits 1, 1.5, 2, 2.5;
    # joining at once instead: 1, 1.3, 2, 2.3.
    kw = dict(mode="async", alpha1=1.0, c1=0.3, k1=2, step_tokens=Constant(4), steps=4)
    assert run(**kw).sim_time == pytest.approx(2.5, abs=1e-12)
    assert run(**kw, join="immediate").sim_time == pytest.approx(2.3, abs=1e-12)


def test_async_all_rejected_is_target_speed_with_waste():
    r = run(mode="async", alpha1=0.0, c1=0.2, k1=2, step_tokens=ONE, join="immediate", steps=3)
    assert r.sim_time == pytest.approx(3.0, abs=1e-12) and r.speedup == pytest.approx(1.0)
    assert r.wasted_target_work == pytest.approx(0.8 / 1.8)  # target 1 ran .2 -> 1 each stage, then cancelled


def test_async_k1_1_is_target_only_like_sync():
    kw = dict(k1=1, k2=3, verifier_cost=0.1, step_tokens=LogNormal(30, 0.5), steps=2000, seed=2)
    a, s = run(mode="async", **kw), run(mode="sync", **kw)
    assert (a.sim_time, a.speedup, a.acceptance_rate) == (pytest.approx(s.sim_time), pytest.approx(s.speedup), None)


def test_async_verifier_latency_by_hand():
    # as the all-accepted case with a 0.1 verifier: commits at 1.1, 1.3, 2.2, 2.4
    r = run(mode="async", alpha1=1.0, c1=0.2, k1=2, step_tokens=ONE, join="immediate", verifier_cost=0.1, steps=4)
    assert r.sim_time == pytest.approx(2.4, abs=1e-12)


@ENGINES
def test_ar_baseline_and_token_sd_exact(engine):
    r = run(mode="ar", steps=7, step_tokens=Constant(5), engine=engine)
    assert r.sim_time == pytest.approx(7.0) and r.speedup == pytest.approx(1.0, abs=1e-12)
    # alpha2 = 1: every pass writes k2 = 4 tokens; an 8-token step is 2 passes of (1 + .25 * 3)/8
    r = run(mode="ar", steps=3, step_tokens=Constant(8), k2=4, alpha2=1.0, c2=0.25, engine=engine)
    assert r.sim_time == pytest.approx(3 * 2 * 1.75 / 8, abs=1e-12)
    assert r.speedup == pytest.approx(4 / 1.75, abs=1e-12)  # g at alpha2 -> 1


@ENGINES
def test_width_tree_batches_the_drafter(engine):
    # draft latency grows with the batch: depth 0 drafts 2 candidates (1.0 s/pass), depth 1 drafts 4 (2.0 s/pass)
    dl = CurveLatency((1, 2, 4), (0.5, 1.0, 2.0), axis="batch")
    r = run(mode="sync", alpha1=1.0, k1=3, width=2, tree=True, step_tokens=ONE, draft_latency=dl, steps=3,
            engine=engine)
    assert r.sim_time == pytest.approx(1.0 + 2.0 + 1.0, abs=1e-12)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("kw, msg", [
    (dict(mode="x"), "unknown mode"),
    (dict(alpha1=1.5), "alpha1 must lie in"),
    (dict(c1=0), "c1 must be"),
    (dict(k1=0), "k1 must be an integer"),
    (dict(k1=4, k2=4, budget=8), "over budget"),
    (dict(tree=True), "sync mode only"),
    (dict(k2=2, token_model="mean"), "use join 'immediate'"),
    (dict(mode="sync", k1=8, target_latency=CurveLatency((1, 4), (1.0, 1.2))), "outside the latency table"),
    (dict(mode="sync", width=8, k1=6, tree=True), "exceeds"),
    (dict(mode="async", engine="renewal"), "sync and ar only"),
])
def test_bad_configurations_raise_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg) as e:
        SimConfig(**kw)
    assert "\n" not in str(e.value)


def test_config_round_trips_through_a_dict():
    cfg = SimConfig(mode="sync", step_tokens=LogNormal(52, 0.4), target_latency=CurveLatency((1, 8), (1, 2)),
                    verifier_latency=Uniform(0.0, 0.1), budget=16)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert SimConfig.from_dict(d) == cfg


# ----------------------------------------------------------------------------- statistics (seeded)

Z = 4.0  # |z| tolerance: a correct model fails one such check with probability ~6e-5


def z_score(r, exact):
    se = (r.speedup_ci95[1] - r.speedup_ci95[0]) / (2 * 2.0395)  # the CI uses t_{0.975, 31} = 2.0395
    return (r.speedup - exact) / se


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


# ----------------------------------------------------------------------------- the two servers agree


@pytest.mark.parametrize("mode, join, k1, k2, v", list(itertools.product(
    ("sync", "async"), ("iteration", "immediate"), (2, 4), (1, 3), (0.0, 0.0625))))
def test_general_server_equals_fixed_rate_server(mode, join, k1, k2, v):
    # times are binary fractions, so both servers compute them exactly and ties break the same way
    kw = dict(mode=mode, join=join, k1=k1, k2=k2, c2=0.25, step_tokens=Uniform(4, 12), verifier_cost=v,
              alpha1=0.6, c1=0.25, steps=300, seed=3)
    a = run(**kw, target_latency=ConstantLatency(0.125)).to_dict()
    b = run(**kw, target_latency=CurveLatency((1, 64), (0.125, 0.125))).to_dict()  # same T, general server
    for key in ("speedup", "steps", "cycles", "sim_time", "baseline_time", "acceptance_rate", "output_tokens"):
        assert a[key] == pytest.approx(b[key], rel=1e-12), key
    for key in ("target_utilisation", "wasted_target_work"):  # differ only in booking a sequence cut at the end
        assert a[key] == pytest.approx(b[key], rel=0.03), key


# ----------------------------------------------------------------------------- the two engines agree


@pytest.mark.parametrize("mode, k1, k2, width, tree, tokens, model, latency", [
    ("sync", 4, 1, 1, False, "sampled", Constant(52), None),
    ("sync", 4, 3, 1, False, "sampled", LogNormal(20, 0.6), CurveLatency((1, 4, 16), (0.05, 0.06, 0.1))),
    ("sync", 3, 3, 3, False, "mean", Constant(8), None),
    ("sync", 3, 1, 2, True, "sampled", LogNormal(20, 0.6), None),
    ("sync", 1, 3, 1, False, "sampled", Constant(8), None),
    ("sync-per-pair", 4, 2, 1, False, "sampled", LogNormal(20, 0.6), None),
    ("ar", 1, 1, 1, False, "sampled", LogNormal(20, 0.6), None),
    ("ar", 1, 4, 1, False, "sampled", Constant(8), CurveLatency((1, 4, 16), (0.05, 0.06, 0.1))),
    ("ar", 1, 4, 1, False, "mean", LogNormal(20, 0.6), None),
])
def test_renewal_engine_reproduces_the_event_engine(mode, k1, k2, width, tree, tokens, model, latency):
    calls = "per_pair" if mode.endswith("-per-pair") else "one"
    kw = dict(mode=mode.removesuffix("-per-pair"), verify_calls=calls, k1=k1, k2=k2, width=width, tree=tree, token_model=tokens, step_tokens=model,
              target_latency=latency, join="immediate" if tokens == "mean" else "iteration", alpha1=0.6,
              correlation=0.3, verifier_latency=Uniform(0.0, 0.1), steps=3000, seed=7,
              draft_latency=CurveLatency((1, 64), (0.01, 0.02), axis="batch") if width > 1 else None)
    a = run(engine="des", **kw).to_dict()
    b = run(engine="renewal", **kw).to_dict()
    assert (a["engine"], b["engine"]) == ("des", "renewal")
    for key in set(a) - {"config", "events", "wall_seconds", "events_per_second", "engine", "mode"}:
        assert a[key] == (b[key] if b[key] is None else pytest.approx(b[key], rel=1e-9)), key


# ----------------------------------------------------------------------------- traces


@pytest.mark.parametrize("mode, width", [("sync", 1), ("sync", 3), ("async", 1), ("async", 2), ("ar", 1)])
def test_trace_round_trip(tmp_path, mode, width):
    p, c = tmp_path / "t.jsonl", tmp_path / "t.chrome.json"
    r = simulate(SimConfig(mode=mode, width=width, alpha1=0.6, c1=0.2, k1=3, k2=2, steps=200, seed=5,
                           verifier_cost=0.05, step_tokens=Uniform(20, 60)), trace=p, chrome=c)
    t = read_trace(p)
    assert t.warnings == []
    assert t.header.source == "lrsim.des" and t.header.mode == {"ar": "ar", "sync": "lr-sync"}.get(mode, "lr-async")
    assert SimConfig.from_dict(t.header.config).mode == mode
    assert t.header.summary["speedup"] == pytest.approx(r.speedup)
    req = t.requests[0]
    assert (req.steps, req.cycles, req.end) == (r.steps, r.cycles, pytest.approx(r.sim_time))
    committed = [s for s in t.steps if s.committed]
    assert len(committed) == r.steps  # one row per output step
    assert len({(s.cycle, s.position) for s in committed}) == r.steps
    assert sum(s.accepted for s in t.steps) == req.accepted_steps
    assert all(s.committed == "draft" for s in t.steps if s.accepted)
    per_cycle = Counter(s.cycle for s in committed)
    assert len(per_cycle) == r.cycles
    if mode == "sync":
        starts = {(s.cycle, s.target_start) for s in t.steps}
        assert len(starts) == r.cycles  # the k1 target steps of a cycle start together, as one batch
        assert max(per_cycle.values()) <= 3
    spans = [e for e in json.loads(c.read_text())["traceEvents"] if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    assert {e["cat"] for e in spans} >= ({"target"} if mode == "ar" else {"draft", "target", "verify"})


def test_events_are_counted():
    r = run(mode="async", steps=2000)
    assert r.events > 2000 and r.events_per_second > 0
