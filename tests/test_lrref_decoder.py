"""lrref's decoder on a toy backend (pure Python, no model): ar/sd/lr-sync, the trace rows, the Backend protocol.

The toy target writes a deterministic token stream; the toy draft writes the same stream but deviates at
some positions (more with sampling), so drafts are accepted sometimes and rejected sometimes.
"""

import inspect

import pytest
from toy import FakeWorker, ToyBackend, toy_decoder

from lrref.backends.base import Backend, Engine, Sampling, StepOut, StepRequest
from lrref.config import MODES, DecodeConfig
from lrref.decode.decoder import Decoder
from lrref.decode.rows import step_row
from lrref.verify.verifiers import ExactVerifier, RandomVerifier
from lrsim.trace import read_trace


def decode(mode, tmp_path, verifier=None, **kw):
    tp = tmp_path / f"{mode}-{kw.get('width', 1)}.jsonl"
    dec, tw = toy_decoder(tp, verifier, mode=mode, log_text=True, **kw)
    try:
        res = [dec.run(i, dec.target.encode_chat(q)) for i, q in enumerate(["a question", "another one"])]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp)


@pytest.fixture(autouse=True)
def fake_worker(monkeypatch):
    """lr-async's draft process replaced by :class:`FakeWorker` (no process, no model)."""
    import lrref.decode.decoder

    monkeypatch.setattr(lrref.decode.decoder, "DraftWorker", FakeWorker)


@pytest.mark.parametrize("mode, kw", [(m, {}) for m in MODES if m != "ar"] + [("lr-sync", {"width": 2, "gamma": 2})])
def test_lossless_on_the_toy_backend(tmp_path, mode, kw):
    ref, _ = decode("ar", tmp_path)
    res, tr = decode(mode, tmp_path, **kw)
    assert [r.ids for r in res] == [r.ids for r in ref] and [r.finish for r in res] == [r.finish for r in ref]
    committed = [s for s in tr.steps if s.committed]
    assert len(committed) == sum(len(r.steps) for r in res)  # one committed row per output step
    assert sum(r.accepted_steps for r in res) == sum(s.committed == "draft" for s in tr.steps)
    if mode.startswith("lr"):
        decided = [s.decision for s in tr.steps if s.decision is not None]
        assert True in decided and False in decided  # both paths ran


@pytest.mark.parametrize("mode", ["lr-sync", "lr-async"])
@pytest.mark.parametrize("p_accept", [0.0, 0.5, 1.0])
def test_trace_accounts_for_every_target_step(tmp_path, mode, p_accept):
    res, tr = decode(mode, tmp_path, verifier=RandomVerifier(p_accept, seed=1))
    # target work discarded in a sync batch still has its row; async's cancelled work is counted apart
    rows = {(s.request, s.cycle, s.position): s.target_forwards for s in tr.steps
            if s.target_start is not None and not s.cancelled}
    assert sum(rows.values()) == sum(r.target_forwards for r in res)
    assert sum(r.accepted for r in res) == sum(s.accepted for s in tr.steps)
    assert sum(r.verified for r in res) == sum(s.decision is not None for s in tr.steps)
    assert all(len(r.ids) <= 60 for r in res)


def test_header_records_the_hardware_and_dtype(tmp_path):
    _, tr = decode("ar", tmp_path)
    hw = tr.header.hardware
    assert hw["dtype"] == "float32" and hw["cpu_model"] and "threads" in hw and tr.header.config["dtype"] == "float32"


def test_step_row_is_the_one_row_builder():
    d = StepOut([1, 2], "d", "step", start=1.0, end=2.0, batch=3)
    t = StepOut([1, 2, 3], "t", "eos", forwards=2, ngram_drafted=4, ngram_accepted=1, start=1.5, end=2.5, batch=2,
                busy_s=0.75)
    r = step_row(7, 2, 1, draft=d, target=t, branch=0, vtimes=(3.0, 3.5), verifier="identical",
                 accepted=True, committed="draft")
    assert (r.request, r.cycle, r.position, r.branch) == (7, 2, 1, 0)
    assert (r.draft_start, r.draft_end, r.draft_tokens, r.draft_batch, r.draft_text) == (1.0, 2.0, 2, 3, None)
    assert (r.target_tokens, r.target_batch, r.target_forwards, r.ngram_drafted, r.ngram_accepted) == (3, 2, 2, 4, 1)
    assert (r.verify_start, r.verify_end, r.accepted, r.committed, r.cancelled) == (3.0, 3.5, True, "draft", False)
    assert (r.target_busy, r.draft_busy) == (0.75, None)  # a backend that does not measure it: null
    c = step_row(0, 0, 4, target=t, cancelled=True, text=True)
    assert c.cancelled and c.target_text == "t" and c.draft_start is None and c.decision is None and not c.accepted


