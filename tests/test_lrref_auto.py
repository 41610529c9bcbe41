"""lrref --mode auto (issue 34): the decoder chooses ar, sd or lr-sync per cycle, from the costs it measures and
the acceptance it sees; on the toy backend (pure Python, pass times reported, not slept)."""

import importlib.util
import math
import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import pytest
from conftest import require_models
from toy import toy_decoder

from lrref.config import DecodeConfig, parse_mode
from lrref.decode.auto import Meter, Tuner, arm_config, candidates
from lrref.decode.request import Committed, Result
from lrsim.adaptive.policy import AutoOptions
from lrsim.errors import InputError
from lrsim.theory.costaware import Arm, speedup
from lrsim.trace import PassRecord, TraceError, read_trace, recorded_setting

QUESTIONS = ["a question", "another one", "a third", "and a fourth one"]


def run_auto(tmp_path, target_s=0.01, row_s=0.0, draft_s=0.001, deviate=0.3, **kw):
    """Decode the questions in auto mode on the toy pair with those pass costs (``deviate``: the draft's share of
    tokens that differ from the target's); results and the trace.  The tuner times cycles by the toy's model clock
    (its passes' reported seconds: :func:`model_clock`)."""
    tp = tmp_path / "auto.jsonl"
    dec, tw = toy_decoder(tp, mode="auto", **({"draft_temperature": 0.0} | kw))
    dec.target.seconds_per_pass, dec.target.seconds_per_row, dec.draft.seconds_per_pass = target_s, row_s, draft_s
    dec.tuner.clock = model_clock(dec)
    dec.draft.deviate = deviate
    try:
        res = [dec.run(i, dec.target.encode_chat(q)) for i, q in enumerate(QUESTIONS)]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp)


def model_clock(dec, lr_extra=0.0):
    """The toy's clock: its target's and draft's reported pass seconds (the toy does not sleep), and ``lr_extra``
    times the draft's on top (an LR cycle slower than its costs say)."""
    return lambda: dec.target.stats.forward_s + (1 + lr_extra) * dec.draft.stats.forward_s


def test_auto_is_lossless_with_the_exact_verifier(tmp_path):
    res, tr = run_auto(tmp_path)
    ar_tp = tmp_path / "ar.jsonl"
    dec, tw = toy_decoder(ar_tp, mode="ar", draft_temperature=0.0)
    ref = [dec.run(i, dec.target.encode_chat(q)) for i, q in enumerate(QUESTIONS)]
    tw.close()
    assert [r.ids for r in res] == [r.ids for r in ref]
    assert {c.mode for c in tr.choices} == {"ar", "sync"}  # it ran both kinds of cycle


def test_a_warm_up_measures_costs_and_writes_nothing(tmp_path):
    # lrref bench --modes ...,auto --warmup 1: the warm-up request runs without the trace (its clock's origin kept)
    tp = tmp_path / "auto.jsonl"
    dec, tw = toy_decoder(tp, mode="auto", draft_temperature=0.0)
    dec.target.seconds_per_pass = 0.01
    try:
        assert dec.warm_up(dec.target.encode_chat(QUESTIONS[0])) >= 0
        assert dec.tuner.meter.costs(True).target_pass(1) > 0  # the warm-up's passes were measured
        dec.run(0, dec.target.encode_chat(QUESTIONS[1]))
    finally:
        dec.close()
        tw.close()
    tr = read_trace(tp)
    assert [r.request for r in tr.requests] == [0] and {c.request for c in tr.choices} == {0}


def test_one_choice_record_per_cycle_before_its_rows(tmp_path):
    _, tr = run_auto(tmp_path)
    cycles = {(s.request, s.cycle) for s in tr.steps}
    assert {(c.request, c.cycle) for c in tr.choices} == cycles and len(tr.choices) == len(cycles)
    first = tr.choices[0]
    assert (first.config, first.alpha1, first.target_pass_s) == ("ar", None, None)  # nothing measured yet
    later = tr.choices[1]
    assert later.target_pass_s == pytest.approx(0.01) and later.target_position_s == 0.0  # one n seen: free
    # an lr-sync cycle has gamma drafted rows per position 0..gamma-1 and the bonus/target row
    for c in tr.choices:
        rows = [s for s in tr.steps if (s.request, s.cycle) == (c.request, c.cycle)]
        if c.mode == "ar":
            assert len(rows) == 1 and rows[0].branch is None
        else:
            assert max((s.position for s in rows if s.branch is not None), default=-1) <= c.k1 - 2
    assert tr.header.mode == "auto" and tr.header.setting is None


