"""Shared by the simulator studies: command line, parallel grids, error bars, the measured CPU numbers.

Each study script imports this module from its own folder (``python studies/NAME.py`` puts ``studies/``
on the path), so every script still runs on its own.
"""

import argparse
from pathlib import Path

import numpy as np

from lrsim.latency import CurveLatency
from lrsim.plots import save_figure
from lrsim.sweep import run_grid

FIGURES = Path(__file__).resolve().parents[1] / "figures"

# MEASUREMENTS.md (2-core CPU, transformers bf16): decode step at batch 1, 2, 4, 8 (seconds), 1 token/sequence
CPU_TARGET = CurveLatency((1, 2, 4, 8), (0.174, 0.159, 0.166, 0.199), axis="positions", extrapolate="linear")
CPU_DRAFT = CurveLatency((1, 2, 4, 8), (0.062, 0.065, 0.071, 0.092), axis="batch", extrapolate="linear")
CPU_STEP_TOKENS = 52  # target steps of ~52 tokens
MPNET_VERIFY = 0.073  # s per step pair, all-mpnet-base-v2 cosine (accepts 75% at 0.85)
JUDGE_VERIFY = 1.1  # s per step pair, a 1.5B judge prefill


def parse_args(doc: str, steps: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIGURES, help="folder for NAME.html and NAME.png")
    ap.add_argument("--steps", type=int, default=steps, help="output steps simulated per point")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    return ap.parse_args()


def grid(args: argparse.Namespace, base: dict, axes: dict, distinct_seeds: bool = False) -> list[dict]:
    """Simulate every point of ``axes`` on top of ``base`` (seed 1; common random numbers unless ``distinct_seeds``)."""
    return run_grid({"steps": args.steps, "seed": 1} | base, axes, workers=args.workers, progress=True,
                    distinct_seeds=distinct_seeds)


def column(rows: list[dict], key: str) -> np.ndarray:
    return np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=float)


def error_bars(rows: list[dict]) -> dict:
    """Plotly ``error_y`` for the speedups' 95% confidence intervals."""
    y = column(rows, "speedup")
    return {"type": "data", "symmetric": False, "array": column(rows, "ci_high") - y,
            "arrayminus": y - column(rows, "ci_low"), "thickness": 1}


def z_scores(rows: list[dict], exact) -> np.ndarray:
    """(simulated - exact) / se, with the simulator's batch-means standard error."""
    return (column(rows, "speedup") - np.asarray(exact, dtype=float)) / column(rows, "speedup_se")


def finish(fig, args: argparse.Namespace, name: str, title: str, **layout) -> None:
    """Title and house style (legend below the plot unless ``layout`` says otherwise), then write and list
    ``NAME.html`` / ``NAME.png``."""
    fig.update_layout(**({"title": title, "template": "plotly_white", "legend": {"orientation": "h", "y": -0.2}}
                         | layout))
    for p in save_figure(fig, args.out / name):
        print(p)
