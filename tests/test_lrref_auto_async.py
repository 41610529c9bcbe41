"""lrref --mode auto choosing lr-async too (issue 42 item 5): an lr-async stage (to its first rejection, where the
pipeline is empty) is one of auto's cycles; the draft process starts only when lr-async is among auto's modes.

On the toy backend with the draft process replaced by :class:`toy.FakeWorker` (in process, deterministic), and
once through the real draft process on random weights (``tiny``)."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import SlowTarget
from toy import FakeWorker, ToyBackend, toy_decoder

from lrref.config import DecodeConfig
from lrref.decode.auto import Meter, Tuner, arm_config, candidates
from lrref.decode.request import Result
from lrsim.adaptive.policy import AutoOptions
from lrsim.errors import InputError
from lrsim.theory.costaware import Arm
from lrsim.trace import ChoiceRecord, PassRecord, read_trace

QUESTIONS = ["a question", "another one", "a third", "and a fourth one"]
WITH_ASYNC = ("ar", "sd", "lr-sync", "lr-async")
AR, SD = Arm("ar"), Arm("ar", 1, 5)
SYNC2, SYNC1_SD, ASYNC2, ASYNC3 = Arm("sync", 3, 1), Arm("sync", 2, 5), Arm("async", 2, 1), Arm("async", 3, 1)


DRAFT_DEVIATE = 0.1  # the fake draft process's tokens that differ from the target's: some stages accept drafts


@pytest.fixture
def fake_worker(monkeypatch):
    """lr-async's draft process replaced by :class:`FakeWorker` (its draft deviating at :data:`DRAFT_DEVIATE` of
    the tokens); every one started is listed."""
    import lrref.decode.decoder

    started = []

    class Recorded(FakeWorker):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.eng.be.deviate = DRAFT_DEVIATE
            started.append(self)

    monkeypatch.setattr(lrref.decode.decoder, "DraftWorker", Recorded)
    return started


class ScriptedTuner(Tuner):
    """auto's tuner with its choices scripted (cycling through ``script``): the decoder's side of every choice
    (the configuration, the threads, the rows, the counters the policy would observe) without the policy's."""

    def __init__(self, cfg, script):
        super().__init__(cfg, AutoOptions(learn_speed=False))
        self.script, self.made = script, 0

    def choose(self):
        arm = self.script[self.made % len(self.script)]
        self.made += 1
        return arm, ChoiceRecord(config=arm.label, mode=arm.mode, k1=arm.k1, k2=arm.k2)


def decode(tmp_path, name, tuner=None, clock=None, **kw):
    """The questions decoded on the toy pair (greedy, exact verifier): results, trace and the target backend."""
    tp = tmp_path / f"{name}.jsonl"
    dec, tw = toy_decoder(tp, **({"draft_temperature": 0.0, "threads": 2, "target_threads": 1} | kw))
    dec.target.seconds_per_pass = 0.01
    if tuner is not None:
        dec.tuner = tuner(dec.cfg)
    if clock is not None:
        dec.tuner.clock = clock(dec)
    try:
        res = [dec.run(i, dec.target.encode_chat(q)) for i, q in enumerate(QUESTIONS)]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp), dec.target


