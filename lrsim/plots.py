"""Plotly figures shared by the studies, and atomic figure writing.

HTML files load plotly.js from its CDN to stay small; a PNG is written beside
each one when kaleido finds a Chrome/Chromium (Debian: ``apt install chromium``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .atomic import atomic_write
from .planner import best_split, plan
from .theory import forms as theory

__all__ = ["atomic_write", "save_figure", "budget_split_figure", "optimum_map_figure"]


def save_figure(fig: go.Figure, stem: Path, png: bool = True) -> list[Path]:
    """Write ``stem.html`` (and ``stem.png`` if a renderer works); return what was written."""
    stem = Path(stem)
    html = stem.with_suffix(".html")
    atomic_write(html, fig.to_html(include_plotlyjs="cdn", full_html=True).encode())
    written = [html]
    if png:
        try:
            data = fig.to_image(format="png", width=fig.layout.width or 1100, height=fig.layout.height or 550, scale=1)
        except Exception as e:  # kaleido missing or no Chrome: HTML is still there
            print(f"note: no PNG for {stem.name} ({type(e).__name__}: {str(e).splitlines()[0][:120]})",
                  file=sys.stderr)
        else:
            atomic_write(stem.with_suffix(".png"), data)
            written.append(stem.with_suffix(".png"))
    return written


def budget_split_figure(alpha1: float, c1: float, alpha2: float, c2: float, m_max: int = 64) -> go.Figure:
    """Speedup vs total budget M: pure SD, pure LR, even split and the optimal split (blog Figure 1)."""
    ms = np.arange(1, m_max + 1)
    fig = go.Figure()
    fig.add_scatter(x=ms, y=theory.g(alpha2, c2, ms), name="pure token SD (k1 = 1, k2 = M)")
    fig.add_scatter(x=ms, y=theory.f_sync(alpha1, c1, ms), name="pure sync LR (k1 = M, k2 = 1)")
    even = ms[np.sqrt(ms) == np.floor(np.sqrt(ms))]
    r = np.sqrt(even)
    fig.add_scatter(x=even, y=theory.h(alpha1, c1, r, alpha2, c2, r, "sync"), mode="lines+markers",
                    name="even split, sync (k1 = k2 = sqrt M)")
    for mode, dash in (("sync", "dash"), ("async", "dot")):
        best = [plan(alpha1, c1, alpha2, c2, int(m), mode).speedup for m in ms]
        fig.add_scatter(x=ms, y=best, name=f"optimal split, {mode}", line={"dash": dash})
    fig.add_hline(y=float(theory.sd_ceiling(alpha2)), line={"color": "grey", "dash": "dot"},
                  annotation_text="token SD ceiling 1/(1-alpha2)")
    fig.update_layout(
        title=f"Speedup vs parallel budget M (alpha1={alpha1}, c1={c1}, alpha2={alpha2}, c2={c2})",
        xaxis_title="parallel budget M (target positions)", yaxis_title="speedup over autoregressive",
        template="plotly_white",
    )
    return fig


def optimum_map_figure(mode: str, c1: float, c2: float, budget: int, res: int = 61) -> go.Figure:
    """Over (alpha1, alpha2): which configuration is best, and the hybrid margin."""
    a = np.linspace(0.05, 0.95, res)
    A1, A2 = np.meshgrid(a, a, indexing="xy")  # rows: alpha2, columns: alpha1
    s = best_split(A1, c1, A2, c2, budget, mode)
    kind = np.where(s.margin > 1e-12, 2, np.where(s.pure_token >= s.pure_step, 0, 1))
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "best configuration (0 pure token SD, 1 pure LR, 2 hybrid)", "hybrid / best pure - 1"))
    fig.add_heatmap(x=a, y=a, z=kind, zmin=0, zmax=2, colorscale=[[0, "#4c78a8"], [0.5, "#f58518"], [1, "#54a24b"]],
                    showscale=False, row=1, col=1)
    fig.add_heatmap(x=a, y=a, z=np.where(np.isfinite(s.margin), s.margin, np.nan), colorscale="RdBu",
                    zmid=0, colorbar={"x": 1.02}, row=1, col=2)
    if mode == "sync":
        from .theorems import conditions_thm3

        c7, c8 = conditions_thm3(A1, c1, A2, c2, budget)
        cond = c7 & c8
        wrong = cond != (s.margin > 1e-12)
        for col in (1, 2):
            fig.add_contour(x=a, y=a, z=cond.astype(float), showscale=False, contours_coloring="lines",
                            colorscale=[[0, "black"], [1, "black"]], contours={"start": 0.5, "end": 0.5, "size": 1},
                            line={"width": 2}, name="(7)&(8) boundary", showlegend=False, row=1, col=col)
            fig.add_scatter(x=A1[wrong], y=A2[wrong], mode="markers", marker={"symbol": "x", "color": "black", "size": 5},
                            name="Thm 3 'iff' wrong", showlegend=col == 1, row=1, col=col)
    else:
        for col in (1, 2):
            fig.add_shape(type="rect", x0=0.52, x1=0.8, y0=0.52, y1=0.8, line={"color": "black", "width": 2},
                          row=1, col=col)
    fig.update_xaxes(title_text="alpha1 (step acceptance)")
    fig.update_yaxes(title_text="alpha2 (token acceptance)")
    what = ("black line: (7)&(8) boundary, x: Thm 3 'iff' wrong" if mode == "sync"
            else "black box: Theorem 4 region")
    fig.update_layout(title=f"{mode} LR, c1={c1}, c2={c2}, M={budget} ({what})", template="plotly_white",
                      legend={"orientation": "h", "y": -0.18})
    return fig
