"""Figure: the async pipeline (event simulator) against Theorem 2's S1/S2 over the look-ahead depth k.

Left: speedup vs k at alpha = 0.7, c = 0.3 (ceil(1/c) = 4, where the closed form switches from S2 to S1).
Right: relative gap simulated / closed form - 1 vs k for the same variants at three (alpha, c) points.
Variants: App. B's assumptions (constant 52-token steps, free verifier, sequences join the target batch
at once); iteration-level joins; log-normal step lengths (CV 0.5); a verifier costing 0.1 T; all three.

Run: python studies/async_gap.py [--out figures] [--steps N]
"""

import numpy as np
from common import column, error_bars, finish, grid, parse_args, z_scores
from plotly.subplots import make_subplots

from lrsim import theory
from lrsim.dists import LogNormal

KS = list(range(1, 11))
POINTS = [(0.7, 0.3), (0.7, 0.2), (0.5, 0.15)]
VARIANTS = {
    "App. B assumptions": dict(join="immediate"),
    "+ iteration-level joins": dict(join="iteration"),
    "+ log-normal step lengths (CV 0.5)": dict(join="immediate", step_tokens=LogNormal(52, 0.5)),
    "+ verifier 0.1 T": dict(join="immediate", verifier_cost=0.1),
    "all three": dict(join="iteration", step_tokens=LogNormal(52, 0.5), verifier_cost=0.1),
}
COLORS = ["#222222", "#4c78a8", "#f58518", "#54a24b", "#b279a2"]


def main() -> None:
    args = parse_args(__doc__, steps=40_000)
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "speedup vs depth k (alpha = 0.7, c = 0.3; ceil(1/c) = 4)",
        "simulated / closed form - 1 (solid: a=.7 c=.3, dash: a=.7 c=.2, dot: a=.5 c=.15)"))
    ks = np.array(KS)
    print("relative gap simulated/closed form - 1 (k = 1..10); max |z| for the assumptions variant")
    for (a, c), dash in zip(POINTS, ("solid", "dash", "dot")):
        exact = theory.f_async(a, c, ks)
        if (a, c) == POINTS[0]:
            fig.add_scatter(x=ks, y=exact, mode="lines+markers", name="closed form f_async (S2 | S1)",
                            line={"color": "grey", "width": 3}, marker={"symbol": "diamond"}, row=1, col=1)
        for (name, kw), color in zip(VARIANTS.items(), COLORS):
            rows = grid(args, {"mode": "async", "alpha1": a, "c1": c} | kw, {"k1": KS})
            y = column(rows, "speedup")
            gap = y / exact - 1
            z = np.abs(z_scores(rows, exact))
            print(f"  alpha={a} c={c} {name:36s} " + " ".join(f"{g:+.3f}" for g in gap)
                  + (f"   max|z| {np.nanmax(z):.2f}" if name == "App. B assumptions" else ""))
            if (a, c) == POINTS[0]:
                fig.add_scatter(x=ks, y=y, error_y=error_bars(rows), mode="markers", name=name,
                                marker={"color": color, "size": 8}, row=1, col=1)
            fig.add_scatter(x=ks, y=gap, mode="lines+markers", line={"color": color, "dash": dash},
                            name=f"{name}, alpha={a}, c={c}", showlegend=False, row=1, col=2)
    fig.add_vline(x=4, line={"dash": "dot", "color": "grey"}, row=1, col=1)
    fig.add_hline(y=0, line={"color": "grey"}, row=1, col=2)
    fig.update_xaxes(title_text="look-ahead depth k1")
    fig.update_yaxes(title_text="speedup over autoregressive", row=1, col=1)
    fig.update_yaxes(title_text="relative gap", tickformat=".0%", row=1, col=2)
    finish(fig, args, "async_gap", "Async LR: event-simulated pipeline vs Theorem 2 (App. B stage model)")


if __name__ == "__main__":
    main()
