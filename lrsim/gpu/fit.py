"""Fitting the hardware model's efficiencies on measured latency profiles, with the residuals.

Least squares on the log of predicted / measured (a relative error, the same
weight for a 2 ms and a 120 ms pass) over every grid point of the given
profiles for the given architectures.  ``kernel_sum`` profiles fit the nine
device-side parameters of :class:`~lrsim.gpu.model.Efficiencies`; ``wall``
profiles then fit the one host-side parameter (host time per kernel launch)
with the device side held.  The shipped fit (``lrsim/data/gpus/fit-h100.json``,
read by :func:`load_fit`) uses the embedded H100 profiles of the small shapes
only; ``python studies/fit_gpu_model.py`` regenerates it.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..latency.profile import Profile, read_profile
from .archs import load_arch
from .devices import get_device
from .model import Efficiencies, Setup, forward_s

PROFILE_DIR = Path(__file__).resolve().parents[1] / "data" / "profiles"
FIT_FILE = Path(__file__).resolve().parents[1] / "data" / "gpus" / "fit-h100.json"
MODEL_VERSION = 1
FIT_ARCHS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")  # the small shapes; the 32B ones are held out
PROFILES = {"kernel_sum": ("h100-ctx0-kernel", "h100-context-kernel"), "wall": ("h100-ctx0-eager", "h100-context-eager")}
# (lower, upper) bounds of the device-side parameters, in Efficiencies' units
BOUNDS = {"flops": (0.05, 1.0), "bandwidth": (0.05, 1.0), "kernel_us": (0.0, 20.0), "splitk_bytes": (0.0, 2000.0),
          "splitk_rows": (1.0, 1024.0), "attn_decode": (0.01, 2.0), "attn_masked": (0.001, 1.0),
          "masked_ns_per_token": (0.0, 500.0), "masked_layer_us": (0.0, 200.0)}
HOST_BOUNDS = (0.0, 500.0)


@dataclass(frozen=True)
class Points:
    """Measured passes of one architecture in one profile: arrays of context, batch, positions and ms."""

    profile: str
    arch: str
    timed: str
    L: np.ndarray
    b: np.ndarray
    q: np.ndarray
    ms: np.ndarray


def profile_points(profile: Profile, archs: tuple[str, ...] | None = None) -> list[Points]:
    """Every measured (non-null) grid point of the profile, per architecture (all, or those in ``archs``)."""
    out = []
    for name, a in profile.archs.items():
        if archs is not None and name not in archs:
            continue
        pts = [(L, b, q, a.ms[i][j][k]) for i, L in enumerate(a.context) for j, b in enumerate(a.batch)
               for k, q in enumerate(a.positions) if a.ms[i][j][k] is not None]
        if pts:
            L, b, q, ms = (np.array(c, dtype=float) for c in zip(*pts))
            out.append(Points(profile.name, name, profile.timed, L, b, q, ms))
    return out


def embedded_points(timed: str, archs: tuple[str, ...] | None) -> list[Points]:
    """The measured points of the embedded H100 profiles of one timing kind."""
    return [p for n in PROFILES[timed] for p in profile_points(read_profile(PROFILE_DIR / f"{n}.json"), archs)]


def predict_ms(pts: Points, eff: Efficiencies, device: str = "h100-sxm", tp: int = 1) -> np.ndarray:
    """The model's ms at the points' shapes."""
    s = Setup(load_arch(pts.arch), get_device(device), eff, tp)
    return 1e3 * forward_s(s, pts.L, pts.b, pts.q, pts.timed)


def _log_residuals(x: np.ndarray, names: tuple[str, ...], base: Efficiencies, data: list[Points]) -> np.ndarray:
    eff = replace(base, **dict(zip(names, map(float, x))))
    return np.concatenate([np.log(predict_ms(p, eff) / p.ms) for p in data])  # log(predicted / measured)


def _least_squares(names: tuple[str, ...], bounds: list[tuple[float, float]], base: Efficiencies,
                   data: list[Points]) -> Efficiencies:
    from scipy.optimize import least_squares

    x0 = [getattr(base, n) for n in names]
    lo, hi = zip(*bounds)
    r = least_squares(_log_residuals, x0, bounds=(lo, hi), args=(names, base, data), x_scale="jac")
    return replace(base, **dict(zip(names, map(float, r.x))))


def fit_kernel(data: list[Points], start: Efficiencies | None = None) -> Efficiencies:
    """The device-side parameters from ``kernel_sum`` points (``host_us`` untouched), from ``start`` (defaults)."""
    return _least_squares(tuple(BOUNDS), list(BOUNDS.values()), start or Efficiencies(), data)


def fit_wall(data: list[Points], device_side: Efficiencies) -> Efficiencies:
    """``host_us`` from ``wall`` points, the device side held: ``wall = max(kernel sum, kernels x host_us)``."""
    return _least_squares(("host_us",), [HOST_BOUNDS], device_side, data)


def residual_summary(data: list[Points], eff: Efficiencies, device: str = "h100-sxm") -> dict:
    """Per ``profile/arch``: points, mean and worst |relative error|, median signed error, worst point."""
    out = {}
    for p in data:
        rel = predict_ms(p, eff, device) / p.ms - 1.0
        i = int(np.argmax(np.abs(rel)))
        out[f"{p.profile}/{p.arch}"] = {
            "points": int(rel.size), "mean_abs": round(float(np.mean(np.abs(rel))), 4),
            "worst_abs": round(float(np.abs(rel[i])), 4), "median": round(float(np.median(rel)), 4),
            "worst_at": {"context": int(p.L[i]), "batch": int(p.b[i]), "positions": int(p.q[i]),
                         "measured_ms": float(p.ms[i]), "predicted_ms": round(float(p.ms[i] * (1 + rel[i])), 3)}}
    return out


def fit(archs: tuple[str, ...] = FIT_ARCHS) -> dict:
    """Fit both timing kinds on the embedded H100 profiles of ``archs``; the record :func:`write_fit` stores."""
    kdata, wdata = embedded_points("kernel_sum", archs), embedded_points("wall", archs)
    if not kdata or not wdata:
        raise InputError(f"no measured points for {', '.join(archs)} in the embedded H100 profiles")
    dev = fit_kernel(kdata)
    full = fit_wall(wdata, dev)
    kernel_params = {k: round(v, 6) for k, v in dev.to_dict().items() if k != "host_us"}
    return {
        "format": "lr-gpu-fit", "version": 1, "model_version": MODEL_VERSION, "device": "h100-sxm",
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "command": "python studies/fit_gpu_model.py",
        "fitted_on": {"archs": list(archs), "profiles": [n for v in PROFILES.values() for n in v],
                      "points": {"kernel_sum": int(sum(p.ms.size for p in kdata)),
                                 "wall": int(sum(p.ms.size for p in wdata))},
                      "loss": "least squares on log(predicted / measured), every measured grid point"},
        "kernel_sum": {"params": kernel_params, "residuals": residual_summary(kdata, dev)},
        "wall": {"params": {"host_us": round(full.host_us, 6)}, "residuals": residual_summary(wdata, full)},
        "notes": [("Fitted on one H100 (transformers 5.17 eager forward, SDPA, DynamicCache, random weights); "
                   "applied to other devices relative to their datasheet peaks, an assumption."),
                  ("The 32B shapes (qwen2.5-32b, qwen3-32b) are never fitted on: studies/gpu_model_validation.py "
                   "predicts them.")]}


def efficiencies_from(record: dict) -> Efficiencies:
    """The :class:`Efficiencies` of a fit record (both timing kinds merged)."""
    known = {f.name for f in fields(Efficiencies)}
    params = record["kernel_sum"]["params"] | record["wall"]["params"]
    if set(params) != known:
        raise InputError(f"fit record has parameters {sorted(params)}, expected {sorted(known)}")
    return Efficiencies(**{k: float(v) for k, v in params.items()})


@functools.lru_cache(maxsize=1)
def load_fit() -> tuple[Efficiencies, dict]:
    """The shipped fit: its efficiencies and its record."""
    record = json.loads(FIT_FILE.read_text(encoding="utf-8"))
    return efficiencies_from(record), record


def write_fit(record: dict, path: Path = FIT_FILE) -> None:
    """Write a fit record atomically."""
    from ..atomic import atomic_write

    atomic_write(path, json.dumps(record, indent=1) + "\n")
