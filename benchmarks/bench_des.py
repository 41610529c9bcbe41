"""Benchmark the event simulator against its performance targets (issue 3).

Measures, side by side in one run:
- events per second of one simulation (target >= 2e5 SimPy events/s), per scheduling mode, on the
  fixed-rate server (constant latency) and the general server (batch-dependent latency); output steps
  per second beside them, since events differ in how much they do;
- a sweep of ``--points`` grid points (default 10,000) with ``--steps`` output steps each (default 1e4)
  on all cores with the progress bar (target: "minutes", taken as <= 600 s).
Each row reports the measurement and the ratio to the target (> 1 means the target is met).  The load
average before and after is printed: other processes on the machine slow every number here.

Run: python benchmarks/bench_des.py [--points N] [--steps N] [--workers N] [--json]
"""

import argparse
import itertools
import os
import platform
import resource
import time

from report import report

from lrsim.cost.passcost import curve
from lrsim.dists import LogNormal
from lrsim.sim import SimConfig, simulate
from lrsim.sweep import run_configs

CPU_CURVE = curve((1, 2, 4, 8), (0.174, 0.159, 0.166, 0.199))  # MEASUREMENTS.md, target decode step (s)

CASES = {
    "sync, k1=4": dict(mode="sync", alpha1=0.7, c1=0.2, k1=4),
    "async, k1=4": dict(mode="async", alpha1=0.7, c1=0.2, k1=4),
    "async, k1=4, CPU T(b) curve (general server)": dict(mode="async", alpha1=0.7, c1=0.2, k1=4,
                                                         target_latency=CPU_CURVE),
    "sync, k1=4, token SD k2=4": dict(mode="sync", alpha1=0.7, c1=0.2, k1=4, k2=4),
    "async, lognormal steps, verifier 0.05 T": dict(mode="async", alpha1=0.7, c1=0.2, k1=4,
                                                    step_tokens=LogNormal(52, 0.5), verifier_cost=0.05),
    "ar (target only)": dict(mode="ar"),
}


def sweep_axes() -> dict:
    """A 10,000-point grid: mode x alpha1 x c1 x k1 x k2."""
    return {"mode": ["sync", "async"], "alpha1": [round(0.5 + 0.05 * i, 2) for i in range(10)],
            "c1": [0.05, 0.1, 0.15, 0.2, 0.3], "k1": list(range(1, 11)), "k2": list(range(1, 11))}


def bench_engine(steps: int) -> list[dict]:
    rows = []
    for name, kw in CASES.items():
        best = None
        for seed in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            r = simulate(SimConfig(steps=steps, seed=seed, engine="des", **kw))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if best is None or r.events / cpu > best["events_per_cpu_s"]:
                best = {"events_per_cpu_s": r.events / cpu, "events_per_wall_s": r.events / wall,
                        "steps_per_cpu_s": r.steps / cpu, "events_per_step": r.events / r.steps}
        note = (f"output steps/CPU-s {best['steps_per_cpu_s']:.3g}, events/wall-s {best['events_per_wall_s']:.3g}, "
                f"{best['events_per_step']:.2f} events/step")
        rows.append({"what": f"DES {name} (events/CPU-s)", "measured": best["events_per_cpu_s"], "target": 2e5,
                     "ratio": best["events_per_cpu_s"] / 2e5, "note": note, **best})
    return rows


def bench_sweep(points: int, steps: int, workers: int | None) -> dict:
    axes = sweep_axes()
    names = list(axes)
    combos = list(itertools.product(*axes.values()))[:points]
    t, cpu0 = time.perf_counter(), _cpu()
    configs = [SimConfig(steps=steps, **dict(zip(names, c))) for c in combos]
    rows = run_configs(configs, workers=workers, progress=True)
    wall, cpu = time.perf_counter() - t, _cpu() - cpu0
    total = sum(r["steps"] for r in rows)
    n = workers or os.cpu_count()
    return {"what": f"sweep {len(rows)} points x {steps} steps, {n} workers (s)",
            "measured": wall, "target": 600.0, "ratio": 600.0 / wall, "cpu_seconds": cpu,
            "note": f"{total / wall:.3g} output steps/s; {cpu:.1f} CPU-s in all, i.e. {cpu / n:.1f} s on {n} idle cores"}


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--engine-steps", type=int, default=50_000, help="output steps per engine measurement")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load0 = os.getloadavg()
    rows = bench_engine(args.engine_steps)
    rows.append(bench_sweep(args.points, args.steps, args.workers))
    machine = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
               "loadavg_before": load0, "loadavg_after": os.getloadavg()}
    report(machine, rows, args.json, width=62)

if __name__ == "__main__":
    main()
