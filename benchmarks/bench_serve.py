"""Benchmark `lrsim serve` against its performance target (issue 11), side by side with `lrsim simulate`.

Target: 1,000 requests of 1,000 output tokens each, lr-async, at a load that keeps ~32 requests running,
simulated in under 60 s on 2 cores (one run is one process: the second core is for a sweep's second run).
The rate is found first: a 200-request probe, then ``rate x 32 / running`` (Little's law), then the full run.
Beside it, `lrsim simulate` (one request, async, k1 = 4) on the same machine in the same process: events per
CPU-second of both (a serving event moves a whole batch: dozens of rows, so it costs more than a
single-request event), and output tokens per CPU-second.

Run: python benchmarks/bench_serve.py [--requests N] [--tokens N] [--running N] [--json]
"""

import argparse
import os
import platform
import time
from dataclasses import replace

from report import report

from lrsim.cost.hardware import HardwareSpec
from lrsim.dists import Constant, LogNormal
from lrsim.serve.config import ServeConfig
from lrsim.serve.metrics import run_metrics
from lrsim.serve.run import run_once
from lrsim.sim import SimConfig, simulate

DECODE = SimConfig(k1=4, alpha1=0.55, step_tokens=LogNormal(52, 0.5), verifier_latency=Constant(0.013))
H100 = dict(hardware=HardwareSpec("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b"))


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def bench_serve(requests: int, tokens: int, running: float) -> dict:
    cfg = ServeConfig(decode=DECODE, requests=200, output_tokens=Constant(tokens), prompt_tokens=Constant(256), **H100)
    rate = 1.0
    for _ in range(2):  # two probes: rate x target running / measured running
        rate *= running / run_metrics(run_once(cfg, "lr-async", rate, 0), cfg)["running_mean"]
    cfg = replace(cfg, requests=requests)
    out, wall, cpu = timed(lambda: run_once(cfg, "lr-async", rate, 0))
    m = run_metrics(out, cfg)
    return {"what": f"serve lr-async, {requests} requests x {tokens} tokens, {rate:.3g} req/s (s)",
            "measured": wall, "target": 60.0, "ratio": 60.0 / wall, "cpu_seconds": cpu, "events": out.events,
            "events_per_cpu_s": out.events / cpu, "tokens_per_cpu_s": requests * tokens / cpu,
            "running_mean": m["running_mean"],
            "note": f"{m['running_mean']:.1f} requests running on average, {out.events} events, "
                    f"{out.events / cpu:.3g} events/CPU-s, {requests * tokens / cpu:.3g} output tokens/CPU-s"}


def bench_simulate(steps: int) -> dict:
    cfg = SimConfig(mode="async", k1=4, alpha1=0.55, c1=0.1, step_tokens=LogNormal(52, 0.5), verifier_cost=0.4,
                    steps=steps, engine="des")
    r, wall, cpu = timed(lambda: simulate(cfg))
    return {"what": f"simulate async k1=4, one request, {steps} steps (events/CPU-s)", "measured": r.events / cpu,
            "target": 2e5, "ratio": r.events / cpu / 2e5, "cpu_seconds": cpu,
            "note": f"{r.events} events, {r.output_tokens / cpu:.3g} output tokens/CPU-s, {wall:.2f} s wall"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--running", type=float, default=32.0, help="requests running on average (sets the rate)")
    ap.add_argument("--steps", type=int, default=50_000, help="simulate: output steps")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load0 = os.getloadavg()
    rows = [bench_serve(a.requests, a.tokens, a.running), bench_simulate(a.steps)]
    serve = rows[0]
    rows.append({"what": "serve events/CPU-s (beside simulate's above)", "measured": serve["events_per_cpu_s"],
                 "target": rows[1]["measured"], "ratio": serve["events_per_cpu_s"] / rows[1]["measured"],
                 "note": "a serving event advances a whole batch (tens of rows); not a target, a comparison"})
    machine = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
               "loadavg_before": load0, "loadavg_after": os.getloadavg()}
    report(machine, rows, a.json, width=70)


if __name__ == "__main__":
    main()
