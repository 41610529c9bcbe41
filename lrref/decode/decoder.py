"""The decoder: runs requests in one mode (``ar``, ``sd``, ``lr-sync``, ``lr-async``, ``auto``) and writes the
trace.

All modes commit whole steps (:mod:`lrref.backends.steps`) and write one trace record
per drafted candidate and per target-only step (:mod:`lrref.decode.rows`).  ``ar``/``sd``
is one target step per cycle (:func:`lrref.decode.cycles.ar_step`), ``lr-sync`` one
:class:`lrref.decode.lr_sync.SyncCycle` per cycle, ``lr-async`` one :class:`lrref.decode.lr_async.AsyncPipeline`
per request, ``auto`` one of them per cycle as its :class:`lrref.decode.auto.Tuner` chooses (an lr-async stage, to
its first rejection, when lr-async is among its modes: the draft process is started then, and only then).
All are job generators (:mod:`lrref.decode.jobs`): :meth:`Decoder.run`
decodes one request, :meth:`Decoder.run_many` several at once whose steps share
batches (:mod:`lrref.decode.closed_loop`; lr-async's drafts share the one draft
process's batches too).

Lossless property: with greedy decoding and a verifier that accepts only
token-identical steps (``exact`` with ``normalize=False``), every committed
step is the target's own greedy step from the same prefix, so LR reproduces
``ar`` token for token (given numerics that do not depend on batch shape).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from lrsim.errors import InputError
from lrsim.modes import lookahead_schedule
from lrsim.trace import Header, RequestRecord, TraceWriter

from ..answers import extract_answer, is_correct
from ..backends.base import Backend
from ..backends.passes import PassLog, attached
from ..config import AUTO, BASE_MODES, DEFAULT_SYSTEM, LR_MODES, MODE_HELP, MODES, DecodeConfig, parse_mode
from ..host.cpu import hardware_facts, resolve_dtype
from ..verify.verifiers import Verifier
from .auto import Tuner
from .closed_loop import ClosedLoop
from .cycles import ar_step, request_steps
from .draft_worker import DraftWorker
from .jobs import DRAFT, TARGET, AsyncSteps, Lane, Steps, run_async_direct, run_direct
from .lr_async import AsyncPipeline
from .request import Committed, Request, Result
from .rows import Rows

__all__ = ["BASE_MODES", "DEFAULT_SYSTEM", "LR_MODES", "MODES", "MODE_HELP", "Committed", "DecodeConfig", "Decoder",
           "Result", "ar_step", "make_header", "parse_mode"]


WARMUP_REQUEST = 1_000_000  #: request index of :meth:`Decoder.warm_up` (no timed request has it)


class Decoder:
    """Runs requests in one mode and writes the trace.

    :param target: target backend (HF, vLLM or llama.cpp).
    :param draft: draft backend (lr-sync; lr-async, and auto with lr-async among its modes, start a draft process
        from ``draft_path`` as well).
    :param verifier: step verifier (lr modes).
    :param draft_dtype: dtype of lr-async's draft process (default: ``cfg.dtype``, ``auto`` resolved here).
    :param draft_kind: backend of lr-async's draft process (:data:`lrref.decode.draft_worker.DRAFT_KINDS`).
    :param draft_random: lr-async's draft process builds random weights
        (:meth:`lrref.backends.random_weights.RandomWeights.model`) instead of loading ``draft_path``.
    :param prefix_caching: lr-async's llama.cpp draft process reuses KV across requests (False: every request
        prefills its whole prompt, as the target backend given with ``prefix_caching=False``).
    :raises InputError: a mode without the draft or verifier it needs.
    :raises lrref.decode.draft_worker.WorkerError: lr-async's draft process did not start.
    """

    def __init__(self, cfg: DecodeConfig, target: Backend, draft: Backend | None = None,
                 verifier: Verifier | None = None, trace: TraceWriter | None = None, draft_path: str | None = None,
                 draft_dtype: str | None = None, draft_kind: str = "hf", draft_random: dict | None = None,
                 prefix_caching: bool = True):
        self.cfg, self.target, self.draft, self.verifier, self.trace = cfg, target, draft, verifier, trace
        self.clock = trace.now if trace else _Clock()
        self.t0 = trace.t0 if trace else self.clock.t0  #: the clock's origin (kept while warm_up sets trace aside)
        self.runs: dict = {}  #: backend -> this decoder's run on it (llama.cpp: another mode's KV is not ours)
        self._begin_runs()
        self.worker: DraftWorker | None = None
        if cfg.is_lr and verifier is None:
            raise InputError(f"mode {cfg.mode} needs a verifier")
        if cfg.draft_in_process and draft is None:
            raise InputError(f"{cfg.base} needs a draft backend")
        self.tuner = Tuner(cfg) if cfg.base == AUTO else None  #: auto's costs and policies
        if cfg.draft_process:  # lr-async; auto with lr-async among its modes
            if not draft_path:
                raise InputError(f"{'lr-async' if cfg.base != AUTO else 'auto with lr-async'} needs the draft model "
                                 "path (it runs in its own process)")
            self.worker = DraftWorker(draft_path, draft_dtype or cfg.dtype, cfg.draft_threads, self.t0,
                                      cfg.max_step_tokens, cfg.draft_sampling, cfg.draft_ngram_cfg,
                                      pool_size=8 * cfg.concurrency, kind=draft_kind, device=cfg.draft_on,
                                      random=draft_random, prefix_caching=prefix_caching)

    def close(self) -> None:
        """Stop the draft process (lr-async; auto with lr-async among its modes)."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def _begin_runs(self) -> None:
        """A new run on every in-process backend that tells runs apart (llama.cpp's ``begin_run``)."""
        self.runs = {be: be.begin_run() for be in (self.target, self.draft)
                     if be is not None and hasattr(be, "begin_run")}

    def _set_threads(self) -> None:
        """Before decoding: every in-process model computes on the main process's threads of this mode
        (``cfg.main_threads``), and the backends the modes share count the coming requests as this decoder's run
        (without prefix caching, problem i of another mode is another request)."""
        for be in (self.target, self.draft):
            if be is not None:
                be.set_threads(self.cfg.main_threads)
        for be, run in self.runs.items():
            be.resume_run(run)

    @property
    def lanes(self) -> dict[str, Lane]:
        """The target lane, and the draft lane when the draft runs in this process (lr-sync)."""
        cfg = self.cfg
        out = {TARGET: Lane(self.target, cfg.sampling, cfg.ngram_cfg)}
        if self.draft is not None:
            out[DRAFT] = Lane(self.draft, cfg.draft_sampling, cfg.draft_ngram_cfg)
        return out

    def run(self, request: int, prompt_ids: Sequence[int], answer_ref: str | None = None) -> Result:
        """Decode one request (prompt token ids) to EOS or the token cap; ``answer_ref``: the reference answer
        (normalised, :func:`lrref.answers.gold_answer`) its trace record's ``correct`` is checked against."""
        w0 = time.perf_counter()
        fwd0 = _forward_s(self.target), _forward_s(self.draft)
        req = self._start(request, prompt_ids)
        self._set_threads()
        with attached(self._pass_logs()):
            if self.cfg.spec.draft_runs == "own":
                eng = self.target.engine(self.cfg.sampling, self.cfg.ngram_cfg, self.clock)
                run_async_direct(self._steps(req), eng, self.worker, req.index)
                req.res.draft_s += self.worker.settle(req.index)  # its draft passes, the cancelled step's too
            else:  # auto with the draft process: its lr-async stages too
                run_direct(self._steps(req), self.lanes, self.clock, self.worker, req.index)
                if self.worker is not None:
                    own = self.worker.settle(req.index)  # overlapped with the target: not the main process's time
                    req.res.draft_s += own
                    req.res.draft_own_s += own
        res = req.res
        res.wall_s = time.perf_counter() - w0
        res.target_s += _forward_s(self.target) - fwd0[0] - res.verify_target_s  # the judge's passes are verify_s
        res.draft_s += _forward_s(self.draft) - fwd0[1]
        return self._finish(req, answer_ref)

    def warm_up(self, prompt_ids: Sequence[int], request: int = WARMUP_REQUEST) -> float:
        """Decode one request that is neither timed nor recorded: no trace rows, pass or request records.  The
        first request of a run pays one-time costs (CUDA kernels and the allocator on a GPU, llama.cpp's threads
        and buffers); a benchmark's timed requests should not.  KV it fed is not reused by the run's requests
        (the backends start a new run after it).  Returns its wall seconds."""
        trace, self.trace = self.trace, None
        t0 = time.perf_counter()
        try:
            self.run(request, prompt_ids)
        finally:
            self.trace = trace
        self._begin_runs()
        return time.perf_counter() - t0

    def run_many(self, prompts: Sequence[tuple[int, Sequence[int]]], concurrency: int,
                 done: Callable[[int, Result], None] | None = None,
                 refs: dict[int, str | None] | None = None) -> list[Result]:
        """Decode ``(request, prompt ids)`` pairs ``concurrency`` at a time, in a closed loop.

        The next request starts as soon as one ends; the target steps of all requests in flight share one
        running batch (lr-sync's drafts one draft batch, lr-async's the draft process's):
        :class:`lrref.decode.closed_loop.ClosedLoop`.  Each result's ``wall_s`` is its latency; model time is
        shared among the requests of every pass by rows (lr-async's draft time too, from the draft's pass
        records, except the passes of the draft step cancelled when a request ends, whose records arrive after it).

        :param done: called with each request's index and result as it ends.
        :param refs: request -> reference answer (as :meth:`run`'s ``answer_ref``).
        """
        if self.tuner is not None and concurrency != 1:
            raise InputError("mode auto decodes one request at a time (concurrency 1)")
        self._set_threads()
        results: dict[int, Result] = {}

        def finish(req: Request) -> None:
            req.res.wall_s = self.clock() - req.res.start
            if self.worker is not None:
                own = self.worker.take_draft_s(req.index)
                req.res.draft_s += own
                if not req.res.draft_overlapped:  # auto's lr-async stages
                    req.res.draft_own_s += own
            results[req.index] = self._finish(req, (refs or {}).get(req.index))
            if done is not None:
                done(req.index, results[req.index])

        def start(i: int, ids: Sequence[int]) -> tuple[Request, Steps | AsyncSteps]:
            req = self._start(i, ids)
            return req, self._steps(req)

        with attached(self._pass_logs()):
            ClosedLoop(self.lanes, self.clock, concurrency, self.worker).run((start(i, ids) for i, ids in prompts),
                                                                             finish)
            if self.worker is not None:
                self.worker.clear()
        return [results[i] for i, _ in prompts]

    def _steps(self, req: Request) -> Steps | AsyncSteps:
        """The request's job generator: lr-async's pipeline (its draft time is overlapped), else
        :func:`lrref.decode.cycles.request_steps` (auto's with its tuner as the cycle hook, and the draft process
        for its lr-async stages when it has one)."""
        if self.cfg.spec.draft_runs == "own":
            req.res.draft_overlapped = True
            return AsyncPipeline(req, self.worker.send).run()
        send = self.worker.send if self.worker is not None else None
        return request_steps(req, self.tuner, send)  # auto: the tuner sets each cycle's configuration

    def _pass_logs(self) -> dict:
        """``{model: PassLog}`` of this decoder's trace: the target, the draft (here or in the draft process), and
        a verifier's own scoring model (the target judging reports its prompts as ``'verifier'`` itself).  auto's
        cost meter reads every record too, with or without a trace."""
        meter = self.tuner.meter if self.tuner is not None else None
        if self.trace is None and meter is None:
            return {}
        t0 = self.t0
        write = self.trace.write_pass if self.trace is not None else None
        if meter is not None:
            write = _tee(write, meter.record)
        lm = getattr(self.verifier, "lm", None)  # first: a model that is also the target gets the target's log
        logs = {} if lm is None else {lm: PassLog(write, "verifier", t0)}
        for be, name in ((self.target, "target"), (self.draft, "draft"), (self.worker, "draft")):
            if be is not None:
                logs.pop(be, None)
                logs[be] = PassLog(write, name, t0)
        return logs

    def _start(self, request: int, prompt_ids: Sequence[int]) -> Request:
        """A new request, started now."""
        req = Request(self.cfg, self.target, self.verifier, self.clock, Rows(self.trace, request, self.cfg.log_text),
                      request, list(prompt_ids))
        req.res.start = self.clock()
        return req

    def _finish(self, req: Request, answer_ref: str | None = None) -> Result:
        """Decode the request's text and write its trace record (with the text's final answer, and whether it
        is right when a reference is given)."""
        res = req.res
        res.text = self.target.decode(res.ids)
        res.end = self.clock()
        res.answer = extract_answer(res.text)
        res.correct = is_correct(res.answer, answer_ref)
        if self.trace:
            self.trace.request(RequestRecord(
                request=req.index, start=res.start, end=res.end, prompt_tokens=len(req.prompt),
                output_tokens=len(res.ids), steps=len(res.steps), accepted_steps=res.accepted_steps, finish=res.finish,
                first_step=res.first_step, text=res.text if self.cfg.log_text else None, answer=res.answer,
                correct=res.correct))
        return res


