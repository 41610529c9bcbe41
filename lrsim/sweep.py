"""Grid sweeps of :mod:`lrsim.sim`: every point of a Cartesian grid is one simulation.

Runs on a local process pool (all cores by default) or, given a scheduler
address, on a Dask cluster (``dask.distributed``); shows a tqdm progress bar
on stderr; writes one row per point to CSV or Parquet atomically (temporary
file, then ``os.replace``).  By default every point uses the same seed (common
random numbers: neighbouring points see the same acceptance and length draws,
which makes differences between them less noisy); ``distinct_seeds`` gives point
``i`` the seed ``seed + i`` instead (independent points, e.g. for tests of agreement).

>>> rows = run_grid({"mode": "sync"}, {"alpha1": [0.6, 0.8], "k1": [2, 4]}, steps=1000)  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .atomic import atomic_write, check_writable
from .errors import InputError
from .processes import can_fork, cores
from .progress import bar
from .sim import SimConfig, simulate

GRID_SYNTAX = "V | A,B,C | START:STOP:NUM (NUM evenly spaced values, both ends included)"
FORMATS = (".csv", ".parquet")


def parse_grid(text: str, convert: Callable[[str], Any] = float) -> list:
    """Values of one grid axis: ``0.7``, ``1,2,4,8`` or ``0.5:0.9:5`` (linspace, ends included).

    ``convert`` parses (and checks) one value; it raises ``ValueError`` or ``TypeError`` on bad input, reported
    as :class:`InputError`.
    """
    text = text.strip()
    if text.count(":") == 2:
        a, b, n = text.split(":")
        try:
            lo, hi, num = float(a), float(b), int(n)
        except ValueError:
            raise InputError(f"bad range {text!r}: expected {GRID_SYNTAX}") from None
        if num < 1:
            raise InputError(f"bad range {text!r}: NUM must be >= 1")
        items = [str(int(round(v))) if abs(v - round(v)) < 1e-9 else repr(round(v, 12))
                 for v in np.linspace(lo, hi, num).tolist()]
    else:
        items = [v.strip() for v in text.split(",") if v.strip()]
    if not items:
        raise InputError(f"empty grid {text!r}: expected {GRID_SYNTAX}")
    try:
        return [convert(v) for v in items]
    except (ValueError, TypeError) as e:
        raise InputError(f"bad grid value in {text!r}: {e}") from None


def grid_points(axes: dict[str, list]) -> list[dict]:
    """Cartesian product of the axes, the last axis varying fastest."""
    names = list(axes)
    return [dict(zip(names, vals)) for vals in itertools.product(*(axes[n] for n in names))]


def build_configs(base: dict, axes: dict[str, list], skip_invalid: bool = False,
                  distinct_seeds: bool = False) -> tuple[list[SimConfig], int]:
    """One validated :class:`SimConfig` per grid point; returns (configs, number skipped).

    An invalid point raises :class:`InputError` naming it, unless ``skip_invalid``.
    """
    configs, skipped = [], 0
    for i, point in enumerate(grid_points(axes)):
        if distinct_seeds:
            point = point | {"seed": (base | point).get("seed", 0) + i}
        try:
            configs.append(SimConfig(**(base | point)))
        except InputError as e:
            if not skip_invalid:
                where = ", ".join(f"{k}={v}" for k, v in point.items())
                raise InputError(f"grid point {where}: {e} (use --skip-invalid to leave such points out)") from None
            skipped += 1
    if not configs:
        raise InputError("no valid grid point")
    return configs, skipped


def _flat(cfg: SimConfig) -> dict:
    """Config as table columns: scalars as they are, nested models as compact JSON."""
    return {k: (json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else v)
            for k, v in cfg.to_dict().items()}


def point_row(item: tuple[int, SimConfig]) -> dict:
    """One grid point's table row: its index, its configuration, what the simulation measured."""
    i, cfg = item
    return {"point": i} | _flat(cfg) | simulate(cfg).row()


def run_chunk(chunk: list[tuple[int, Any]], fn: Callable[[Any], Any] = point_row) -> list[tuple[int, Any]]:
    """``fn`` of every item of a chunk of (index, item), the index kept (a worker task)."""
    return [(i, fn(item)) for i, item in chunk]


def _chunks(items: list, workers: int, per_worker: int) -> list[list[tuple[int, Any]]]:
    n = len(items)
    size = max(1, math.ceil(n / (workers * per_worker)))  # ~per_worker tasks per worker: balance, a live bar
    pairs = list(enumerate(items))
    return [pairs[i:i + size] for i in range(0, n, size)]


def _progress(total: int, enabled: bool, desc: str = "lrsim sweep", unit: str = "pt"):
    return bar(total=total, desc=desc, enabled=enabled, unit=unit, mininterval=0.5, smoothing=0.1)


