"""``--html FILE``: one self-contained page of what a command's text report says, as pictures.

The page holds plotly.js inline (no network when it is viewed), the text
report, and one figure per finding: the (k1, k2) speedup map with the optimum
marked, the pure-method lines, the theorem and seed-formula verdicts, the
calibrated step acceptance by lookahead position and the pass-cost curves
(given traces or a latency profile), the predicted speedup, and the serving
latency against load with its crossovers.  Written atomically
(:mod:`lrsim.atomic`): a failed run leaves no half-written page.
"""

from __future__ import annotations

import html
import os
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .atomic import atomic_write
from .errors import InputError
from .modes import LR_MODES

Figure = tuple[str, go.Figure]  #: (caption, figure)
COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
LAYOUT = dict(template="plotly_white", height=480, margin=dict(l=60, r=30, t=60, b=60),
              legend={"orientation": "h", "y": -0.22})


# ----------------------------------------------------------------------------- plans


def closed_plan_figures(p) -> list[Figure]:
    """A closed-form :class:`lrsim.planner.Plan`: h(k1, k2) over the feasible pairs, and speedup against M."""
    from .planner import max_depth
    from .theory import forms as theory

    k1 = np.arange(1, max_depth(p.c1, p.budget, p.mode) + 1)
    k2 = np.arange(1, p.budget + 1)
    K1, K2 = np.meshgrid(k1, k2)  # rows: k2, columns: k1
    z = theory.h(p.alpha1, p.c1, K1, p.alpha2, p.c2, K2, p.mode)
    feasible = theory.parallel_dim(p.c1, K1, p.mode) * K2 <= p.budget
    z = np.where(feasible, z, np.nan)
    keep = feasible.any(axis=1)
    fig = go.Figure(go.Heatmap(x=k1, y=k2[keep], z=z[keep], colorscale="Viridis", colorbar={"title": "speedup"},
                               hovertemplate="k1 %{x}, k2 %{y}: %{z:.3f}x<extra></extra>"))
    _mark(fig, p.k1, p.k2, f"optimum k1 = {p.k1}, k2 = {p.k2}: {p.speedup:.3f}x")
    fig.update_layout(title=f"h(k1, k2) = f(k1) g(k2), {p.mode}, M = {p.budget} (blank: over budget)",
                      xaxis_title="k1 (step level)", yaxis_title="k2 (token level)", **LAYOUT)
    return [("speedup map: every feasible (k1, k2), the optimum starred", fig), _budget_lines(p)]


def _mark(fig: go.Figure, x: float, y: float, name: str, **where) -> None:
    fig.add_scatter(x=[x], y=[y], mode="markers+text", text=["best"], textposition="top center", name=name,
                    marker={"symbol": "star", "size": 18, "color": "#e45756", "line": {"color": "white", "width": 1}},
                    showlegend=True, **where)


def _budget_lines(p) -> Figure:
    from .planner import plan

    ms = np.arange(1, min(512, max(32, 2 * p.budget)) + 1)
    plans = [plan(p.alpha1, p.c1, p.alpha2, p.c2, int(m), p.mode, top=1) for m in ms]
    fig = go.Figure()
    for name, ys in (("best split (hybrid allowed)", [q.speedup for q in plans]),
                     ("pure token SD (k1 = 1)", [q.pure_token.speedup for q in plans]),
                     ("pure LR (k2 = 1)", [q.pure_step.speedup for q in plans])):
        fig.add_scatter(x=ms, y=ys, mode="lines", name=name)
    fig.add_vline(x=p.budget, line={"dash": "dot", "color": "grey"}, annotation_text=f"M = {p.budget}")
    fig.update_layout(title=f"Speedup against the budget M ({p.mode}; alpha1 = {p.alpha1:g}, c1 = {p.c1:g}, "
                            f"alpha2 = {p.alpha2:g}, c2 = {p.c2:g})",
                      xaxis_title="parallel budget M (target positions)", yaxis_title="speedup", **LAYOUT)
    return "pure-method lines: the best of each method at every budget", fig


