"""A request decoded cycle by cycle: ``ar``/``sd`` steps (:func:`ar_step`) or ``lr-sync`` cycles
(:class:`lrref.decode.lr_sync.SyncCycle`), as ``req.cfg`` says (:func:`request_steps`); ``auto`` sets ``req.cfg``
before each cycle through a hook (:class:`lrref.decode.auto.Tuner`).  Both are job generators
(:mod:`lrref.decode.jobs`)."""

from __future__ import annotations

from typing import Protocol

from ..backends.base import StepRequest
from .jobs import TARGET, Job, Steps
from .lr_sync import SyncCycle
from .request import Request
from .seed import step_seed


class CycleHook(Protocol):
    """Called around every cycle of :func:`request_steps` (``auto``'s tuner)."""

    def begin(self, req: Request, cycle: int) -> None:
        """Before the cycle: may set ``req.cfg`` to the configuration the cycle runs."""

    def end(self, req: Request) -> None:
        """After the cycle, with what it committed in ``req.res``."""


def request_steps(req: Request, hook: CycleHook | None = None) -> Steps:
    """ar/sd steps or lr-sync cycles, each as ``req.cfg`` says when it starts, until EOS or the token cap; with
    ``hook``, its ``begin`` and ``end`` around every cycle."""
    cycle = 0
    while req.left > 0:
        if hook is not None:
            hook.begin(req, cycle)
        if not req.cfg.spec.draft:  # ar, sd: target-only steps
            done = yield from ar_step(req, cycle)
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
