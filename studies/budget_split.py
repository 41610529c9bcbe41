"""Figure: speedup vs parallel budget M, pure token SD vs pure LR vs split budgets (English blog, Figure 1).

Run: python studies/budget_split.py [--out figures]
"""

import argparse
from pathlib import Path

from lrsim.cli import DEFAULTS
from lrsim.plots import budget_split_figure, save_figure

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "figures")
    args = ap.parse_args()
    fig = budget_split_figure(DEFAULTS["alpha1"], DEFAULTS["c1"], DEFAULTS["alpha2"], DEFAULTS["c2"])
    for p in save_figure(fig, args.out / "budget_split"):
        print(p)
