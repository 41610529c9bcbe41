"""lrref --mode auto (issue 34): the decoder chooses ar, sd or lr-sync per cycle, from the costs it measures and
the acceptance it sees; on the toy backend (pure Python, pass times reported, not slept)."""

import subprocess
import sys
from collections import Counter

import pytest
from toy import toy_decoder

from lrref.config import DecodeConfig, parse_mode
from lrref.decode.auto import Meter, arm_config, candidates
from lrsim.errors import InputError
from lrsim.theory.costaware import Arm
from lrsim.trace import PassRecord, TraceError, read_trace, recorded_setting

QUESTIONS = ["a question", "another one", "a third", "and a fourth one"]


def run_auto(tmp_path, target_s=0.01, row_s=0.0, draft_s=0.001, deviate=0.3, **kw):
    """Decode the questions in auto mode on the toy pair with those pass costs (``deviate``: the draft's share of
    tokens that differ from the target's); results and the trace."""
    tp = tmp_path / "auto.jsonl"
    dec, tw = toy_decoder(tp, mode="auto", **({"draft_temperature": 0.0} | kw))
    dec.target.seconds_per_pass, dec.target.seconds_per_row, dec.draft.seconds_per_pass = target_s, row_s, draft_s
    dec.draft.deviate = deviate
    try:
        res = [dec.run(i, dec.target.encode_chat(q)) for i, q in enumerate(QUESTIONS)]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp)


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