def _pool_context():
    """Where the workers come from: forked from this process, as always, unless other threads run in it (a progress
    bar's monitor, a notebook's, a test runner's): a thread may hold a lock at the fork that no child ever releases
    (a worker stalled 20 s in the test suite), so then from a forkserver (a clean process, whose children import
    ``__main__`` again: a script needs its ``if __name__ == "__main__":`` guard there); the platform's default
    where there is no forkserver."""
    import multiprocessing as mp

    if not can_fork() and "forkserver" in mp.get_all_start_methods():
        return mp.get_context("forkserver")
    return None


def map_tasks(fn: Callable[[Any], Any], items: list, workers: int | None = None, scheduler: Any = None,
              progress: bool = True, desc: str = "lrsim sweep", unit: str = "pt", per_worker: int = 50) -> list:
    """``[fn(x) for x in items]`` in parallel, results in item order, a tqdm bar on stderr.

    ``fn`` must be picklable (a module-level function or a ``functools.partial`` of one).
    ``scheduler``: a ``dask.distributed`` scheduler address (``tcp://host:8786``)
    or a :class:`distributed.Client`; otherwise a local process pool with
    ``workers`` processes (default: one per core this process may run on; 1 runs in this process).
    Items go to workers in chunks of about ``len(items) / (workers x per_worker)``.
    """
    workers = workers or cores()
    client = _dask_client(scheduler) if scheduler is not None else None
    done: list[tuple[int, Any]] = []
    task = partial(run_chunk, fn=fn)
    with _progress(len(items), progress, desc, unit) as bar:
        if client is not None:
            done = _run_dask(task, _chunks(items, max(1, sum(client.nthreads().values())), per_worker), client,
                             bar, own=client is not scheduler)
        elif workers == 1:
            for i, item in enumerate(items):
                done += task([(i, item)])
                bar.update(1)
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context()) as pool:
                futures = [pool.submit(task, c) for c in _chunks(items, workers, per_worker)]
                for f in as_completed(futures):
                    part = f.result()
                    done += part
                    bar.update(len(part))
    return [r for _, r in sorted(done, key=lambda p: p[0])]


def run_configs(configs: list[SimConfig], workers: int | None = None, scheduler: str | None = None,
                progress: bool = True) -> list[dict]:
    """Simulate every config, in parallel (:func:`map_tasks`); rows in config order."""
    return map_tasks(point_row, list(enumerate(configs)), workers, scheduler, progress)


def _dask_client(scheduler: Any):
    """A ``distributed.Client`` for an address (or the client given); one-line :class:`InputError` if unreachable."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError("--scheduler needs dask.distributed: pip install 'lookahead-reasoning[dask]'") from None
    if isinstance(scheduler, Client):
        return scheduler
    try:
        return Client(scheduler, timeout="10s")
    except (OSError, TimeoutError, ValueError, TypeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {msg}") from None


def _run_dask(task: Callable, chunks: list, client, bar, own: bool) -> list:
    from distributed import as_completed as dask_completed

    try:
        futures = client.map(task, chunks, pure=False)
        done: list = []
        for f in dask_completed(futures):
            part = f.result()
            done += part
            bar.update(len(part))
        return done
    finally:
        if own:
            client.close()


def check_output(path: str | os.PathLike) -> Path:
    """Refuse, before any work, an output whose format is unknown or whose directory is not writable."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise InputError(f"output {p}: unknown format {p.suffix or '(none)'!r}; use .csv or .parquet")
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError("writing Parquet needs pyarrow: pip install 'lookahead-reasoning[parquet]'") from None
    if p.is_dir():
        raise InputError(f"output {p} is a directory")
    check_writable(p)
    return p


def table_bytes(rows: list[dict], fmt: str) -> bytes:
    """Rows as CSV (header line, one line per row) or Parquet bytes."""
    if fmt == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows), buf)
        return buf.getvalue()
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return out.getvalue().encode()


def write_rows(rows: list[dict], path: str | os.PathLike) -> Path:
    """Write rows to ``path`` (.csv or .parquet) atomically."""
    p = Path(path)
    atomic_write(p, table_bytes(rows, p.suffix.lower()))
    return p


def run_grid(base: dict, axes: dict[str, Iterable], out: str | os.PathLike | None = None,
             workers: int | None = None, scheduler: Any = None, progress: bool = False,
             skip_invalid: bool = False, distinct_seeds: bool = False, **fixed: Any) -> list[dict]:
    """Sweep ``base | fixed`` over the grid ``axes`` (lists of values); optionally write ``out``."""
    if out is not None:
        check_output(out)
    configs, _ = build_configs(base | fixed, {k: list(v) for k, v in axes.items()}, skip_invalid, distinct_seeds)
    rows = run_configs(configs, workers, scheduler, progress)
    if out is not None:
        write_rows(rows, out)
    return rows
