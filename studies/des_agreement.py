"""Figure: where the event simulator agrees with the closed forms, under the paper's assumptions.

Three maps over (alpha, c): sync LR with k1 = 4 against Theorem 1, async LR with k1 = 4 against
Theorem 2 (S2 where 4 < ceil(1/c), S1 elsewhere) and the sync hybrid k1 = 3, k2 = 4 (alpha2 = 0.6,
c2 = 0.05, mean-field token model) against h = f g.  Colour: z = (simulated - closed form) / se, se from
the simulator's batch-means CI.  Constant 52-token steps, free verifier, W = 1, immediate joins.

Run: python studies/des_agreement.py [--out figures] [--steps N]
"""

import numpy as np
from common import finish, grid, parse_args, z_scores
from plotly.subplots import make_subplots
from scipy.stats import norm

from lrsim import theory

ALPHAS = [round(0.1 * i, 1) for i in range(1, 10)]
CS = [round(0.05 * i, 2) for i in range(1, 10)]
PANELS = {
    "sync, k1 = 4 vs Theorem 1": (dict(mode="sync", k1=4), lambda a, c: theory.f_sync(a, c, 4)),
    "async, k1 = 4 vs Theorem 2": (dict(mode="async", k1=4), lambda a, c: theory.f_async(a, c, 4)),
    "hybrid sync, k1 = 3, k2 = 4 vs h = f g": (
        dict(mode="sync", k1=3, k2=4, alpha2=0.6, c2=0.05, token_model="mean"),
        lambda a, c: theory.h(a, c, 3, 0.6, 0.05, 4, "sync")),
}


def main() -> None:
    args = parse_args(__doc__, steps=40_000)
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(PANELS), horizontal_spacing=0.06)
    n_tests = len(PANELS) * len(ALPHAS) * len(CS)
    bonferroni = norm.ppf(1 - 0.025 / n_tests)  # family-wise 5%, two-sided
    for col, (title, (base, exact_fn)) in enumerate(PANELS.items(), 1):
        rows = grid(args, base | {"join": "immediate", "seed": 100 * col}, {"alpha1": ALPHAS, "c1": CS},
                    distinct_seeds=True)  # independent cells
        exact = np.array([exact_fn(r["alpha1"], r["c1"]) for r in rows])
        z = z_scores(rows, exact).reshape(len(ALPHAS), len(CS))
        rel = (np.array([r["speedup"] for r in rows]) / exact - 1).reshape(len(ALPHAS), len(CS))
        half = np.array([(r["ci_high"] - r["ci_low"]) / 2 / r["speedup"] for r in rows])
        print(f"{title}: max |z| {np.abs(z).max():.2f} (Bonferroni threshold {bonferroni:.2f} for {n_tests} tests), "
              f"mean z {z.mean():+.2f}, sd of z {z.std(ddof=1):.2f}, "
              f"max |rel. error| {np.abs(rel).max():.4f}, CI half-width {half.min():.4f}..{half.max():.4f} (relative)")
        fig.add_heatmap(x=CS, y=ALPHAS, z=z, zmin=-4, zmax=4, colorscale="RdBu", showscale=col == 3,
                        colorbar={"title": "z"}, text=np.round(rel * 100, 2), texttemplate="%{z:.1f}",
                        hovertemplate="c=%{x} alpha=%{y}<br>z=%{z:.2f}<br>rel. error %{text}%<extra></extra>",
                        row=1, col=col)
    fig.update_xaxes(title_text="c1 (draft / target time per step)")
    fig.update_yaxes(title_text="alpha1 (step acceptance)", col=1)
    finish(fig, args, "des_agreement", f"Event simulator vs closed forms under the paper's assumptions: z-scores "
           f"({args.steps} steps per cell; |z| < {bonferroni:.2f} is agreement at 5% family-wise)", width=1300)


if __name__ == "__main__":
    main()
