"""lrref's decoder on a toy backend (pure Python, no model): ar/sd/lr-sync, the trace rows, the Backend protocol.

The toy target writes a deterministic token stream; the toy draft writes the same stream but deviates at
some positions (more with sampling), so drafts are accepted sometimes and rejected sometimes.
"""

import inspect
import random

import pytest

from lrref.backend import Backend, BackendStats, Engine, Sampling, StepOut, StepRequest
from lrref.config import MODES, DecodeConfig
from lrref.decoder import Decoder, make_header
from lrref.rows import step_row
from lrref.steps import StepSplitter
from lrref.verifiers import ExactVerifier, RandomVerifier
from lrref.worker import step_seed
from lrsim.trace import TraceWriter, read_trace

WORDS = ["one", " two", " three", " four", ".", "\n\n", " five", " six"]
EOS = len(WORDS)


class ToyBackend:
    """Next token = a hash of the last three tokens; ``deviate`` of the positions differ (the draft)."""

    def __init__(self, name: str, deviate: float = 0.0):
        self.name, self.path, self.eos_ids, self.stats = name, f"/toy/{name}", (EOS,), BackendStats()
        self.deviate = deviate
        self.threads: list[int] = []  # every set_threads call

    def set_threads(self, n):
        self.threads.append(n)

    def decode(self, ids):
        return "".join(WORDS[i] for i in ids if i != EOS)

    def encode(self, text):
        return [WORDS.index(w) for w in text.split("|") if w in WORDS]

    def encode_chat(self, question, system=None):
        return [0, 1, 2] + [len(question) % 5]

    def vocab(self):
        return {w: i for i, w in enumerate(WORDS)}

    def engine(self, sampling, ngram, clock=None):
        return ToyEngine(self, sampling, clock or (lambda: 0.0))

    def _next(self, ids, rng):
        h = hash(tuple(ids[-3:])) % 97
        if len(ids) > 40 and h % 11 == 0:
            return EOS
        tok = h % len(WORDS)
        if self.deviate and (rng.random() if rng else (h % 100) / 100) < self.deviate:
            tok = (tok + 1) % len(WORDS)
        return tok

    def generate_steps(self, reqs, sampling, ngram=None, clock=None):
        clock = clock or (lambda: 0.0)
        outs = []
        for r in reqs:
            rng = None if sampling.greedy else random.Random(r.seed)
            sp, ids, t0 = StepSplitter(self.decode, self.eos_ids, r.cap), list(r.ids), clock()
            while sp.finish is None:
                ids.append(self._next(ids, rng))
                sp.push(ids[-1])
            self.stats.forwards += len(sp.ids)
            outs.append(StepOut(list(sp.ids), self.decode(sp.ids), sp.finish, forwards=len(sp.ids), start=t0,
                                end=clock(), batch=len(reqs)))
        return outs


class ToyEngine:
    """A running batch of the toy model: one token per row per :meth:`step`."""

    def __init__(self, be, sampling, clock):
        self.be, self.sampling, self.clock, self.rows, self.n = be, sampling, clock, {}, 0

    @property
    def active(self):
        return len(self.rows)

    def add(self, reqs):
        hs = []
        for r in reqs:
            self.n += 1
            rng = None if self.sampling.greedy else random.Random(r.seed)
            self.rows[self.n] = (StepSplitter(self.be.decode, self.be.eos_ids, r.cap), list(r.ids), rng, self.clock())
            hs.append(self.n)
        return hs

    def _out(self, h, finish=None):
        sp, _, _, t0 = self.rows.pop(h)
        return h, StepOut(list(sp.ids), self.be.decode(sp.ids), finish or sp.finish, forwards=len(sp.ids), start=t0,
                          end=self.clock())

    def step(self):
        for sp, ids, rng, _ in self.rows.values():
            ids.append(self.be._next(ids, rng))
            sp.push(ids[-1])
        self.be.stats.forwards += 1
        return [self._out(h) for h in [h for h, row in self.rows.items() if row[0].finish]]

    def cancel(self, handles):
        return [self._out(h, "cancelled") for h in handles if h in self.rows]


