"""Does LR pay on MoE under load?  Closed-loop serving (``lrsim serve --concurrency``) of MoE and dense targets,
and what ``--mode auto`` chooses there (issue 41, item 5).

    python studies/moe_load.py [--requests N] [--replications R] [--workers W] [--out figures]

Targets on H100s, as in ``studies/moe_lr.py`` (whose ``figures/moe_lr.json`` this reads): Qwen3-30B-A3B (one GPU),
Qwen3-235B-A22B (TP 4, FP8) and the dense Qwen3-32B (TP 2), the current ``vllm`` engine, uniform routing (the
bound); the draft Qwen3-1.7B on an H100 of its own, a 13 ms verifier.  Decoding: alpha1 0.6, alpha2 0.6, steps
log-normal with mean 52 tokens (CV 0.5); LR at the (k1, k2) the single-request plan chose for that target at
alpha1 0.6 (``figures/moe_lr.json``), sd at the same k2.  Workload: prompts of 256 tokens, outputs log-normal with
mean 1,024 (CV 0.5); N clients each send their next request when the previous one finished (N = 1 ... 64; 640
requests per replication, the first and last quarter dropped, so that the window starts after one mean sojourn at
every N), vLLM's scheduler defaults (128 sequences, 2,048 batched tokens; an LR request holds k1 rows).  Modes: ar, sd,
lr-async (with token speculation inside steps) and auto (per request, :mod:`lrsim.serve.auto`).

Metric: the mean time per output token (TPOT) of each mode over ar's at the same N, with 95% intervals over
replications; the crossover N past which a mode no longer beats ar (:mod:`lrsim.serve.crossover`).  Writes
``figures/moe_load.json`` and ``figures/moe_load.html`` / ``.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lrsim  # noqa: E402
from lrsim.atomic import atomic_write  # noqa: E402
from lrsim.dists import Constant, LogNormal  # noqa: E402
from lrsim.errors import InputError, run_command  # noqa: E402

TARGETS = {"qwen3-30b-a3b": "tp1", "qwen3-235b-a22b": "tp4:fp8", "qwen3-32b": "tp2"}
DEVICE = "h100-sxm"
ALPHA1 = 0.6
CONCURRENCY = (1, 4, 16, 64)
MODES = ("ar", "sd", "lr-async", "auto")
COLORS = {"sd": "#f58518", "lr-async": "#e45756", "auto": "#54a24b"}


def planned(arch: str, figures: Path) -> tuple[int, int]:
    """The (k1, k2) the single-request plan chose for ``arch`` on the H100 at alpha1 0.6 (``moe_lr.json``)."""
    path = figures / "moe_lr.json"
    if not path.is_file():
        raise InputError(f"{path}: run `python studies/moe_lr.py` first (this study serves its plans)")
    for row in json.loads(path.read_text())["rows"]:
        if row["target"] == arch and row["device"] == DEVICE and row["routing_overlap"] == 0:
            p = row["plans"][str(ALPHA1)]
            return max(2, p["k1"]), max(2, p["k2"])  # LR needs k1 >= 2 (a plan of ar keeps LR's shallowest)
    raise InputError(f"{path}: no H100 row of {arch}")


def serve(arch: str, par: str, k1: int, k2: int, a: argparse.Namespace) -> lrsim.results.ServeResult:
    hw = lrsim.hardware(f"model:{DEVICE}:{par}:vllm", target_arch=arch, draft_arch="qwen3-1.7b",
                        draft_hardware=f"model:{DEVICE}:tp1:vllm", verifier_latency=0.013)
    return lrsim.simulate_serving(concurrency=list(CONCURRENCY), modes=MODES, hardware=hw, alpha1=ALPHA1,
                                  alpha2=0.6, k1=k1, k2=k2, step_tokens=LogNormal(52, 0.5), requests=a.requests,
                                  replications=a.replications, warmup=0.25, seed=7, prompt_tokens=Constant(256),
                                  output_tokens=LogNormal(1024, 0.5), workers=a.workers, progress=True)


def ratios(rows: list[dict]) -> dict[str, dict[int, float]]:
    """Each mode's mean TPOT over ar's at each N."""
    ar = {r["concurrency"]: r["tpot_mean"] for r in rows if r["mode"] == "ar"}
    return {m: {r["concurrency"]: r["tpot_mean"] / ar[r["concurrency"]] for r in rows if r["mode"] == m}
            for m in MODES if m != "ar"}


def figure(results: list[dict], out: Path) -> list[Path]:
    from plotly.subplots import make_subplots

    from lrsim.plots import save_figure

    fig = make_subplots(rows=1, cols=len(results), shared_yaxes=True,
                        subplot_titles=[f"{r['target']} ({r['parallel']})" for r in results])
    for col, r in enumerate(results, 1):
        ar = {x["concurrency"]: x["tpot_mean"] for x in r["rows"] if x["mode"] == "ar"}
        for m in MODES[1:]:
            pts = sorted((x for x in r["rows"] if x["mode"] == m), key=lambda x: x["concurrency"])
            n = [x["concurrency"] for x in pts]
            fig.add_scatter(x=n, y=[ar[c] / x["tpot_mean"] for c, x in zip(n, pts)], mode="lines+markers", name=m,
                            legendgroup=m, showlegend=col == 1, line={"color": COLORS[m]}, row=1, col=col)
        fig.add_hline(y=1.0, line={"dash": "dot", "color": "grey"}, row=1, col=col)
        fig.update_xaxes(type="log", title_text="concurrent requests N", row=1, col=col)
    fig.update_yaxes(title_text="TPOT speedup over ar", row=1, col=1)
    fig.update_layout(title="LR under load on H100s: MoE (Qwen3-30B-A3B, Qwen3-235B-A22B) against dense (Qwen3-32B)",
                      template="plotly_white", legend={"orientation": "h", "y": -0.25})
    return save_figure(fig, out / "moe_load")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=640, help="requests per replication (default 640)")
    ap.add_argument("--replications", type=int, default=2, help="independent replications (default 2)")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: every core)")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")

    def command() -> str:
        a = ap.parse_args(argv)
        t0, results = time.perf_counter(), []
        lines = ["| target | (k1, k2) | mode | " + " | ".join(f"N = {n}" for n in CONCURRENCY) + " | crossover N |",
                 "|---|---|---|" + "---|" * len(CONCURRENCY) + "---|"]
        for arch, par in TARGETS.items():
            k1, k2 = planned(arch, a.out)
            r = serve(arch, par, k1, k2, a)
            rows = r.table.to_dicts()
            auto = [x for x in rows if x["mode"] == "auto"]
            results.append({"target": arch, "parallel": par, "k1": k1, "k2": k2, "rows": rows,
                            "crossovers": r.crossovers, "tpot_over_ar": ratios(rows)})
            for m, per in ratios(rows).items():
                cross = next(c for c in r.crossovers if c["mode"] == m and c["metric"] == "tpot_mean")
                where = (f"{cross['crossover_rate']:.0f}" if cross["crossover_rate"] is not None else
                         f"none ({cross['where']} 1-{CONCURRENCY[-1]})")
                lines.append(f"| {arch} ({par}) | ({k1}, {k2}) | {m} | "
                             + " | ".join(f"{1 / per[n]:.2f}x" for n in CONCURRENCY) + f" | {where} |")
            lines.append("| | | auto ran lr-async for | " + " | ".join(
                f"{x['lr_share']:.0%}" for x in sorted(auto, key=lambda x: x["concurrency"]))
                + " | |")
        cmd = "python studies/moe_load.py " + " ".join(argv if argv is not None else sys.argv[1:])
        atomic_write(a.out / "moe_load.json", json.dumps({"command": cmd.strip(), "results": results},
                                                          indent=1) + "\n")
        paths = figure(results, a.out)
        return "\n".join(lines + [f"({time.perf_counter() - t0:.0f} s; wrote {a.out / 'moe_load.json'}, "
                                  f"{', '.join(str(p) for p in paths)})"])

    return run_command("moe_load", command)


if __name__ == "__main__":
    sys.exit(main())
