"""``lrsim simulate`` (one run of the event simulator) and ``lrsim sweep`` (a grid of them)."""

from __future__ import annotations

import argparse
import json

from ..format import format_sim
from . import HELP
from .common import add_auto_args, add_sim_args, auto_options, plain, positive_int, sim_flags, sim_settings


def add_parsers(sub) -> None:
    p = sub.add_parser("simulate", help=HELP["simulate"])
    add_sim_args(p, grid=False, auto=True)
    p.add_argument("--trace", metavar="FILE.jsonl", help="write the run as an lr-trace (JSON Lines)")
    p.add_argument("--chrome", metavar="FILE.json", help="write a Chrome trace / Perfetto JSON of the run")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_auto_args(p, phases=True)

    p = sub.add_parser("sweep", help=HELP["sweep"])
    add_sim_args(p, grid=True)
    p.add_argument("--out", "-o", required=True, metavar="FILE.csv|FILE.parquet", help="table to write (atomically)")
    p.add_argument("--workers", type=positive_int, help="local processes (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on this dask.distributed scheduler instead")
    p.add_argument("--skip-invalid", action="store_true", help="leave out grid points that are invalid or over budget")
    p.add_argument("--distinct-seeds", action="store_true",
                   help="point i gets seed + i (independent points), not one seed for all (common random numbers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run_simulate(a: argparse.Namespace) -> str:
    from pathlib import Path

    from ..atomic import check_writable
    from ..sim import SimConfig, simulate

    settings = sim_settings(a)
    if settings.get("mode") == "auto":
        return run_auto(a, settings)
    cfg = SimConfig(**settings)
    for path in (a.trace, a.chrome):
        if path:
            check_writable(Path(path))
    r = simulate(cfg, trace=a.trace, chrome=a.chrome)
    return json.dumps(r.to_dict(), indent=2) if a.json else format_sim(r)


def run_auto(a: argparse.Namespace, settings: dict) -> str:
    """``lrsim simulate --mode auto``: the policy against every fixed configuration it chooses among."""
    from ..adaptive.sim import parse_phases, simulate_auto
    from ..errors import InputError
    from ..sim import SimConfig

    given = [f for f, k in (("--k1", "k1"), ("--k2", "k2")) if k in settings] + [
        f for f, v in (("--trace", a.trace), ("--chrome", a.chrome)) if v]
    if given:
        raise InputError(f"--mode auto chooses k1 and k2 and writes no trace: drop {', '.join(given)}")
    base = SimConfig(**(settings | {"mode": "async"}))
    phases = parse_phases(a.phases or f"{base.steps}:{base.alpha1}", base.alpha2)
    r = simulate_auto(base, phases, auto_options(a), seed=base.seed)
    return json.dumps(r.to_dict(), indent=2) if a.json else r.format()


def run_sweep(a: argparse.Namespace) -> str:
    import time

    from ..sweep import build_configs, check_output, parse_grid, run_configs, write_rows

    scalars, _ = sim_flags()
    fixed = {k: v for k, v in sim_settings(a).items() if k not in {n for _, n, _ in scalars}}
    axes = {name: parse_grid(getattr(a, name), plain(parse)) for _, name, parse in scalars
            if getattr(a, name) is not None}
    out = check_output(a.out)
    configs, skipped = build_configs(fixed, axes, a.skip_invalid, a.distinct_seeds)
    t = time.perf_counter()
    rows = run_configs(configs, a.workers, a.scheduler, progress=not a.no_progress)
    write_rows(rows, out)
    note = f" ({skipped} invalid point(s) left out)" if skipped else ""
    return f"wrote {len(rows)} rows to {out} in {time.perf_counter() - t:.1f} s{note}"
