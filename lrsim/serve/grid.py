"""Serving runs over modes x rates x replications, in parallel (:func:`lrsim.sweep.map_tasks`), one row per (mode, rate).

Every check that can fail on the user's input (modes, k2 for ``sd``, the
profile, KV capacity against the largest request, rows against the limits)
runs here first, in this process, so bad input stops before any work and
nothing is written.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import InputError
from .arrivals import make_requests
from .config import ServeConfig, check_mode, check_rate, mode_config
from .metrics import combine, run_metrics
from .run import build_world, check_fits, run_once

ROW_KEYS = ("mode", "rate", "k1", "k2", "requests", "replications")


def preflight(cfg: ServeConfig, modes: Sequence[str], rates: Sequence[float | None]) -> None:
    """Raise a one-line :class:`~lrsim.errors.InputError` for anything the runs would refuse."""
    if not modes:
        raise InputError("no mode given")
    for r in rates:
        if r is not None:
            check_rate(r)
    for mode in modes:
        check_mode(mode)
        build_world(cfg, mode)  # pricers and profile points it can reach
        for rep in range(cfg.replications):
            check_fits(cfg, mode, make_requests(cfg, rates[0], rep))


def run_task(task: tuple[ServeConfig, str, float | None, int]) -> dict:
    """One run's metrics (a worker task): ``(config, mode, rate, replication)``."""
    cfg, mode, rate, rep = task
    return run_metrics(run_once(cfg, mode, rate, rep), cfg)


def serve_grid(cfg: ServeConfig, modes: Sequence[str], rates: Sequence[float | None], workers: int | None = None,
               scheduler: Any = None, progress: bool = False) -> tuple[list[dict], list[dict]]:
    """(one row per mode and rate with intervals over replications, the per-run metrics)."""
    from ..sweep import map_tasks

    preflight(cfg, modes, rates)
    tasks = [(cfg, m, r, k) for m in modes for r in rates for k in range(cfg.replications)]
    runs = map_tasks(run_task, tasks, workers, scheduler, progress, desc="lrsim serve", unit="run", per_worker=1)
    per_run = [{"mode": m, "rate": r, "replication": k} | met for (_, m, r, k), met in zip(tasks, runs)]
    rows = []
    for mode in modes:
        sim = mode_config(cfg, mode)
        for rate in rates:
            group = [met for (_, m, r, _k), met in zip(tasks, runs) if m == mode and r == rate]
            head = {"mode": mode, "rate": rate, "k1": sim.k1, "k2": sim.k2, "requests": cfg.requests,
                    "replications": cfg.replications}
            rows.append(head | combine(group))
    return rows, per_run
