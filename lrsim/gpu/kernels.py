"""The GEMM kernels a serving engine runs for each weight format, as they run: efficiency curves from published
kernel benchmarks (``lrsim/data/gpus/kernels.json``; ``docs/gpu-model.md``, "Kernels").

The fitted efficiencies (:class:`~lrsim.gpu.setup.Efficiencies`, ``fit-h100.json``) are those of cuBLAS bf16 GEMMs.
A quantized format runs another kernel: Marlin for GPTQ/AWQ int4 and 8-bit weights, CUTLASS ``cutlass_scaled_mm``
for FP8 W8A8.  Each kernel's curve gives two ratios to the bf16 GEMM *measured in the same published benchmark*
(speedup over it / the speedup its roofline allows):

- ``bandwidth``: of the achieved memory bandwidth, the memory-bound regime (decode: few rows ``M``);
- ``flops``: of the achieved tensor-core throughput at the kernel's peak (bf16, or FP8 for W8A8), the compute-bound
  regime (prefill: many rows; for Marlin the dequantization and its ``mma.sync`` pipeline).

The model prices a GEMM of format ``f`` at ``max(FLOPs / (e_f r_f F_f), bytes / (e_b r_b B)) + t_k``: ``e_b r_b`` and
``e_f r_f`` are the kernel's fractions of the device's peaks.  A ratio table is indexed by the GEMM's rows ``M``
(interpolated linearly in ``log2 M``) or by the device's memory bandwidth in TB/s (linearly), clamped at its ends.
Every point comes from its curve's cited source; none is fitted on the validation rows.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

KERNELS_FILE = Path(__file__).resolve().parents[1] / "data" / "gpus" / "kernels.json"
BY = ("M", "bandwidth_tb_s")
PEAKS = ("bf16", "fp8")


@dataclass(frozen=True)
class Ratio:
    """One ratio table: ``points`` of ``(x, ratio)`` by ``M`` or by the device's bandwidth (TB/s)."""

    by: str
    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, M, bandwidth_tb_s: float):
        """The ratio at ``M`` rows (array or scalar) on a device of ``bandwidth_tb_s``."""
        if self.by == "bandwidth_tb_s":
            return float(np.interp(bandwidth_tb_s, self.x, self.y)) + 0.0 * np.asarray(M, dtype=float)
        m = np.log2(np.maximum(np.asarray(M, dtype=float), 1.0))
        return np.interp(m, np.log2(self.x), self.y)


@dataclass(frozen=True)
class KernelCurve:
    """One GEMM kernel's efficiency ratios to the fitted bf16 GEMM, with the published source they come from."""

    name: str
    kernel: str
    peak: str  #: the tensor-core peak it runs at: ``bf16`` or ``fp8``
    bandwidth: Ratio
    flops: Ratio
    source: str
    url: str = ""

    def ratios(self, M, bandwidth_tb_s: float):
        """``(r_b, r_f)`` at ``M`` rows on a device of ``bandwidth_tb_s`` TB/s."""
        return self.bandwidth(M, bandwidth_tb_s), self.flops(M, bandwidth_tb_s)


def _ratio(d: object, where: str) -> Ratio:
    if not isinstance(d, dict) or d.get("by") not in BY or not isinstance(d.get("points"), list) or not d["points"]:
        raise InputError(f"{where}: a ratio needs 'by' ({' or '.join(BY)}) and a non-empty 'points' list")
    pts = sorted((float(x), float(y)) for x, y in d["points"])
    if any(x <= 0 or not 0 < y <= 1.5 for x, y in pts):
        raise InputError(f"{where}: points must be (x > 0, 0 < ratio <= 1.5), got {pts}")
    return Ratio(d["by"], tuple(x for x, _ in pts), tuple(y for _, y in pts))


@functools.lru_cache(maxsize=1)
def _load() -> tuple[dict[str, KernelCurve], dict[str, str], dict[str, str]]:
    d = json.loads(KERNELS_FILE.read_text(encoding="utf-8"))
    curves = {}
    for name, c in d["curves"].items():
        where = f"{KERNELS_FILE.name}: curves.{name}"
        if c.get("peak") not in PEAKS or not str(c.get("source", "")).strip():
            raise InputError(f"{where}: needs a peak ({' or '.join(PEAKS)}) and a source")
        curves[name] = KernelCurve(name, c["kernel"], c["peak"], _ratio(c["bandwidth"], f"{where}.bandwidth"),
                                   _ratio(c["flops"], f"{where}.flops"), c["source"], c.get("url", ""))
    formats = dict(d["formats"])
    unknown = sorted(v for v in formats.values() if v not in curves)
    if unknown:
        raise InputError(f"{KERNELS_FILE.name}: formats name unknown curves {unknown}")
    return curves, formats, dict(d.get("borrowed", {}))


def curves() -> dict[str, KernelCurve]:
    """Every kernel curve, by name."""
    return dict(_load()[0])


def curve_for(fmt: str) -> KernelCurve:
    """The curve the weight format ``fmt`` runs (a :class:`~lrsim.gpu.dtypes.Dtype`'s ``curve`` name).

    :raises InputError: a format with no curve (one line listing those that have one).
    """
    cs, formats, _ = _load()
    if fmt not in formats:
        raise InputError(f"no kernel curve for format {fmt!r}: known are {', '.join(formats)}")
    return cs[formats[fmt]]


def borrowed(fmt: str) -> str | None:
    """Why a format without a curve of its own runs another's (None: it has its own)."""
    return _load()[2].get(fmt)
