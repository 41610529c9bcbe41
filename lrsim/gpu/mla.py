"""Multi-head latent attention (MLA: DeepSeek-V2/V3/R1) as the serving engines run it.

An MLA layer caches one compressed latent per token, ``kv_lora_rank`` wide, and one RoPE key shared by the heads,
``qk_rope_head_dim`` wide (DeepSeek-V3: 512 + 64 = 576 elements per token and layer), instead of K and V per KV
head.  Its projections (DeepSeek-V2 paper, arXiv:2405.04434, section 2.1; ``vllm/model_executor/models/
deepseek_v2.py``, ``vllm/v1/attention/backends/mla/common.py``), with ``h`` the hidden size, ``H`` the heads,
``Lq`` ``q_lora_rank``, ``Lkv`` ``kv_lora_rank``, ``P`` ``qk_nope_head_dim``, ``R`` ``qk_rope_head_dim``, ``V``
``v_head_dim``:

- ``fused_qkv_a_proj`` (``q_a_proj`` and ``kv_a_proj_with_mqa`` merged, ``h -> Lq + Lkv + R``): vLLM builds it
  with ``disable_tp=True``, so it is **replicated**: every GPU runs all of it (without ``q_lora_rank``,
  DeepSeek-V2-Lite: a TP-sharded ``q_proj`` ``h -> H (P + R)`` and a replicated ``kv_a_proj_with_mqa``);
- ``q_a_layernorm``, ``kv_a_layernorm`` (RMSNorms of the two latents);
- ``q_b_proj`` (``Lq -> H (P + R)``, TP splits the heads); ``kv_b_proj`` (``Lkv -> H (P + V)``, TP splits the
  heads); ``o_proj`` (``H V -> h``, TP splits its input rows);
- the RoPE of ``q_pe`` and the shared ``k_pe``; ``concat_and_cache_mla`` writes the latent and ``k_pe`` to the
  paged cache.

**Two ways to run the attention** (``common.py``'s docstring: "a data-movement friendly approach" for decode, "a
compute friendly approach" for prefill):

- *absorbed* (decode, and the engines' small "prefills", speculative verification among them): ``W_UK`` is
  folded into the query and ``W_UV`` into the output, two per-head batched GEMMs (``torch.bmm``) over the local
  heads in bf16 (vLLM dequantizes ``kv_b_proj`` into ``W_UK_T`` and ``W_UV`` after loading), ``2 M H P Lkv`` and
  ``2 M H Lkv V`` FLOPs; the attention between them (FlashMLA on Hopper) is an MQA over the latent: every query
  head scores the ``Lkv + R`` wide cached entries and sums the ``Lkv`` wide latents, ``2 H (Lkv + R)`` plus ``2 H
  Lkv`` FLOPs per query and cached token, and reads each sequence's latent cache **once**, ``(L + q)(Lkv + R)``
  elements (an assumption where one sequence's query heads x positions span several of FlashMLA's 64-row tiles:
  taken as served by the L2 cache);
- *expanded* (prefill, and longer extends): ``kv_b_proj`` up-projects every cached and new latent to per-head K
  (``P``, with ``k_pe`` broadcast to ``P + R``) and V, then FlashAttention (varlen) runs plain multi-head
  attention with a ``P + R`` query/key and a ``V`` value head dimension; with a cached context vLLM gathers the
  latents from the paged cache and merges the two attention states (``merge_attn_states``).

Which way a pass goes is the engine's choice by query length per row: vLLM's MLA metadata builder classes a
request as a decode when its query length is at most the backend's ``reorder_batch_threshold``, 128 for FlashMLA
("process small prefills with decode pathway", ``vllm/v1/attention/backends/mla/flashmla.py``), and SGLang runs
its ``decode`` and ``target_verify`` modes absorbed.  Here: absorbed for a decode or verification pass of at most
:data:`DECODE_MAX_Q` positions per row, expanded for a prefill or a longer pass, on every serving engine release (an
assumption for the older ones: vLLM's MLA builders before the FlashMLA threshold classed as decodes only single
positions, or 1 + the speculative tokens, so their multi-position passes ran expanded; not modelled per release).

**Tensor parallelism** splits the heads (``q_b_proj``, ``kv_b_proj``, the attention, ``o_proj``) but not the latent:
vLLM counts one KV head for an MLA model on every TP rank (``ModelConfig.get_num_kv_heads``: "When using MLA
during decode it becomes MQA", ``return 1``), so **every GPU caches and reads the whole latent of its sequences**;
the KV cache is not divided by the TP degree (:func:`lrsim.gpu.model.memory_need`).  Nor are the replicated
``fused_qkv_a_proj`` weights, which every GPU holds and reads whole, plus the bf16 ``W_UK_T`` / ``W_UV`` copies of
its ``kv_b_proj`` share (:func:`extra_weight_bytes`).  Under DP attention each GPU runs all the heads of its own
rows (SGLang's reason for DP attention on DeepSeek: no replicated latent).

Efficiencies: the GEMMs and bmm at the dense GEMMs' fitted ``e_f``, ``e_b``; the MLA attention kernel at ``e_f``
of the bf16 peak and ``e_b`` of the bandwidth (FlashMLA's README: up to 660 TFLOPS compute-bound and 3000 GB/s
memory-bound on an H800 SXM5, 0.67 of 989 TFLOPS and 0.90 of 3.35 TB/s; the fit's 0.71 and 0.79 are taken: an
assumption, no MLA kernel was timed here).
"""