def test_auto_runs_lr_async_stages_between_other_cycles_and_is_lossless(tmp_path, fake_worker):
    """Scripted choices: lr-async stages among ar, sd and lr-sync(+sd) cycles.  Every stage ends at its first
    rejection (or the request's end), the output is ar's token for token, the target's threads follow each cycle's
    layout (lr-async's target_threads 1, the others' threads 2) and one draft process served every stage."""
    ref, _, _ = decode(tmp_path, "ar", mode="ar")
    script = [AR, ASYNC2, SYNC2, ASYNC3, SD, ASYNC2, ASYNC3, SYNC1_SD]
    res, tr, tgt = decode(tmp_path, "auto", lambda cfg: ScriptedTuner(cfg, script), mode="auto",
                          auto_modes=WITH_ASYNC, auto_max_gamma=3)
    assert [r.ids for r in res] == [r.ids for r in ref] and [r.finish for r in res] == [r.finish for r in ref]
    assert len(fake_worker) == 1 and not tr.warnings
    stages = [c for c in tr.choices if c.mode == "async"]
    assert stages and {c.config for c in stages} == {"lr-async gamma=2", "lr-async gamma=3"}
    assert {c.mode for c in tr.choices} == {"ar", "sync", "async"}
    rejected = accepted = 0
    for c in stages:
        rows = [s for s in tr.steps if (s.request, s.cycle) == (c.request, c.cycle)]
        committed = [s.committed for s in rows if s.committed]
        assert committed and "target" not in committed[:-1]  # drafts accepted, then at most the rejection's step
        assert all(s.position < c.k1 + len(committed) for s in rows)  # never more than gamma ahead
        rejected += committed[-1] == "target"
        accepted += committed.count("draft")
    assert rejected >= 2  # stages ended at a rejection, and the next cycle ran (the script's next configuration)
    assert accepted >= 2  # and some kept drafts before it
    assert sum(len(r.steps) for r in res) == sum(s.committed is not None for s in tr.steps)
    # threads: 2 when each request starts, then set at each change of layout
    want = []
    for q in range(len(QUESTIONS)):
        want.append(2)
        for c in (c for c in tr.choices if c.request == q):
            n = 1 if c.mode == "async" else 2
            if n != want[-1]:
                want.append(n)
    assert tgt.threads == want and 1 in want
    assert all(r.draft_own_s >= 0 and r.draft_s >= r.draft_own_s for r in res)


def test_the_policy_chooses_lr_async_and_the_trace_names_it(tmp_path, fake_worker):
    """auto among ar and lr-async alone, a free batch and a draft that costs nothing: LR pays, so the policy runs
    lr-async stages (the first one the probe, gamma 2), token-identical to ar; the choice records and the header's
    candidates name lr-async, and lrsim replay reproduces the decisions."""
    from lrsim.adaptive.trace import check_auto_traces

    ref, _, _ = decode(tmp_path, "ar", mode="ar")
    res, tr, _ = decode(tmp_path, "auto", mode="auto", auto_modes=("ar", "lr-async"),
                        clock=lambda dec: (lambda: dec.target.stats.forward_s))
    assert [r.ids for r in res] == [r.ids for r in ref]
    lr = [c for c in tr.choices if c.mode != "ar"]
    assert lr and all(c.mode == "async" and c.config.startswith("lr-async gamma=") for c in lr)
    assert lr[0].config == "lr-async gamma=2"  # the probe: the draft's cost was not measured yet
    assert lr[-1].draft_token_s == 0.0 and lr[-1].speed_factors.keys() == {"ar", "async"}
    assert tr.header.config["auto_modes"] == ["ar", "lr-async"]
    assert {m for m, _, _ in tr.header.config["auto_candidates"]} == {"ar", "async"}
    rep = check_auto_traces([tr])
    assert rep.decisions == len(tr.choices) - 1 and rep.reproduced == rep.decisions
    assert len(fake_worker) == 1


@pytest.mark.parametrize("modes", [("ar", "sd", "lr-sync"), ("ar", "lr-sync")])
def test_no_draft_process_without_lr_async(tmp_path, fake_worker, modes):
    res, tr, _ = decode(tmp_path, "auto", mode="auto", auto_modes=modes)
    assert fake_worker == [] and all(c.mode in ("ar", "sync") for c in tr.choices)
    assert all(r.draft_own_s == 0 for r in res)


