"""``lrsim simulate`` (one run of the event simulator) and ``lrsim sweep`` (a grid of them)."""

from __future__ import annotations

import argparse
import json

from ..format import format_sim
from . import HELP
from .common import add_sim_args, positive_int, sim_flags, sim_settings


def add_parsers(sub) -> None:
    p = sub.add_parser("simulate", help=HELP["simulate"])
    add_sim_args(p, grid=False, auto=True)
    p.add_argument("--trace", metavar="FILE.jsonl", help="write the run as an lr-trace (JSON Lines)")
    p.add_argument("--chrome", metavar="FILE.json", help="write a Chrome trace / Perfetto JSON of the run")
    p.add_argument("--json", action="store_true", help="print JSON")
    g = p.add_argument_group("--mode auto (lrsim.adaptive: the policy chooses mode, k1 and k2 every few steps; "
                             "--alpha1/--alpha2 are its prior)")
    g.add_argument("--phases", metavar="STEPS:ALPHA1[:ALPHA2],...",
                   help="the request's true acceptance, changing mid-request, e.g. 30:0.8,30:0.3 (default: --steps "
                        "at --alpha1)")
    g.add_argument("--max-gamma", type=positive_int, default=8, help="deepest LR configuration (default 8)")
    g.add_argument("--k2-options", default="1,4", metavar="K2,...", help="token SD widths to choose among (default 1,4)")
    g.add_argument("--segment-steps", type=positive_int, default=4, help="output steps per decision (default 4)")
    g.add_argument("--dwell", type=positive_int, default=4, help="decisions a choice is kept (default 4)")
    g.add_argument("--switch-margin", type=float, default=1 / 16,
                   help="gain a new choice needs under the same draw, in [0, 1) (default 1/16: a switch drops the "
                        "drafts in flight, about one step in dwell x segment-steps)")
    g.add_argument("--prior-weight", type=float, default=4.0, help="observations the prior is worth (default 4)")
    g.add_argument("--memory", type=float, default=32.0,
                   help="verdicts the acceptance estimate weighs at most, older ones fading (default 32)")

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
    from ..adaptive_sim import parse_phases, simulate_auto
    from ..errors import InputError
    from ..sim import SimConfig

    given = [f for f, k in (("--k1", "k1"), ("--k2", "k2")) if k in settings] + [
        f for f, v in (("--trace", a.trace), ("--chrome", a.chrome)) if v]
    if given:
        raise InputError(f"--mode auto chooses k1 and k2 and writes no trace: drop {', '.join(given)}")
    try:
        k2s = sorted({int(k) for k in a.k2_options.split(",")})
    except ValueError:
        raise InputError(f"--k2-options {a.k2_options!r}: expected integers, e.g. 1,4") from None
    if not k2s or k2s[0] < 1:
        raise InputError(f"--k2-options {a.k2_options!r}: widths >= 1")
    if a.prior_weight <= 0:
        raise InputError(f"--prior-weight must be > 0, got {a.prior_weight}")
    base = SimConfig(**(settings | {"mode": "async"}))
    phases = parse_phases(a.phases, base.alpha2) if a.phases else parse_phases(f"{base.steps}:{base.alpha1}",
                                                                               base.alpha2)
    r = simulate_auto(base, phases, max_gamma=a.max_gamma, k2s=k2s, dwell=a.dwell, switch_margin=a.switch_margin,
                      segment_steps=a.segment_steps, prior_weight=a.prior_weight, memory=a.memory,
                      seed=base.seed)
    return json.dumps(r.to_dict(), indent=2) if a.json else r.format()


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