def _tee(write: Callable | None, also: Callable) -> Callable:
    """A record writer that hands each record to ``also`` too (``write`` None: to ``also`` alone)."""
    if write is None:
        return also

    def both(rec) -> None:
        write(rec)
        also(rec)

    return both


class _Clock:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.t0


def _forward_s(be: Backend | None) -> float:
    return be.stats.forward_s if be is not None else 0.0


def _torch_threads() -> int | None:
    """torch's intra-op threads in this process; None where torch is not loaded (the llama.cpp backend needs none)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def make_header(cfg: DecodeConfig, models: dict, backend: str, verifier: dict | None, notes: str | None = None,
                backend_info: dict | None = None, random_weights: dict | None = None) -> Header:
    """Trace header with the full config (and its help), models, backend and machine facts.

    ``hardware`` has the CPU model and its relevant flags, the dtype ``cfg.dtype`` resolves to, the
    target's torch threads (:func:`lrref.host.cpu.hardware_facts`) and the devices (with the GPU's name on CUDA).
    ``backend_info`` (the llama.cpp backend's binding, version, threads and GGUF quantisation) goes to
    ``config.backend_info``; its ``dtype`` replaces the resolved ``cfg.dtype`` in ``hardware`` (GGUF weights
    are quantised: ``--dtype`` does not apply).

    :param random_weights: the models have random weights (:meth:`lrref.backends.random_weights.RandomWeights.header`):
        recorded as ``config.random_weights``.
    """
    import os

    from lrsim.trace import Setting, machine_facts

    threads = cfg.main_threads
    torch = sys.modules.get("torch")  # not loaded by the llama.cpp backend
    gpu = torch.cuda.get_device_name(torch.device(cfg.device)) if torch and cfg.device.startswith("cuda") else None
    dtype = (backend_info or {}).get("dtype") or resolve_dtype(cfg.dtype, cfg.device)
    hw = machine_facts() | {"torch_threads": _torch_threads(), "device": cfg.device, "draft_device": cfg.draft_on,
                            "gpu": gpu, "loadavg_start": list(os.getloadavg())} | hardware_facts(dtype, threads)
    conf = cfg.trace_config()
    if verifier:
        conf["verifier"] = verifier
    if backend_info:
        conf["backend_info"] = backend_info
    if random_weights:
        conf["random_weights"] = random_weights
    if cfg.base == AUTO:  # no one setting: each cycle's configuration is in its choice record
        from .auto import candidates

        conf["auto_candidates"] = [[a.mode, a.k1, a.k2] for a in candidates(cfg)]  # what lrsim replay checks
        setting = None
    else:  # the run in lrsim's terms (lrsim.modes.lookahead_schedule: gamma -> k1, how the verifier is called);
        # lr-async's target runs on target_threads (the draft process has the rest)
        s = lookahead_schedule(cfg.base, cfg.gamma)
        setting = Setting(s.mode, s.k1, cfg.ngram_k + 1 if cfg.ngram_k else 1, cfg.width if s.mode != "ar" else 1,
                          s.verify_calls, hardware_label(cfg, gpu), cfg.concurrency, placement(cfg)).to_dict()
    return Header(source="lrref", mode=cfg.base, config=conf, setting=setting, models=models, backend=backend,
                  hardware=hw, notes=notes)


def placement(cfg: DecodeConfig) -> str:
    """Which roles ran on the target's device (the setting's ``colocated``): lr-sync's draft and every verifier
    run in the target's process, on its threads or GPU; lr-async's draft process has threads of its own on a CPU
    (``--draft-threads``), but shares a GPU it runs on with the target."""
    if not cfg.is_lr:
        return "none"
    if cfg.spec.draft_runs == "own" and not (cfg.draft_on.startswith("cuda") and cfg.draft_on == cfg.device):
        return "verifier"
    return "draft+verifier"


def hardware_label(cfg: DecodeConfig, gpu: str | None = None) -> str:
    """The setting's hardware share: ``threads=N`` of the target on a CPU, ``gpu=NAME`` on CUDA (the GPU's name)."""
    if gpu is not None:
        return f"gpu={gpu}"
    return f"threads={cfg.target_threads if cfg.base == 'lr-async' else cfg.threads}"
