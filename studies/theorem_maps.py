"""Figures: where hybrid (k1, k2 >= 2) beats pure methods over (alpha1, alpha2), sync (Thm 3) and async (Thm 4).

Run: python studies/theorem_maps.py [--out figures]
"""

import argparse
from pathlib import Path

from lrsim.plots import optimum_map_figure, save_figure

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "figures")
    args = ap.parse_args()
    for name, mode, c1, c2, m in (("theorem3_map", "sync", 0.2, 0.1, 16), ("theorem4_map", "async", 0.2, 0.1, 16)):
        for p in save_figure(optimum_map_figure(mode, c1, c2, m), args.out / name):
            print(p)
