"""How ``lrsim serve`` shows its results: a text table, JSON rows, and a plotly figure against the rate."""

from __future__ import annotations

import json
import math
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..dists import Constant
from .arrivals import file_rate
from .crossover import describe

PANELS = (("tpot_mean", "mean time per output token (ms)", 1000.0), ("e2e_p50", "median end-to-end latency (s)", 1.0),
          ("goodput", "goodput (requests/s meeting the SLO)", 1.0))
COLORS = {"ar": "#4c78a8", "sd": "#f58518", "lr-sync": "#54a24b", "lr-async": "#e45756", "auto": "#b279a2"}


def serve_title(cfg, key: str) -> str:
    """The title of a serving table (``lrsim serve``, :func:`lrsim.simulate_serving`): the decoding, the latency
    model, the arrivals (``key``: 'rate' or 'concurrency'), the requests."""
    d = cfg.decode
    hw = cfg.hardware
    lat = f"profile {hw.name} ({hw.target_arch}/{hw.draft_arch or 'c1'})" if hw else "latency model"
    src = f"arrivals file (mean rate {file_rate(cfg) or 0:.3g}/s)" if cfg.trace_arrivals else f"{cfg.arrival} arrivals"
    src = "closed loop (N concurrent clients)" if key == "concurrency" else src
    out = "traces" if cfg.pairs else (f"{cfg.output_tokens.mean:g}" if isinstance(cfg.output_tokens, Constant)
                                      else f"mean {cfg.output_tokens.mean:g}")
    return (f"LR serving: alpha1={d.alpha1:g}, c1={d.c1:g}, k1={d.k1}, alpha2={d.alpha2:g}, k2={d.k2}, {lat}, {src}, "
            f"{cfg.requests} requests x {cfg.replications} replications, output tokens {out}")


def _ci(row: dict, key: str, scale: float = 1.0, fmt: str = ".3g") -> str:
    v, lo, hi = row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    s = f"{v * scale:{fmt}}"
    return s + (f" [{lo * scale:{fmt}}, {hi * scale:{fmt}}]" if lo is not None and hi is not None else "")


def load(row: dict) -> float | None:
    """The row's load level: its concurrency in a closed loop, else its request rate (None: a file's own times)."""
    return row["concurrency"] if row.get("concurrency") is not None else row["rate"]


def _load_text(row: dict) -> str:
    if row.get("concurrency") is not None:
        return f"N={row['concurrency']}"
    return f"{row['rate']:.3g}" if row["rate"] is not None else "file"


def format_rows(rows: Sequence[dict], crosses: Sequence[dict], title: str) -> str:
    """A table (one line per mode and rate, 95% intervals over replications) and the crossover lines."""
    lines = [title, f"{'mode':>8s} {'k1':>3s} {'k2':>3s} {'load':>7s}  {'TPOT ms':>22s}  {'TTFT s':>20s}  "
                    f"{'e2e p50 s':>20s}  {'e2e p99 s':>9s}  {'tok/s':>8s}  {'goodput':>8s}  {'batch':>6s}  {'waste':>5s}"]
    for r in rows:
        rate = _load_text(r)
        good = f"{r['goodput']:.3g}" if r.get("goodput") is not None else "-"
        lines.append(f"{r['mode']:>8s} {r['k1']:>3d} {r['k2']:>3d} {rate:>7s}  {_ci(r, 'tpot_mean', 1000.0):>22s}  "
                     f"{_ci(r, 'ttft_mean'):>20s}  {_ci(r, 'e2e_p50'):>20s}  {r['e2e_p99']:>9.3g}  "
                     f"{r['throughput']:>8.4g}  {good:>8s}  {r['running_mean']:>6.1f}  "
                     f"{r['wasted_target_tokens']:>5.2f}")
    auto = [r for r in rows if r["mode"] == "auto"]
    if auto:
        lines.append("auto: requests that ran lr-async (the rest ar), mean depth k1: " + ", ".join(
            f"{_load_text(r)} {100 * r['lr_share']:.0f}% k1 {r['k1_mean']:.2f}" for r in auto))
    short = sorted({f"{r['mode']}@{_load_text(r)}" for r in rows
                    if load(r) is not None and (r.get("warmup_covers_sojourn") or 0) < 1})
    if short:
        lines.append(f"note: the warm-up is shorter than one mean sojourn in {', '.join(short)}: "
                     "raise --requests or --warmup for steady-state numbers")
    rates = sorted({load(r) for r in rows if load(r) is not None})
    if crosses and len(rates) > 1:
        lines += ["", "Crossover (the speculative mode's metric is no longer below ar's; per-replication, paired):"]
        lines += ["  " + describe(c, rates) for c in crosses]
    return "\n".join(lines)


def json_rows(rows: Sequence[dict], crosses: Sequence[dict]) -> str:
    """The rows as JSON; each speculative mode's rows carry its crossover rates (``crossover_<metric>``)."""
    out = []
    for r in rows:
        extra = {f"crossover_{c['metric']}": c["crossover_rate"] for c in crosses if c["mode"] == r["mode"]}
        out.append(r | extra)
    return json.dumps(out, indent=1, default=_plain)


def _plain(v):
    return float(v) if hasattr(v, "__float__") else str(v)


def figure(rows: Sequence[dict], crosses: Sequence[dict], title: str) -> go.Figure:
    """Latency and goodput (or throughput without an SLO) against the rate, one line per mode; crossovers marked."""
    good = any(r.get("goodput") is not None for r in rows)
    panels = [p if p[0] != "goodput" or good else ("throughput", "output throughput (tokens/s)", 1.0) for p in PANELS]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[p[1] for p in panels])
    for col, (key, _, scale) in enumerate(panels, 1):
        for mode in dict.fromkeys(r["mode"] for r in rows):
            pts = sorted((r for r in rows if r["mode"] == mode and load(r) is not None), key=load)
            y = [r[key] * scale for r in pts]
            err = _error(pts, key, scale)
            fig.add_scatter(x=[load(r) for r in pts], y=y, error_y=err, mode="lines+markers", name=mode,
                            legendgroup=mode, showlegend=col == 1, line={"color": COLORS.get(mode)}, row=1, col=col)
    for c in crosses:
        if c["crossover_rate"] is not None and c["metric"] == "tpot_mean":
            fig.add_vline(x=c["crossover_rate"], line={"dash": "dot", "color": COLORS.get(c["mode"])}, row=1, col=1)
    closed = any(r.get("concurrency") is not None for r in rows)
    fig.update_xaxes(title_text="concurrent requests (closed loop)" if closed else "request rate (requests/s)")
    fig.update_layout(title=title, template="plotly_white", legend={"orientation": "h", "y": -0.2})
    return fig


def _error(pts: list[dict], key: str, scale: float) -> dict | None:
    if not pts or pts[0].get(f"{key}_lo") is None:
        return None
    return {"type": "data", "symmetric": False, "thickness": 1,
            "array": [(r[f"{key}_hi"] - r[key]) * scale if r.get(f"{key}_hi") is not None else 0 for r in pts],
            "arrayminus": [(r[key] - r[f"{key}_lo"]) * scale if r.get(f"{key}_lo") is not None else 0 for r in pts]}