def test_auto_picks_lr_where_batches_are_free_and_steps_accepted(tmp_path):
    """A free batch, a draft 10x cheaper than the target and high step acceptance: LR pays, so auto runs lr-sync
    after the first cycle measured the target; with most steps rejected it leaves LR (the toy proposes no n-gram
    tokens, so sd keeps its prior token acceptance and pays on a free batch)."""
    _, tr = run_auto(tmp_path, target_s=0.01, row_s=0.0, draft_s=0.001, deviate=0.0)
    modes = Counter(c.mode for c in tr.choices[1:])
    assert modes["sync"] == sum(modes.values()) and max(c.k1 for c in tr.choices) >= 3
    assert tr.choices[-1].alpha1 > 0.8
    _, low = run_auto(tmp_path, target_s=0.01, row_s=0.0, draft_s=0.001, deviate=0.3)
    assert low.choices[-1].alpha1 < 0.2 and Counter(c.mode for c in low.choices[-10:])["ar"] >= 8


def test_auto_picks_ar_where_batches_cost_linearly(tmp_path):
    """Each row of a pass costs a whole pass and the draft costs as much as the target: no LR configuration can
    pay; once measured, LR is not chosen again (ar or sd only after the first LR cycle's costs are in)."""
    _, tr = run_auto(tmp_path, target_s=0.01, row_s=0.01, draft_s=0.01)
    tried = [i for i, c in enumerate(tr.choices) if c.mode == "sync"]
    assert tried, "LR is tried while its costs are unmeasured (optimism)"
    assert tr.choices[tried[0]].config == "lr-sync gamma=1" and tr.choices[tried[0]].best != "lr-sync gamma=1"  # the probe
    after = tr.choices[tried[0] + 1:]
    assert after and all(c.mode == "ar" for c in after)
    assert after[-1].draft_token_s == pytest.approx(0.01) and after[-1].target_position_s == pytest.approx(0.01)
    assert all(c.speedup <= 1.0 + 1e-9 for c in after if c.config == "ar")


def test_meter_fits_the_affine_pass_cost_exactly():
    m = Meter()
    assert m.costs(True) is None
    for n, t, times in ((1, 1.0, 3), (5, 3.0, 1), (3, 2.0, 2)):
        for _ in range(times):
            m.record(PassRecord(engine="target", seconds=t, rows=n, tokens=n))
    m.record(PassRecord(engine="target", seconds=99.0, rows=1, tokens=1000))  # a long prefill: left out
    m.record(PassRecord(engine="draft", seconds=0.2, rows=1, tokens=1))
    m.record(PassRecord(engine="draft", seconds=5.0, rows=1, tokens=40))  # a draft prefill: not a token
    m.verified(4, 0.2)
    c = m.costs(False)
    assert m.fit() == pytest.approx((1.0, 0.5))  # T(n) = 1 + 0.5 (n - 1) through the points
    assert (c.target_pass(3), c.draft_token_s, c.verify_pair_s, c.draft_sd) == (pytest.approx(2.0), 0.2, 0.05, False)
    m.record(PassRecord(engine="target", seconds=1.5, rows=1, tokens=5))  # n = 5 now at 2.25 on average
    # s = (2 * 2 * 1.0 + 2 * 4 * 1.25) / (2 * 4 + 2 * 16) = 14 / 40 through t1 = 1
    assert m.fit() == pytest.approx((1.0, 0.35))


def test_meter_is_optimistic_before_a_second_batch_size():
    m = Meter()
    m.record(PassRecord(engine="target", seconds=0.5, rows=1, tokens=1))
    c = m.costs(True)
    assert (c.target_pass(8), c.draft_token_s, c.verify_pair_s) == (0.5, 0.0, 0.0)


def test_arms_map_to_fixed_modes():
    cfg = DecodeConfig(mode="auto", auto_max_gamma=3)
    assert [a.label for a in candidates(cfg)][:2] == ["ar", "sd k2=5"]
    assert {a.k1 for a in candidates(cfg) if a.mode == "sync"} == {2, 3, 4}
    assert arm_config(cfg, Arm("ar", 1, 5)).mode == "sd" and arm_config(cfg, Arm("ar", 1, 5)).ngram_k == 4
    c = arm_config(cfg, Arm("sync", 4, 1))
    assert (c.base, c.gamma, c.ngram_k) == ("lr-sync", 3, 0)
    assert arm_config(cfg, Arm("sync", 2, 5)).mode == "lr-sync+sd"