def simulated_plan_figures(tp) -> list[Figure]:
    """A simulated :class:`lrsim.prediction.TracePlan`: speedup over (k1, k2) per LR mode, and the pure lines."""
    modes = [m for m in LR_MODES if any(r["mode"] == m and r["width"] == 1 for r in tp.ranked)]
    fig = make_subplots(rows=1, cols=max(1, len(modes)), subplot_titles=[f"{m} LR" for m in modes])
    best = tp.best.setting
    for col, mode in enumerate(modes, 1):
        rows = [r for r in tp.ranked if r["mode"] == mode and r["width"] == 1]
        k1s, k2s = sorted({r["k1"] for r in rows}), sorted({r["k2"] for r in rows})
        z = np.full((len(k2s), len(k1s)), np.nan)
        for r in rows:
            z[k2s.index(r["k2"]), k1s.index(r["k1"])] = r["speedup"]
        fig.add_heatmap(x=k1s, y=k2s, z=z, coloraxis="coloraxis", row=1, col=col,
                        hovertemplate="k1 %{x}, k2 %{y}: %{z:.3f}x<extra></extra>")
        if best.mode == mode:
            _mark(fig, best.k1, best.k2, f"best: {mode} k1 = {best.k1}, k2 = {best.k2}: {tp.best.speedup:.3f}x",
                  row=1, col=col)
    fig.update_xaxes(title_text="k1 (step level)", dtick=1)
    fig.update_yaxes(title_text="k2 (token level)", dtick=1)
    fig.update_layout(title=f"Simulated speedup, budget M = {tp.budget} (blank: not simulated)",
                      coloraxis={"colorscale": "Viridis", "colorbar": {"title": "speedup"}}, **LAYOUT)
    return [("speedup map: every simulated (k1, k2) per mode, the best starred", fig), _simulated_lines(tp)]


def _simulated_lines(tp) -> Figure:
    fig = go.Figure()
    lines = (("pure token SD (ar, k1 = 1)", "ar", "k2", lambda r: r["k1"] == 1),
             ("pure sync LR (k2 = 1)", "sync", "k1", lambda r: r["k2"] == 1),
             ("pure async LR (k2 = 1)", "async", "k1", lambda r: r["k2"] == 1))
    for name, mode, axis, keep in lines:
        rows = sorted((r for r in tp.ranked if r["mode"] == mode and r["width"] == 1 and keep(r)), key=lambda r: r[axis])
        if rows:
            fig.add_scatter(x=[r[axis] for r in rows], y=[r["speedup"] for r in rows], mode="lines+markers", name=name)
    fig.add_hline(y=tp.best.speedup, line={"dash": "dot", "color": "#e45756"},
                  annotation_text=f"best overall {tp.best.speedup:.3f}x")
    fig.update_layout(title="Pure methods, simulated: speedup against depth (k1) or positions (k2)",
                      xaxis_title="k (k1 for LR, k2 for token SD)", yaxis_title="speedup", **LAYOUT)
    return "pure-method lines: token SD alone and LR alone on the same workload", fig


# ----------------------------------------------------------------------------- verdicts, predictions


def verdict_figure(theorems: Sequence[Any], seeds: Sequence[Any] = ()) -> Figure:
    """A table of every theorem check and seed-formula comparison, its verdict coloured."""
    rows = [(r.name, r.verdict, f"{r.points_checked:,} points", r.statement) for r in theorems]
    rows += [(f.name, f.verdict, f.source, f"derived {f.derived}") for f in seeds]
    good = ("holds", "proved equal")
    fill = [["#d9f2d9" if v in good else "#f9d6d5" for _, v, _, _ in rows]]
    cols = list(zip(*rows)) if rows else [(), (), (), ()]
    fig = go.Figure(go.Table(header={"values": ["check", "verdict", "checked", "claim / form"], "align": "left",
                                     "fill_color": "#e8e8e8"},
                             cells={"values": cols, "align": "left", "fill_color": [["white"] * len(rows), fill[0],
                                                                                    ["white"] * len(rows),
                                                                                    ["white"] * len(rows)]},
                             columnwidth=[1.2, 0.8, 1.2, 4]))
    fig.update_layout(title="Theorem verdicts (lrsim theorems) and seed formulas (lrsim symbolic)",
                      **(LAYOUT | {"height": 120 + 48 * len(rows)}))
    return "verdicts: green holds, red fails or differs", fig


