"""A toy model for lrref's decoder tests (pure Python, no torch): a backend, its running batch, the draft process.

The toy target writes a deterministic token stream; the toy draft writes the same stream but deviates at
some positions (more with sampling), so drafts are accepted sometimes and rejected sometimes.
"""

import random
import time

from lrref.backends.base import BackendStats, StepOut, StepRequest
from lrref.config import DecodeConfig
from lrref.decode.decoder import Decoder, make_header
from lrref.backends.steps import StepSplitter
from lrref.verify.verifiers import ExactVerifier
from lrref.decode.seed import step_seed
from lrsim.trace import TraceWriter

WORDS = ["one", " two", " three", " four", ".", "\n\n", " five", " six"]
EOS = len(WORDS)


class ToyBackend:
    """Next token = a hash of the last three tokens; ``deviate`` of the positions differ (the draft)."""

    def __init__(self, name: str, deviate: float = 0.0):
        self.name, self.path, self.eos_ids, self.stats = name, f"/toy/{name}", (EOS,), BackendStats()
        self.deviate = deviate
        self.seconds_per_pass = 0.0  # added to stats.forward_s by every pass of the running batch
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
        """One step per request through a running batch, as :meth:`lrref.backends.hf.HFBackend.generate_steps` does."""
        eng = self.engine(sampling, ngram, clock)
        handles = eng.add(reqs)
        done = {}
        while eng.active:
            done.update(eng.step())
        return [done[h] for h in handles]


class ToyEngine:
    """A running batch of the toy model: one token per row per :meth:`step`; a step's ``batch`` is the mean
    number of rows in its passes (rounded), as in :class:`lrref.backends.hf.HFEngine`."""

    def __init__(self, be, sampling, clock):
        self.be, self.sampling, self.clock, self.rows, self.n = be, sampling, clock, {}, 0
        self.batch_sum = {}  # handle -> rows summed over the passes it took part in
        self.request = {}  # handle -> the request of its StepRequest

    @property
    def active(self):
        return len(self.rows)

    def add(self, reqs):
        hs = []
        for r in reqs:
            self.n += 1
            rng = None if self.sampling.greedy else random.Random(r.seed)
            self.rows[self.n] = (StepSplitter(self.be.decode, self.be.eos_ids, r.cap), list(r.ids), rng, self.clock())
            self.request[self.n] = r.request
            hs.append(self.n)
        return hs

    def _out(self, h, finish=None):
        sp, _, _, t0 = self.rows.pop(h)
        bsum = self.batch_sum.pop(h, 0)
        return h, StepOut(list(sp.ids), self.be.decode(sp.ids), finish or sp.finish, forwards=len(sp.ids), start=t0,
                          end=self.clock(), batch=round(bsum / len(sp.ids)) if sp.ids else 0)

    def step(self):
        log = getattr(self.be, "pass_log", None)  # one pass record per step, as the real engines report them
        if log is not None and self.rows:
            log(time.perf_counter(), self.be.seconds_per_pass, [1] * len(self.rows),
                [len(row[1]) for row in self.rows.values()], len(self.rows), None,
                [self.request[h] for h in self.rows])
        for h, (sp, ids, rng, _) in self.rows.items():
            ids.append(self.be._next(ids, rng))
            sp.push(ids[-1])
            self.batch_sum[h] = self.batch_sum.get(h, 0) + len(self.rows)
        self.be.stats.forwards += 1
        self.be.stats.forward_s += self.be.seconds_per_pass
        return [self._out(h) for h in [h for h, row in self.rows.items() if row[0].finish]]

    def cancel(self, handles):
        return [self._out(h, "cancelled") for h in handles if h in self.rows]


class FakeWorker:
    """The draft process, in process and deterministic: one draft step per poll, as
    :mod:`lrref.decode.draft_worker` sends."""

    def __init__(self, path, dtype, threads, t0, max_step, sampling, ngram=None, **kw):
        self.eng = ToyBackend("draft", deviate=0.3).engine(sampling, ngram)
        self.max_step, self.chain, self.inbox, self.fwd, self.seen = max_step, None, [], 0.0, 0.0

    def send(self, kind, *a):
        if kind in ("chain", "idle") and self.chain and self.chain["handle"] is not None:
            for _, out in self.eng.cancel([self.chain["handle"]]):
                self.inbox.append(("cancelled", self.chain["epoch"], len(self.chain["made"]), out))
        if kind == "chain":
            epoch, prefix, rem, credit, seed, *_ = a
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




DEFAULTS = {"gamma": 3, "max_step_tokens": 6, "max_tokens": 60, "threads": 0, "draft_temperature": 0.5,
            "dtype": "float32"}


def toy_decoder(path, verifier=None, **kw):
    """A decoder of the toy target and draft (settings ``DEFAULTS | kw``) writing its trace to ``path``; its writer."""
    cfg = DecodeConfig(**(DEFAULTS | kw))
    tgt, drf = ToyBackend("target"), ToyBackend("draft", deviate=0.3)
    tw = TraceWriter(path, make_header(cfg, {"target": tgt.path, "draft": drf.path}, "toy", {"name": "exact"}))
    return Decoder(cfg, tgt, drf, verifier or ExactVerifier(normalize=False), tw, draft_path=drf.path), tw
