"""One simulation: pick the engine, run it, compute the result, write the traces asked for."""

from __future__ import annotations

from pathlib import Path

from .config import SimConfig
from .events import EventRun
from .export import make_trace, write_outputs
from .renewal import run_renewal
from .results import SimResult, summarize
from .sched_ar import ArRun
from .sched_async import AsyncRun
from .sched_sync import SyncRun
from .workload import Workload

SCHEDULERS: dict[str, type[EventRun]] = {"ar": ArRun, "sync": SyncRun, "async": AsyncRun}


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
    run = SCHEDULERS[cfg.mode](cfg, work, record)
    log = run.run()
    res = summarize(cfg, log, work.c1_eff)
    if record:
        write_outputs(make_trace(res, cfg, run.rec.rows, log.accepted), trace, chrome)
    return res
