"""Mixture-of-experts passes: how many experts a pass wakes, and what reading them costs.

A pass feeds ``M`` tokens to an MoE layer of ``E`` routed experts, each token going through ``k`` of them.  Every
expert at least one token picked must be read whole (its gate, up and down weights), so a pass's weight bytes grow
with its tokens until every expert is touched: this is what separates an MoE target from a dense one under LR's
batches of step rows.

**Distinct experts.**  With uniform routing (the bound BLIS prices, pessimistic: real routers pick some experts
more often, and a step's tokens share topics), one token leaves a given expert untouched with probability
``1 - k/E``; ``N`` independent tokens leave it untouched with probability ``(1 - k/E)^N``, so::

    E[D] = E (1 - (1 - k/E)^N)             D(1) = k,   D -> E as N grows

**Routing overlap** ``rho`` in [0, 1): the tokens of one pass (consecutive positions of one sequence, or rows that
share a prefix) route alike.  A pass of ``M`` tokens counts as ``N = 1 + (M - 1)(1 - rho)`` independent ones:
``rho = 0`` is the uniform bound (the default: nothing measured here tells how much a reasoning step's tokens
share their experts), ``rho -> 1`` reads only one token's ``k`` experts whatever ``M``.

**Bytes and FLOPs of the routed experts** (per GPU, TP ``n`` shards every expert's intermediate width, as vLLM's
and SGLang's ``FusedMoE`` do without expert parallelism): weights ``E[D] x 3 h i x w / n`` bytes (``w`` the
experts' bytes per weight: MXFP4 4.25 bits with its scales for gpt-oss), activations ``M k (h + i) x 2 x 2`` bytes,
``2 M k x 3 h i / n`` FLOPs.

**The fused-MoE call** (top-k, block alignment, the w13 grouped GEMM, the activation, the w2 grouped GEMM, the
weighted sum: the kernel path the engine runs for the experts' format, ``kernels.json`` "moe") is priced from
published kernel sweeps, not at the dense GEMMs' fitted efficiencies::

    t = t0 + max(FLOPs / (u_f P), W / (u_b B))

``W`` those bytes, ``B`` the datasheet bandwidth, ``P`` the dense bf16 (or FP8) peak; ``t0`` (the call's fixed
time under a CUDA graph), ``u_b`` and ``u_f`` (absolute fractions) come from a sweep of the kernel over batch
sizes ``M``: ``t0`` and ``u_b`` the least-squares line ``t = t0 + W(M) / (u_b B)`` through its memory-bound points,
``u_f`` the mean of ``FLOPs / ((t - t0) P)`` over its compute-bound ones (:func:`fit_sweeps`).  The achieved
fraction of the bandwidth, ``W / (t B)``, rises with ``M`` from a few per cent (one token: the fixed time
dominates) towards ``u_b``.

**Expert parallelism** (``model:...:ep``, vLLM's ``--enable-expert-parallel``, SGLang's ``--ep``): the ``n`` GPUs
hold ``E / n`` whole experts each instead of a ``1 / n`` slice of every expert, and a pass lasts as long as its
slowest GPU: the one whose own experts the pass wakes most.  Each expert is woken with probability
``p = 1 - (1 - k/E)^N``; taking the experts as woken independently (an approximation: a token's ``k`` picks are
distinct, so the counts are slightly anti-correlated), a GPU's woken count is ``Binomial(E/n, p)`` and the slowest
of ``n`` GPUs wakes on average::

    E[max_r D_r] = sum_{j=0}^{E/n - 1} (1 - F(j)^n),   F the Binomial(E/n, p) CDF

(``E[max] = sum_j P(max > j)`` for a count; ``n = 1`` gives ``E[D]``).  Against a seeded Monte Carlo of uniform
routing (``tests/test_gpu_moe.py``) it is within 3.5% for the shipped shapes at EP 2-8 and 1-64 tokens, except
Mixtral's 8 experts at EP 8 with one token (0.9 for 1: -10%).  That GPU reads its woken experts whole,
``E[max] x 3 h i x w`` bytes; its FLOPs and activations are the mean GPU's, ``M k / n`` token-expert pairs (an
approximation: the busiest GPU may have more).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .archs import ArchConfig
from .kernels import KERNELS_FILE, PEAKS

MXFP4_BYTES = (4 + 8 / 32) / 8  # 4-bit values and one 8-bit (E8M0) scale per 32: 4.25 bits per weight
ROUTING_OVERLAP = 0.0  #: the default: uniform routing, the pessimistic bound (see the module docstring)
MOE_KERNELS = 7  # router GEMM, top-k softmax, moe_align_block_size, fused_moe w13, SiluAndMul, fused_moe w2, moe_sum


def distinct_experts(experts: int, k: int, tokens, overlap: float = ROUTING_OVERLAP):
    """``E[D] = E (1 - (1 - k/E)^N)``, ``N = 1 + (M - 1)(1 - rho)``: experts a pass of ``tokens`` reads (arrays)."""
    m = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    n = 1.0 + (m - 1.0) * (1.0 - overlap)
    return experts * (1.0 - (1.0 - k / experts) ** n)


def expert_weight_bytes(arch: ArchConfig, dtype_bytes: float) -> float:
    """Bytes per weight of the routed experts: the checkpoint's own format where only they are quantized
    (gpt-oss's MXFP4), else the setup's format."""
    if arch.weights_format == "mxfp4":
        return MXFP4_BYTES
    return dtype_bytes


@functools.lru_cache(maxsize=32)
def _log_binomials(m: int) -> tuple[np.ndarray, np.ndarray]:
    """``j = 0..m`` and ``log C(m, j)``."""
    j = np.arange(m + 1, dtype=float)
    return j, np.array([math.lgamma(m + 1) - math.lgamma(x + 1) - math.lgamma(m - x + 1) for x in range(m + 1)])


def _max_of_binomials(m: int, p: np.ndarray, ranks: int) -> np.ndarray:
    """``E[max of ranks i.i.d. Binomial(m, p)] = sum_{j<m} (1 - F(j)^ranks)`` for each ``p`` (1-D)."""
    j, log_c = _log_binomials(m)
    q = np.clip(p, 1e-12, 1.0 - 1e-12)[:, None]  # keeps the logs finite at p = 0 and p = 1
    pmf = np.exp(log_c + j * np.log(q) + (m - j) * np.log1p(-q))
    cdf = np.minimum(np.cumsum(pmf, axis=1)[:, :-1], 1.0)
    return np.sum(1.0 - cdf ** ranks, axis=1)


def experts_per_rank(experts: int, k: int, tokens, ranks: int, overlap: float = ROUTING_OVERLAP):
    """Expert parallelism over ``ranks`` GPUs of ``experts / ranks`` whole experts each: the experts the slowest
    GPU's share of a pass of ``tokens`` wakes, ``E[max_r D_r]`` (the module docstring; arrays)."""
    d = np.asarray(distinct_experts(experts, k, tokens, overlap), dtype=float)
    if ranks == 1:
        return d
    if d.size == 1:  # one pass
        return _max_of_binomials(experts // ranks, d.reshape(1) / experts, ranks).reshape(d.shape)
    u, inv = np.unique(d, return_inverse=True)  # a grid has few distinct token counts
    return _max_of_binomials(experts // ranks, u / experts, ranks)[inv].reshape(d.shape)


# --- the fused-MoE call's efficiency (kernels.json "moe"): published sweeps, absolute fractions -----------------

ACT_BYTES = 2 * 2  # per (token-expert pair, hidden + width element): bf16 in and out, as moe_mlp prices them


@dataclass(frozen=True)
class MoeSweep:
    """One published sweep of a fused-MoE call over batch sizes: the shape, the GPU's datasheet peaks, ``M`` and
    the call's time in us at each."""

    gpu: str
    bandwidth_tb_s: float
    peak_tflops: float
    experts: int
    held: int  #: experts on the timed GPU (``experts`` unless the sweep simulates expert parallelism)
    top_k: int
    intermediate: int  #: the experts' width on the timed GPU (``N``)
    hidden: int  #: ``K``
    weight_bytes: float
    M: tuple[float, ...]
    us: tuple[float, ...]
    memory_bound_M: tuple[float, ...]
    compute_bound_M: tuple[float, ...]

    def nbytes(self, M):
        """``W(M) = held (1 - (1 - k/E)^M) x 3 N K w + M k (held/E) (N + K) x 4``: the woken experts the timed GPU
        holds, read whole, and its token-expert pairs' activations (arrays)."""
        m = np.asarray(M, dtype=float)
        share = self.held / self.experts  # the timed GPU's share of the experts (1 without expert parallelism)
        woken = share * distinct_experts(self.experts, self.top_k, m)  # held (1 - (1 - k/E)^M)
        weights = woken * 3 * self.intermediate * self.hidden * self.weight_bytes  # D x 3 N K w
        return weights + m * self.top_k * share * (self.intermediate + self.hidden) * ACT_BYTES  # + M k (N + K) 4

    def flops(self, M):
        """``F(M) = 2 M k (held/E) x 3 N K``: the timed GPU's token-expert pairs through w13 and w2 (arrays)."""
        m = np.asarray(M, dtype=float)
        pairs = m * self.top_k * self.held / self.experts  # M k held/E: the timed GPU's token-expert pairs
        return 2.0 * pairs * 3 * self.intermediate * self.hidden  # 2 pairs x 3 N K

    def time_us(self, M) -> float:
        """The published time at ``M`` (one of the sweep's points)."""
        return self.us[self.M.index(float(M))]


@dataclass(frozen=True)
class MoeKernel:
    """One kernel path on one GPU generation: ``t = t0 + max(F / (u_f P), W / (u_b B))`` and where it comes from."""

    path: str
    generation: str
    kernel: str
    peak: str  #: the tensor-core peak it runs at: ``bf16`` or ``fp8``
    fixed_us: float  #: ``t0``: the call's fixed time (us)
    bandwidth: float  #: ``u_b``: achieved fraction of the datasheet bandwidth streaming the woken experts
    flops: float  #: ``u_f``: achieved fraction of the dense ``peak`` when compute-bound
    source: str
    url: str = ""
    sweeps: tuple[MoeSweep, ...] = ()
    borrowed: str = ""  #: why this generation runs another's numbers ("" where they are its own)

    def seconds(self, nbytes, flops, bandwidth: float, peak: float):
        """``t0 + max(F / (u_f P), W / (u_b B))`` for ``nbytes`` and ``flops`` (arrays) on a device of ``bandwidth``
        bytes/s and ``peak`` FLOP/s."""
        t_bytes = np.asarray(nbytes, dtype=float) / (self.bandwidth * bandwidth)  # W / (u_b B)
        t_flops = np.asarray(flops, dtype=float) / (self.flops * peak)  # F / (u_f P)
        return 1e-6 * self.fixed_us + np.maximum(t_flops, t_bytes)  # t0 + max(F / (u_f P), W / (u_b B))

    def achieved(self, nbytes, flops, bandwidth: float, peak: float):
        """The achieved fraction of the datasheet bandwidth, ``W / (t B)``: the curve by batch size (arrays)."""
        return np.asarray(nbytes, dtype=float) / (self.seconds(nbytes, flops, bandwidth, peak) * bandwidth)  # W/(tB)


def fit_sweeps(sweeps: tuple[MoeSweep, ...]) -> tuple[float | None, float | None, float | None]:
    """``(t0 us, u_b, u_f)`` from published sweeps (None where they hold no such points).

    ``t0``, ``u_b``: least squares of ``t_i = t0 + W_i / (u_b B_i)`` over every memory-bound point, linear in
    ``(t0, 1/u_b)`` with regressors ``(1, W_i / B_i)``.  ``u_f``: the mean of ``F_i / ((t_i - t0) P_i)`` over the
    compute-bound points."""
    x, y = [], []
    for sw in sweeps:
        for m in sw.memory_bound_M:
            x.append(float(sw.nbytes(m)) / (sw.bandwidth_tb_s * 1e12) * 1e6)  # W_i / B_i in us at u_b = 1
            y.append(sw.time_us(m))
    t0 = u_b = None
    if len(x) >= 2:
        a = np.column_stack([np.ones(len(x)), x])  # t_i = t0 * 1 + (1 / u_b) * W_i / B_i
        (t0, inv), *_ = np.linalg.lstsq(a, np.asarray(y), rcond=None)
        t0, u_b = float(t0), 1.0 / float(inv)
    u_f = None
    fr = [float(sw.flops(m)) / ((sw.time_us(m) - (t0 or 0.0)) * 1e-6 * sw.peak_tflops * 1e12)  # F / ((t - t0) P)
          for sw in sweeps for m in sw.compute_bound_M]
    if fr:
        u_f = float(np.mean(fr))
    return t0, u_b, u_f


def _num(d: dict, key: str, where: str, cast=float):
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise InputError(f"{where}: {key!r} must be a positive number, got {v!r}")
    return cast(v)


def _sweep(d: object, where: str) -> MoeSweep:
    if not isinstance(d, dict):
        raise InputError(f"{where}: a sweep must be an object")
    Ms, us = d.get("M"), d.get("us")
    if not isinstance(Ms, list) or not isinstance(us, list) or not Ms or len(Ms) != len(us):
        raise InputError(f"{where}: 'M' and 'us' must be non-empty lists of equal length")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in Ms + us):
        raise InputError(f"{where}: 'M' and 'us' must hold positive numbers")
    picks = {}
    for key in ("memory_bound_M", "compute_bound_M"):
        picks[key] = tuple(float(m) for m in d.get(key, []))
        if any(m not in Ms for m in picks[key]):
            raise InputError(f"{where}: {key} names batch sizes the sweep does not hold: {d.get(key)}")
    experts = _num(d, "experts", where, int)
    held = _num(d, "held", where, int) if "held" in d else experts
    return MoeSweep(str(d.get("gpu", "")), _num(d, "bandwidth_tb_s", where), _num(d, "peak_tflops", where), experts,
                    held, _num(d, "top_k", where, int), _num(d, "intermediate", where, int),
                    _num(d, "hidden", where, int), _num(d, "weight_bytes", where),
                    tuple(float(m) for m in Ms), tuple(float(t) for t in us), picks["memory_bound_M"],
                    picks["compute_bound_M"])


@functools.lru_cache(maxsize=1)
def _moe_data() -> dict:
    d = json.loads(KERNELS_FILE.read_text(encoding="utf-8")).get("moe")
    if not isinstance(d, dict) or not all(isinstance(d.get(k), dict) for k in ("paths", "formats", "generations")):
        raise InputError(f"{KERNELS_FILE.name}: the 'moe' section needs 'paths', 'formats' and 'generations'")
    return d


def _entry(path: str, gen: str) -> tuple[dict, dict]:
    paths = _moe_data()["paths"]
    if path not in paths or gen not in paths[path].get("generations", {}):
        raise InputError(f"{KERNELS_FILE.name}: moe.paths has no {path}/{gen} (a borrow names a curve that is absent)")
    return paths[path], paths[path]["generations"][gen]


@functools.lru_cache(maxsize=None)
def _resolve(path: str, gen: str, seen: tuple[str, ...] = ()) -> MoeKernel:
    """One path on one generation: its sweeps' fit, explicit numbers over it, borrowed ones where it has none."""
    where = f"{KERNELS_FILE.name}: moe.paths.{path}.generations.{gen}"
    if f"{path}/{gen}" in seen:
        raise InputError(f"{where}: the borrows form a cycle ({' -> '.join(seen)})")
    p, e = _entry(path, gen)
    if p.get("peak") not in PEAKS or not str(e.get("source", "")).strip():
        raise InputError(f"{where}: needs a source, and its path a peak ({' or '.join(PEAKS)})")
    sweeps = tuple(_sweep(s, f"{where}.sweeps[{j}]") for j, s in enumerate(e.get("sweeps", [])))
    t0, u_b, u_f = fit_sweeps(sweeps)
    got = {"fixed_us": t0, "bandwidth": u_b, "flops": u_f}
    for key in got:
        if key in e:
            got[key] = _num(e, key, where)
    borrow = e.get("borrow", {})
    for key, ref in borrow.items():  # "flops": "triton/hopper": that path's number on that generation
        if key not in got:
            raise InputError(f"{where}: cannot borrow {key!r} (only {', '.join(got)})")
        other_path, _, other_gen = str(ref).partition("/")
        got[key] = getattr(_resolve(other_path, other_gen, seen + (f"{path}/{gen}",)), key)
    missing = [k for k, v in got.items() if v is None]
    if missing:
        raise InputError(f"{where}: no sweep point or number gives {', '.join(missing)}")
    if got["fixed_us"] < 0 or not 0 < got["bandwidth"] <= 1 or not 0 < got["flops"] <= 1:
        raise InputError(f"{where}: t0 {got['fixed_us']:.1f} us, u_b {got['bandwidth']:.3f}, u_f {got['flops']:.3f} "
                         "are out of range (t0 >= 0, 0 < u <= 1)")
    return MoeKernel(path, gen, str(p.get("kernel", "")), p["peak"], got["fixed_us"], got["bandwidth"], got["flops"],
                     str(e["source"]), str(e.get("url", "")), sweeps)


def moe_kernels() -> dict[tuple[str, str], MoeKernel]:
    """Every path on every generation it has numbers for, by ``(path, generation)``."""
    return {(p, g): _resolve(p, g) for p, d in _moe_data()["paths"].items() for g in d.get("generations", {})}


@functools.lru_cache(maxsize=None)
def moe_kernel(fmt: str, weights_format: str = "", generation: str = "") -> MoeKernel:
    """The fused-MoE path the engines run for experts in format ``fmt`` (a :class:`~lrsim.gpu.dtypes.Dtype`'s
    ``kernel_curve``; MXFP4 where the checkpoint's ``weights_format`` says so) on a GPU of ``generation``.

    :raises InputError: a format or a generation with no path (one line naming the known ones).
    """
    d = _moe_data()
    key = "mxfp4" if weights_format == "mxfp4" else fmt
    if key not in d["formats"]:
        raise InputError(f"no fused-MoE kernel path for experts in {key!r}: known are {', '.join(d['formats'])}")
    if generation not in d["generations"]:
        raise InputError(f"no fused-MoE curve for GPU generation {generation!r}: known are "
                         f"{', '.join(repr(g) for g in d['generations'])}")
    path, gen = d["formats"][key], d["generations"][generation]
    own = d["paths"].get(path, {})
    if gen in own.get("generations", {}):
        return _resolve(path, gen)
    if gen not in own.get("borrowed", {}):
        raise InputError(f"{KERNELS_FILE.name}: moe path {path!r} has no curve for {gen!r} and borrows none")
    k = _resolve(path, own["borrowed"][gen])
    return MoeKernel(**{**k.__dict__, "generation": gen,
                        "borrowed": f"{gen} runs {path}'s {k.generation} numbers (no sweep of its own)"})


def moe_seconds(s, nbytes, flops):
    """Seconds of one fused-MoE call of ``nbytes`` (woken experts' weights and the pairs' activations) and ``flops``
    on setup ``s``: ``t0 + max(F / (u_f P), W / (u_b B))`` with its path's numbers (:func:`moe_kernel`)."""
    k = moe_kernel(s.fmt.kernel_curve, s.arch.weights_format, s.device.generation)
    fp8 = k.peak == "fp8" and s.device.fp8_flops is not None  # FP8 paths only run where the format keeps FP8
    return k.seconds(nbytes, flops, s.device.bandwidth, s.device.fp8_flops if fp8 else s.device.flops)