def prediction_figure(p) -> Figure:
    """A :class:`lrsim.prediction.Prediction`: the simulated speedup with its interval beside the closed form."""
    s = p.setting
    names, ys, err = ["simulated prediction"], [p.speedup], None
    if p.speedup_ci95:
        err = {"type": "data", "symmetric": False, "array": [p.speedup_ci95[1] - p.speedup],
               "arrayminus": [p.speedup - p.speedup_ci95[0]]}
    fig = go.Figure(go.Bar(x=names, y=ys, error_y=err, marker_color=COLORS[0], name="predicted", width=0.4))
    if p.closed_form is not None:
        fig.add_bar(x=["paper closed form h(k1, k2)"], y=[p.closed_form], marker_color=COLORS[1], name="closed form",
                    width=0.4)
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "grey"}, annotation_text="target-only decoding")
    fig.update_layout(title=f"Predicted speedup: {s.mode}, k1 = {s.k1}, k2 = {s.k2}, W = {s.width}",
                      yaxis_title="speedup over target-only decoding", showlegend=False, **LAYOUT)
    return "predicted speedup (95% interval) and the closed form on the same numbers", fig


# ----------------------------------------------------------------------------- measurements


def acceptance_figure(cal) -> Figure:
    """Step acceptance by lookahead position (Wilson 95% intervals) from a :class:`lrsim.prediction.calibrate.Calibration`."""
    props = cal.alpha1_by_position
    x = list(range(1, len(props) + 1))
    fig = go.Figure(go.Bar(x=x, y=[q.p for q in props], marker_color=COLORS[0], name="by position",
                           error_y={"type": "data", "symmetric": False, "array": [q.hi - q.p for q in props],
                                    "arrayminus": [q.p - q.lo for q in props]},
                           customdata=[[q.k, q.n] for q in props],
                           hovertemplate="position %{x}: %{y:.3f} (%{customdata[0]} of %{customdata[1]})<extra></extra>"))
    if cal.alpha1 is not None:
        fig.add_hline(y=cal.alpha1.p, line={"dash": "dot", "color": "#e45756"},
                      annotation_text=f"pooled alpha1 = {cal.alpha1.p:.3f}")
    fig.update_layout(title=f"Calibrated step acceptance by lookahead position ({cal.steps} steps, "
                            f"{len(cal.traces)} traces)", xaxis_title="lookahead position (1 = next step)",
                      yaxis_title="accepted share", yaxis_range=[0, 1.05], xaxis_dtick=1, **LAYOUT)
    return "acceptance by position: does alpha1 depend on how far ahead the draft is?", fig


def pass_cost_figure(profile, archs: Sequence[str] | None = None, what: str = "") -> Figure:
    """One forward pass in ms against batch, positions per row and (if measured) context, per profile entry."""
    names = [n for n in profile.archs if archs is None or any(n == a or n.startswith(a + "@") for a in archs)]
    contexts = any(len(profile.archs[n].context) > 1 for n in names)
    titles = ["vs batch (1 position per row)", "vs positions per row (batch 1)"] + (["vs context (batch 1)"] * contexts)
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles)
    for i, n in enumerate(names):
        a, color = profile.archs[n], COLORS[i % len(COLORS)]
        c0 = a.context[0]
        curves = [[(c0, b, 1) for b in a.batch], [(c0, 1, q) for q in a.positions]]
        if contexts:
            curves.append([(c, 1, 1) for c in a.context])
        for col, points in enumerate(curves, 1):
            xs = [pt[(1, 2, 0)[col - 1]] for pt in points]
            ys = [_ms(a, *pt) for pt in points]
            fig.add_scatter(x=list(xs), y=ys, mode="lines+markers", name=n, legendgroup=n, showlegend=col == 1,
                            line={"color": color}, row=1, col=col)
    fig.update_xaxes(type="log")
    fig.update_yaxes(title_text="ms per forward pass", col=1)
    fig.update_layout(title=f"Pass costs of {what or profile.name} ({profile.timed})", **LAYOUT)
    return "pass-cost curves: what one forward pass costs as the batch, positions and context grow", fig