def _members(proto) -> dict:
    return {n: m for n, m in vars(proto).items() if not n.startswith("_") and callable(m)}


@pytest.mark.parametrize("impl", ["lrref.backends.hf:HFBackend", "lrref.backends.vllm:VLLMBackend",
                                  "lrref.backends.llamacpp:LlamaCppBackend", "toy"])
def test_backends_implement_the_protocol(impl):
    if impl == "toy":
        cls = ToyBackend
    else:
        if "llamacpp" not in impl:  # the llama.cpp backend imports neither torch nor its binding at import
            pytest.importorskip("torch")
        mod, name = impl.split(":")
        cls = getattr(__import__(mod, fromlist=[name]), name)
    for name, proto_fn in _members(Backend).items():
        got = getattr(cls, name, None)
        assert callable(got), f"{cls.__name__} lacks {name}"
        want = list(inspect.signature(proto_fn).parameters)
        assert list(inspect.signature(got).parameters)[:len(want)] == want, (cls.__name__, name)
    assert set(Backend.__annotations__) == {"name", "path", "eos_ids", "stats"}


@pytest.mark.parametrize("impl", ["lrref.backends.hf:HFEngine", "lrref.backends.vllm:VLLMEngine",
                                  "lrref.backends.llamacpp:LlamaEngine"])
def test_engines_implement_the_protocol(impl):
    if "llamacpp" not in impl:
        pytest.importorskip("torch")
    mod, name = impl.split(":")
    cls = getattr(__import__(mod, fromlist=[name]), name)
    for name in ("active", "add", "step", "cancel"):
        assert hasattr(cls, name), (cls.__name__, name)
    assert isinstance(inspect.getattr_static(cls, "active"), property)
    assert set(_members(Engine)) | {"active"} == {"active", "add", "step", "cancel"}


def test_bad_configurations_are_input_errors():
    from lrsim.errors import InputError

    with pytest.raises(InputError, match="needs a verifier"):
        Decoder(DecodeConfig(mode="lr-sync"), ToyBackend("t"), ToyBackend("d"))
    with pytest.raises(InputError, match="dtype"):
        DecodeConfig(dtype="float16")
    with pytest.raises(InputError):
        Sampling(top_p=0)
    assert StepRequest((1,), 1).seed == 0


def test_async_cancels_stale_work_and_counts_draft_time(tmp_path):
    res, tr = decode("lr-async", tmp_path, verifier=RandomVerifier(0.5, seed=3))
    cancelled = [s for s in tr.steps if s.cancelled]
    assert cancelled and all(not s.committed and not s.accepted for s in cancelled)
    assert any(s.draft_start is not None for s in cancelled) and any(s.target_start is not None for s in cancelled)
    assert all(r.draft_overlapped and r.draft_s > 0 for r in res)


@pytest.mark.parametrize("mode, want", [("ar", 2), ("lr-sync", 2), ("lr-async", 1)])
def test_the_decoder_sets_each_backends_threads_per_mode(tmp_path, mode, want):
    """Through the protocol's ``set_threads``: ``threads`` in the sync modes, ``target_threads`` in lr-async."""
    cfg = DecodeConfig(mode=mode, threads=2, target_threads=1, max_tokens=8, dtype="float32")
    tgt, drf = ToyBackend("target"), ToyBackend("draft", deviate=0.3)
    dec = Decoder(cfg, tgt, drf, ExactVerifier(normalize=False), draft_path=drf.path)
    dec.run(0, tgt.encode_chat("q"))
    assert tgt.threads == drf.threads == [want]


def test_run_steps_returns_steps_in_request_order():
    from lrref.backends.base import run_steps

    be = ToyBackend("t")
    reqs = [StepRequest((0, 1, 2, i), cap) for i, cap in ((1, 9), (2, 1), (3, 4))]
    got = run_steps(be.engine(Sampling(), None), reqs)
    assert [len(o.ids) <= r.cap for o, r in zip(got, reqs)] == [True] * 3
    assert [o.ids for o in got] == [o.ids for o in be.generate_steps(reqs, Sampling())]
    assert got[1].n_tokens == 1 and got[0].n_tokens > 1  # the rows finished at different passes


