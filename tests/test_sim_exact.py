"""lrsim.sim: exact simulated times on small deterministic cases (both engines), the tie rule, validation."""

import json

import pytest

from lrsim.cost.passcost import curve
from lrsim.dists import Constant, LogNormal, Uniform
from lrsim.errors import InputError
from lrsim.sim import SimConfig, simulate
from lrsim.trace import read_trace

ONE = Constant(1)  # one token per step: a target step is one forward pass of T = 1
ENGINES = pytest.mark.parametrize("engine", ["des", "renewal"])


def run(**kw):
    return simulate(SimConfig(**kw))


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
        SimConfig(mode="async", width=2, request_tokens=Constant(100))
    with pytest.raises(ValueError, match="request_tokens"):
        SimConfig(mode="sync", engine="renewal", request_tokens=Constant(100))
    SimConfig(mode="async", request_tokens=Constant(100))  # async: the completing step ends its stage


@ENGINES
def test_sync_batch_dependent_latency(engine):
    # T(1) = 1, T(2) = 1.5 per pass: draft 0.2, then a batch of 2 costs 1.5
    lat = curve((1, 2), (1.0, 1.5), axis="batch")
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


@pytest.mark.parametrize("join", ["immediate", "iteration"])
def test_target_completions_come_before_a_draft_at_the_same_time(join, tmp_path):
    # c1 = 1 and one-token steps: target j and draft j finish together at every integer time.  The target's
    # completion is processed first (the tie rule), so target j + 1 starts on an empty server: batch 1 always.
    # Processed the other way round, the finishing target would still count: batch 2.
    kw = dict(mode="async", alpha1=1.0, c1=1.0, k1=2, step_tokens=ONE, join=join, steps=6)
    r = simulate(SimConfig(**kw), trace=tmp_path / "t.jsonl")
    assert r.peak_positions == 1 and r.sim_time == pytest.approx(6.0, abs=1e-12)
    assert {s.target_batch for s in read_trace(tmp_path / "t.jsonl").steps} == {1}


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
    dl = curve((1, 2, 4), (0.5, 1.0, 2.0), axis="batch")
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
    (dict(mode="sync", k1=8, target_latency=curve((1, 4), (1.0, 1.2))), "outside the measured range"),
    (dict(mode="sync", width=8, k1=6, tree=True), "exceeds"),
    (dict(mode="async", engine="renewal"), "sync and ar only"),
    (dict(verify_calls="twice"), "verify_calls must be one of one, per_pair"),
])
def test_bad_configurations_raise_one_line(kw, msg):
    from lrsim.errors import InputError

    with pytest.raises(InputError, match=msg) as e:
        SimConfig(**kw)
    assert "\n" not in str(e.value) and isinstance(e.value, ValueError)


def test_config_round_trips_through_a_dict():
    cfg = SimConfig(mode="sync", step_tokens=LogNormal(52, 0.4), target_latency=curve((1, 8), (1, 2)),
                    verifier_latency=Uniform(0.0, 0.1), request_tokens=Constant(300), budget=16)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert SimConfig.from_dict(d) == cfg


def test_prefill_unseen_in_sync_exact_times():
    """Sync k1 = 2, every draft rejected, 4-token steps; a pass costs 1 + rows x positions, a draft pass
    0.5 + 0.5 q.  'unseen': row 1 prefills draft 0 (4 tokens) in the first pass, T(2, (2 + 4) / 2) = 7, then
    three passes of T(2, 1) = 3; the draft prefills the target's committed step, 4 x 1.0 + 0.5 x 4 = 6, except
    in the first cycle (prompt 0): 4.  'none': 4 + 4 x 3 = 16 per cycle."""
    from lrsim.cost.passcost import curve

    kw = dict(mode="sync", k1=2, alpha1=0.0, step_tokens=Constant(4), steps=10, engine="des",
              target_latency=curve((1, 100), (2, 101), "positions", "linear"),
              draft_latency=curve((1, 100), (1.0, 50.5), "positions", "linear"))
    r = simulate(SimConfig(prefill="unseen", **kw))
    assert r.sim_time == pytest.approx(4 + 16 + 9 * (6 + 16), rel=1e-12)
    assert simulate(SimConfig(prefill="none", **kw)).sim_time == pytest.approx(10 * 16, rel=1e-12)
    assert simulate(SimConfig(prefill="last", **kw)).sim_time == pytest.approx(r.sim_time, rel=1e-12)  # k1 = 2


