"""Operator-level cost of one decoder forward pass on one device (optionally tensor parallel), vectorised over shapes.

A pass of ``b`` rows, ``q`` new positions per row over a KV cache of ``L``
tokens is priced operator by operator, each as a roofline plus fixed costs::

    t(op) = max(FLOPs / (e_f F), bytes / (e_b B)) + kernels x t_k

with ``F`` the dense bf16 peak and ``B`` the memory bandwidth of the device
spec, and a few efficiencies fitted on measured profiles (:class:`Efficiencies`,
:mod:`lrsim.gpu.fit`).  What is modelled is the engine the profiles measured:
transformers' eager Qwen2/Qwen3 forward with SDPA attention and a
``DynamicCache`` (``docs/gpu-model.md``), whose kernel count per layer is
counted from its code; with CUDA graphs the kernel sum (``kernel_sum``) is
what remains, eagerly the host's launches bound the wall time (``wall``).

Tensor parallelism over ``n`` GPUs (Megatron style): QKV, gate/up and the LM
head split their output columns, O and down their input rows, attention its
heads; two ring all-reduces per layer (after O and after down) of the ``M x
hidden`` activations and one all-gather of the logits, each
``2 (n-1)/n bytes / bw + 2 (n-1) latency`` (all-gather: half of it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InputError
from .archs import ArchConfig
from .devices import DeviceSpec

BYTES = 2  # bf16 weights, activations and KV cache
ATTN_TILE = 64  # query rows per tile of the masked (q > 1) SDPA kernel: q = 2..64 cost the same
# kernels per decoder layer of transformers' eager Qwen2 forward (counted from its code):
NORM_KERNELS = 7  # RMSNorm: to(fp32), pow, mean, add eps, rsqrt, mul, to(bf16) x weight (7 with the weight mul)
ROPE_KERNELS = 10  # q and k: x cos, rotate_half (neg, cat), x sin, add
LAYER_KERNELS = 2 * NORM_KERNELS + 3 + ROPE_KERNELS + 2 + 1 + 1 + 1 + 2 + 2 + 2 + 1
#              norms  q,k,v   rope   cat K,V  sdpa transpose o  adds gate,up act,mul down  = 39
QK_NORM_KERNELS = 2 * NORM_KERNELS  # Qwen3: RMSNorm of q and of k per head
FORWARD_KERNELS = 15 + NORM_KERNELS + 1  # embedding, rotary tables, positions and masks; final norm; LM head
USABLE_MEMORY = 0.85  # of the device's memory for weights + KV + activations (reproduces the H100 run's skips)


@dataclass(frozen=True)
class Efficiencies:
    """The fitted parameters (``lrsim/data/gpus/fit-h100.json``): fractions of the spec's peaks, and fixed costs."""

    flops: float = 0.7  # achieved fraction of the dense bf16 peak (GEMMs, prefill attention)
    bandwidth: float = 0.8  # achieved fraction of memory bandwidth (weights, activations, KV copies)
    kernel_us: float = 2.0  # fixed device time per kernel (us)
    splitk_bytes: float = 60.0  # bytes per GEMM output element and row, up to splitk_rows rows (split-K partials)
    splitk_rows: float = 20.0  # rows over which a skinny GEMM's extra output traffic grows
    attn_decode: float = 0.66  # fraction of bandwidth of q = 1 attention (K and V read once per query head)
    attn_masked: float = 0.04  # fraction of bf16 peak of q > 1 attention on 64-row query tiles
    masked_ns_per_token: float = 20.0  # q > 1 attention: ns per layer and cached token, whatever the batch
    masked_layer_us: float = 15.0  # q > 1 attention: us per layer (mask path)
    host_us: float = 35.0  # wall only: host time per kernel launched by the eager forward (us)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Setup:
    """What one pass runs on: the architecture, the device, the efficiencies and the TP degree."""

    arch: ArchConfig
    device: DeviceSpec
    eff: Efficiencies
    tp: int = 1

    @property
    def kernel_s(self) -> float:
        return 1e-6 * (self.device.kernel_us if self.device.kernel_us is not None else self.eff.kernel_us)

    @property
    def host_s(self) -> float:
        return 1e-6 * (self.device.host_us if self.device.host_us is not None else self.eff.host_us)


