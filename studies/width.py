"""Figure: draft width W, acceptance and speedup (paper Table 3 trend: acceptance up, speedup flat past W = 2).

Sync LR with depth gamma = 2 (k1 = 3), per-candidate step acceptance 0.63 (the paper's W = 1 value).
Acceptance model: candidates independent (rho = 0) or sharing one verdict with probability rho = 0.459,
the value that makes P_8 = 0.83, the paper's W = 8 acceptance.  Drafting costs a batch: the chain drafts
W candidates per position, the tree W^(j+1) at depth j, at this CPU's measured draft latency per batch
(62/65/71/92 ms at 1/2/4/8, extrapolated linearly); target T(b) as measured; verifier 73 ms per call.

Run: python studies/width.py [--out figures] [--steps N]
"""

import numpy as np
from common import CPU_DRAFT, CPU_STEP_TOKENS, CPU_TARGET, MPNET_VERIFY, column, error_bars, finish, grid, parse_args
from plotly.subplots import make_subplots

from lrsim import theory
from lrsim.dists import Constant
from lrsim.sim import accept_probability

WIDTHS = [1, 2, 3, 4, 6, 8]
ALPHA1, RHO = 0.63, 0.459
CASES = {
    "tree, rho = 0.459": dict(tree=True, correlation=RHO),
    "chain, rho = 0.459": dict(tree=False, correlation=RHO),
    "tree, independent (rho = 0)": dict(tree=True, correlation=0.0),
}
COLORS = ["#4c78a8", "#54a24b", "#f58518"]


def main() -> None:
    args = parse_args(__doc__, steps=20_000)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("step acceptance (some candidate accepted)",
                                                        "speedup over autoregressive"))
    w = np.array(WIDTHS)
    base = dict(mode="sync", k1=3, alpha1=ALPHA1, target_latency=CPU_TARGET, draft_latency=CPU_DRAFT,
                step_tokens=Constant(CPU_STEP_TOKENS), verifier_latency=Constant(MPNET_VERIFY))
    c1 = CPU_DRAFT(1) / CPU_TARGET(1)
    for rho, dash in ((RHO, "solid"), (0.0, "dash")):
        fig.add_scatter(x=w, y=[accept_probability(ALPHA1, int(x), rho) for x in w], mode="lines",
                        line={"color": "grey", "dash": dash}, name=f"model P_W, rho = {rho}", row=1, col=1)
    fig.add_scatter(x=[1, 8], y=[0.63, 0.83], mode="markers", marker={"symbol": "x", "size": 12, "color": "black"},
                    name="paper, GSM8K, 7B judge", row=1, col=1)
    free = [theory.f_sync(accept_probability(ALPHA1, int(x), RHO), c1, 3) for x in w]
    fig.add_scatter(x=w, y=free, mode="lines", line={"color": "grey", "dash": "dot"},
                    name="f_sync(P_W), drafting W free", row=1, col=2)
    print(f"sync, k1 = 3, alpha1 = {ALPHA1}, c1 = {c1:.3f}; W = {WIDTHS}")
    for (name, kw), color in zip(CASES.items(), COLORS):
        rows = grid(args, base | kw, {"width": WIDTHS})
        acc, sp = column(rows, "acceptance_rate"), column(rows, "speedup")
        print(f"  {name:28s} acceptance " + " ".join(f"{a:.3f}" for a in acc)
              + "   speedup " + " ".join(f"{s:.3f}" for s in sp))
        fig.add_scatter(x=w, y=acc, mode="markers", marker={"color": color, "size": 9}, name=name,
                        row=1, col=1)
        fig.add_scatter(x=w, y=sp, error_y=error_bars(rows), mode="lines+markers", line={"color": color},
                        name=name, showlegend=False, row=1, col=2)
    print("  f_sync(P_W, c1, 3) with free drafting: " + " ".join(f"{v:.3f}" for v in free))
    fig.update_xaxes(title_text="draft width W")
    finish(fig, args, "width", "Width W: acceptance rises, speedup does not (sync, depth 2, this CPU's latencies)")


if __name__ == "__main__":
    main()