class FakeWorker:
    """The draft process, in process and deterministic: one draft step per poll, as :mod:`lrref.worker` sends."""

    def __init__(self, path, dtype, threads, t0, max_step, sampling, ngram=None, **kw):
        self.eng = ToyBackend("draft", deviate=0.3).engine(sampling, ngram)
        self.max_step, self.chain, self.inbox, self.fwd, self.seen = max_step, None, [], 0.0, 0.0

    def send(self, kind, *a):
        if kind in ("chain", "idle") and self.chain and self.chain["handle"] is not None:
            for _, out in self.eng.cancel([self.chain["handle"]]):
                self.inbox.append(("cancelled", self.chain["epoch"], len(self.chain["made"]), out))
        if kind == "chain":
            epoch, prefix, rem, credit, seed = a
            self.chain = {"epoch": epoch, "prefix": list(prefix), "rem": rem, "credit": credit, "seed": seed,
                          "made": [], "handle": None, "eos": False}
        elif kind == "idle":
            self.chain = None
        elif kind == "credit" and self.chain and a[0] == self.chain["epoch"]:
            self.chain["credit"] += a[1]

    def poll(self, timeout=0.0):
        c = self.chain
        if c and c["handle"] is None and not c["eos"] and len(c["made"]) < c["credit"]:
            cap = min(self.max_step, c["rem"] - sum(len(m) for m in c["made"]))
            if cap > 0:
                ids = tuple(c["prefix"] + [t for m in c["made"] for t in m])
                c["handle"] = self.eng.add([StepRequest(ids, cap, step_seed(c["seed"], len(c["made"])))])[0]
        elif c and c["handle"] is not None:
            while c["handle"] in self.eng.rows:
                for _, out in self.eng.step():
                    self.inbox.append(("draft", c["epoch"], len(c["made"]), out))
                    c["made"].append(out.ids)
                    c["handle"], c["eos"] = None, out.finish == "eos"
                    self.fwd += 0.5
        out, self.inbox = self.inbox, []
        return out

    def new_forward_s(self):
        new, self.seen = self.fwd - self.seen, self.fwd
        return new

    def close(self):
        pass


def decode(mode, tmp_path, verifier=None, **kw):
    cfg = DecodeConfig(**({"mode": mode, "gamma": 3, "max_step_tokens": 6, "max_tokens": 60, "threads": 0,
                           "draft_temperature": 0.5, "dtype": "float32", "log_text": True} | kw))
    tgt, drf = ToyBackend("target"), ToyBackend("draft", deviate=0.3)
    tp = tmp_path / f"{mode}-{kw.get('width', 1)}.jsonl"
    tw = TraceWriter(tp, make_header(cfg, {"target": tgt.path, "draft": drf.path}, "toy", {"name": "exact"}))
    dec = Decoder(cfg, tgt, drf, verifier or ExactVerifier(normalize=False), tw, draft_path=drf.path)
    try:
        res = [dec.run(i, tgt.encode_chat(q)) for i, q in enumerate(["a question", "another one"])]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp)


@pytest.fixture(autouse=True)
def fake_worker(monkeypatch):
    """lr-async's draft process replaced by :class:`FakeWorker` (no process, no model)."""
    import lrref.decoder

    monkeypatch.setattr(lrref.decoder, "DraftWorker", FakeWorker)


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
    t = StepOut([1, 2, 3], "t", "eos", forwards=2, ngram_drafted=4, ngram_accepted=1, start=1.5, end=2.5, batch=2)
    r = step_row(7, 2, 1, draft=d, target=t, branch=0, vtimes=(3.0, 3.5), verifier="identical",
                 accepted=True, committed="draft")
    assert (r.request, r.cycle, r.position, r.branch) == (7, 2, 1, 0)
    assert (r.draft_start, r.draft_end, r.draft_tokens, r.draft_batch, r.draft_text) == (1.0, 2.0, 2, 3, None)
    assert (r.target_tokens, r.target_batch, r.target_forwards, r.ngram_drafted, r.ngram_accepted) == (3, 2, 2, 4, 1)
    assert (r.verify_start, r.verify_end, r.accepted, r.committed, r.cancelled) == (3.0, 3.5, True, "draft", False)
    c = step_row(0, 0, 4, target=t, cancelled=True, text=True)
    assert c.cancelled and c.target_text == "t" and c.draft_start is None and c.decision is None and not c.accepted


def _members(proto) -> dict:
    return {n: m for n, m in vars(proto).items() if not n.startswith("_") and callable(m)}


@pytest.mark.parametrize("impl", ["lrref.hf:HFBackend", "lrref.vllm_backend:VLLMBackend",
                                  "lrref.llamacpp_backend:LlamaCppBackend", "toy"])
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


@pytest.mark.parametrize("impl", ["lrref.hf:HFEngine", "lrref.vllm_backend:VLLMEngine",
                                  "lrref.llamacpp_backend:LlamaEngine"])
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
    from lrref.backend import run_steps

    be = ToyBackend("t")
    reqs = [StepRequest((0, 1, 2, i), cap) for i, cap in ((1, 9), (2, 1), (3, 4))]
    got = run_steps(be.engine(Sampling(), None), reqs)
    assert [len(o.ids) <= r.cap for o, r in zip(got, reqs)] == [True] * 3
    assert [o.ids for o in got] == [o.ids for o in be.generate_steps(reqs, Sampling())]
    assert got[1].n_tokens == 1 and got[0].n_tokens > 1  # the rows finished at different passes