def test_prefill_of_each_prompt_in_ar_exact_times():
    """ar, requests of 8 tokens in 4-token steps, a 10-token prompt: each request's first pass prefills it,
    T(1, 11) = 12, then 3 passes of 2; its second step 4 x 2: 26 per request."""
    from lrsim.cost.passcost import curve

    cfg = SimConfig(mode="ar", step_tokens=Constant(4), request_tokens=Constant(8), prompt_tokens=10, steps=4,
                    prefill="last", target_latency=curve((1, 100), (2, 101), "positions", "linear"))
    assert simulate(cfg).sim_time == pytest.approx(2 * 26, rel=1e-12)
    with pytest.raises(InputError, match="event engine only"):
        SimConfig(mode="ar", prefill="last", engine="renewal")


def test_async_rows_reuse_what_the_earlier_row_wrote():
    """Async with prefill: a row conditioned on draft j - 1 prefills only what the row at j - 1 has not written of
    the target's step that the draft repeats (overlap_*): more overlap, less prefill, never below no prefill."""
    kw = dict(mode="async", k1=3, alpha1=0.8, step_tokens=Constant(20), steps=400, engine="des",
              target_latency=curve((1, 200), (2, 201), "positions", "linear"),
              draft_latency=curve((1, 200), (0.5, 100.0), "positions", "linear"))
    none = simulate(SimConfig(prefill="none", **kw)).sim_time
    full = simulate(SimConfig(prefill="unseen", **kw)).sim_time
    half = simulate(SimConfig(prefill="unseen", overlap_accepted=Constant(0.5), overlap_rejected=Constant(0.5),
                              **kw)).sim_time
    alll = simulate(SimConfig(prefill="unseen", overlap_accepted=Constant(1.0), overlap_rejected=Constant(1.0),
                              **kw)).sim_time
    assert none < alll < half < full


def test_written_so_far_on_the_work_clock():
    """A job of 4 passes writing 8 tokens on a server of 1 s iterations: 4 tokens after 2 s, all once done."""
    import simpy

    from lrsim.sim.servers import Job, TargetServer

    env = simpy.Environment()
    srv = TargetServer(env, lambda b, extra=0: 1.0, grid=True)
    job = Job(0, 8, 4, 8)
    srv.run([job])
    env.run(until=2.0)
    assert srv.written_so_far(job) == pytest.approx(4.0)
    env.run(until=10.0)
    assert srv.written_so_far(job) == 8.0


def test_pro_rata_is_even_over_the_passes_and_clamped():
    """The one pro-rata rule both servers use: 3 of 4 passes of 10 tokens is 7.5; none before, all after."""
    from lrsim.sim.servers import pro_rata

    assert pro_rata(10, 3, 4) == 7.5
    assert pro_rata(10, -1, 4) == 0.0 and pro_rata(10, 5, 4) == 10.0


def test_prompt_found_in_kv_is_not_prefilled_exact_times():
    """ar as in the test above, but the target's KV already holds a share of each prompt (another run of the same
    request left it): all of it, 16 per request (4 passes of 2, twice); half of it, 5 tokens prefilled, T(1, 6) = 7
    + 3 x 2 + 8 = 21."""
    from lrsim.cost.passcost import curve

    kw = dict(mode="ar", step_tokens=Constant(4), request_tokens=Constant(8), prompt_tokens=10, steps=4,
              prefill="last", target_latency=curve((1, 100), (2, 101), "positions", "linear"))
    assert simulate(SimConfig(prompt_cached=1.0, **kw)).sim_time == pytest.approx(2 * 16, rel=1e-12)
    assert simulate(SimConfig(prompt_cached=0.5, **kw)).sim_time == pytest.approx(2 * 21, rel=1e-12)
    assert simulate(SimConfig(prompt_cached=1.0, prefill="none", **{k: v for k, v in kw.items()
                                                                    if k != "prefill"})).sim_time == \
        pytest.approx(2 * 16, rel=1e-12)
    with pytest.raises(InputError, match="prompt_cached must lie in"):
        SimConfig(prompt_cached=1.5)


def test_draft_prompt_found_in_kv_is_not_prefilled():
    """Sync as in test_prefill_unseen_in_sync_exact_times with a 10-token prompt the target holds: the drafter's
    first pass also prefills it, 0.5 x 10 = 5 more, unless its KV holds the prompt too."""
    from lrsim.cost.passcost import curve

    kw = dict(mode="sync", k1=2, alpha1=0.0, step_tokens=Constant(4), steps=10, engine="des", prefill="unseen",
              prompt_tokens=10, prompt_cached=1.0, target_latency=curve((1, 100), (2, 101), "positions", "linear"),
              draft_latency=curve((1, 100), (1.0, 50.5), "positions", "linear"))
    fed = simulate(SimConfig(**kw)).sim_time
    held = simulate(SimConfig(draft_prompt_cached=1.0, **kw)).sim_time
    assert held == pytest.approx(4 + 16 + 9 * (6 + 16), rel=1e-12)
    assert fed - held == pytest.approx(5, rel=1e-12)
