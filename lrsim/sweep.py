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

import argparse
import csv
import io
import itertools
import json
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .atomic import atomic_write, check_writable
from .errors import InputError
from .sim import SimConfig, simulate

GRID_SYNTAX = "V | A,B,C | START:STOP:NUM (NUM evenly spaced values, both ends included)"
FORMATS = (".csv", ".parquet")


def parse_grid(text: str, convert: Callable[[str], Any] = float) -> list:
    """Values of one grid axis: ``0.7``, ``1,2,4,8`` or ``0.5:0.9:5`` (linspace, ends included).

    ``convert`` parses (and checks) one value; it raises ``ValueError`` or
    ``argparse.ArgumentTypeError`` on bad input, reported as :class:`InputError`.
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
    except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
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


def run_chunk(chunk: list[tuple[int, SimConfig]]) -> list[dict]:
    """Simulate a list of (index, config); the rows keep the index (a worker task)."""
    return [{"point": i} | _flat(cfg) | simulate(cfg).row() for i, cfg in chunk]


def _chunks(configs: list[SimConfig], workers: int) -> list[list[tuple[int, SimConfig]]]:
    n = len(configs)
    size = max(1, math.ceil(n / (workers * 50)))  # ~50 tasks per worker: balance and a live progress bar
    items = list(enumerate(configs))
    return [items[i:i + size] for i in range(0, n, size)]


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="pt", file=sys.stderr, disable=not enabled, mininterval=0.5, smoothing=0.1,
                desc="lrsim sweep")


def run_configs(configs: list[SimConfig], workers: int | None = None, scheduler: str | None = None,
                progress: bool = True) -> list[dict]:
    """Simulate every config, in parallel; rows in config order.

    ``scheduler``: a ``dask.distributed`` scheduler address (``tcp://host:8786``)
    or a :class:`distributed.Client`; otherwise a local process pool with
    ``workers`` processes (default: all cores; 1 runs in this process).
    """
    workers = workers or os.cpu_count() or 1
    client = _dask_client(scheduler) if scheduler is not None else None
    rows: list[dict] = []
    with _progress(len(configs), progress) as bar:
        if client is not None:
            rows = _run_dask(configs, client, bar, own=client is not scheduler)
        elif workers == 1:
            for i, cfg in enumerate(configs):
                rows += run_chunk([(i, cfg)])
                bar.update(1)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(run_chunk, c) for c in _chunks(configs, workers)]
                for f in as_completed(futures):
                    part = f.result()
                    rows += part
                    bar.update(len(part))
    return sorted(rows, key=lambda r: r["point"])


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


def _run_dask(configs: list[SimConfig], client, bar, own: bool) -> list[dict]:
    from distributed import as_completed as dask_completed

    try:
        workers = max(1, sum(client.nthreads().values()))
        futures = client.map(run_chunk, _chunks(configs, workers), pure=False)
        rows: list[dict] = []
        for f in dask_completed(futures):
            part = f.result()
            rows += part
            bar.update(len(part))
        return rows
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
