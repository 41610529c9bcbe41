"""Serving under load: the request rate above which LR (and token SD) no longer beat target-only decoding.

Three deployments, each served by `lrsim serve` (lrsim.serve) at a range of Poisson request rates, with the
same requests in every mode (common random numbers), intervals over independent replications:

1. The paper's pair shapes on the embedded H100 profile `h100-ctx0-kernel` (kernel sums, what an engine with
   CUDA graphs approaches; context ~0): target qwen2.5-32b (R1-Distill-Qwen-32B's shape, here on ONE H100, the
   paper used TP 2), draft qwen2.5-1.5b (R1-Distill-Qwen-1.5B's shape), its own H100.  Workload: prompts of 256
   tokens, outputs log-normal with mean 1024 and CV 0.5.  Step acceptance alpha1 = 0.55 (SPEC: "step
   acceptance usually > 50%, up to 63%"); steps log-normal, mean 52 tokens (the project's measured mean step,
   MEASUREMENTS.md), CV 0.5 (an assumption; the embedded CPU traces' step times have CV 0.64); the 7B judge's
   0.013 s per step pair (SPEC, the authors' review-thread table) on a verifier that overlaps calls; n-gram
   token speculation with alpha2 = 0.29 and k2 = 5 (the calibration of the embedded lrref traces: 4-token
   prompt lookup), c2 = 0.01 (lookup is nearly free).  LR look-ahead k1 = 4 (the official repository's default
   max_depth 4).  vLLM's scheduler defaults: max_num_seqs 128, max_num_batched_tokens 2048.
2. The same on `h100-context-kernel` (passes over checked KV caches, 1K-16K; 32B points that did not fit 80 GB
   are missing): prompts 128 and outputs 512 tokens, so every context stays at or below the profile's first
   context (1024), where it is priced (the dear side); the 32B target cannot be priced at batch >= 4 beyond 1K.
3. The default CPU pair (Qwen2.5-Coder 0.5B draft, 1.5B target, mpnet verifier) calibrated from the embedded
   lrref traces (`lrsim/data/default/`): acceptance, step lengths, the verifier's latencies, request lengths,
   and the latency profile those traces calibrate (`lrsim calibrate --profile-out`), each mode priced on the
   entry of its own recorded setup (ar, sd on the sync setup's threads; lr-async's target and draft on one
   thread each: issue 20; before it every mode was priced on the lr-async setup's single-thread target).  The
   target's pass cost is fitted at the recorded batches (1-3) and extrapolated linearly beyond (the study's
   loads reach batches of ~10-20: read them as a model).  LR look-ahead k1 = 2 (recorded), n-gram k2 = 5
   (recorded).

The crossover of a mode is the smallest rate at which its mean time per output token (and, second, its median
end-to-end latency) is no longer below ar's, interpolated between swept rates, per replication; mean and
Student-t 95% interval over replications.  Run from the repository root:

    python studies/serve_crossover.py [--requests N] [--replications R] [--workers W] [--quick] [--replot]

It writes figures/serve_crossover.json (every row and crossover, and the command) and the figure.
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from common import FIGURES, finish
from plotly.subplots import make_subplots

from lrsim.atomic import atomic_write
from lrsim.cost.hardware import HardwareSpec
from lrsim.dists import Constant, LogNormal
from lrsim.serve.calibration import decode_from_traces, length_pairs
from lrsim.serve.config import ServeConfig
from lrsim.serve.crossover import crossovers, describe
from lrsim.serve.grid import serve_grid
from lrsim.sim import SimConfig
from lrsim.trace import default_traces, read_trace

NGRAM = dict(alpha2=0.29, c2=0.01)
H100 = SimConfig(alpha1=0.55, step_tokens=LogNormal(52, 0.5), verifier_latency=Constant(0.013), **NGRAM)
COLORS = {"ar": "#4c78a8", "sd": "#f58518", "lr-async": "#e45756", "lr-async+sd": "#54a24b"}


def variants(k1: int, k2: int) -> list[tuple[str, str, dict]]:
    """(label, serve mode, decode overrides): target only, n-gram SD, LR, LR with n-gram inside steps."""
    return [("ar", "ar", {}), ("sd", "sd", {"k2": k2}), ("lr-async", "lr-async", {"k1": k1, "k2": 1}),
            ("lr-async+sd", "lr-async", {"k1": k1, "k2": k2})]


def setups(args: argparse.Namespace) -> list[dict]:
    traces = [read_trace(p) for p in default_traces()]
    cpu, cpu_hw = decode_from_traces(traces, k2=5)  # every mode priced on the setup its traces ran on
    h100 = dict(hardware=HardwareSpec("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b"))
    h100ctx = dict(hardware=HardwareSpec("h100-context-kernel", "qwen2.5-32b", "qwen2.5-1.5b"))
    common = dict(replications=args.replications, warmup=0.25, seed=11)
    return [
        {"name": "H100, qwen2.5-32b / 1.5b, h100-ctx0-kernel",
         "cfg": ServeConfig(decode=H100, requests=args.requests, prompt_tokens=Constant(256),
                            output_tokens=LogNormal(1024, 0.5), **h100, **common),
         "rates": [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0], "k1": 4, "k2": 5},
        {"name": "H100, qwen2.5-32b / 1.5b, h100-context-kernel (contexts <= 1K)",
         "cfg": ServeConfig(decode=H100, requests=args.requests, prompt_tokens=Constant(128),
                            output_tokens=Constant(512), **h100ctx, **common),
         "rates": [0.25, 0.5, 1.0, 2.0, 3.0, 4.0], "k1": 4, "k2": 5},
        {"name": "CPU pair (embedded lrref traces, calibrated)",
         "cfg": ServeConfig(decode=cpu, requests=args.requests, pairs=length_pairs(traces), hardware=cpu_hw,
                            **common),
         "rates": [0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2], "k1": 2, "k2": 5},
    ]


def run_setup(s: dict, args: argparse.Namespace) -> tuple[list[dict], list[dict], list[str]]:
    rows, per_run, labels = [], [], []
    for label, mode, over in variants(s["k1"], s["k2"]):
        cfg = replace(s["cfg"], decode=replace(s["cfg"].decode, **over))
        r, p = serve_grid(cfg, [mode], s["rates"], workers=args.workers, progress=True)
        for x in r + p:
            x["mode"] = label
        rows, per_run, labels = rows + r, per_run + p, labels + [label]
    return rows, per_run, labels


def panel(fig, rows: list[dict], crosses: list[dict], row: int, last: bool) -> None:
    rates = sorted({r["rate"] for r in rows})
    for col, (key, scale) in enumerate((("tpot_mean", 1000.0), ("e2e_p50", 1.0)), 1):
        for label in dict.fromkeys(r["mode"] for r in rows):
            pts = sorted((r for r in rows if r["mode"] == label), key=lambda r: r["rate"])
            y = np.array([r[key] for r in pts]) * scale
            err = {"type": "data", "symmetric": False, "thickness": 1,
                   "array": [(r[f"{key}_hi"] - r[key]) * scale for r in pts],
                   "arrayminus": [(r[key] - r[f"{key}_lo"]) * scale for r in pts]}
            fig.add_scatter(x=[r["rate"] for r in pts], y=y, error_y=err, mode="lines+markers", name=label,
                            legendgroup=label, showlegend=row == 1 and col == 1,
                            line={"color": COLORS[label]}, row=row, col=col)
        ar = sorted((r for r in rows if r["mode"] == "ar"), key=lambda r: r["rate"])
        for c in crosses:  # a cross on ar's curve at the crossover, its 95% interval as an x error bar
            if c["metric"] == key and c["crossover_rate"] is not None:
                x = c["crossover_rate"]
                y = float(np.interp(x, [r["rate"] for r in ar], [r[key] for r in ar])) * scale
                lo, hi = max(c["crossover_lo"] or x, rates[0] / 1.5), min(c["crossover_hi"] or x, rates[-1] * 1.5)
                err = {"type": "data", "symmetric": False, "array": [hi - x], "arrayminus": [x - lo], "thickness": 2}
                fig.add_scatter(x=[x], y=[y], error_x=err, mode="markers", showlegend=False,
                                marker={"symbol": "x", "size": 11, "color": COLORS[c["mode"]]},
                                name=f"{c['mode']} crossover", row=row, col=col)
        fig.update_xaxes(type="log", tickvals=rates, ticktext=[f"{r:g}" for r in rates], row=row, col=col,
                         title_text="request rate (requests/s, Poisson)" if last else None)
        fig.update_yaxes(type="log", row=row, col=col)


def simulate_all(args: argparse.Namespace) -> list[dict]:
    """Every setup served; its rows and crossovers (also printed)."""
    out = []
    for s in setups(args)[:1] if args.quick else setups(args):
        rows, per_run, labels = run_setup(s, args)
        crosses = crossovers(per_run, labels)
        print(f"\n{s['name']}  ({s['cfg'].requests} requests x {s['cfg'].replications} replications per point)")
        for r in rows:
            print(f"  {r['mode']:>12s} rate {r['rate']:>6.3g}: TPOT {1000 * r['tpot_mean']:8.2f} ms  e2e p50 "
                  f"{r['e2e_p50']:8.2f} s  running {r['running_mean']:6.1f}  waste {r['wasted_target_tokens']:.2f}"
                  f"  steady {r['warmup_covers_sojourn']:.2f}")
        for c in crosses:
            print("  " + describe(c, s["rates"]))
        out.append({"name": s["name"], "rows": rows, "crossovers": crosses})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIGURES)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--replications", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="the first setup only, 2 replications of 120 requests")
    ap.add_argument("--replot", action="store_true", help="redraw the figure from OUT/serve_crossover.json")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.replications = 120, 2
    data = args.out / "serve_crossover.json"
    t0 = time.perf_counter()
    if args.replot:
        results = json.loads(data.read_text())["setups"]
    else:
        results = simulate_all(args)
        atomic_write(data, json.dumps({"command": "python studies/serve_crossover.py " + " ".join(sys.argv[1:]),
                                       "setups": results}, indent=1, default=float))
        print(f"\n{time.perf_counter() - t0:.0f} s; {data}")
    fig = make_subplots(rows=len(results), cols=2, vertical_spacing=0.1, subplot_titles=[
        t for s in results for t in (f"{s['name']}: mean TPOT (ms)", "median end-to-end latency (s)")])
    for i, s in enumerate(results, 1):
        panel(fig, s["rows"], s["crossovers"], i, i == len(results))
    finish(fig, args, "serve_crossover", "Serving under load: where speculation stops paying<br><sup>x on ar's "
           "curve: a mode's crossover rate (95% interval, clipped to the swept range); bars: 95% intervals over "
           "replications</sup>", height=330 * len(results) + 190, width=1150,
           legend={"orientation": "h", "y": -0.1}, margin={"b": 120})


if __name__ == "__main__":
    main()
