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
from lrref.decode.messages import Cancelled, Chain, Credit, Draft, Stop
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
        self.seconds_per_row = 0.0  # and this for each row of the pass after the first (none: a free batch)
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
    number of rows in its passes (rounded), as in :class:`lrref.backends.hf_engine.HFEngine`."""

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
        seconds = self.be.seconds_per_pass + self.be.seconds_per_row * max(len(self.rows) - 1, 0)
        if log is not None and self.rows:
            log(time.perf_counter(), seconds, [1] * len(self.rows),
                [len(row[1]) for row in self.rows.values()], len(self.rows), None,
                [self.request[h] for h in self.rows])
        for h, (sp, ids, rng, _) in self.rows.items():
            ids.append(self.be._next(ids, rng))
            sp.push(ids[-1])
            self.batch_sum[h] = self.batch_sum.get(h, 0) + len(self.rows)
        self.be.stats.forwards += 1
        self.be.stats.forward_s += seconds
        return [self._out(h) for h in [h for h, row in self.rows.items() if row[0].finish]]

    def cancel(self, handles):
        return [self._out(h, "cancelled") for h in handles if h in self.rows]


class FakeWorker:
    """The draft process, in process and deterministic (:mod:`lrref.decode.draft_worker`'s messages and its
    :class:`~lrref.decode.draft_worker.DraftWorker` interface): one chain per request, one toy engine for all of
    them, and one action per poll: start the next step of every idle chain with credit, or else run the running
    rows to their end."""

    def __init__(self, path, dtype, threads, t0, max_step, sampling, ngram=None, **kw):
        self.eng = ToyBackend("draft", deviate=0.3).engine(sampling, ngram)
        self.max_step, self.chains, self.owner, self.inbox, self.draft_s = max_step, {}, {}, [], {}

    @property
    def pass_log(self):
        return getattr(self.eng.be, "pass_log", None)

    @pass_log.setter
    def pass_log(self, log):  # the decoder attaches its trace's: the toy draft's passes are recorded
        self.eng.be.pass_log = log

    def send(self, msg):
        match msg:
            case Chain() | Stop():
                c = self.chains.get(msg.request)
                if c and c["handle"] is not None:
                    for h, out in self.eng.cancel([c["handle"]]):
                        self.owner.pop(h)
                        self.inbox.append(Cancelled(msg.request, c["epoch"], len(c["made"]), out))
                if isinstance(msg, Chain):
                    self.chains[msg.request] = {"epoch": msg.epoch, "prefix": list(msg.prefix), "rem": msg.remaining,
                                                "credit": msg.credit, "seed": msg.seed, "made": [], "handle": None,
                                                "eos": False}
                else:
                    self.chains.pop(msg.request, None)
            case Credit():
                c = self.chains.get(msg.request)
                if c and msg.epoch == c["epoch"]:
                    c["credit"] += msg.n

    def _next(self, r, c):
        cap = min(self.max_step, c["rem"] - sum(len(m) for m in c["made"]))
        if c["handle"] is None and not c["eos"] and len(c["made"]) < c["credit"] and cap > 0:
            ids = tuple(c["prefix"] + [t for m in c["made"] for t in m])
            return StepRequest(ids, cap, step_seed(c["seed"], len(c["made"])), r)
        return None

    def poll(self, timeout=0.0):
        new = [(r, c, q) for r, c in self.chains.items() for q in [self._next(r, c)] if q is not None]
        if new:
            for (r, c, _), h in zip(new, self.eng.add([q for _, _, q in new])):
                c["handle"], self.owner[h] = h, r
        else:
            while self.eng.active:
                for h, out in self.eng.step():
                    r = self.owner.pop(h)
                    c = self.chains[r]
                    self.inbox.append(Draft(r, c["epoch"], len(c["made"]), out))
                    c["made"].append(out.ids)
                    c["handle"], c["eos"] = None, out.finish == "eos"
                    self.draft_s[r] = self.draft_s.get(r, 0.0) + 0.5
        out, self.inbox = self.inbox, []
        return out

    def settle(self, request):
        self.inbox = [m for m in self.inbox if m.request != request]
        return self.take_draft_s(request)

    def clear(self):
        self.inbox, self.draft_s = [], {}

    def take_draft_s(self, request):
        return self.draft_s.pop(request, 0.0)

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
