"""``lrsim simulate`` (one run of the event simulator) and ``lrsim sweep`` (a grid of them)."""

from __future__ import annotations

import argparse
import json

from .common import add_sim_args, positive_int, sim_flags, sim_settings


def add_parsers(sub) -> None:
    p = sub.add_parser("simulate", help="event simulation of one request: speedup, acceptance, utilisation, trace")
    add_sim_args(p, grid=False)
    p.add_argument("--trace", metavar="FILE.jsonl", help="write the run as an lr-trace (JSON Lines)")
    p.add_argument("--chrome", metavar="FILE.json", help="write a Chrome trace / Perfetto JSON of the run")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("sweep", help="simulate every point of a grid, in parallel, into a CSV or Parquet file")
    add_sim_args(p, grid=True)
    p.add_argument("--out", "-o", required=True, metavar="FILE.csv|FILE.parquet", help="table to write (atomically)")
    p.add_argument("--workers", type=positive_int, help="local processes (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on this dask.distributed scheduler instead")
    p.add_argument("--skip-invalid", action="store_true", help="leave out grid points that are invalid or over budget")
    p.add_argument("--distinct-seeds", action="store_true",
                   help="point i gets seed + i (independent points), not one seed for all (common random numbers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def format_sim(r) -> str:
    lo, hi = r.speedup_ci95
    ci = f"95% CI {lo:.3f}-{hi:.3f}, batch means" if lo is not None else "no CI: fewer than 2 cycles"
    th = f"   closed form {r.theory_speedup:.3f}x" if r.theory_speedup is not None else ""
    acc = f"{r.acceptance_rate:.3f}" if r.acceptance_rate is not None else "-"
    cfg = r.config
    return "\n".join([
        f"Lookahead Reasoning simulation ({r.mode}, k1 = {cfg['k1']}, k2 = {cfg['k2']}, W = {cfg['width']}, "
        f"{r.steps} steps, seed {cfg['seed']})",
        f"  speedup              {r.speedup:.3f}x  ({ci}){th}",
        f"  acceptance rate      {acc}  (model P_W = {r.accept_probability:.3f})",
        f"  per cycle            {r.steps_per_cycle:.3f} steps, {r.accepted_per_cycle:.3f} accepted drafts "
        f"({r.cycles} cycles)",
        f"  target utilisation   {r.target_utilisation:.3f}   wasted target work {r.wasted_target_work:.3f}   "
        f"peak positions {r.peak_positions}",
        f"  simulated time       {r.sim_time:.6g}  (baseline {r.baseline_time:.6g}, c1_eff {r.c1_eff:.4g})",
        f"  events               {r.events}  ({r.events_per_second:.3g}/s, {r.wall_seconds:.3f} s wall)",
    ])


def run_simulate(a: argparse.Namespace) -> str:
    from pathlib import Path

    from ..atomic import check_writable
    from ..sim import SimConfig, simulate

    cfg = SimConfig(**sim_settings(a))
    for path in (a.trace, a.chrome):
        if path:
            check_writable(Path(path))
    r = simulate(cfg, trace=a.trace, chrome=a.chrome)
    return json.dumps(r.to_dict(), indent=2) if a.json else format_sim(r)


def run_sweep(a: argparse.Namespace) -> str:
    import time

    from ..sweep import build_configs, check_output, parse_grid, run_configs, write_rows

    scalars, _ = sim_flags()
    fixed = {k: v for k, v in sim_settings(a).items() if k not in {n for _, n, _ in scalars}}
    axes = {name: parse_grid(getattr(a, name), parse) for _, name, parse in scalars
            if getattr(a, name) is not None}
    out = check_output(a.out)
    configs, skipped = build_configs(fixed, axes, a.skip_invalid, a.distinct_seeds)
    t = time.perf_counter()
    rows = run_configs(configs, a.workers, a.scheduler, progress=not a.no_progress)
    write_rows(rows, out)
    note = f" ({skipped} invalid point(s) left out)" if skipped else ""
    return f"wrote {len(rows)} rows to {out} in {time.perf_counter() - t:.1f} s{note}"
