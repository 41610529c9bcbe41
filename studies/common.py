"""Shared by the studies: command line, parallel grids, error bars, the measured CPU numbers (simulator
studies); the recordings' system prompt and paired speedups over problems (studies of recorded lrref runs).

Each study script imports this module from its own folder (``python studies/NAME.py`` puts ``studies/``
on the path), so every script still runs on its own.  Recorded runs: :func:`traces_of` and :func:`trace_of` find
their traces, recorded or packed; packing them into ``studies/data/``: :func:`staged` and :func:`gzip_copy`.
"""

import argparse
import gzip
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from lrsim.cost.passcost import curve
from lrsim.errors import InputError
from lrsim.plots import save_figure
from lrsim.sweep import run_grid

FIGURES = Path(__file__).resolve().parents[1] / "figures"

# MEASUREMENTS.md (2-core CPU, transformers bf16): decode step at batch 1, 2, 4, 8 (seconds), 1 token/sequence
CPU_TARGET = curve((1, 2, 4, 8), (0.174, 0.159, 0.166, 0.199), axis="positions", extrapolate="linear")
CPU_DRAFT = curve((1, 2, 4, 8), (0.062, 0.065, 0.071, 0.092), axis="batch", extrapolate="linear")
CPU_STEP_TOKENS = 52  # target steps of ~52 tokens
MPNET_VERIFY = 0.073  # s per step pair, all-mpnet-base-v2 cosine (accepts 75% at 0.85)
JUDGE_VERIFY = 1.1  # s per step pair, a 1.5B judge prefill
# the recorded studies' system prompt (record_validation.sh, verifier_tradeoff.py): short steps, a boxed answer
CONCISE_SYSTEM = ("Solve the problem in a few short steps separated by blank lines. Be concise. Put the final "
                  "answer within \\boxed{}.")


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


def per_request(trace) -> dict[int, tuple[int, float]]:
    """A trace's finished requests: request -> (output tokens, wall seconds)."""
    return {r.request: (r.output_tokens, r.end - r.start) for r in trace.requests if r.end > r.start}


def paired_speedup(trace, ar, rng: np.random.Generator, reps: int = 2000) -> tuple[float, float, float, int]:
    """Speedup of ``trace`` over ``ar`` (tokens/s ratio) on their shared requests (problems), its paired
    bootstrap 95% CI over those problems, and their number.

    :raises InputError: no finished request in common.
    """
    a, b = per_request(trace), per_request(ar)
    ids = sorted(set(a) & set(b))
    if not ids:
        raise InputError(f"{trace.path}: no finished request in common with the ar trace {ar.path}")
    x = np.array([a[i] for i in ids], dtype=float)  # (tokens, seconds) of the configuration
    y = np.array([b[i] for i in ids], dtype=float)  # the same problems under ar

    def ratio(idx: np.ndarray) -> np.ndarray:
        # (sum tokens / sum seconds) / (sum tokens_ar / sum seconds_ar), per resample (row of idx)
        return (x[idx, 0].sum(-1) / x[idx, 1].sum(-1)) / (y[idx, 0].sum(-1) / y[idx, 1].sum(-1))

    point = float(ratio(np.arange(len(ids))[None, :])[0])
    boot = ratio(rng.integers(0, len(ids), (reps, len(ids))))  # problems resampled with replacement, both modes
    return point, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975)), len(ids)


def with_ci(x: float, ci: list[float] | tuple[float, float] | None, digits: int = 3) -> str:
    """``x [lo, hi]`` for a Markdown table (``x`` alone without an interval; the bounds one digit shorter)."""
    return f"{x:.{digits}f}" + (f" [{ci[0]:.{digits - 1}f}, {ci[1]:.{digits - 1}f}]" if ci else "")


def traces_of(folder: Path, mode: str = "*") -> list[Path]:
    """The traces of a run folder, recorded (``trace-MODE.jsonl``) or packed (``.jsonl.gz``), in name order (a
    recorded trace before its packed copy); ``mode`` as lrref names the file (``lr-async+sd`` -> ``lr-async_sd``)."""
    pattern = f"trace-{mode.replace('+', '_')}.jsonl*"
    return sorted(p for p in folder.glob(pattern) if p.name.endswith((".jsonl", ".jsonl.gz")))


def trace_of(folder: Path, mode: str) -> Path:
    """The trace of ``mode`` in a run folder, the recorded one when both are there.

    :raises InputError: the folder has no trace of ``mode``.
    """
    paths = traces_of(folder, mode)
    if not paths:
        raise InputError(f"{folder}: no trace-{mode.replace('+', '_')}.jsonl[.gz]")
    return paths[0]


@contextmanager
def staged(dest: Path) -> Iterator[Path]:
    """A temporary folder beside ``dest`` to fill; renamed to ``dest`` when the block ends, removed on any error, so
    a pack is all there or not there.

    :raises InputError: ``dest`` exists.
    """
    if dest.exists():
        raise InputError(f"{dest} exists: move it away first")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pack.", dir=dest.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def gzip_copy(src: Path, folder: Path) -> Path:
    """``src`` into ``folder`` gzipped (level 9, no timestamp: the same bytes every time), or copied as it is when
    it is gzipped already; returns the new file."""
    if src.suffix == ".gz":
        return Path(shutil.copy2(src, folder / src.name))
    dst = folder / (src.name + ".gz")
    with open(src, "rb") as fi, gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as fo:
        shutil.copyfileobj(fi, fo)
    return dst
