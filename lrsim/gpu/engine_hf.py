"""The ``hf-eager`` engine: transformers' eager Qwen2/Qwen3/Llama forward with SDPA attention and a
``DynamicCache``, bf16 (what ``lrref --backend hf`` runs, and what the embedded H100 profiles measured).

Per decoder layer (heads, KV heads and MLP width divided by the TP degree ``n``), kernels counted from
transformers' modeling code (``modeling_qwen2.py``, 5.x; 39 per layer, 53 with Qwen3's q/k norms):

- QKV, O, gate+up, down GEMMs: ``2 M N K`` FLOPs, weights + inputs + outputs (+ split-K partials); 3, 1, 2, 1
  kernels;
- attention ``q = 1``: every query head reads its K and V, ``b (L+1) H d x 2 x 2`` bytes at ``e_a B``; 1;
- attention ``q > 1`` (SDPA's masked path): ``4 b H ceil(q/64) 64 (L+q) d`` FLOPs at ``e_m F`` + ``(L+q) c_L`` +
  ``c_layer``; 1;
- KV append (``torch.cat``): read ``L``, write ``L + q`` tokens of K and V; 2;
- fp32 RMSNorms, RoPE, transpose, residual adds, SiLU x up: ~36, 20, 4, 12, 10 bytes per element; 14, 10, 1, 2, 2;
- TP: two all-reduces of ``M x hidden x 2`` bytes (NCCL, :mod:`lrsim.gpu.collectives`); 2.

Per pass: the LM head (vocab-parallel under TP, then an all-gather of the logits), the final norm, embedding,
rotary tables and masks (23 kernels).  ``wall`` is ``max(kernel sum, kernels x t_host)``: the eager host launches
every kernel (``t_host`` each) while the device runs behind it.
"""

from __future__ import annotations

import numpy as np

from .collectives import nccl_all_gather, nccl_all_reduce
from .dtypes import BF16
from .ops import elementwise, gemm
from .setup import Setup

ATTN_TILE = 64  # query rows per tile of the masked (q > 1) SDPA kernel: q = 2..64 cost the same
NORM_KERNELS = 7  # RMSNorm: to(fp32), pow, mean, add eps, rsqrt, mul, to(bf16) x weight (7 with the weight mul)
ROPE_KERNELS = 10  # q and k: x cos, rotate_half (neg, cat), x sin, add
LAYER_KERNELS = 2 * NORM_KERNELS + 3 + ROPE_KERNELS + 2 + 1 + 1 + 1 + 2 + 2 + 2 + 1
#              norms  q,k,v   rope   cat K,V  sdpa transpose o  adds gate,up act,mul down  = 39
QK_NORM_KERNELS = 2 * NORM_KERNELS  # Qwen3: RMSNorm of q and of k per head
FORWARD_KERNELS = 15 + NORM_KERNELS + 1  # embedding, rotary tables, positions and masks; final norm; LM head


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
    decode = b * Lk * heads * a.head_dim * 2 * BF16 / (e.attn_decode * dev.bandwidth)
    tiles = np.ceil(q / ATTN_TILE) * ATTN_TILE
    masked = (4.0 * b * heads * tiles * Lk * a.head_dim / (e.attn_masked * dev.flops)
              + Lk * e.masked_ns_per_token * 1e-9 + e.masked_layer_us * 1e-6)
    return np.where(q == 1, decode, masked) + s.kernel_s


def layer_ops(s: Setup, L, b, q, prefill: bool = False) -> dict:
    """Seconds of each operator of one decoder layer (arrays over the shapes)."""
    a, n = s.arch, s.tp
    M = b * q
    h, hq, hkv, inter = a.hidden, a.q_dim // n, a.kv_dim // n, a.intermediate // n
    ops = {
        "norms": elementwise(s, 2 * M * 36 * h, 2 * NORM_KERNELS),  # fp32 RMSNorm: ~36 bytes per element
        "qkv": gemm(s, M, hq + 2 * hkv, h, kernels=3),
        "rope": elementwise(s, M * 20 * (hq + hkv), ROPE_KERNELS),  # 5 bf16 elementwise passes over q and k
        "kv_append": elementwise(s, b * (2 * L + q) * hkv * 2 * BF16, 2),  # torch.cat: read L, write L + q
        "attention": attention(s, L, b, q, prefill),
        "o": gemm(s, M, h, hq) + elementwise(s, M * 4 * hq, 1),  # with the transpose copy before it
        "mlp": gemm(s, M, 2 * inter, h, kernels=2) + elementwise(s, M * 10 * inter, 2) + gemm(s, M, h, inter),
        "residual": elementwise(s, 2 * M * 6 * h, 2),
        "all_reduce": 2 * nccl_all_reduce(s, M * h * BF16),
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
    ops["lm_head"] = gemm(s, M, vocab, a.hidden) + nccl_all_gather(s, M * a.vocab * BF16)
    ops["fixed"] = elementwise(s, M * 36 * a.hidden, FORWARD_KERNELS - 1)  # final norm, embedding, rotary, masks
    return ops


def kernels(s: Setup) -> int:
    """Kernels one pass launches (the eager host's work is proportional to it)."""
    per_layer = LAYER_KERNELS + QK_NORM_KERNELS * s.arch.qk_norm + 2 * (s.tp > 1)
    return s.arch.layers * per_layer + FORWARD_KERNELS + (s.tp > 1)


def wall_s(s: Setup, kernel_sum, M, q=1.0):
    """Eager wall time: the host launches every kernel while the device runs behind it."""
    return np.maximum(kernel_sum, kernels(s) * s.host_s)
