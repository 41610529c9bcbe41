"""``ar`` and ``sd``: one target step per cycle (n-gram speculation inside it in ``sd``)."""

from __future__ import annotations

from ..backends.base import StepRequest
from .jobs import TARGET, Job, Steps
from .request import Request
from .seed import step_seed


def ar_step(req: Request, cycle: int) -> Steps:
    """One target step (``ar``; ``sd`` with n-gram speculation inside it), committed; returns True at EOS."""
    cfg = req.cfg
    cap = min(cfg.max_step_tokens, req.left)
    t = (yield Job(TARGET, [StepRequest(tuple(req.prefix()), cap, step_seed(cfg.seed, req.index, cycle, -1),
                                        req.index)], cfg.ngram_cfg))[0]
    req.count_target(t)
    req.rows.write(cycle, 0, target=t, committed="target")
    return req.commit(t, "target")