from __future__ import annotations

import numpy as np

from .archs import ArchConfig
from .dtypes import BF16
from .ops import elementwise, linear, mem_s
from .setup import Setup

DECODE_MAX_Q = 128  #: positions per row up to which a pass runs absorbed (vLLM FlashMLA's reorder_batch_threshold)
# Kernels of an MLA layer beyond a dense one's 10 (norms, qkv, rope, cache write, attention, o, gate_up, act,
# down), absorbed path: the q_a and kv_a RMSNorms, q_b_proj, and the two bmm (W_UK, W_UV) = 5; without
# q_lora_rank the q projection and kv_a_proj_with_mqa stand for qkv and one norm goes: 4.
EXTRA_KERNELS_Q_LORA = 5
EXTRA_KERNELS = 4
EXTRA_QUANT_KERNELS = 1  # w8a8: five quantized linears per layer (two MLA input projections, o, gate_up, down)


def extra_kernels(a: ArchConfig) -> int:
    """Kernels an MLA layer runs beyond a dense layer's (absorbed path; 0 for standard attention)."""
    if not a.is_mla:
        return 0
    return EXTRA_KERNELS_Q_LORA if a.q_lora_rank else EXTRA_KERNELS


def bmm(s: Setup, M, heads: int, N: int, K: int):
    """Per-head batched GEMMs in bf16 (``torch.bmm`` over the local heads): ``[M x K] @ [K x N]`` for each of
    ``heads``: ``2 M heads N K`` FLOPs; the bf16 weights once, the inputs and outputs, one kernel."""
    flops = 2.0 * M * heads * N * K
    nbytes = BF16 * heads * (N * K + M * K + M * N)
    return np.maximum(flops / (s.eff.flops * s.device.flops), mem_s(s, nbytes)) + s.kernel_s


def latent_attention(s: Setup, L, b, q):
    """The absorbed MLA attention kernel (FlashMLA), per layer: an MQA over the latent cache for the local heads.

    Bytes: each row's cached latents and RoPE keys, ``b (L + q)(Lkv + R)`` in the KV format, read once, plus the
    absorbed queries in (``Lkv + R`` per head) and the latent outputs out (``Lkv`` per head) in bf16.
    FLOPs: ``2 b H q (L + q)(Lkv + R)`` for the scores and ``2 b H q (L + q) Lkv`` for the values.
    """
    a = s.arch
    heads, kl, r = a.heads // s.tp, a.kv_lora_rank, a.qk_rope_head_dim
    Lk = L + q
    nbytes = b * Lk * (kl + r) * s.kv_bytes + b * q * heads * (2 * kl + r) * BF16
    flops = 2.0 * b * heads * q * Lk * (2 * kl + r)
    return np.maximum(flops / (s.eff.flops * s.device.flops), mem_s(s, nbytes)) + s.kernel_s


def expanded_attention(s: Setup, L, b, q, prefill: bool = False):
    """The expanded MLA attention (FlashAttention varlen), per layer: multi-head attention over the up-projected K
    (``P + R`` per head) and V (``V`` per head) of ``L + q`` tokens, bf16.  FLOPs ``2 b H q (L + q)(P + R + V)``
    (a causal prefill over no cache: ``b H q^2 (P + R + V)``)."""
    a = s.arch
    heads, dqk, dv = a.heads // s.tp, a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim
    Lk = L + q
    nbytes = BF16 * b * heads * (Lk * (dqk + dv) + q * (dqk + dv))  # K and V in; q in and the output out
    flops = b * heads * q * q * (dqk + dv) if prefill else 2.0 * b * heads * q * Lk * (dqk + dv)
    return np.maximum(flops / (s.eff.flops * s.device.flops), mem_s(s, nbytes)) + s.kernel_s