def _ms(a, context: float, batch: float, positions: float) -> float | None:
    try:
        return a.time_ms(context, batch, positions)
    except InputError:  # a point the profile did not measure: left out, never invented
        return None


def trace_figures(traces: Sequence[Any]) -> list[Figure]:
    """Calibrated acceptance by position and the pass costs the traces calibrate."""
    from .prediction.calibrate import calibrate
    from .prediction.compose import trace_hardware

    cal = calibrate(traces)
    out = [acceptance_figure(cal)] if cal.alpha1_by_position else []
    hw = trace_hardware(traces, cal.alpha2)
    return out + [pass_cost_figure(hw.loaded, what="the traces' calibrated engine")]


def hardware_figures(hw) -> list[Figure]:
    """The pass costs of a :class:`lrsim.cost.hardware.HardwareSpec`'s architectures on its profile."""
    archs = [a for a in (hw.target_arch, hw.draft_arch, hw.judge_arch) if a]
    return [pass_cost_figure(hw.loaded, archs, f"{hw.name}: {', '.join(archs)}")]


def serve_figure(rows: Sequence[dict], crosses: Sequence[dict], title: str) -> Figure:
    """Latency and goodput against the load per mode, crossovers marked (``lrsim serve``'s figure)."""
    from .serve.report import figure

    fig = figure(rows, crosses, title)
    fig.update_layout(height=540, title={"text": title, "font": {"size": 12}})
    return "latency against load: dotted lines mark where a speculative mode stops beating ar", fig


# ----------------------------------------------------------------------------- the page


def render(title: str, text: str, figures: Sequence[Figure]) -> str:
    """The page: plotly.js inline once, the text report, every figure with its caption."""
    from plotly.offline import get_plotlyjs

    parts = []
    for i, (caption, fig) in enumerate(figures):
        div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"figure-{i}",
                          config={"displaylogo": False, "responsive": True})
        parts.append(f'<section class="figure"><h2>{html.escape(caption)}</h2>{div}</section>')
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}"
            "h2{font-size:1.05em;margin-top:2em}pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}"
            f"</style><script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{len(figures)} figures; the text report is at the end.</p>"
            + "".join(parts) + f"<h2>Text report</h2><pre>{html.escape(text)}</pre></body></html>\n")


def write_page(path: str | os.PathLike, title: str, text: str, figures: Sequence[Figure]) -> None:
    """Write the page atomically (check the path first with :func:`lrsim.atomic.check_writable`)."""
    atomic_write(path, render(title, text, figures))


def page_for_results(path: str | os.PathLike, results: Sequence[Any], traces: Sequence[Any] | None, hw: Any,
                     title: str) -> None:
    """The API's page (:func:`lrsim.write_html`): figures for each result, then for the traces and hardware."""
    from .atomic import check_writable
    from .prediction.outcome import TracePlan
    from .results import PlanResult, PredictionResult, ServeResult, TheoremsResult

    check_writable(path)
    figs: list[Figure] = []
    for r in results:
        if isinstance(r, PlanResult):
            figs += simulated_plan_figures(r.raw) if isinstance(r.raw, TracePlan) else closed_plan_figures(r.raw)
        elif isinstance(r, TheoremsResult):
            figs.append(verdict_figure(r.raw))
        elif isinstance(r, PredictionResult):
            figs.append(prediction_figure(r.raw))
        elif isinstance(r, ServeResult):
            figs.append(serve_figure(r.raw, r.crossovers, r.title))
        else:
            raise InputError(f"write_html: cannot draw a {type(r).__name__} (plan, theorems, predict or serving "
                             "results)")
    figs += trace_figures(traces) if traces else []
    figs += hardware_figures(hw) if hw is not None else []
    write_page(path, title, "\n\n".join(str(r) for r in results), figs)