def test_an_lr_async_auto_needs_the_draft_path_and_no_in_process_draft(fake_worker):
    from lrref.decode.decoder import Decoder
    from lrref.verify.verifiers import ExactVerifier

    cfg = DecodeConfig(mode="auto", auto_modes="ar,lr-async", dtype="float32")
    assert cfg.auto_modes == ("ar", "lr-async") and cfg.draft_process and not cfg.draft_in_process
    with pytest.raises(InputError, match="auto with lr-async needs the draft model path"):
        Decoder(cfg, ToyBackend("target"), None, ExactVerifier(normalize=False))
    dec = Decoder(cfg, ToyBackend("target"), None, ExactVerifier(normalize=False), draft_path="/toy/draft")
    dec.close()
    assert not DecodeConfig(mode="auto").draft_process and DecodeConfig(mode="auto").draft_in_process


def test_candidates_and_configs_of_lr_async():
    cfg = DecodeConfig(mode="auto", auto_modes=WITH_ASYNC, auto_max_gamma=3)
    cands = candidates(cfg)
    assert [a for a in cands if a.mode == "async"] == [ASYNC2, ASYNC3]  # gamma 2..3, no +sd
    default = candidates(DecodeConfig(mode="auto", auto_max_gamma=3))
    assert default == [a for a in cands if a.mode != "async"]  # the default modes: as before
    c = arm_config(cfg, ASYNC3)
    assert (c.mode, c.gamma, c.ngram_k, c.main_threads, c.spec.draft_runs) == ("lr-async", 3, 0, 1, "own")
    assert candidates(DecodeConfig(mode="auto", auto_modes="lr-async")) == [ASYNC2, ASYNC3, Arm("async", 4, 1)]


@pytest.mark.parametrize("kw, msg", [
    ({"auto_modes": "ar,lr"}, "auto_modes: 'lr' is not one of ar, sd, lr-sync, lr-async"),
    ({"auto_modes": "ar,ar"}, "list distinct modes"),
    ({"auto_modes": ""}, "is not one of"),
    ({"auto_modes": "ar,lr-async", "auto_max_gamma": 1}, "auto_max_gamma must be >= 2 with lr-async"),
])
def test_auto_modes_errors(kw, msg):
    with pytest.raises(InputError, match=msg):
        DecodeConfig(mode="auto", **kw)


def test_the_meter_leaves_out_target_passes_on_another_layout():
    """An lr-async stage's target runs beside the draft process (on target_threads on a CPU): its passes stay out of
    the target's fit (what that costs the stage is the speed model's to learn); the draft process's passes are the
    draft's cost."""
    m = Meter()
    m.record(PassRecord(engine="target", seconds=0.01, rows=1, tokens=1))
    m.target_on = False
    m.record(PassRecord(engine="target", seconds=0.03, rows=1, tokens=1))
    m.record(PassRecord(engine="draft", seconds=0.002, rows=1, tokens=1))
    assert m.fit() == (0.01, 0.0) and list(m.draft) == [0.002]
    t = Tuner(DecodeConfig(mode="auto", auto_modes=WITH_ASYNC, threads=2, target_threads=1))
    assert t.configs[ASYNC2].main_threads == 1 and t.configs[SYNC2].main_threads == 2
    req = SimpleNamespace(index=0, res=Result([], "", [], "max_tokens", 0.0, 10), cfg=None, clock=lambda: 0.0,
                          rows=SimpleNamespace(choice=lambda rec: None))
    for arm, on in ((ASYNC2, False), (SYNC2, True), (AR, True)):
        t.choose = lambda arm=arm: (arm, ChoiceRecord(config=arm.label))
        t.begin(req, 1)
        assert t.meter.target_on is on and req.cfg is t.configs[arm]
        t.end(req)
        assert t.meter.target_on and req.cfg is t.cfg


