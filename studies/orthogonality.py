"""Figure: LR and token SD are orthogonal (paper Figure 3): each alone saturates, together they go further.

(a) speedup vs draft steps gamma1 (async depth k1 = gamma1 + 1): LR alone and LR + n-gram SD (gamma2 = 4).
(b) speedup vs speculative tokens gamma2 (k2 = gamma2 + 1): SD alone and SD + LR (gamma1 = 6, the paper's).
Illustrative parameters chosen so the single methods land near the paper's AIME numbers (not a fit):
alpha1 = 0.5, c1 = 0.2, verifier 0.1 T, alpha2 = 0.4, c2 = 0.01 (n-gram), log-normal 52-token steps (CV 0.5),
geometric token acceptance per pass, iteration-level joins.  Dotted: closed forms h = f_async g.

Run: python studies/orthogonality.py [--out figures] [--steps N]
"""

import numpy as np
from common import column, error_bars, finish, grid, parse_args
from plotly.subplots import make_subplots

from lrsim import theory
from lrsim.dists import LogNormal

GAMMA = list(range(0, 9))
P = dict(alpha1=0.5, c1=0.2, alpha2=0.4, c2=0.01)
BASE = dict(mode="async", verifier_cost=0.1, step_tokens=LogNormal(52, 0.5)) | P
PANELS = [  # (title, varied field, fixed settings per curve)
    ("(a) vs draft steps gamma1", "k1", {"LR alone": dict(k2=1), "LR + SD (gamma2 = 4)": dict(k2=5)}),
    ("(b) vs speculative tokens gamma2", "k2", {"SD alone": dict(k1=1), "SD + LR (gamma1 = 6)": dict(k1=7)}),
]
COLORS = ["#4c78a8", "#e45756"]


def main() -> None:
    args = parse_args(__doc__, steps=20_000)
    fig = make_subplots(rows=1, cols=2, subplot_titles=[p[0] for p in PANELS])
    x = np.array(GAMMA)
    for col, (_, field, curves) in enumerate(PANELS, 1):
        for (name, fixed), color in zip(curves.items(), COLORS):
            rows = grid(args, BASE | fixed, {field: [g + 1 for g in GAMMA]})
            y = column(rows, "speedup")
            k1 = x + 1 if field == "k1" else np.full_like(x, fixed["k1"])
            k2 = x + 1 if field == "k2" else np.full_like(x, fixed["k2"])
            exact = theory.h(P["alpha1"], P["c1"], k1, P["alpha2"], P["c2"], k2, "async")
            print(f"  {name:24s} gamma = 0..8: " + " ".join(f"{v:.2f}" for v in y)
                  + f"   (max {y.max():.2f}; closed form max {exact.max():.2f})")
            fig.add_scatter(x=x, y=y, error_y=error_bars(rows), mode="lines+markers", name=name,
                            line={"color": color}, row=1, col=col)
            fig.add_scatter(x=x, y=exact, mode="lines", line={"color": color, "dash": "dot"},
                            name=f"{name}, closed form", showlegend=False, row=1, col=col)
    fig.update_xaxes(title_text="draft steps gamma1", col=1)
    fig.update_xaxes(title_text="speculative tokens gamma2", col=2)
    fig.update_yaxes(title_text="speedup over autoregressive", col=1)
    finish(fig, args, "orthogonality",
           "Orthogonality of LR and token SD (async LR, event-simulated; dotted: closed forms)")


if __name__ == "__main__":
    main()
