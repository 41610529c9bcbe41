"""Figure: speedup vs speculative budget M, pure token SD vs step + token split, event-simulated
(companion of budget_split.py, the English blog's Figure 1).

Lines: closed forms at the CLI defaults (alpha1 = alpha2 = 0.6, c1 = 0.1, c2 = 0.05): pure SD g(M) and the
even split k1 = k2 = sqrt(M), sync and async.  Filled markers: the simulator under the paper's assumptions
(constant 52-token steps, mean-field token passes, immediate joins, free verifier).  Open markers: a more
realistic pipeline (log-normal steps with CV 0.5, geometric token acceptance per pass, iteration-level
joins).  Error bars: 95% batch-means CIs.

Run: python studies/budget_split_des.py [--out figures] [--steps N]
"""

import numpy as np
import plotly.graph_objects as go
from common import column, error_bars, finish, grid, parse_args

from lrsim import theory
from lrsim.cli import DEFAULTS
from lrsim.dists import LogNormal

A1, C1, A2, C2 = DEFAULTS["alpha1"], DEFAULTS["c1"], DEFAULTS["alpha2"], DEFAULTS["c2"]
PURE = [1, 2, 4, 8, 16, 32, 64]
ROOTS = [1, 2, 3, 4, 5, 6, 7, 8]
IDEAL = dict(token_model="mean", join="immediate")
REAL = dict(token_model="sampled", join="iteration", step_tokens=LogNormal(52, 0.5))
CURVES = [  # name, color, base settings, grid
    ("pure token SD (k1 = 1, k2 = M)", "#4c78a8", dict(mode="ar"), {"k2": PURE}),
    ("even split, sync (k1 = k2 = sqrt M)", "#f58518", dict(mode="sync"), {"k1": ROOTS}),
    ("even split, async (k1 = k2 = sqrt M)", "#54a24b", dict(mode="async"), {"k1": ROOTS}),
]


def main() -> None:
    args = parse_args(__doc__, steps=20_000)
    fig = go.Figure()
    ms = np.arange(1, 65)
    r = np.sqrt(ms[np.sqrt(ms) == np.floor(np.sqrt(ms))])
    lines = [theory.g(A2, C2, ms), theory.h(A1, C1, r, A2, C2, r, "sync"), theory.h(A1, C1, r, A2, C2, r, "async")]
    xs = [ms, r**2, r**2]
    for (name, color, base, axes), x, y in zip(CURVES, xs, lines):
        fig.add_scatter(x=x, y=y, mode="lines", line={"color": color}, name=f"{name}, closed form")
        for label, kw, symbol in (("paper's assumptions", IDEAL, "circle"), ("realistic", REAL, "circle-open")):
            rows = []
            for k in next(iter(axes.values())):  # the split varies k1 and k2 together
                point = {"k2": k} if base["mode"] == "ar" else {"k1": k, "k2": k}
                rows += grid(args, base | {"alpha1": A1, "c1": C1, "alpha2": A2, "c2": C2} | kw | point, {})
            m = np.array([rw["k2"] * (1 if base["mode"] == "ar" else rw["k1"]) for rw in rows])
            sp = column(rows, "speedup")
            print(f"  {name:38s} {label:20s} M = " + " ".join(f"{int(a)}:{b:.2f}" for a, b in zip(m, sp)))
            fig.add_scatter(x=m, y=sp, error_y=error_bars(rows), mode="markers", name=f"{name}, {label}",
                            marker={"color": color, "symbol": symbol, "size": 9, "line": {"width": 2}})
    fig.add_hline(y=float(theory.sd_ceiling(A2)), line={"color": "grey", "dash": "dot"},
                  annotation_text="token SD ceiling 1/(1-alpha2)")
    finish(fig, args, "budget_split_des",
           f"Speedup vs budget M, event-simulated (alpha1={A1}, c1={C1}, alpha2={A2}, c2={C2})",
           xaxis_title="parallel budget M (target positions)", yaxis_title="speedup over autoregressive",
           legend={"font": {"size": 10}})


if __name__ == "__main__":
    main()