def test_cli_refuses_an_auto_mode_that_is_not_one():
    r = subprocess.run([sys.executable, "-m", "lrref.cli", "generate", "--mode", "auto", "--auto-modes",
                        "ar,lr-turbo", "--prompt", "x"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["lrref: error: auto_modes: 'lr-turbo' is not one of ar, sd, lr-sync, "
                                             "lr-async, got 'ar,lr-turbo'"]


def test_auto_through_the_real_draft_process_on_random_weights(tmp_path):
    """The draft process itself (hf, random ``tiny`` weights, the target's own: its drafts are the target's steps),
    a random verifier that also judges identical drafts (stages end at random rejections), a target that pauses
    before its passes (so drafts are ahead: :class:`conftest.SlowTarget`): scripted lr-async stages between ar and
    lr-sync cycles write ar's tokens, the draft process's passes reach the trace and the cost meter, and the choice
    records name the stages."""
    from lrref.backends.hf_random import RandomBackend
    from lrref.backends.random_weights import parse
    from lrref.decode.decoder import Decoder, make_header
    from lrref.verify.verifiers import RandomVerifier
    from lrsim.trace import TraceWriter

    rw = parse("tiny", 12, 30)
    kw = dict(dtype="float32", threads=1, pool_size=16)
    tgt, drf = (RandomBackend(**rw.model("target"), **kw) for _ in range(2))  # lr-sync's draft: the target's too
    prompts = [tgt.encode_chat(q) for q in QUESTIONS[:2]]
    base = dict(max_tokens=30, max_step_tokens=5, threads=1, target_threads=1, draft_threads=1, dtype="float32",
                verify_identical=True)
    ar = Decoder(DecodeConfig(mode="ar", **base), tgt)
    ref = [ar.run(i, p).ids for i, p in enumerate(prompts)]
    cfg = DecodeConfig(mode="auto", auto_modes=("ar", "lr-sync", "lr-async"), auto_max_gamma=3, **base)
    tp = tmp_path / "auto.jsonl"
    tw = TraceWriter(tp, make_header(cfg, {"target": "random:tiny", "draft": "random:tiny"}, "hf", {"name": "random"}))
    dec = Decoder(cfg, SlowTarget(tgt, 0.02), drf, RandomVerifier(0.5, seed=2), tw, draft_path="random:tiny",
                  draft_random=rw.model("target"))
    dec.tuner = ScriptedTuner(cfg, [AR, ASYNC3, SYNC2, ASYNC2])
    try:
        res = [dec.run(i, p) for i, p in enumerate(prompts)]
        meter = dec.tuner.meter
    finally:
        dec.close()
        tw.close()
    tr = read_trace(tp)
    assert [r.ids for r in res] == ref and not tr.warnings
    assert {c.config for c in tr.choices if c.mode == "async"} == {"lr-async gamma=2", "lr-async gamma=3"}
    stage_rows = [s for s in tr.steps for c in tr.choices
                  if c.mode == "async" and (s.request, s.cycle) == (c.request, c.cycle)]
    assert any(s.committed == "draft" for s in stage_rows)  # a stage kept drafts of the draft process
    assert any(s.decision is False for s in stage_rows)  # and one ended at a rejection
    assert any(p.engine == "draft" and p.requests == [0] for p in tr.passes)  # from both processes
    assert meter.draft and all(r.draft_own_s > 0 for r in res)


def test_run_many_runs_auto_stages_too(tmp_path, fake_worker):
    """Decoder.run_many (the closed loop, one request at a time for auto) answers an lr-async stage's jobs beside
    the other cycles' on its engines: ar's tokens again, the draft process's time counted as overlapped."""
    ref, _, _ = decode(tmp_path, "ar", mode="ar")
    dec, tw = toy_decoder(tmp_path / "many.jsonl", mode="auto", draft_temperature=0.0, auto_modes=WITH_ASYNC,
                          auto_max_gamma=3, threads=2, target_threads=1)
    dec.tuner = ScriptedTuner(dec.cfg, [AR, ASYNC2, SYNC2, ASYNC3])
    try:
        res = dec.run_many([(i, dec.target.encode_chat(q)) for i, q in enumerate(QUESTIONS)], 1)
    finally:
        dec.close()
        tw.close()
    assert [r.ids for r in res] == [r.ids for r in ref] and not read_trace(tmp_path / "many.jsonl").warnings
    assert all(0 < r.draft_own_s <= r.draft_s and not r.draft_overlapped for r in res)
