"""One simulation: pick the engine, run it, compute the result, write the traces asked for."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .async_loop import AsyncLoop, applies
from .config import SimConfig
from .renewal import RenewalRun, run_renewal
from .results import SimResult, summarize
from .workload import Workload


def scheduler(mode: str) -> type:
    """The event engine's scheduler of ``mode`` (imported when first needed: the event engine loads SimPy, which a
    plan on the renewal engine and the async loop never uses)."""
    from .sched_ar import ArRun
    from .sched_async import AsyncRun
    from .sched_sync import SyncRun

    return {"ar": ArRun, "sync": SyncRun, "async": AsyncRun}[mode]


def uses_renewal(cfg: SimConfig, record: bool) -> bool:
    """Sync and ar runs without a trace, finite requests or prefill go to the renewal engine (same numbers,
    faster)."""
    return cfg.engine == "renewal" or (cfg.engine == "auto" and cfg.mode != "async" and not record
                                       and cfg.request_tokens is None and cfg.prefill == "none")


def simulate(cfg: SimConfig, trace: str | Path | None = None, chrome: str | Path | None = None) -> SimResult:
    """Run one simulation; optionally write its lr-trace (JSONL) and a Chrome/Perfetto trace (JSON).

    Both files are written atomically, after the run.
    """
    record = trace is not None or chrome is not None
    work = Workload(cfg)
    if uses_renewal(cfg, record):
        return summarize(cfg, run_renewal(cfg, work), work.c1_eff)
    if applies(cfg, work, record):  # async on its dedicated loop: the event engine's numbers, faster
        return summarize(cfg, AsyncLoop(cfg, work).advance(cfg.steps), work.c1_eff)
    run = scheduler(cfg.mode)(cfg, work, record)
    log = run.run()
    res = summarize(cfg, log, work.c1_eff)
    if record:
        from .export import make_trace, write_outputs

        write_outputs(make_trace(res, cfg, run.rec.rows, log.accepted), trace, chrome)
    return res


class Continuable:
    """A run that can be taken further: :meth:`result` (steps) is what ``simulate`` returns for ``cfg`` with
    ``steps`` output steps, and each call with more steps goes on from where the last one stopped.

    Exact, and cheaper than new runs of more steps: the renewal engine draws only the cycles it lacks (and cuts
    anywhere in those it has), the async loop (:mod:`.async_loop`) runs on from its state (fewer steps than it has
    run: a fresh run).  A configuration neither engine takes (``resumable`` False) is simulated afresh each time.
    """

    def __init__(self, cfg: SimConfig):
        self.cfg, self.work = cfg, Workload(cfg)
        if uses_renewal(cfg, False):
            self.runner = RenewalRun(cfg, self.work)
        elif applies(cfg, self.work, False):
            self.runner = AsyncLoop(cfg, self.work)
        else:
            self.runner = None
        self.done: dict[int, SimResult] = {}  # results by steps

    @property
    def resumable(self) -> bool:
        return self.runner is not None

    def result(self, steps: int) -> SimResult:
        if steps in self.done:
            return self.done[steps]
        cfg = self.cfg if steps == self.cfg.steps else replace(self.cfg, steps=steps)
        if self.runner is None or not self.runner.can_reach(steps):
            return simulate(cfg)
        res = self.done[steps] = summarize(cfg, self.runner.advance(steps), self.work.c1_eff)
        return res