@pytest.mark.parametrize("mode", ["ar", "lr-sync"])
def test_every_pass_is_a_trace_record_of_its_engine(tmp_path, mode):
    """The decoder attaches its trace's pass log to the target and the draft for the run: one record per engine
    pass, each naming the requests of its rows; nothing is attached after the run."""
    tp = tmp_path / "t.jsonl"
    dec, tw = toy_decoder(tp, RandomVerifier(0.5, seed=2), mode=mode)
    try:
        res = [dec.run(i, dec.target.encode_chat(q)) for i, q in enumerate(["a question", "another one"])]
    finally:
        dec.close()
        tw.close()
    tr = read_trace(tp)
    assert dec.target.pass_log is None and dec.draft.pass_log is None
    by = {e: [p for p in tr.passes if p.engine == e] for e in ("target", "draft")}
    assert len(by["target"]) == dec.target.stats.forwards and len(by["draft"]) == dec.draft.stats.forwards
    assert sum(p.rows for p in by["target"]) == sum(s.target_forwards or 0 for s in tr.steps)
    assert sum(p.rows for p in by["draft"]) == sum(s.draft_forwards or 0 for s in tr.steps)
    assert (len(by["draft"]) > 0) == (mode == "lr-sync") and sum(r.target_forwards for r in res) > 0
    assert {tuple(p.requests) for p in tr.passes} == {(0,), (1,)}
    assert all(p.tokens == p.rows == p.outputs and p.context >= 4 for p in tr.passes)


def test_passes_of_requests_decoded_together_name_them_all(tmp_path):
    tp = tmp_path / "t.jsonl"
    dec, tw = toy_decoder(tp, RandomVerifier(0.5, seed=2), mode="lr-sync", concurrency=2)
    try:
        dec.run_many([(i, dec.target.encode_chat(q)) for i, q in enumerate(["a", "bb", "ccc"])], 2)
    finally:
        tw.close()
    passes = read_trace(tp).passes
    assert any(p.requests == [0, 1] for p in passes) and {r for p in passes for r in p.requests} == {0, 1, 2}
    assert all(p.rows >= len(p.requests) for p in passes)


def test_a_verifiers_own_model_logs_verifier_passes_and_the_target_judging_itself_stays_target(tmp_path):
    class Judge(ExactVerifier):
        def __init__(self, lm):
            super().__init__(normalize=False)
            self.lm = lm

    dec, tw = toy_decoder(tmp_path / "t.jsonl", mode="lr-sync")
    tw.close()
    dec.verifier = Judge(ToyBackend("judge"))
    names = {be.name: log.engine for be, log in dec._pass_logs().items()}
    assert names == {"target": "target", "draft": "draft", "judge": "verifier"}
    dec.verifier = Judge(dec.target)
    assert {be.name: log.engine for be, log in dec._pass_logs().items()} == {"target": "target", "draft": "draft"}


def test_the_target_judging_its_own_steps_is_verifier_time_not_target_time(tmp_path):
    """A judge that is the target runs its passes on the target's backend: they count in ``verify_s`` and
    ``verify_target_s``, not in ``target_s`` too (else the time shares pass 100% and the overhead goes negative)."""
    class SelfJudge(RandomVerifier):
        name = "judge"

        def __init__(self, lm):
            super().__init__(0.5, seed=3)
            self.lm, self.calls = lm, 0

        def verify(self, pairs, contexts=()):
            self.calls += 1
            self.lm.stats.forward_s += 1.0  # one judge prefill on the target, 1 s
            return super().verify(pairs, contexts)

    dec, tw = toy_decoder(tmp_path / "t.jsonl", mode="lr-sync")
    dec.verifier = judge = SelfJudge(dec.target)
    dec.target.seconds_per_pass = 0.25
    try:
        res = dec.run(0, dec.target.encode_chat("abc"))
    finally:
        tw.close()
    assert judge.calls > 0 and res.verify_target_s == judge.calls * 1.0
    assert res.target_s == pytest.approx(0.25 * dec.target.stats.forwards)  # the target's own passes only


class RunBackend(ToyBackend):
    """A toy target that tells runs apart as llama.cpp's does (begin_run / resume_run), recording which run each
    step's requests came in."""

    def __init__(self, name):
        super().__init__(name)
        self.runs, self.run, self.seen = 0, 0, []

    def begin_run(self):
        self.runs += 1
        self.run = self.runs
        return self.run

    def resume_run(self, run):
        self.run = run

    def generate_steps(self, reqs, *a, **kw):
        self.seen += [(self.run, r.request) for r in reqs]
        return super().generate_steps(reqs, *a, **kw)


def test_decoders_sharing_a_backend_each_resume_their_own_run(tmp_path):
    # lrref bench decodes problem i in every mode in turn on one target backend: without its own run, a later mode's
    # request i would count as the first mode's and reuse its KV with --no-prefix-caching (a bench measured that:
    # the mode after ar skipped the prompt's prefill)
    tgt = RunBackend("target")
    decs = [Decoder(DecodeConfig(mode="ar", max_tokens=8, max_step_tokens=4), tgt) for _ in range(2)]
    runs = [d.runs[tgt] for d in decs]
    assert runs == [1, 2]
    for i in range(2):
        for d in decs:
            d.run(i, tgt.encode_chat("a question"))
    order = list(dict.fromkeys(tgt.seen))  # (run, request) of every step, first appearances in order
    assert order == [(runs[0], 0), (runs[1], 0), (runs[0], 1), (runs[1], 1)]
