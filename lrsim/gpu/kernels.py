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
    return _points(d["points"], d["by"], "ratio", 1.5, where)


def _points(pts: list, by: str, what: str, top: float, where: str) -> Ratio:
    """``(x, y)`` points sorted by ``x`` as a :class:`Ratio` by ``by``; each ``x > 0`` and ``0 < y <= top``."""
    xy = sorted((float(x), float(y)) for x, y in pts)
    if any(x <= 0 or not 0 < y <= top for x, y in xy):
        raise InputError(f"{where}: points must be (x > 0, 0 < {what} <= {top:g}), got {xy}")
    return Ratio(by, tuple(x for x, _ in xy), tuple(y for _, y in xy))


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


# --- attention kernels (kernels.json "attention"): absolute fractions of the device's datasheet peaks -------------

MIB = 2.0 ** 20
PREFILL_KERNELS = ("fa2", "fa3")  #: the FlashAttention generations a serving engine's prefill runs


@dataclass(frozen=True)
class DecodeCurve:
    """Achieved fraction of the datasheet HBM bandwidth of a decode attention call, by the K/V MiB it reads, for
    each source GPU's bandwidth (TB/s, ascending)."""

    bandwidths: tuple[float, ...]
    x: tuple[tuple[float, ...], ...]  #: K/V MiB per call, per source GPU
    y: tuple[tuple[float, ...], ...]  #: achieved fraction of the bandwidth at those MiB
    source: str

    @property
    def floor_mib(self) -> float:
        """Below this many MiB a call's time is held (the smallest measured call; a fixed-latency floor)."""
        return max(xs[0] for xs in self.x)

    def __call__(self, kv_mib, bandwidth_tb_s: float):
        """``u(kv_mib)`` on a device of ``bandwidth_tb_s`` TB/s.  On each source GPU the call's time ``T = x / u``
        is interpolated linearly in ``log x`` on ``log T`` (a power law between points, so a larger call is never
        faster: the points' ``T`` is non-decreasing), ``u`` held beyond the last point; between the two source GPUs
        that bracket the device's bandwidth (clamped) the fraction is linear in the bandwidth."""
        x = np.maximum(np.asarray(kv_mib, dtype=float), 1e-9)
        per_gpu = []
        for xs, ys in zip(self.x, self.y):
            lx, lt = np.log(xs), np.log(np.asarray(xs) / np.asarray(ys))  # log x_i, log T_i (T_i = x_i / u_i)
            u = x / np.exp(np.interp(np.log(x), lx, lt))  # u = x / T(x), T log-log between points
            per_gpu.append(np.where(x > xs[-1], ys[-1], u))  # beyond the last point: u held
        bw = float(np.clip(bandwidth_tb_s, self.bandwidths[0], self.bandwidths[-1]))
        j = int(np.searchsorted(self.bandwidths, bw, side="right")) - 1
        if j >= len(self.bandwidths) - 1:
            return per_gpu[-1]
        w = (bw - self.bandwidths[j]) / (self.bandwidths[j + 1] - self.bandwidths[j])  # linear in TB/s
        return (1.0 - w) * per_gpu[j] + w * per_gpu[j + 1]  # u = (1 - w) u_j + w u_{j+1}


@dataclass(frozen=True)
class PrefillCurve:
    """One FlashAttention generation's achieved fraction of the dense bf16 peak on one GPU generation: ``causal``
    by the prompt's query rows, ``full`` by the keys each query row attends to."""

    kernel: str
    generation: str
    causal: Ratio
    full: Ratio
    source: str


def _fractions(pts: object, where: str) -> Ratio:
    if not isinstance(pts, list) or not pts:
        raise InputError(f"{where}: a non-empty list of (x, fraction) points is needed")
    return _points(pts, "M", "fraction", 1.0, where)


@functools.lru_cache(maxsize=1)
def _attention() -> tuple[DecodeCurve, dict[tuple[str, str], PrefillCurve], dict[str, str], dict[str, str]]:
    a = json.loads(KERNELS_FILE.read_text(encoding="utf-8"))["attention"]
    dec = a["decode"]
    gpus = sorted(dec["curves"].items(), key=lambda kv: float(kv[0]))
    ratios = [_fractions(c["points"], f"{KERNELS_FILE.name}: attention.decode.curves.{bw}") for bw, c in gpus]
    ys = []
    for r in ratios:  # a call reading more bytes never takes less time: t_i = max_{j<=i} x_j / u_j, u_i = x_i / t_i
        x = np.asarray(r.x)
        ys.append(tuple(float(v) for v in x / np.maximum.accumulate(x / np.asarray(r.y))))
    decode = DecodeCurve(tuple(float(bw) for bw, _ in gpus), tuple(r.x for r in ratios), tuple(ys), dec["source"])
    prefill = {}
    for kernel, k in a["prefill"]["kernels"].items():
        for gen, c in k.items():
            if not isinstance(c, dict):
                continue  # the kernel's description
            where = f"{KERNELS_FILE.name}: attention.prefill.kernels.{kernel}.{gen}"
            prefill[(kernel, gen)] = PrefillCurve(kernel, gen, _fractions(c["causal"], where + ".causal"),
                                                  _fractions(c["full"], where + ".full"), c["source"])
    return decode, prefill, dict(a["prefill"]["generations"]), dict(a["prefill"]["borrowed"])


def decode_curve() -> DecodeCurve:
    """The decode attention curve (bandwidth fraction by K/V MiB per call and device bandwidth)."""
    return _attention()[0]


def decode_excess_s(nbytes, bandwidth_tb_s: float):
    """Seconds an attention call reading ``nbytes`` takes beyond the smallest published call, on a device of
    ``bandwidth_tb_s`` TB/s: ``T(x) - T(x_0)`` with ``T(x) = x / (u_dec(x) B)``, ``x`` held at ``x_0`` below it
    (so 0 there).  The caller adds its fixed kernel cost in place of the published floor ``T(x_0)``."""
    dec = decode_curve()
    bw = bandwidth_tb_s * 1e12
    mib = np.maximum(np.asarray(nbytes, dtype=float) / MIB, dec.floor_mib)  # x held at x_0 below it
    t = mib * MIB / (dec(mib, bandwidth_tb_s) * bw)  # T(x) = x / (u(x) B)
    t0 = dec.floor_mib * MIB / (dec(dec.floor_mib, bandwidth_tb_s) * bw)  # T(x_0)
    return np.maximum(t - t0, 0.0)


def prefill_curve(kernel: str, generation: str) -> PrefillCurve:
    """The prefill curve of FlashAttention generation ``kernel`` (``fa2``, ``fa3``) on a device of ``generation``.

    A generation without its own benchmark takes the one ``kernels.json`` names (``borrowed``); a kernel with no
    curve on that generation falls back to ``fa2`` there (FA3 runs on Hopper only).

    :raises InputError: an unknown kernel (one line).
    """
    if kernel not in PREFILL_KERNELS:
        raise InputError(f"unknown attention kernel {kernel!r}: known are {', '.join(PREFILL_KERNELS)}")
    _, curves, gens, _ = _attention()
    gen = gens.get(generation, gens[""])
    return curves.get((kernel, gen)) or curves[("fa2", gen)]


def attention_borrowed(generation: str) -> str | None:
    """Why a device generation without attention benchmarks of its own runs another's curve (None: its own)."""
    return _attention()[3].get(generation)
