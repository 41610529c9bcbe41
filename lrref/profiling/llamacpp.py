"""``lrref profile --backend llamacpp``: a latency profile of llama.cpp forward passes on prepared GGUF models.

    lrref profile --backend llamacpp --model qwen2.5-coder-1.5b-instruct,qwen2.5-coder-0.5b-instruct \\
        --threads 2 --async-threads 1,1 --require-idle --out cpu-llamacpp.json

**What is timed** is what the decoder's own pass costs and what a trace's pass
records carry: :meth:`lrref.backends.llamacpp.LlamaCppBackend.forward` (one
``llama_decode``, split only beyond ``n_batch`` tokens, and the logits read
back), on a backend built as the decoder builds it (per-sequence KV streams,
``n_batch`` 512, flash attention auto, at least 2048 positions per sequence).
A shape (context ``L``, rows ``b``, positions ``q``) is ``b`` rows sharing one
pass, as the decoder's batched steps do: each row its own KV sequence holding
``L`` cached tokens (one sequence prefilled with random tokens, copied to the
others with ``seq_cp``), fed ``q`` new random tokens, with logits at all ``q``
(``--logits all``, the default: n-gram verification) or at the last only
(``--logits last``: a step's prefill).  After every pass the ``q`` new positions
are removed again and each sequence's length is checked.  Per shape:
``--warmup`` untimed passes, then timed passes until ``--repeats`` or until
they add up to ``--budget`` seconds (at least one); the median is kept and the
count is recorded.

**Setups** (entries ``MODEL@SETUP``, and the profile's ``setups`` map):

- ``tN`` (``--threads N``): the model alone on N threads, as ``ar``, ``sd``
  and ``lr-sync`` run it (target and draft in one process, one after the
  other, on the same threads);
- ``tAco`` and ``tBco`` (``--async-threads A,B``): as lr-async runs them, the
  target on A threads in this process *while* the draft decodes on B threads
  in a helper process (the *co-runner*), and the draft on B threads while the
  target co-runs on A.  The co-runner decodes without pause: one row, one new
  position per pass, over a cached context that starts at ``--co-context``
  tokens, grows by one per pass and is cut back after 256 passes; it runs from
  before the entry's warm-up to after its last timed pass.  That is an lr-async
  partner that never waits (the real draft process idles when it is
  ``gamma`` steps ahead, the real target when it waits for a draft): the
  upper end of the interference.

Bad input (an unknown or unprepared model, a bad grid or thread layout) is one
line and exit 2 before any model loads; the profile is written atomically at
the end, with its provenance (CPU model and flags, llama.cpp's own system
info, binding and version, quantisations, threads and co-runner of every
entry, what else ran on the machine during each entry, command, date).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from lrsim.errors import DomainError, InputError, UsageError
from lrsim.latency.profile import ArchProfile, Profile, Provenance, write_profile

DEFAULTS = {"context": "0,256,1024", "batch": "1,2,4", "positions": "1,2,3,4,6,8,16,32,64", "warmup": 1,
            "repeats": 5}
BUDGET_S = 1.0  # timed seconds per shape after which timing stops early (at least one pass)
CO_CONTEXT = 256  # the co-runner's cached context at its start
CO_SPAN = 256  # ... grows by one token per pass, cut back after this many
MIN_CTX_PER_SEQ = 2048  # as the decoder sizes its sequences (lrref.session.Session._llamacpp_backends)
LOGITS = ("all", "last")
MAX_ROWS = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # profile and model names (lrsim.latency.profile's rule)
_SHAPE_KEYS = ("{arch}.block_count", "{arch}.attention.head_count", "{arch}.attention.head_count_kv",
               "{arch}.embedding_length", "{arch}.attention.key_length", "{arch}.attention.value_length",
               "general.file_type")


class CoRunnerError(DomainError):
    """The co-runner process failed (one line: its last error line)."""


@dataclass(frozen=True)
class GGUFModel:
    """A model to time: registry name (or the file's stem), its GGUF file, and what the profile says of it."""

    name: str
    path: str
    quant: str
    layers: int
    kv_bytes_per_token: int  # f16 K and V (llama.cpp's default cache type) of every layer


def read_model(spec: str, cache: str | None) -> GGUFModel:
    """A registry name or ``.gguf`` path, resolved and its metadata read (no weights loaded).

    :raises InputError: unknown, not prepared, or not a GGUF model llama.cpp can read.
    """
    from .. import models
    from ..backends.llamacpp_tokenizer import FTYPES, gguf_meta

    path = models.resolve_gguf(spec, cache)
    try:
        m = gguf_meta(path, _SHAPE_KEYS)
    except ValueError:
        raise InputError(f"{path}: llama.cpp cannot read it as a GGUF model") from None
    try:
        layers, heads, kv_heads, embd = (int(m[k]) for k in _SHAPE_KEYS[:4])
        k_len = int(m[_SHAPE_KEYS[4]] or embd // heads)
        v_len = int(m[_SHAPE_KEYS[5]] or embd // heads)
    except (TypeError, ValueError):
        raise InputError(f"{path}: no layer and attention shape in its metadata ({m['general.architecture']})") \
            from None
    ft = m["general.file_type"]
    quant = "?" if ft is None else FTYPES.get(int(ft), f"ftype {ft}")
    name = spec if spec in models.REGISTRY else path.stem
    if not _NAME.match(name):
        raise UsageError(f"{path}: profile entries are named after the file, which needs letters, digits, '.', '_' "
                         f"and '-' only: rename it")
    return GGUFModel(name, str(path), quant, layers, layers * kv_heads * (k_len + v_len) * 2)


@dataclass(frozen=True)
class Entry:
    """One profile entry: a model timed on ``threads`` threads, alone or beside a co-running model."""

    model: GGUFModel
    setup: str
    threads: int
    co: GGUFModel | None = None
    co_threads: int | None = None

    @property
    def name(self) -> str:
        return f"{self.model.name}@{self.setup}"


@dataclass(frozen=True)
class LlamaSpec:
    """What ``lrref profile --backend llamacpp`` measures (validated on construction: :class:`UsageError`)."""

    target: GGUFModel
    draft: GGUFModel | None
    threads: int | None
    async_threads: tuple[int, int] | None
    context: tuple[int, ...]
    batch: tuple[int, ...]
    positions: tuple[int, ...]
    warmup: int = 1
    repeats: int = 5
    budget: float = BUDGET_S
    logits: str = "all"
    co_context: int = CO_CONTEXT
    seed: int = 0
    name: str | None = None

    def __post_init__(self) -> None:
        check_settings(self.threads, self.async_threads, self.batch, self.warmup, self.repeats, self.budget,
                       self.logits, self.co_context, self.seed, self.name)

    @property
    def shapes(self) -> int:
        return len(self.context) * len(self.batch) * len(self.positions)

    def entries(self) -> list[Entry]:
        """Alone on ``threads`` (target, then draft), then lr-async's pair (each beside the other), deduplicated."""
        models = [self.target] + ([self.draft] if self.draft else [])
        out = [Entry(m, f"t{self.threads}", self.threads) for m in models] if self.threads else []
        if self.async_threads:
            a, b = self.async_threads
            draft = self.draft or self.target
            out += [Entry(self.target, f"t{a}co", a, draft, b), Entry(draft, f"t{b}co", b, self.target, a)]
        return list({e.name: e for e in out}.values())

    def setups(self) -> dict:
        """The profile's ``setups``: which entry each simulator mode's target and draft run on."""
        out = {}
        if self.threads:
            t = f"t{self.threads}"
            out |= {"ar": {"target": t}, "sync": {"target": t, "draft": t}}
        if self.async_threads:
            out["async"] = {"target": f"t{self.async_threads[0]}co", "draft": f"t{self.async_threads[1]}co"}
        return out


def check_settings(threads: int | None, async_threads: tuple[int, int] | None, batch: Sequence[int], warmup: int,
                   repeats: int, budget: float, logits: str, co_context: int, seed: int, name: str | None = None
                   ) -> None:
    """:raises UsageError: a setting out of range (one line naming the flag)."""
    if threads is None and async_threads is None:
        raise UsageError("give --threads N and/or --async-threads A,B")
    counts = [("--threads", 1 if threads is None else threads, 1), ("--warmup", warmup, 0), ("--repeats", repeats, 1),
              ("--co-context", co_context, 0), ("--seed", seed, 0)]
    for flag, v, lo in counts + [("--async-threads", t, 1) for t in async_threads or ()]:
        if v < lo:
            raise UsageError(f"{flag} must be >= {lo}, got {v}")
    if not budget > 0:
        raise UsageError(f"--budget must be > 0 seconds, got {budget}")
    if logits not in LOGITS:
        raise UsageError(f"--logits must be one of {', '.join(LOGITS)}, got {logits!r}")
    if max(batch) > MAX_ROWS:
        raise UsageError(f"--batch: at most {MAX_ROWS} rows (llama.cpp sequences), got {max(batch)}")
    if name is not None and not _NAME.match(name):
        raise UsageError(f"--name uses letters, digits, '.', '_' and '-', got {name!r}")


def _tokens(be, n: int, rng) -> list[int]:
    return rng.integers(0, be.tok.n_vocab, n).tolist()


def fill(be, context: int, rows: int, rng) -> None:
    """Sequences ``0..rows-1`` of ``be`` hold the same ``context`` random tokens (one prefill, then ``seq_cp``)."""
    slots = be.slots[:rows]
    for s in slots:
        be.lib.llama_memory_seq_rm(be.mem, s.seq, 0, -1)
        s.ids = []
    if context:
        toks = _tokens(be, context, rng)
        be.forward([(slots[0], toks, context - 1)])
        be.commit_kv(slots[0], toks, context)
        for s in slots[1:]:
            be.lib.llama_memory_seq_cp(be.mem, slots[0].seq, s.seq, -1, -1)
            s.ids = list(toks)


def one_pass(be, rows: int, q: int, first_out: int, rng) -> float:
    """Seconds of one :meth:`~lrref.backends.llamacpp.LlamaCppBackend.forward` of ``q`` new tokens in each of
    ``rows`` sequences; the new positions are removed afterwards (and the lengths checked)."""
    parts = [(s, _tokens(be, q, rng), first_out) for s in be.slots[:rows]]
    before = [len(s.ids) for s, _, _ in parts]
    _, seconds = be.forward(parts)
    for (s, toks, _), n in zip(parts, before):
        be.commit_kv(s, toks, 0)
        if len(s.ids) != n or be.lib.llama_memory_seq_pos_max(be.mem, s.seq) != n - 1:
            raise RuntimeError(f"sequence {s.seq} holds {be.lib.llama_memory_seq_pos_max(be.mem, s.seq) + 1} "
                               f"positions after the pass was removed, not {n}")
    return seconds


def time_shape(be, rows: int, q: int, spec: LlamaSpec, rng) -> list[float]:
    """``spec.warmup`` untimed passes, then timed ones until ``spec.repeats`` or ``spec.budget`` seconds."""
    first = 0 if spec.logits == "all" else q - 1
    for _ in range(spec.warmup):
        one_pass(be, rows, q, first, rng)
    times: list[float] = []
    while len(times) < spec.repeats and (not times or sum(times) < spec.budget):
        times.append(one_pass(be, rows, q, first, rng))
    return times


def _nested(spec: LlamaSpec, d: dict) -> tuple:
    return tuple(tuple(tuple(d[(L, b, q)] for q in spec.positions) for b in spec.batch) for L in spec.context)


def measure_entry(entry: Entry, spec: LlamaSpec, tick: Callable[[int], object]) -> tuple[ArchProfile, dict]:
    """The entry's :class:`ArchProfile`, and its facts (threads, co-runner, load, wall time, timed passes)."""
    import numpy as np

    from ..backends.llamacpp import LlamaCppBackend
    from ..host.load import Monitor

    need = max(spec.context) + max(spec.positions)
    be = LlamaCppBackend(entry.model.path, threads=entry.threads, slots=max(spec.batch),
                         ctx_per_seq=max(MIN_CTX_PER_SEQ, need), name=entry.model.name)
    rng = np.random.default_rng(spec.seed)
    ms, counts = {}, {}
    try:
        with CoRunner(entry, spec) as co:
            mon, t0 = Monitor(), time.perf_counter()
            fill(be, 0, 1, rng)
            for _ in range(spec.warmup + 2):  # the process's first passes (thread pool, buffers)
                one_pass(be, 1, 1, 0, rng)
            for L in spec.context:
                fill(be, L, max(spec.batch), rng)
                for b in spec.batch:
                    for q in spec.positions:
                        times = time_shape(be, b, q, spec, rng)
                        ms[(L, b, q)], counts[(L, b, q)] = float(f"{1000 * statistics.median(times):.6g}"), len(times)
                        tick(1)
            wall, load = time.perf_counter() - t0, mon.record()
        params = int(be.lib.llama_model_n_params(be.model))
        facts = {"model": entry.model.name, "gguf": Path(entry.model.path).name, "quant": entry.model.quant,
                 "threads": entry.threads, "setup": entry.setup, "co_runner": co.report, "load": load,
                 "wall_s": round(wall, 1), "timed_passes": _nested(spec, counts), "ctx_per_seq": be.ctx_per_seq,
                 "slots": be.n_slots, "n_batch": be.n_batch, "flash_attn": be.flash_attn}
    finally:
        be.close()
    arch = ArchProfile(entry.name, params, entry.model.layers, entry.model.kv_bytes_per_token, spec.context,
                       spec.batch, spec.positions, _nested(spec, ms))
    return arch, facts


# --- the co-runner -------------------------------------------------------------------------------------


class CoRunner:
    """While the block runs, ``entry.co`` decodes without pause in a process of its own (no co-model: nothing).

    ``report`` (after the block): the co-runner's model, threads, passes, their mean ms and its duty (seconds in
    passes / wall seconds); None without a co-runner.
    """

    def __init__(self, entry: Entry, spec: LlamaSpec):
        self.entry, self.spec = entry, spec
        self.proc = self.conn = None
        self.report: dict | None = None

    def __enter__(self) -> CoRunner:
        e = self.entry
        if e.co is None:
            return self
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=co_runner_main, daemon=True,
                                args=(child, e.co.path, e.co_threads, self.spec.co_context, self.spec.seed + 1))
        self.proc.start()
        child.close()
        try:
            self._recv(600)
        except BaseException:
            self._stop()
            raise
        return self

    def _recv(self, timeout: float) -> tuple:
        try:
            if not self.conn.poll(timeout):
                raise CoRunnerError(f"the co-runner ({self.entry.co.name}) did not answer within {timeout:g} s")
            msg = self.conn.recv()
        except (EOFError, OSError):
            raise CoRunnerError(f"the co-runner ({self.entry.co.name}) exited (exit code {self.proc.exitcode})") \
                from None
        if msg[0] == "error":
            raise CoRunnerError(f"the co-runner ({self.entry.co.name}) crashed: {msg[1].strip().splitlines()[-1]}")
        return msg

    def __exit__(self, exc_type, *rest) -> None:
        if self.proc is None:
            return
        try:
            if exc_type is None:
                self.conn.send(("stop",))
                done = self._recv(120)[1]
                self.report = {"model": self.entry.co.name, "threads": self.entry.co_threads, "rows": 1,
                               "positions": 1, "context": [self.spec.co_context, self.spec.co_context + CO_SPAN],
                               "passes": done["passes"],
                               "mean_pass_ms": round(1000 * done["busy_s"] / max(done["passes"], 1), 3),
                               "duty": round(done["busy_s"] / max(done["wall_s"], 1e-9), 4)}
        finally:
            self._stop()

    def _stop(self) -> None:
        self.proc.join(0 if self.report is None else 10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(10)


def co_runner_main(conn, path: str, threads: int, context: int, seed: int) -> None:
    """Entry point of the co-runner process: decode passes back to back until told to stop."""
    try:
        import numpy as np

        from ..backends.llamacpp import LlamaCppBackend

        be = LlamaCppBackend(path, threads=threads, slots=1, ctx_per_seq=max(MIN_CTX_PER_SEQ, context + CO_SPAN + 1))
        rng = np.random.default_rng(seed)
        fill(be, context, 1, rng)
        conn.send(("ready",))
        s, n, busy, t0 = be.slots[0], 0, 0.0, time.perf_counter()
        while not conn.poll():
            tok = _tokens(be, 1, rng)
            busy += be.forward([(s, tok, 0)])[1]
            be.commit_kv(s, tok, 1)
            n += 1
            if len(s.ids) >= context + CO_SPAN:
                be.lib.llama_memory_seq_rm(be.mem, s.seq, context, -1)
                s.ids = s.ids[:context]
        conn.recv()
        conn.send(("done", {"passes": n, "busy_s": busy, "wall_s": time.perf_counter() - t0}))
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except Exception:  # report, then die: the main process turns it into an error
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass


# --- the command ---------------------------------------------------------------------------------------


def run(spec: LlamaSpec, out: Path, argv: Sequence[str], progress: bool = False) -> str:
    """Measure every entry of ``spec`` and write the profile to ``out``; returns a one-line summary."""
    from tqdm import tqdm

    from ..host.load import Monitor, warn_if_busy

    mon, t0 = Monitor(), time.perf_counter()
    archs, facts = {}, {}
    entries = spec.entries()
    with tqdm(total=spec.shapes * len(entries), disable=not progress, file=sys.stderr, unit="shape") as bar:
        for e in entries:
            bar.set_description(e.name)
            archs[e.name], facts[e.name] = measure_entry(e, spec, bar.update)
    load = mon.now()
    prof = Profile(spec.name or "cpu-llamacpp", "wall", _provenance(spec, argv, facts, load, time.perf_counter() - t0),
                   archs, _description(spec), spec.setups() or None,
                   "unseen")  # per-sequence KV: a row prefills what its own sequence has not seen (lrsim.sim prefill)
    write_profile(prof, out)
    warn_if_busy(load, "the profile")
    n = f"{len(archs)} entr{'y' if len(archs) == 1 else 'ies'}"
    return (f"wrote {out}: profile {prof.name}, {n} ({', '.join(archs)}) x {spec.shapes} shapes "
            f"in {time.perf_counter() - t0:.0f} s")


def _description(spec: LlamaSpec) -> str:
    from ..host.cpu import cpu_model

    return (f"{cpu_model()}, llama.cpp: wall time of one LlamaCppBackend.forward (lrref profile --backend llamacpp), "
            f"by setup (threads alone, or beside lr-async's other model)")


def _provenance(spec: LlamaSpec, argv: Sequence[str], facts: dict, load, wall: float) -> Provenance:
    from ..backends import llamacpp_ffi as ffi
    from ..host.cpu import cpu_flags, cpu_ids, cpu_model

    quants = sorted({f["quant"] for f in facts.values()})
    flags = cpu_flags()
    info = ffi.load().llama_print_system_info()
    extra = {"entries": facts, "setups": spec.setups(), "logits": spec.logits, "budget_s": spec.budget,
             "seed": spec.seed, "binding": "xllamacpp", "binding_version": ffi.binding_version(),
             "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "cpus": os.cpu_count(),
             "cpu_flags": None if flags is None else sorted(flags), **cpu_ids(),
             "llama_system_info": info.decode("utf-8", "replace").strip() if info else None,
             "load": None if load is None else load.to_dict(), "wall_s": round(wall, 1)}
    return Provenance(
        device=cpu_ids()["cpu_kind"] or cpu_model(), engine=f"llama.cpp (xllamacpp {ffi.binding_version()}, C API through ctypes): lrref's "
        "LlamaCppBackend.forward, one llama_decode per pass (split beyond n_batch), per-sequence KV streams",
        dtype="gguf:" + ",".join(quants), date=time.strftime("%Y-%m-%d", time.gmtime()), command=" ".join(argv),
        cpu=cpu_model(), warmup=spec.warmup, repeats=spec.repeats,
        statistic=f"median of 1-{spec.repeats} timed passes (a shape's timing stops once they add up to "
                  f"{spec.budget:g} s; counts in extra.entries.*.timed_passes)",
        notes=(f"Logits at {'every new position' if spec.logits == 'all' else 'the last new position of each row'} "
               "(--logits); random tokens; each row its own KV sequence, one prefilled sequence copied to the others "
               "(seq_cp); the new positions are removed after every pass and the lengths checked.",
               "Entries ARCH@tN: the model alone on N llama.cpp threads (ar, sd, lr-sync). ARCH@tNco: on N threads "
               f"while the other model decodes without pause in its own process (one row, one position per pass, "
               f"context {spec.co_context}-{spec.co_context + CO_SPAN}): lr-async with a partner that never waits.",
               "extra.entries.*.load: what other processes used during the entry (lrref/host/load.py); busy above "
               "0.1 of one core."),
        extra=extra)
