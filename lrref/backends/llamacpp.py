"""llama.cpp backend: :class:`lrref.backends.base.Backend` on the GGUF files ``lrref models prepare`` keeps.

Binding.  llama.cpp's C API from the ``xllamacpp`` wheel (prebuilt CPU wheels
on PyPI; see :mod:`lrref.backends.llamacpp_ffi` for why its C symbols and not its
server API, and why not llama-cpp-python, which PyPI ships only as a source
package that compiles llama.cpp at install time).  No torch: the text side is
:mod:`lrref.backends.llamacpp_tokenizer`, sampling :mod:`lrref.backends.np_sampling`.

Sequences and KV.  One llama.cpp context per backend with ``slots`` sequence
ids, each with its own KV stream (``kv_unified = false``).  A row of an engine
owns a slot while it runs; when it finishes, the slot keeps the KV of the
tokens it fed, keyed by those token ids (the prefix cache).  A new row takes
the free slot with the longest common token prefix and drops the rest
(``llama_memory_seq_rm``), or, when another slot (even a running row's)
shares a longer prefix, copies that slot's KV (``llama_memory_seq_cp``) into
a free one: the ``gamma + 1`` target rows of an LR cycle prefill their common
prefix once.  Rows beyond the free slots wait in a queue and join when a slot
frees.  Per-stream KV keeps each token's KV cell equal to its position, and a
row reads only its own sequence's KV.  The logits are not bit-identical across
ways of cutting the same tokens into passes, though: llama.cpp's CPU flash
attention (on by default, ``flash_attn=-1``) moved SmolLM2-135M's logits after
one prefix by up to 1.4 between splits of that prefix into passes (without it,
multi-token passes agreed bit for bit and one-token passes differed by up to
0.65; 2-core AMD EPYC with AVX2, 2026-11-26).  Batched steps, chunked prefill
and n-gram verification therefore give batch-1 decoding's tokens except where
its top two logits are that close (``tests/test_lrref_llamacpp.py``).

One :meth:`LlamaEngine.step` is one forward pass (one ``llama_decode``, split
only beyond ``n_batch`` tokens) over every active row: its pending tokens plus
its n-gram proposals (:func:`lrref.backends.ngram.propose`), with logits at every
position that needs a next token, verified as in the HF backend.  Steps stop by
:class:`lrref.backends.steps.StepSplitter`.  ``cancel`` drops rows between passes (the
engine runs in the caller's thread, so no pass is ever half done; a pass that
has started runs to its end).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lrsim.errors import InputError

from .base import BackendStats, Clock, Sampling, StepOut, StepRequest, chat_messages, run_steps
from .engine_row import StepRow
from .ngram import NgramConfig
from .np_sampling import accept_greedy, accept_sampled, probs_from_logits
from .passes import PassLog
from .steps import StepSplitter

COPY_MIN_TOKENS = 8  # copy another slot's KV only when it saves at least this many prefill tokens
DTYPE_NOTE = "--dtype does not apply: GGUF quantised weights"


# --- slots: sequence ids with their KV-resident token ids ---------------------------------------------




@dataclass
class _Slot:
    seq: int
    ids: list[int] = field(default_factory=list)  # tokens whose KV sits at positions 0..len-1
    owner: int | None = None  # handle of the running row
    used: int = 0  # last use (LRU)
    request: tuple | None = None  # (run, request) whose row fed its KV


def _common(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    if n == 0:
        return 0
    eq = np.asarray(a[:n]) == np.asarray(b[:n])
    return n if eq.all() else int(np.argmin(eq))


@dataclass(kw_only=True)
class _Row(StepRow):
    slot: _Slot | None = None  # while it runs (pending: the ids past the slot's KV)
    rng: np.random.Generator | None = None


# --- the batch engine -----------------------------------------------------------------------------------


class LlamaEngine:
    """A running batch of rows on one :class:`LlamaCppBackend`; rows join and leave between forward passes
    (:class:`lrref.backends.base.Engine`)."""

    def __init__(self, be: LlamaCppBackend, sampling: Sampling, ngram: NgramConfig, clock: Clock):
        self.be, self.sampling, self.ngram, self.clock = be, sampling, ngram, clock
        self.rows: list[_Row] = []
        self.waiting: list[_Row] = []  # rows without a free slot yet (they join as slots free up)

    @property
    def active(self) -> int:
        return len(self.rows) + len(self.waiting)

    def add(self, reqs: Sequence[StepRequest]) -> list[int]:
        """Start one step for each request; returns handles (finished rows are reported by :meth:`step`)."""
        out = []
        for r in reqs:
            if len(r.ids) == 0:
                raise ValueError("empty prefix")
            self.be.fit(len(r.ids) + r.cap + self.ngram.k + 1)
            row = self.be.new_row(r.ids, r.cap, self.clock())
            row.request = r.request
            if not self.sampling.greedy:
                row.rng = np.random.default_rng(int(r.seed) & 0x7FFF_FFFF_FFFF_FFFF)
            self.waiting.append(row)
            out.append(row.handle)
        self._admit()
        return out

    def _admit(self) -> None:
        while self.waiting and self.be.has_free_slot():
            row = self.waiting.pop(0)
            self.be.attach(row)
            self.rows.append(row)

    def step(self) -> list[tuple[int, StepOut]]:
        """One forward pass over all rows; returns the rows that finished their step."""
        self._admit()
        if not self.rows:
            if self.waiting:
                raise RuntimeError("no free llama.cpp sequence slot: other engines hold them all")
            return []
        props = [r.proposal(self.ngram) for r in self.rows]
        logits, seconds = self.be.forward([(r.slot, r.pending + p, len(r.pending) - 1)
                                           for r, p in zip(self.rows, props)], [r.request for r in self.rows])
        B = len(self.rows)
        self.be.stats.count_pass(B, seconds)
        best = logits.argmax(-1) if self.sampling.greedy else None
        finished, keep, o = [], [], 0
        for r, p in zip(self.rows, props):
            n = len(p) + 1
            if best is not None:
                new = accept_greedy(best[o:o + n].tolist(), p)
            else:
                new = accept_sampled(probs_from_logits(logits[o:o + n], self.sampling), p, r.rng)
            o += n
            self.be.commit_kv(r.slot, r.pending + p, len(r.pending) + len(new) - 1)
            self.be.stats.prefill_tokens += max(0, len(r.pending) - 1)
            r.take(new, len(p), B)
            r.busy += seconds
            if r.splitter.finish is not None:
                self.be.release(r.slot)
                finished.append((r.handle, r.out(self.be.decode, self.clock())))
            else:
                keep.append(r)
        self.rows = keep
        return finished

    def cancel(self, handles: Sequence[int]) -> list[tuple[int, StepOut]]:
        """Stop rows now, running or still waiting (their partial step is returned with finish 'cancelled')."""
        hs = set(handles)
        out = []
        for r in self.rows + self.waiting:
            if r.handle in hs:
                if r.slot is not None:
                    self.be.release(r.slot)
                out.append((r.handle, r.out(self.be.decode, self.clock(), "cancelled")))
        self.rows = [r for r in self.rows if r.handle not in hs]
        self.waiting = [r for r in self.waiting if r.handle not in hs]
        return out


# --- the backend ------------------------------------------------------------------------------------------


class LlamaCppBackend:
    """One GGUF model in a llama.cpp context, generating steps for batches of prefixes.

    Implements :class:`lrref.backends.base.Backend` and :class:`lrref.backends.base.ScoringBackend`.  Every
    :meth:`forward` is reported to ``pass_log`` when one is attached (:mod:`lrref.backends.passes`).

    :param path: the ``.gguf`` file.
    :param threads: llama.cpp threads of this context (:meth:`set_threads` changes them).
    :param slots: sequences the context holds at once (running rows + cached prefixes).
    :param ctx_per_seq: KV positions per sequence (rounded up to 256; grows when an idle backend needs more).
    :param n_batch: most tokens in one ``llama_decode`` (a larger pass is split).
    :param flash_attn: llama.cpp flash attention: -1 auto, 0 off, 1 on.
    :param prefix_caching: reuse KV that other requests fed (False: ``--no-prefix-caching``).
    """

    pass_log: PassLog | None = None

    def __init__(self, path: str | os.PathLike, threads: int = 2, slots: int = 8, ctx_per_seq: int = 2048,
                 n_batch: int = 512, flash_attn: int = -1, name: str | None = None, prefix_caching: bool = True):
        from . import llamacpp_ffi as ffi
        from .llamacpp_tokenizer import GGUFTokenizer, quant_name

        self.ffi, self.lib = ffi, ffi.load()
        self.path = str(path)
        self.name = name or Path(self.path).stem
        self.model = self.lib.llama_model_load_from_file(self.path.encode(), self.lib.llama_model_default_params())
        if not self.model:
            raise ValueError(f"llama.cpp could not load {self.path}")
        self.tok = GGUFTokenizer(self.lib, self.model)
        self.eos_ids = self.tok.eos_ids
        self.quant = quant_name(self.lib, self.model)
        self.threads, self.n_slots, self.n_batch, self.flash_attn = threads, slots, n_batch, flash_attn
        self.prefix_caching = prefix_caching  #: reuse KV across requests (a shared system prompt, ...)
        self.run = 0  #: which run (a decoder: one mode of a bench) the requests belong to (:meth:`begin_run`)
        self._runs = 0  #: runs begun so far
        self.stats = BackendStats()
        self.ctx = None
        self._handles = self._tick = 0
        self._new_context(ctx_per_seq)
        self._batch_buffers(n_batch)

    def _new_context(self, ctx_per_seq: int) -> None:
        if self.ctx:
            self.lib.llama_free(self.ctx)
        per = -(-ctx_per_seq // 256) * 256
        cp = self.ffi.context_params(per * self.n_slots, self.n_batch, self.n_slots, self.threads, kv_unified=False,
                                     flash_attn=self.flash_attn)
        self.ctx = self.lib.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {self.n_slots} x {per} positions")
        self.ctx_per_seq = int(self.lib.llama_n_ctx(self.ctx)) // self.n_slots
        self.mem = self.lib.llama_get_memory(self.ctx)
        self.slots = [_Slot(i) for i in range(self.n_slots)]

    def _batch_buffers(self, cap: int) -> None:
        ffi, c_i32p = self.ffi, ctypes.POINTER(ctypes.c_int32)
        self._tok, self._pos = np.zeros(cap, np.int32), np.zeros(cap, np.int32)
        self._nseq, self._out = np.ones(cap, np.int32), np.zeros(cap, np.int8)
        self._seq = np.zeros(cap, np.int32)
        base = self._seq.ctypes.data
        self._seqp = (c_i32p * cap)(*[ctypes.cast(base + 4 * i, c_i32p) for i in range(cap)])
        self._batch = ffi.Batch(0, self._tok.ctypes.data_as(c_i32p), None, self._pos.ctypes.data_as(c_i32p),
                                self._nseq.ctypes.data_as(c_i32p), self._seqp,
                                self._out.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)))

    # -- slots -------------------------------------------------------------------------------------------
    def new_row(self, ids: Sequence[int], cap: int, start: float) -> _Row:
        """A row (not attached to a slot yet) to extend ``ids`` by one step of at most ``cap`` tokens."""
        self._handles += 1
        return _Row(handle=self._handles, ids=list(ids), pending=[],
                    splitter=StepSplitter(self.decode, self.eos_ids, cap), start=start)

    def has_free_slot(self) -> bool:
        return any(s.owner is None for s in self.slots)

    def fit(self, need: int) -> None:
        """Make sure a sequence of ``need`` positions fits (re-creating an idle context if it must grow).

        :raises InputError: it does not fit while rows are running (a prompt too long for ``ctx_per_seq``).
        """
        if need <= self.ctx_per_seq:
            return
        if any(s.owner is not None for s in self.slots):
            raise InputError(f"a step needs {need} positions but the llama.cpp context of {self.name} holds "
                             f"{self.ctx_per_seq} per sequence while rows are running: the prompt is too long")
        self._new_context(max(need, 2 * self.ctx_per_seq))

    def attach(self, row: _Row) -> None:
        """Give ``row`` a free slot holding the longest prefix of its ids (kept, or copied from another slot).

        Without prefix caching (:attr:`prefix_caching` False) only KV its own request fed counts: every
        request prefills its whole prompt (vLLM's ``enable_prefix_caching=False``); the rows of one request
        still share their common prefix.
        """
        ids, limit = row.ids, len(row.ids) - 1
        free = [s for s in self.slots if s.owner is None]
        mine = self.prefix_caching or row.request is None
        key = (self.run, row.request)  # a request of this run: another mode's request 0 is not this one
        common = {s.seq: _common(s.ids, ids, limit) if mine or s.request == key else 0 for s in self.slots}
        dst = max(free, key=lambda s: (common[s.seq], -s.used))
        src = max(self.slots, key=lambda s: common[s.seq])
        c = common[dst.seq]
        if common[src.seq] >= c + COPY_MIN_TOKENS:
            dst = min(free, key=lambda s: (common[s.seq] > 0, s.used))
            self.lib.llama_memory_seq_cp(self.mem, src.seq, dst.seq, -1, -1)
            self.stats.kv_copies += 1
            c, dst.ids = common[src.seq], list(src.ids)
        if not self.lib.llama_memory_seq_rm(self.mem, dst.seq, c, -1):
            raise RuntimeError(f"llama.cpp could not drop positions >= {c} of sequence {dst.seq}")
        self._tick += 1
        dst.ids, dst.owner, dst.used, dst.request = ids[:c], row.handle, self._tick, key
        row.slot, row.pending, row.cached_tokens = dst, ids[c:], c
        self.stats.reused_tokens += c

    def begin_run(self) -> int:
        """A new run starts (one mode of ``lrref bench``): without prefix caching, KV its requests fed before
        belongs to another run (request indices start at 0 in every mode, so they alone would match).  Returns
        the run's id, for :meth:`resume_run`."""
        self._runs += 1
        self.run = self._runs
        return self.run

    def resume_run(self, run: int) -> None:
        """The coming requests belong to ``run`` (from :meth:`begin_run`): ``lrref bench`` decodes each problem
        in every mode in turn on the same backend, so each mode's decoder says whose requests come next."""
        self.run = run

    def release(self, slot: _Slot) -> None:
        """The row is done: its slot keeps the KV of ``slot.ids`` for later prefixes."""
        slot.owner = None

    def commit_kv(self, slot: _Slot, fed: list[int], keep: int) -> None:
        """After a pass fed ``fed`` to ``slot``: keep the first ``keep`` (drop rejected proposals' KV)."""
        if keep < len(fed):
            self.lib.llama_memory_seq_rm(self.mem, slot.seq, len(slot.ids) + keep, -1)
        slot.ids += fed[:keep]

    # -- forward ----------------------------------------------------------------------------------------
    def forward(self, parts: Sequence[tuple[_Slot, list[int], int]], requests: Sequence[int | None] = (),
                engine: str | None = None) -> tuple[np.ndarray, float]:
        """One pass: feed each part's tokens to its slot.

        Returns the logits ``[outputs, vocab]`` at every position from each part's ``first_out`` index on, in
        order (a view valid until the next call, when unsplit), and the seconds the pass took.  The pass is
        reported to :attr:`pass_log` when one is attached (``requests``: of the rows; ``engine``: overrides the
        log's name, e.g. ``'verifier'``).
        """
        tok = np.concatenate([np.asarray(t, np.int32) for _, t, _ in parts])
        pos = np.concatenate([np.arange(len(s.ids), len(s.ids) + len(t), dtype=np.int32) for s, t, _ in parts])
        seq = np.concatenate([np.full(len(t), s.seq, np.int32) for s, t, _ in parts])
        out = np.concatenate([np.arange(len(t)) >= f for _, t, f in parts]).astype(np.int8)
        logits, t0, seconds = self._decode(tok, pos, seq, out, len(parts))
        if self.pass_log is not None:
            self.pass_log(t0, seconds, [len(t) for _, t, _ in parts], [len(s.ids) for s, _, _ in parts],
                          int(out.sum()), self.threads, requests, engine)
        return logits, seconds

    def _decode(self, tok: np.ndarray, pos: np.ndarray, seq: np.ndarray, out: np.ndarray,
                rows: int) -> tuple[np.ndarray, float, float]:
        """``llama_decode`` over the batch (split beyond ``n_batch``): logits, start (``perf_counter``), seconds."""
        t0 = time.perf_counter()
        chunks = []
        for a in range(0, len(tok), self.n_batch):
            b = min(a + self.n_batch, len(tok))
            n = b - a
            self._tok[:n], self._pos[:n], self._seq[:n], self._out[:n] = tok[a:b], pos[a:b], seq[a:b], out[a:b]
            self._batch.n_tokens = n
            rc = self.lib.llama_decode(self.ctx, self._batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed with code {rc} ({n} tokens, {rows} rows)")
            k = int(out[a:b].sum())
            if k:
                v = np.ctypeslib.as_array(self.lib.llama_get_logits(self.ctx), (k, self.tok.n_vocab))
                chunks.append(v if b == len(tok) and not chunks else v.copy())
        logits = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        return logits, t0, time.perf_counter() - t0

    def next_token_logits(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """Logits of the token after each prompt, float32 ``[B, V]`` (judge/score verifiers); reuses cached prefixes."""
        rows, out = [self.new_row(p, 1, 0.0) for p in prompts], []
        n_free = sum(s.owner is None for s in self.slots)
        if not n_free:
            raise RuntimeError("no free llama.cpp sequence slot for the verifier")
        for a in range(0, len(rows), n_free):
            part = rows[a:a + n_free]
            for r in part:
                self.fit(len(r.ids) + 1)
                self.attach(r)
            lg, seconds = self.forward([(r.slot, r.pending, len(r.pending) - 1) for r in part], engine="verifier")
            self.stats.forward_s += seconds
            out.append(lg.copy())
            for r in part:
                self.commit_kv(r.slot, r.pending, len(r.pending))
                self.release(r.slot)
        return np.concatenate(out)

    # -- text ------------------------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(ids)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text)

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        """The GGUF's chat template rendered (as transformers does) and tokenized with special tokens parsed."""
        return self.tok.apply_chat_template(chat_messages(question, system), tokenize=True, add_generation_prompt=True)

    def vocab(self) -> dict[str, int]:
        return self.tok.get_vocab()

    # -- the interface -------------------------------------------------------------------------------------
    def set_threads(self, n: int) -> None:
        """llama.cpp threads of this context from the next pass on (its own pool; 0: leave them)."""
        if n and n != self.threads:
            self.lib.llama_set_n_threads(self.ctx, n, n)
            self.threads = n

    def engine(self, sampling: Sampling, ngram: NgramConfig, clock: Clock | None = None) -> LlamaEngine:
        """A running batch (continuous batching over the sequence slots, which keep the prefix cache)."""
        return LlamaEngine(self, sampling, ngram, clock or time.perf_counter)

    def generate_steps(self, reqs: Sequence[StepRequest], sampling: Sampling, ngram: NgramConfig = NgramConfig(),
                       clock: Clock | None = None) -> list[StepOut]:
        """One step for each request, batched; each row stops at its own boundary or cap."""
        return run_steps(self.engine(sampling, ngram, clock), reqs)

    def describe(self) -> dict:
        """This model's part of the trace header: GGUF file, quantisation, context and batch settings."""
        return {"gguf": Path(self.path).name, "quant": self.quant, "slots": self.n_slots,
                "ctx_per_seq": self.ctx_per_seq, "n_batch": self.n_batch, "flash_attn": self.flash_attn}

    def close(self) -> None:
        """Free the context and the model (the backend is unusable afterwards)."""
        if self.ctx:
            self.lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None


def header_info(target: LlamaCppBackend, draft_path: str | None, threads: int, draft_threads: int | None) -> dict:
    """``config.backend_info`` of a trace header: binding and version, ``OMP_WAIT_POLICY``, the weights (the
    ``hardware.dtype`` of the header, since ``--dtype`` does not apply), and per model its GGUF file,
    quantisation and llama.cpp threads in this mode."""
    from .llamacpp_tokenizer import gguf_quant

    info = {"binding": "xllamacpp", "binding_version": target.ffi.binding_version(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "dtype": f"gguf:{target.quant}",
            "prefix_caching": target.prefix_caching,
            "dtype_note": DTYPE_NOTE, "target": target.describe() | {"threads": threads}}
    if draft_path:
        info["draft"] = {"gguf": Path(draft_path).name, "quant": gguf_quant(draft_path), "threads": draft_threads}
    return info