def up_projection(s: Setup, L, b, q):
    """The expanded path's ``kv_b_proj`` over every latent a row attends to (``b (L + q)`` tokens, in the weights'
    format), the K built from ``k_nope`` and the broadcast ``k_pe`` (read and written in bf16), and with a cached
    context the latents gathered from the paged cache and the two attention states merged (2 kernels)."""
    a = s.arch
    heads, kl, r = a.heads // s.tp, a.kv_lora_rank, a.qk_rope_head_dim
    dqk, P, V = a.qk_nope_head_dim + r, a.qk_nope_head_dim, a.v_head_dim
    T = b * (L + q)
    up = linear(s, T, heads * (P + V), kl) + elementwise(s, T * heads * dqk * 2 * BF16, 1)
    L = np.asarray(L, dtype=float)
    gather = elementwise(s, b * L * (kl + r) * (s.kv_bytes + BF16) + 3 * b * q * heads * V * BF16, 2)
    return up + np.where(L > 0, gather, 0.0)


def absorbed(q, prefill: bool):
    """Whether a pass of ``q`` positions per row runs the absorbed path (:data:`DECODE_MAX_Q`; arrays)."""
    return np.logical_and(not prefill, np.asarray(q, dtype=float) <= DECODE_MAX_Q)


def attention_ops(s: Setup, L, b, q, prefill: bool = False) -> dict:
    """Seconds of each MLA attention operator of one layer on one GPU (local heads ``H / n``), arrays over the
    shapes: ``qkv_a`` (the replicated ``fused_qkv_a_proj``; without ``q_lora_rank`` the sharded ``q_proj`` and the
    replicated ``kv_a_proj_with_mqa``), ``q_b``, ``mla_norms``, ``rope``, ``kv_write``, ``mla_up`` (the absorbed
    path's two bmm, or the expanded path's up-projection), ``attention`` and ``o``."""
    a = s.arch
    M, h, heads = b * q, a.hidden, a.heads // s.tp
    ql, kl, r, P, V = a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
    if ql:
        ops = {"qkv_a": linear(s, M, ql + kl + r, h), "q_b": linear(s, M, heads * (P + r), ql),
               "mla_norms": elementwise(s, M * (ql + kl) * 2 * BF16, 2)}  # RMSNorm: read and write bf16
    else:
        ops = {"qkv_a": linear(s, M, heads * (P + r), h) + linear(s, M, kl + r, h),
               "mla_norms": elementwise(s, M * kl * 2 * BF16, 1)}
    ops["rope"] = elementwise(s, M * 2 * BF16 * (heads + 1) * r, 1)  # q_pe of each local head and the shared k_pe
    ops["kv_write"] = elementwise(s, M * (kl + r) * (BF16 + s.kv_bytes), 1)  # concat_and_cache_mla
    fast = absorbed(q, prefill)
    ops["mla_up"] = np.where(fast, bmm(s, M, heads, kl, P) + bmm(s, M, heads, V, kl), up_projection(s, L, b, q))
    ops["attention"] = np.where(fast, latent_attention(s, L, b, q), expanded_attention(s, L, b, q, prefill))
    ops["o"] = linear(s, M, h, heads * V)
    return ops


def replicated_params(a: ArchConfig) -> int:
    """Parameters every GPU holds whole under TP: the MLA input projections vLLM does not shard
    (``fused_qkv_a_proj``, or ``kv_a_proj_with_mqa`` without ``q_lora_rank``), every layer's; 0 for standard
    attention."""
    if not a.is_mla:
        return 0
    return a.layers * a.hidden * (a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim)


def extra_weight_bytes(a: ArchConfig, tp: int, weight_bytes: float) -> float:
    """Bytes per GPU beyond ``weights / tp`` of an MLA model: the replicated input projections' other ``1 - 1/tp``
    (in the weights' format) and the bf16 ``W_UK_T`` / ``W_UV`` copies of the GPU's ``kv_b_proj`` share that the
    absorbed path multiplies by (vLLM keeps ``kv_b_proj`` for the expanded path too)."""
    if not a.is_mla:
        return 0.0
    absorbed_copy = a.layers * a.kv_lora_rank * a.heads * (a.qk_nope_head_dim + a.v_head_dim) * BF16 / tp
    return replicated_params(a) * weight_bytes * (1.0 - 1.0 / tp) + absorbed_copy
