"""Figure: what a batch-dependent T(b) and the verifier's latency do to the best depth k1, on this CPU.

Numbers measured on this kind of machine (MEASUREMENTS.md): target decode step 174/159/166/199 ms at
batch 1/2/4/8 (extrapolated linearly beyond 8), draft step 62 ms at batch 1 (c1 = 0.356), 52-token steps,
step acceptance 0.75 (mpnet cosine >= 0.85), verifier 73 ms (mpnet) or 1.1 s (a 1.5B judge prefill).
Speedup vs k1 for sync and async LR under: constant T = 174 ms (the paper's assumption), the measured
T(b), and T(b) with each verifier; the optimum of each curve is marked.  Third panel: sync LR with
n-gram token speculation inside steps (k2 = 4, alpha2 = 0.35, c2 = 0.01, mean-field token model), where the
k1 x 4 positions reach the rising part of T(b).

Run: python studies/latency_optimum.py [--out figures] [--steps N]
"""

import numpy as np
from common import (
    CPU_DRAFT,
    CPU_STEP_TOKENS,
    CPU_TARGET,
    JUDGE_VERIFY,
    MPNET_VERIFY,
    column,
    error_bars,
    finish,
    grid,
    parse_args,
)
from plotly.subplots import make_subplots

from lrsim import theory
from lrsim.cost.passcost import constant
from lrsim.dists import Constant

K1 = list(range(1, 11))
ALPHA1 = 0.75
C1 = CPU_DRAFT(1) / CPU_TARGET(1)
CASES = {
    "constant T = 174 ms": dict(target_latency=constant(0.174)),
    "measured T(b)": dict(target_latency=CPU_TARGET),
    "measured T(b) + mpnet verifier (73 ms)": dict(target_latency=CPU_TARGET, verifier_latency=Constant(MPNET_VERIFY)),
    "measured T(b) + 1.5B judge (1.1 s)": dict(target_latency=CPU_TARGET, verifier_latency=Constant(JUDGE_VERIFY)),
}
COLORS = ["#222222", "#4c78a8", "#54a24b", "#e45756"]
SD = dict(k2=4, alpha2=0.35, c2=0.01, token_model="mean", join="immediate", draft_sd=True)


def main() -> None:
    args = parse_args(__doc__, steps=20_000)
    fig = make_subplots(rows=1, cols=3, subplot_titles=("sync LR", "async LR", "sync LR + n-gram SD (k2 = 4)"))
    ks = np.array(K1)
    base = dict(alpha1=ALPHA1, draft_latency=CPU_DRAFT, step_tokens=Constant(CPU_STEP_TOKENS))
    print(f"alpha1 = {ALPHA1}, c1 = {C1:.3f}; best k1 and speedup per case")
    panels = (("sync", {}), ("async", {}), ("sync", SD))
    for col, (mode, sd) in enumerate(panels, 1):
        label = mode + ("+SD" if sd else "")
        exact = theory.f_step(ALPHA1, C1, ks, mode) * (theory.g(0.35, 0.01, 4) if sd else 1.0)
        fig.add_scatter(x=ks, y=exact, mode="lines", name="closed form", line={"color": "grey", "dash": "dot"},
                        showlegend=col == 1, row=1, col=col)
        for (name, kw), color in zip(CASES.items(), COLORS):
            rows = grid(args, base | kw | sd | {"mode": mode}, {"k1": K1})
            y = column(rows, "speedup")
            best = int(np.argmax(y))
            print(f"  {label:8s} {name:40s} best k1 = {K1[best]:2d}: {y[best]:.3f}x   (k1 = 1..10: "
                  + " ".join(f"{v:.2f}" for v in y) + ")")
            fig.add_scatter(x=ks, y=y, error_y=error_bars(rows), mode="lines+markers", name=name,
                            line={"color": color}, showlegend=col == 1, row=1, col=col)
            fig.add_scatter(x=[K1[best]], y=[y[best]], mode="markers", showlegend=False, hoverinfo="skip",
                            marker={"symbol": "star", "size": 16, "color": color, "line": {"width": 1}},
                            row=1, col=col)
        best_th = int(np.argmax(exact))
        print(f"  {label:8s} {'closed form':40s} best k1 = {K1[best_th]:2d}: {exact[best_th]:.3f}x")
    fig.update_xaxes(title_text="k1 (sync: steps per cycle; async: depth)")
    fig.update_yaxes(title_text="speedup over autoregressive", col=1)
    finish(fig, args, "latency_optimum", f"This CPU: speedup vs k1 with the measured T(b) and verifier latencies "
           f"(alpha1 = {ALPHA1}, c1 = {C1:.3f}; stars: optimum)")


if __name__ == "__main__":
    main()
