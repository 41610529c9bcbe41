"""A request decoded cycle by cycle: ``ar``/``sd`` steps (:func:`ar_step`), ``lr-sync`` cycles
(:class:`lrref.decode.lr_sync.SyncCycle`) or ``lr-async`` stages (:class:`lrref.decode.lr_async.AsyncPipeline`
run for one stage: to its first rejection, where its pipeline is empty), as ``req.cfg`` says
(:func:`request_steps`); ``auto`` sets ``req.cfg`` before each cycle through a hook
(:class:`lrref.decode.auto.Tuner`).  All are job generators (:mod:`lrref.decode.jobs`); an lr-async stage's jobs
are lr-async's (:data:`lrref.decode.jobs.AsyncJob`), which :func:`lrref.decode.jobs.run_direct` answers given the
draft process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..backends.base import StepRequest
from .jobs import TARGET, AsyncSteps, Job, Steps
from .lr_async import AsyncPipeline
from .lr_sync import SyncCycle
from .messages import ToWorker
from .request import Request
from .seed import step_seed


class CycleHook(Protocol):
    """Called around every cycle of :func:`request_steps` (``auto``'s tuner)."""

    def begin(self, req: Request, cycle: int) -> None:
        """Before the cycle: may set ``req.cfg`` to the configuration the cycle runs."""

    def end(self, req: Request) -> None:
        """After the cycle, with what it committed in ``req.res``."""


def request_steps(req: Request, hook: CycleHook | None = None,
                  send: Callable[[ToWorker], None] | None = None) -> Steps | AsyncSteps:
    """ar/sd steps, lr-sync cycles or lr-async stages (``send``: to the draft process), each as ``req.cfg`` says
    when it starts, until EOS or the token cap; with ``hook``, its ``begin`` and ``end`` around every cycle.  A
    cycle whose configuration runs the target on other threads than the one before (lr-async's
    ``target_threads``, the others' ``threads``) sets them first (``req.target.set_threads``)."""
    cycle, threads = 0, req.cfg.main_threads  # the decoder set the mode's threads
    while req.left > 0:
        if hook is not None:
            hook.begin(req, cycle)
        if req.cfg.main_threads != threads:
            threads = req.cfg.main_threads
            req.target.set_threads(threads)
        if not req.cfg.spec.draft:  # ar, sd: target-only steps
            done = yield from ar_step(req, cycle)
        elif req.cfg.spec.draft_runs == "own":  # lr-async: one stage
            if send is None:
                raise ValueError("an lr-async stage needs the draft process (send)")
            done = yield from AsyncPipeline(req, send, stage=cycle).run()
        else:
            done = yield from SyncCycle(req, cycle, req.prefix(), req.left).run()
        if hook is not None:
            hook.end(req)
        cycle += 1
        if done:
            req.res.finish = "eos"
            break
    return req.res.finish == "eos"


def ar_step(req: Request, cycle: int) -> Steps:
    """One target step (``ar``; ``sd`` with n-gram speculation inside it), committed; returns True at EOS."""
    cfg = req.cfg
    cap = min(cfg.max_step_tokens, req.left)
    t = (yield Job(TARGET, [StepRequest(tuple(req.prefix()), cap, step_seed(cfg.seed, req.index, cycle, -1),
                                        req.index)], cfg.ngram_cfg))[0]
    req.count_target(t)
    req.rows.write(cycle, 0, target=t, committed="target")
    return req.commit(t, "target")
