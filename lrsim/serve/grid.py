"""Serving runs over modes x loads x replications, in parallel (:func:`lrsim.sweep.map_tasks`), one row per (mode, load).

Every check that can fail on the user's input (modes, k2 for ``sd``, the
profile, KV capacity against the largest request, rows against the limits)
runs here first, in this process, so bad input stops before any work and
nothing is written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ..errors import InputError
from .arrivals import make_requests
from .config import ServeConfig, check_mode, check_rate, mode_config
from .metrics import combine, run_metrics
from .run import build_world, check_fits, run_once


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


def _point(cfg: ServeConfig, load: float | int | None, key: str) -> tuple[ServeConfig, float | None]:
    """The configuration and rate of one load level (``key``: 'rate', or 'concurrency' for a closed loop)."""
    return (replace(cfg, concurrency=int(load)), None) if key == "concurrency" else (cfg, load)


def check_grid(cfg: ServeConfig, modes: Sequence[str], loads: Sequence[float | None], key: str = "rate") -> None:
    """:func:`preflight` at every load level."""
    for load in loads:
        c, rate = _point(cfg, load, key)
        preflight(c, modes, [rate])


def serve_grid(cfg: ServeConfig, modes: Sequence[str], loads: Sequence[float | None], workers: int | None = None,
               scheduler: Any = None, progress: bool = False, key: str = "rate") -> tuple[list[dict], list[dict]]:
    """(one row per mode and load with intervals over replications, the per-run metrics).

    ``loads`` are request rates (``key = 'rate'``; None: an arrivals file's own times) or, closed loop,
    numbers of concurrent clients (``key = 'concurrency'``).
    """
    from ..sweep import map_tasks

    check_grid(cfg, modes, loads, key)
    tasks = [(*_point(cfg, x, key), m, x, k) for m in modes for x in loads for k in range(cfg.replications)]
    runs = map_tasks(run_task, [(c, m, r, k) for c, r, m, _x, k in tasks], workers, scheduler, progress,
                     desc="lrsim serve", unit="run", per_worker=1)
    per_run = [{"mode": m, key: x, "replication": k} | met for (_c, _r, m, x, k), met in zip(tasks, runs)]
    rows = []
    for mode in modes:
        sim = mode_config(cfg, mode)
        for x in loads:
            group = [met for (_c, _r, m, xx, _k), met in zip(tasks, runs) if m == mode and xx == x]
            head = {"mode": mode, "rate": x if key == "rate" else None, "concurrency": x if key != "rate" else None,
                    "k1": sim.k1, "k2": sim.k2, "requests": cfg.requests, "replications": cfg.replications}
            row = head | combine(group)
            if key != "rate":
                row["rate"] = row["request_rate"]  # closed loop: the rate is an outcome
            rows.append(row)
    return rows, per_run