def check_tp(arch: ArchConfig, tp: int) -> None:
    """:raises InputError: ``tp`` does not divide the attention and the KV heads (one line)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"TP degree must be an integer >= 1, got {tp!r}")
    if arch.heads % tp or arch.kv_heads % tp:
        raise InputError(f"TP {tp} does not divide {arch.name}'s {arch.heads} attention heads and {arch.kv_heads} "
                         "KV heads")


def _mem(s: Setup, nbytes):
    return nbytes / (s.eff.bandwidth * s.device.bandwidth)  # bytes / achieved bandwidth


def gemm(s: Setup, M, N: int, K: int, kernels: int = 1):
    """``[M x K] @ [K x N]`` in bf16: ``max(2MNK / (e_f F), (NK + MK + MN) 2 B / (e_b B) + split-K) + k t_k``."""
    flops = 2.0 * M * N * K
    nbytes = BYTES * (N * K + M * K + M * N)  # weights read once, inputs read, outputs written
    nbytes = nbytes + N * np.minimum(M, s.eff.splitk_rows) * s.eff.splitk_bytes  # skinny GEMMs' partial sums
    return np.maximum(flops / (s.eff.flops * s.device.flops), _mem(s, nbytes)) + kernels * s.kernel_s


def elementwise(s: Setup, nbytes, kernels: int):
    """Memory-bound kernels: ``bytes / (e_b B) + k t_k``."""
    return _mem(s, nbytes) + kernels * s.kernel_s


def attention(s: Setup, L, b, q, prefill: bool = False):
    """SDPA over the cache, per layer (local heads).

    q = 1: every query head reads its K and V rows: ``b (L+1) H d 2 x 2 B / (e_a B)``.
    q > 1 (masked path, as measured: far above the bytes): ``4 b H ceil(q/64) 64 (L+q) d / (e_m F)`` on padded
    64-row tiles, plus ``(L+q) x ns/token`` and a per-layer fixed cost.
    prefill (no cache, causal): ``2 b H q^2 d`` FLOPs at the GEMM efficiency.
    """
    a, e, dev = s.arch, s.eff, s.device
    heads = a.heads // s.tp
    Lk = L + q
    if prefill:
        return 2.0 * b * heads * q * q * a.head_dim / (e.flops * dev.flops) + s.kernel_s  # causal: half of 4 b H q^2 d
    decode = b * Lk * heads * a.head_dim * 2 * BYTES / (e.attn_decode * dev.bandwidth)
    tiles = np.ceil(q / ATTN_TILE) * ATTN_TILE
    masked = (4.0 * b * heads * tiles * Lk * a.head_dim / (e.attn_masked * dev.flops)
              + Lk * e.masked_ns_per_token * 1e-9 + e.masked_layer_us * 1e-6)
    return np.where(q == 1, decode, masked) + s.kernel_s


def ring(s: Setup, nbytes, all_reduce: bool = True):
    """Ring all-reduce: ``2 (n-1)/n x bytes / bw + 2 (n-1) x latency`` (all-gather: half); 0 without TP."""
    n = s.tp
    if n == 1:
        return 0.0 * nbytes
    steps = 2 * (n - 1) if all_reduce else n - 1
    return steps / n * nbytes / s.device.ring_bandwidth(n) + steps * s.device.link_latency_us * 1e-6 + s.kernel_s


def layer_ops(s: Setup, L, b, q, prefill: bool = False) -> dict:
    """Seconds of each operator of one decoder layer (arrays over the shapes)."""
    a, n = s.arch, s.tp
    M = b * q
    h, hq, hkv, inter = a.hidden, a.q_dim // n, a.kv_dim // n, a.intermediate // n
    ops = {
        "norms": elementwise(s, 2 * M * 36 * h, 2 * NORM_KERNELS),  # fp32 RMSNorm: ~36 bytes per element
        "qkv": gemm(s, M, hq + 2 * hkv, h, kernels=3),
        "rope": elementwise(s, M * 20 * (hq + hkv), ROPE_KERNELS),  # 5 bf16 elementwise passes over q and k
        "kv_append": elementwise(s, b * (2 * L + q) * hkv * 2 * BYTES, 2),  # torch.cat: read L, write L + q
        "attention": attention(s, L, b, q, prefill),
        "o": gemm(s, M, h, hq) + elementwise(s, M * 4 * hq, 1),  # with the transpose copy before it
        "mlp": gemm(s, M, 2 * inter, h, kernels=2) + elementwise(s, M * 10 * inter, 2) + gemm(s, M, h, inter),
        "residual": elementwise(s, 2 * M * 6 * h, 2),
        "all_reduce": 2 * ring(s, M * h * BYTES),
    }
    if a.qk_norm:
        ops["qk_norm"] = elementwise(s, M * 36 * (hq + hkv), QK_NORM_KERNELS)
    return ops


def forward_ops(s: Setup, L, b, q, prefill: bool = False) -> dict:
    """Seconds of each operator summed over the whole pass: layers x per-layer ops + LM head and fixed kernels."""
    a = s.arch
    M = b * q
    ops = {k: a.layers * v for k, v in layer_ops(s, L, b, q, prefill).items()}
    vocab = -(-a.vocab // s.tp)  # vocab-parallel LM head (ceil)
    ops["lm_head"] = gemm(s, M, vocab, a.hidden) + ring(s, M * a.vocab * BYTES, all_reduce=False)
    ops["fixed"] = elementwise(s, M * 36 * a.hidden, FORWARD_KERNELS - 1)  # final norm, embedding, rotary, masks
    return ops


def kernels(s: Setup) -> int:
    """Kernels one pass launches (the eager host's work is proportional to it)."""
    per_layer = LAYER_KERNELS + QK_NORM_KERNELS * s.arch.qk_norm + 2 * (s.tp > 1)
    return s.arch.layers * per_layer + FORWARD_KERNELS + (s.tp > 1)


def forward_s(s: Setup, L, b, q, timed: str = "kernel_sum", prefill: bool = False):
    """Seconds of one pass: the kernel sum, or (``wall``) ``max(kernel sum, kernels x host time per launch)``."""
    L, b, q = (np.asarray(x, dtype=float) for x in (L, b, q))
    total = sum(forward_ops(s, L, b, q, prefill).values())
    if timed == "wall":
        return np.maximum(total, kernels(s) * s.host_s)  # eager: the host launches, the device runs behind it
    if timed != "kernel_sum":
        raise InputError(f"timing kind must be kernel_sum or wall, got {timed!r}")
    return total


def memory_need(arch: ArchConfig, L, b, q, tp: int = 1):
    """Bytes per GPU: weights / n + KV of ``b (L + q)`` tokens / n + the pass's largest activations."""
    L, b, q = (np.asarray(x, dtype=float) for x in (L, b, q))
    M = b * q
    acts = M * (arch.vocab * 4 + 3 * arch.intermediate * BYTES + 4 * arch.hidden * 4) / tp  # fp32 logits, MLP, norms
    return arch.params * BYTES / tp + arch.kv_bytes_per_token(BYTES) * b * (L + q) / tp + acts


def fits(s: Setup, L, b, q):
    """True where the pass fits ``USABLE_MEMORY`` of the device's memory."""
    return memory_need(s.arch, L, b, q, s.tp) <= USABLE_MEMORY * s.device.memory_bytes
