"""The decoder: runs requests in one mode (``ar``, ``sd``, ``lr-sync``, ``lr-async``) and writes the trace.

All modes commit whole steps (:mod:`lrref.steps`) and write one trace record
per drafted candidate and per target-only step (:mod:`lrref.rows`).  ``ar``/``sd``
is one target step per cycle (here), ``lr-sync`` one :class:`lrref.lr_sync.SyncCycle`
per cycle, ``lr-async`` one :class:`lrref.lr_async.AsyncPipeline` per request.

Lossless property: with greedy decoding and a verifier that accepts only
token-identical steps (``exact`` with ``normalize=False``), every committed
step is the target's own greedy step from the same prefix, so LR reproduces
``ar`` token for token (given numerics that do not depend on batch shape).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from lrsim.errors import InputError
from lrsim.trace import Header, RequestRecord, TraceWriter

from .backend import Backend, StepRequest
from .config import BASE_MODES, DEFAULT_SYSTEM, LR_MODES, MODE_HELP, MODES, DecodeConfig, parse_mode
from .cpu import hardware_facts, resolve_dtype
from .lr_async import AsyncPipeline
from .lr_sync import SyncCycle
from .request import Committed, Request, Result
from .rows import Rows
from .verifiers import Verifier
from .worker import DraftWorker, step_seed

__all__ = ["BASE_MODES", "DEFAULT_SYSTEM", "LR_MODES", "MODES", "MODE_HELP", "Committed", "DecodeConfig", "Decoder",
           "Result", "ar_step", "make_header", "parse_mode"]


class Decoder:
    """Runs requests in one mode and writes the trace.

    :param target: target backend (HF, vLLM or llama.cpp).
    :param draft: draft backend (lr-sync; lr-async starts a draft process from ``draft_path`` instead).
    :param verifier: step verifier (lr modes).
    :param draft_dtype: dtype of lr-async's draft process (default: ``cfg.dtype``, ``auto`` resolved here).
    :param draft_kind: backend of lr-async's draft process (:data:`lrref.worker.DRAFT_KINDS`).
    :raises InputError: a mode without the draft or verifier it needs.
    :raises lrref.worker.WorkerError: lr-async's draft process did not start.
    """

    def __init__(self, cfg: DecodeConfig, target: Backend, draft: Backend | None = None,
                 verifier: Verifier | None = None, trace: TraceWriter | None = None, draft_path: str | None = None,
                 draft_dtype: str | None = None, draft_kind: str = "hf"):
        self.cfg, self.target, self.draft, self.verifier, self.trace = cfg, target, draft, verifier, trace
        self.clock = trace.now if trace else _Clock()
        self.worker: DraftWorker | None = None
        if cfg.is_lr and verifier is None:
            raise InputError(f"mode {cfg.mode} needs a verifier")
        if cfg.base == "lr-sync" and draft is None:
            raise InputError("lr-sync needs a draft backend")
        if cfg.base == "lr-async":
            if not draft_path:
                raise InputError("lr-async needs the draft model path (it runs in its own process)")
            t0 = trace.t0 if trace else self.clock.t0
            self.worker = DraftWorker(draft_path, draft_dtype or cfg.dtype, cfg.draft_threads, t0,
                                      cfg.max_step_tokens, cfg.draft_sampling, cfg.draft_ngram_cfg, kind=draft_kind)

    def close(self) -> None:
        """Stop the draft process (lr-async)."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def run(self, request: int, prompt_ids: Sequence[int], answer_ref: str | None = None) -> Result:
        """Decode one request (prompt token ids) to EOS or the token cap."""
        cfg = self.cfg
        t_start, w0 = self.clock(), time.perf_counter()
        fwd0 = _forward_s(self.target), _forward_s(self.draft)
        req = Request(cfg, self.target, self.verifier, self.clock, Rows(self.trace, request, cfg.log_text), request,
                      list(prompt_ids))
        for be in (self.target, self.draft):
            if be is not None:
                be.set_threads(cfg.main_threads)
        if cfg.base == "lr-async":
            req.res.draft_overlapped = True
            AsyncPipeline(req, self.worker).run()
        else:
            self._run_cycles(req)
        res = req.res
        res.wall_s = time.perf_counter() - w0
        res.text = self.target.decode(res.ids)
        res.target_s += _forward_s(self.target) - fwd0[0]
        res.draft_s += _forward_s(self.draft) - fwd0[1]
        if self.trace:
            self.trace.request(RequestRecord(
                request=request, start=t_start, end=self.clock(), prompt_tokens=len(prompt_ids),
                output_tokens=len(res.ids), steps=len(res.steps), accepted_steps=res.accepted_steps, finish=res.finish,
                text=res.text if cfg.log_text else None))
        return res

    def _run_cycles(self, req: Request) -> None:
        """ar/sd steps or lr-sync cycles until EOS or the token cap."""
        cycle = 0
        while req.left > 0:
            if self.cfg.base == "ar":
                done = ar_step(req, cycle)
            else:
                done = SyncCycle(req, self.draft, cycle, req.prefix(), req.left).run()
            cycle += 1
            if done:
                req.res.finish = "eos"
                break


def ar_step(req: Request, cycle: int) -> bool:
    """One target step (``ar``; ``sd`` with n-gram speculation inside it), committed; True at EOS."""
    cfg = req.cfg
    cap = min(cfg.max_step_tokens, req.left)
    t = req.target.generate_steps([StepRequest(tuple(req.prefix()), cap, step_seed(cfg.seed, req.index, cycle, -1))],
                                  cfg.sampling, cfg.ngram_cfg, req.clock)[0]
    req.count_target(t)
    req.rows.write(cycle, 0, target=t, committed="target")
    return req.commit(t, "target")


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
                backend_info: dict | None = None) -> Header:
    """Trace header with the full config (and its help), models, backend and machine facts.

    ``hardware`` has the CPU model and its relevant flags, the dtype ``cfg.dtype`` resolves to and the
    target's torch threads (:func:`lrref.cpu.hardware_facts`).  ``backend_info`` (the llama.cpp backend's
    binding, version, threads and GGUF quantisation) goes to ``config.backend_info``; its ``dtype`` replaces the
    resolved ``cfg.dtype`` in ``hardware`` (GGUF weights are quantised: ``--dtype`` does not apply).
    """
    import os

    from lrsim.trace import Setting, machine_facts

    threads = cfg.target_threads if cfg.base == "lr-async" else cfg.threads
    dtype = (backend_info or {}).get("dtype") or resolve_dtype(cfg.dtype)
    hw = machine_facts() | {"torch_threads": _torch_threads(), "device": "cpu",
                            "loadavg_start": list(os.getloadavg())} | hardware_facts(dtype, threads)
    conf = cfg.trace_config()
    if verifier:
        conf["verifier"] = verifier
    if backend_info:
        conf["backend_info"] = backend_info
    # the run in lrsim's terms: sync writes gamma + 1 target steps per cycle and verifies pair by pair;
    # lr-async's target runs on target_threads (the draft process has the rest)
    mode, k1 = {"lr-sync": ("sync", cfg.gamma + 1), "lr-async": ("async", cfg.gamma)}.get(cfg.base, ("ar", 1))
    setting = Setting(mode, k1, cfg.ngram_k + 1 if cfg.ngram_k else 1, cfg.width if mode != "ar" else 1,
                      "per_pair" if mode == "sync" else "one",
                      f"threads={cfg.target_threads if mode == 'async' else cfg.threads}")
    return Header(source="lrref", mode=cfg.base, config=conf, setting=setting.to_dict(), models=models,
                  backend=backend, hardware=hw, notes=notes)
