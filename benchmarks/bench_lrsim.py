"""Benchmark lrsim's analytical core against its performance targets (issue 2).

Measures, side by side in one run:
- ``plan`` exact optimum at M = 256 (target < 50 ms per call),
- the Theorem 4 scan of ~1e6 parameter points (target < 10 s),
- Monte Carlo throughput (target >= 1e7 stages per second).
Each row reports the measurement and the ratio target/measured (> 1 means the target is met).

Run: python benchmarks/bench_lrsim.py [--json]
"""

import argparse
import os
import platform
import time

from report import report

from lrsim.montecarlo import simulate_async, simulate_sync
from lrsim.planner import plan
from lrsim.theorems import thm4_scan


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for mode in ("sync", "async"):
        t, _ = best_of(lambda: plan(0.7, 0.01, 0.6, 0.02, 256, mode), 20)
        rows.append({"what": f"plan M=256 {mode} (s/call)", "measured": t, "target": 0.050, "ratio": 0.050 / t})
    t, scan = best_of(lambda: thm4_scan(resolution=14, m_max=64), 1)
    n = scan["margin"].size
    rows.append({"what": f"Theorem 4 scan, {n} points (s)", "measured": t, "target": 10.0 * n / 1e6,
                 "ratio": 10.0 * n / 1e6 / t})
    stages = 10_000_000
    for name, fn in (("sync", simulate_sync), ("async", simulate_async)):
        t, _ = best_of(lambda: fn(0.7, 0.2, 4, stages, 0), 3)
        rate = stages / t
        rows.append({"what": f"Monte Carlo {name} (stages/s)", "measured": rate, "target": 1e7, "ratio": rate / 1e7})
    machine = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    report(machine, rows, args.json)


if __name__ == "__main__":
    main()