@pytest.mark.parametrize("kw, msg", [({"auto_max_gamma": 9}, "auto_max_gamma must be in 1..8"),
                                     ({"auto_max_gamma": 0}, "auto_max_gamma must be in 1..8"),
                                     ({"concurrency": 2}, "one request at a time"),
                                     ({"width": 2, "draft_temperature": 1.0}, "width 1")])
def test_auto_config_errors(kw, msg):
    with pytest.raises(InputError, match=msg):
        DecodeConfig(mode="auto", **kw)


def test_auto_mode_names():
    assert parse_mode("auto") == ("auto", False) and DecodeConfig(mode="auto").is_lr
    with pytest.raises(InputError, match="unknown mode"):
        parse_mode("auto+sd")


def lrref(*args):
    return subprocess.run([sys.executable, "-m", "lrref.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, msg", [
    (["generate", "--mode", "auto", "--gamma", "3", "--prompt", "x"], "drop --gamma"),
    (["generate", "--mode", "auto", "--ngram", "2", "--prompt", "x"], "drop --ngram"),
    (["bench", "--modes", "auto,ar", "--gamma", "2"], "drop --gamma"),
    (["generate", "--mode", "auto", "--auto-max-gamma", "9", "--prompt", "x"], "auto_max_gamma must be in 1..8"),
    (["generate", "--mode", "auto+sd", "--prompt", "x"], "unknown mode"),
])
def test_cli_refuses_flags_auto_would_override(args, msg):
    r = lrref(*args)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_auto_trace_has_no_one_setting(tmp_path):
    _, tr = run_auto(tmp_path)
    with pytest.raises(TraceError, match="adaptive trace"):
        recorded_setting(tr.header)


def test_replay_checks_an_auto_runs_decisions(tmp_path):
    from lrsim.adaptive.trace import check_auto_traces

    res, tr = run_auto(tmp_path)
    rep = check_auto_traces([tr])
    assert rep.decisions == len(tr.choices) - 1  # the run's first cycle measured the target: no estimates
    assert rep.reproduced == rep.decisions  # the closed forms at the recorded means and costs give its speedups
    assert 0 < rep.greedy <= rep.decisions and 0 <= rep.regret < 1
    assert sum(u.tokens for u in rep.uses) == rep.tokens == sum(len(r.ids) for r in res)
    assert sum(u.cycles for u in rep.uses) == len(tr.choices)
    out = subprocess.run([sys.executable, "-m", "lrsim.cli", "replay", str(tmp_path / "auto.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("auto run: 4 request(s)"), out.stderr
    bad = subprocess.run([sys.executable, "-m", "lrsim.cli", "replay", str(tmp_path / "auto.jsonl"), "--k1", "3"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "drop --k1" in bad.stderr


# --- the speed it gets (issue 42) ----------------------------------------------------------------------------

T1, STEP = 0.01, 40  # the fake tuner's target pass over one position (s) and step length (tokens)


def fake_tuner(learn_speed=True):
    """A tuner on a fake clock whose meter measured a near-free batch (T(n) = T1 (1 + 0.05 (n - 1))), a draft
    token at T1 / 10 and a free verifier: LR's closed forms promise a lot; the clock (a list) and the tuner."""
    now = [0.0]
    tuner = Tuner(DecodeConfig(mode="auto"), AutoOptions(learn_speed=learn_speed), clock=lambda: now[0])
    for n in (1, 2):
        tuner.meter.record(PassRecord(engine="target", seconds=T1 * (1 + 0.05 * (n - 1)), rows=n, tokens=n))
    tuner.meter.record(PassRecord(engine="draft", seconds=T1 / 10, rows=1, tokens=1))
    tuner.meter.verified(1, 0.0)
    return tuner, now


def fake_request(index):
    """What the tuner reads and writes of a request: its index, result, configuration and choice records."""
    records = []
    return SimpleNamespace(index=index, res=Result([], "", [], "max_tokens", 0.0, 10), cfg=None, records=records,
                           rows=SimpleNamespace(choice=records.append))


def fake_cycle(tuner, now, req, cycle, lr_slowdown):
    """One cycle of the tuner's choice: ar and sd one step of STEP tokens, lr-sync gamma accepted drafts and the
    target's step; ar's and sd's seconds as their closed form predicts, lr-sync's ``lr_slowdown`` times that
    (at the step acceptance the policy believed when it chose).  The arm it ran."""
    tuner.begin(req, cycle)
    rec, pol = req.records[-1], tuner.policy
    arm = Arm(rec.mode, rec.k1, rec.k2)
    s = speedup(arm, pol.step.mean, pol.token.mean, pol.step_tokens, tuner.meter.costs(True))
    for i in range(arm.k1):
        req.res.steps.append(Committed([1] * STEP, "x", "draft" if i < arm.k1 - 1 else "target"))
        req.res.ids += [1] * STEP
    req.res.verified += arm.k1 - 1
    req.res.accepted += arm.k1 - 1
    now[0] += (1 if arm.mode == "ar" else lr_slowdown) * STEP * arm.k1 * T1 / s
    tuner.end(req)
    return arm


def test_lr_three_times_slower_than_predicted_is_left_within_a_few_cycles_and_across_requests():
    """Every draft accepted, but lr-sync takes 3x the time its closed form predicts: auto leaves it after two
    timed LR cycles (the request's first cycle prefills: not timed), and the next request, whose acceptance prior
    is high, starts from that knowledge (no LR); ar and sd, exactly as predicted, keep a factor of 1.  Without
    the speed model, LR all along."""
    tuner, now = fake_tuner()
    req0 = [fake_cycle(tuner, now, r, c, 3.0) for r in [fake_request(0)] for c in range(12)]
    assert [a.mode for a in req0[:4]] == ["sync", "sync", "sync", "ar"]
    assert sum(a.mode == "sync" for a in req0) <= 4  # a Thompson draw of the acceptance may try it once more
    req1 = [fake_cycle(tuner, now, r, c, 3.0) for r in [fake_request(1)] for c in range(12)]
    assert all(a.mode == "ar" for a in req1) and tuner.policy.step.mean > 0.9
    f = tuner.speed_factors()
    assert f["ar"] == 1.0 and 1 / 3 < f["sync"] < 0.45  # exp(-estimate): log 3 shrunk towards ar's 0 by the prior
    assert tuner.speed.weight("ar") > 0 and tuner.speed.weight("sync") > 0
    off, now = fake_tuner(learn_speed=False)
    for r in range(2):
        req = fake_request(r)
        assert all(fake_cycle(off, now, req, c, 3.0).mode == "sync" for c in range(12))
    assert off.speed is None and off.speed_factors() is None


def test_a_request_first_cycle_is_not_timed():
    tuner, now = fake_tuner()
    req = fake_request(0)
    fake_cycle(tuner, now, req, 0, 3.0)
    assert tuner.speed.stats == {}
    fake_cycle(tuner, now, req, 1, 3.0)
    assert tuner.speed.weight("sync") + tuner.speed.weight("ar") == 1.0


def test_auto_on_the_toy_leaves_lr_that_is_slower_than_its_costs(tmp_path):
    """The toy decoder with every draft accepted and a free batch: LR pays by its costs; with the clock charging
    the draft's passes 31 times (LR slower than the costs it measured), auto leaves LR within the first request
    and runs none in the next three; the choice records carry the speed factors."""
    def run(learn_speed):
        tp = tmp_path / f"auto-{learn_speed}.jsonl"
        dec, tw = toy_decoder(tp, mode="auto", draft_temperature=0.0)
        dec.target.seconds_per_pass, dec.draft.seconds_per_pass, dec.draft.deviate = 0.01, 0.001, 0.0
        dec.tuner = Tuner(dec.cfg, AutoOptions(learn_speed=learn_speed), clock=model_clock(dec, lr_extra=30.0))
        try:
            for i, q in enumerate(QUESTIONS):
                dec.run(i, dec.target.encode_chat(q))
        finally:
            dec.close()
            tw.close()
        return read_trace(tp)

    tr = run(True)
    assert not tr.warnings and all(c.mode == "ar" for c in tr.choices if c.request > 0)
    assert sum(c.mode == "sync" for c in tr.choices) <= 3
    assert all(set(c.speed_factors) == {"ar", "sync"} for c in tr.choices[1:])
    assert tr.choices[-1].speed_factors["sync"] < 0.5 * tr.choices[-1].speed_factors["ar"]
    off = run(False)
    assert all(c.mode == "sync" for c in off.choices if c.request > 0)
    assert all(c.speed_factors is None for c in off.choices)


needs_binding = pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None,
                                   reason="llama.cpp binding not installed: pip install -e '.[llamacpp]'")


@needs_binding
@pytest.mark.models
def test_auto_learns_its_speed_on_a_real_model(tmp_path):
    """llama.cpp, SmolLM2-135M as target and draft (one thread each): auto with the speed model decodes two
    requests on the decoder's clock; the trace is valid, every choice after the first carries both families'
    factors, the model observed every cycle but each request's first, and replay reproduces the decisions."""
    (path,) = require_models("smollm2-135m-instruct", gguf=True)
    from lrref.backends.llamacpp import LlamaCppBackend
    from lrref.decode.decoder import Decoder, make_header
    from lrref.verify.verifiers import ExactVerifier
    from lrsim.adaptive.trace import check_auto_traces
    from lrsim.trace import TraceWriter

    tgt, drf = LlamaCppBackend(str(path), threads=1), LlamaCppBackend(str(path), threads=1, slots=4)
    cfg = DecodeConfig(mode="auto", auto_max_gamma=2, max_step_tokens=20, max_tokens=48, threads=1)
    tp = tmp_path / "auto.jsonl"
    tw = TraceWriter(tp, make_header(cfg, {"target": str(path), "draft": str(path)}, "llamacpp", {"name": "exact"}))
    dec = Decoder(cfg, tgt, drf, ExactVerifier(normalize=False), tw)
    speed, ratios = dec.tuner.speed, []
    observe = speed.observe
    speed.observe = lambda arm, x, *a: (ratios.append(x), observe(arm, x, *a))
    try:
        for i, q in enumerate(["What is 12*7?", "Tom reads 18 pages a day. How many in 2 weeks?"]):
            dec.run(i, tgt.encode_chat(q, cfg.system))
    finally:
        dec.close()
        tw.close()
        tgt.close()
        drf.close()
    tr = read_trace(tp)
    assert not tr.warnings and len(tr.requests) == 2 and tr.choices[0].speed_factors is None
    assert all(set(c.speed_factors) == {"ar", "sync"} for c in tr.choices[1:])
    assert all(math.isfinite(v) and v > 0 for c in tr.choices[1:] for v in c.speed_factors.values())
    assert len(ratios) == len(tr.choices) - len(tr.requests)  # every cycle but each request's first
    assert all(abs(x) < 3 for x in ratios)  # log(realized / predicted): within 20x on the decoder's clock
    rep = check_auto_traces([tr])
    assert rep.decisions == len(tr.choices) - 1 and rep.reproduced == rep.decisions


def test_a_choice_record_with_bad_speed_factors_is_skipped(tmp_path):
    from lrsim.trace import Header, TraceWriter

    tp = tmp_path / "bad.jsonl"
    TraceWriter(tp, Header(source="lrref", mode="auto")).close()
    with open(tp, "a", encoding="utf-8") as fh:
        fh.write('{"type": "choice", "speed_factors": {"ar": 1.0, "sync": 0.4}}\n')
        fh.write('{"type": "choice", "speed_factors": {"ar": -1}}\n')
        fh.write('{"type": "choice", "speed_factors": {"lr": 1.0}}\n')
    tr = read_trace(tp)
    assert [c.speed_factors for c in tr.choices] == [{"ar": 1.0, "sync": 0.4}]
    assert len(tr.warnings) == 2 and all("speed_factors" in w for w in tr.warnings)


def test_meter_forgets_the_warm_up_and_ignores_a_few_slow_passes():
    """The meter keeps each size's latest WINDOW passes and takes their median: a slow warm-up fades, a busy spell's
    few slow passes do not move the cost (a mean kept the warm-up's 40x passes forever: issue 42)."""
    from lrref.decode.auto import WINDOW

    m = Meter()
    for _ in range(20):  # the warm-up request on a busy machine
        m.record(PassRecord(engine="target", seconds=1.2, rows=1, tokens=1))
        m.record(PassRecord(engine="draft", seconds=0.5, rows=1, tokens=1))
    for i in range(WINDOW):
        m.record(PassRecord(engine="target", seconds=0.03 if i % 8 else 0.9, rows=1, tokens=1))  # 1 in 8 slow
        m.record(PassRecord(engine="draft", seconds=0.012, rows=1, tokens=1))
    m.record(PassRecord(engine="target", seconds=0.11, rows=1, tokens=5))
    c = m.costs(True)
    assert m.fit() == pytest.approx((0.03, 0.02))  # (0.11 - 0.03) / 4
    assert (c.draft_token_s, len(m.draft)) == (0.012, WINDOW)  # the window holds the latest draft passes
