"""Trace replay validation: calibrate on recorded lrref runs, predict held-out configurations.

``python studies/replay_validation.py [--data studies/data/validation] [--bootstrap 20]``

The data are three benchmark runs of the reference decoder on the default CPU pair
(Qwen2.5-Coder 0.5B draft, 1.5B target, all-mpnet-base-v2 verifier), 10 bundled
problems each, every mode of a run side by side on the same problems
(``studies/record_validation.sh``; see ``studies/data/validation/README.md``):

- ``g2/``: ar, sd, lr-async, lr-async+sd at depth gamma = 2;
- ``g2s/``: ar, lr-sync at gamma = 2;
- ``g3/``: ar, lr-sync, lr-async, lr-sync+sd at gamma = 3.

Two protocols.  *Fixed split*: calibrate on the fit set (g2 ar, sd, lr-async;
g2s ar, lr-sync), predict every LR/SD configuration (the fit ones are in-sample
checks, the rest held out: other depths, n-gram inside LR steps, sync + n-gram).
*Leave one out*: predict each configuration from every other trace (its own
left out).  Predictions are :func:`lrsim.replay.predict`.  Measured speedup =
tokens/s of the configuration over tokens/s of ``ar`` in the same run; its 95%
interval is a paired bootstrap over the problems.  The pure closed form is the
paper's ``h(k1, k2)`` with the calibrated alpha1, c1, alpha2.
Writes ``figures/replay_validation.{html,png}`` and ``figures/replay_validation.json``,
and prints the table as Markdown.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from lrsim.atomic import atomic_write
from lrsim.plots import save_figure
from lrsim.replay import predict
from lrsim.trace import Trace, read_trace, recorded_setting

ROOT = Path(__file__).resolve().parents[1]
FIT = {("g2", "ar"), ("g2", "sd"), ("g2", "lr-async"), ("g2s", "ar"), ("g2s", "lr-sync")}


def load_runs(data: Path) -> dict[str, dict[str, Trace]]:
    """{run folder: {mode as recorded: trace}}."""
    runs = {}
    for folder in sorted(p for p in data.iterdir() if p.is_dir()):
        traces = [read_trace(p) for p in sorted(folder.glob("trace-*.jsonl*"))]
        if traces:
            runs[folder.name] = {label(t): t for t in traces}
    if not runs:
        raise SystemExit(f"replay_validation: no trace-*.jsonl[.gz] under {data}")
    return runs


def label(t: Trace) -> str:
    """The mode as the user asked for it ('sd', 'lr-async+sd', ...); the header's mode is the base mode."""
    mode = str((t.header.config or {}).get("mode") or t.header.mode)
    return {"lr+sd": "lr-async+sd"}.get(mode, mode)


def per_request(trace: Trace) -> dict[int, tuple[int, float]]:
    """request -> (output tokens, wall seconds)."""
    return {r.request: (r.output_tokens, r.end - r.start) for r in trace.requests if r.end > r.start}


def measured(trace: Trace, ar: Trace, rng: np.random.Generator, reps: int = 2000) -> tuple[float, float, float]:
    """Speedup of ``trace`` over ``ar`` (tokens/s ratio) and a paired bootstrap 95% CI over shared requests."""
    a, b = per_request(trace), per_request(ar)
    ids = sorted(set(a) & set(b))
    x = np.array([a[i] for i in ids], dtype=float)  # (tokens, seconds) of the configuration
    y = np.array([b[i] for i in ids], dtype=float)  # the same problems under ar

    def ratio(idx: np.ndarray) -> np.ndarray:
        # (sum tokens / sum seconds) / (sum tokens_ar / sum seconds_ar), per resample
        return (x[idx, 0].sum(-1) / x[idx, 1].sum(-1)) / (y[idx, 0].sum(-1) / y[idx, 1].sum(-1))

    point = float(ratio(np.arange(len(ids))[None, :])[0])
    boot = ratio(rng.integers(0, len(ids), (reps, len(ids))))
    return point, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def rows_for(runs: dict[str, dict[str, Trace]], steps: int, bootstrap: int) -> list[dict]:
    every = [(r, m, t) for r, traces in runs.items() for m, t in traces.items()]
    fit = [t for r, m, t in every if (r, m) in FIT]
    if not fit:
        raise SystemExit("replay_validation: the fit set (g2 ar, sd, lr-async; g2s ar, lr-sync) is missing")
    rng = np.random.default_rng(0)
    rows = []
    for run, mode, t in every:
        ar = runs[run].get("ar")
        if mode == "ar" or ar is None:
            continue
        setting = recorded_setting(t.header)
        m, lo, hi = measured(t, ar, rng)
        base = {"run": run, "mode": mode, "gamma": t.header.config.get("gamma"), "sim_mode": setting.mode,
                "k1": setting.k1, "k2": setting.k2, "measured": m, "measured_ci95": [lo, hi]}
        others = [o for r2, m2, o in every if (r2, m2) != (run, mode)]
        for protocol, traces, role in (("fixed", fit, "fit" if (run, mode) in FIT else "held-out"),
                                       ("leave-one-out", others, "held-out")):
            p = predict(traces, setting, steps=steps, seed=1, bootstrap=bootstrap)
            rows.append(base | {
                "protocol": protocol, "role": role, "predicted": p.speedup,
                "predicted_ci95": list(p.speedup_ci95) if p.speedup_ci95 else None,
                "error": p.speedup / m - 1, "closed_form": p.closed_form,
                "closed_form_error": None if p.closed_form is None else p.closed_form / m - 1,
            })
            print(f"{protocol:13s} {run:3s} {mode:12s} measured {m:.3f} predicted {p.speedup:.3f} "
                  f"({rows[-1]['error']:+.1%})", flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| protocol | run | mode | sim (k1, k2) | role | measured [95% CI] | predicted [95% CI] | error "
           "| closed form | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pc = r["predicted_ci95"]
        pci = f" [{pc[0]:.2f}, {pc[1]:.2f}]" if pc else ""
        cf = "-" if r["closed_form"] is None else f"{r['closed_form']:.3f}"
        cfe = "-" if r["closed_form_error"] is None else f"{r['closed_form_error']:+.1%}"
        out.append(f"| {r['protocol']} | {r['run']} | {r['mode']} | {r['sim_mode']} ({r['k1']}, {r['k2']}) | "
                   f"{r['role']} | {r['measured']:.3f} [{r['measured_ci95'][0]:.2f}, {r['measured_ci95'][1]:.2f}] | "
                   f"{r['predicted']:.3f}{pci} | {r['error']:+.1%} | {cf} | {cfe} |")
    out.append("")
    for protocol in ("fixed", "leave-one-out"):
        for role in ("fit", "held-out"):
            sel = [r for r in rows if r["protocol"] == protocol and r["role"] == role]
            if not sel:
                continue
            e = [abs(r["error"]) for r in sel]
            c = [abs(r["closed_form_error"]) for r in sel if r["closed_form_error"] is not None]
            within = sum(r["measured_ci95"][0] <= r["predicted"] <= r["measured_ci95"][1] for r in sel)
            out.append(f"- {protocol}, {role} ({len(sel)}): replay mean |error| {np.mean(e):.1%}, max "
                       f"{np.max(e):.1%}, {sum(x <= 0.05 for x in e)} within 5%, {within} inside the measured "
                       f"95% CI; closed form mean |error| {np.mean(c):.1%}, max {np.max(c):.1%}")
    return "\n".join(out)


def figure(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    lo = min(min(r["measured_ci95"][0], r["predicted"]) for r in rows) * 0.9
    hi = max(max(r["measured_ci95"][1], r["predicted"], r["closed_form"] or 0) for r in rows) * 1.05
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"color": "grey", "dash": "dot"},
                             name="predicted = measured"))
    for (protocol, role), symbol in ((("fixed", "fit"), "circle-open"), (("fixed", "held-out"), "circle"),
                                     (("leave-one-out", "held-out"), "diamond")):
        sel = [r for r in rows if r["role"] == role and r["protocol"] == protocol]
        if not sel:
            continue
        x = np.array([r["measured"] for r in sel])
        y = np.array([r["predicted"] for r in sel])
        xci = np.array([r["measured_ci95"] for r in sel])
        yci = np.array([r["predicted_ci95"] or [r["predicted"]] * 2 for r in sel])
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers+text", marker={"symbol": symbol, "size": 10},
            name=f"replay, {protocol} ({role})",
            text=[f"{r['run']} {r['mode']}" if protocol == "fixed" else "" for r in sel], textposition="top center",
            error_x={"type": "data", "symmetric": False, "array": xci[:, 1] - x, "arrayminus": x - xci[:, 0]},
            error_y={"type": "data", "symmetric": False, "array": yci[:, 1] - y, "arrayminus": y - yci[:, 0]}))
        cf = [(r["measured"], r["closed_form"]) for r in sel if r["closed_form"] is not None]
        if cf and protocol == "fixed":
            fig.add_trace(go.Scatter(x=[a for a, _ in cf], y=[b for _, b in cf], mode="markers",
                                     marker={"symbol": "x", "size": 9}, name=f"paper closed form ({role})"))
    fig.update_layout(title="Trace replay: predicted vs measured speedup over ar (lrref, 2-core CPU)",
                      xaxis_title="measured speedup (95% CI: paired bootstrap over problems)",
                      yaxis_title="predicted speedup", template="plotly_white",
                      legend={"orientation": "h", "y": -0.2}, width=900, height=700)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "studies" / "data" / "validation")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    ap.add_argument("--steps", type=int, default=20_000, help="simulated output steps per prediction")
    ap.add_argument("--bootstrap", type=int, default=20, help="bootstrap replicates per prediction")
    a = ap.parse_args()
    rows = rows_for(load_runs(a.data), a.steps, a.bootstrap)
    table = markdown(rows)
    print(table)
    atomic_write(a.out / "replay_validation.json", json.dumps(rows, indent=2).encode())
    for p in save_figure(figure(rows), a.out / "replay_validation"):
        print(p)


if __name__ == "__main__":
    main()
