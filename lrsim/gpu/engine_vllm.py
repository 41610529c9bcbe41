"""The fused operators of the serving engines: vLLM's V1 model runner (read at v0.10.1, the version the official LR
code runs; SGLang and TensorRT-LLM run the same fusions), FlashAttention over a paged KV cache, fused kernels and
merged projections.

Per decoder layer (``vllm/model_executor/models/qwen2.py``, ``qwen3.py``, ``llama.py``; v0.10.1), local heads and
MLP width divided by the TP degree ``n`` (KV heads replicated where ``n`` exceeds them):

- ``input_layernorm``, ``post_attention_layernorm`` (``fused_add_rms_norm``: residual add + RMSNorm): read x
  and the residual, write both, 8 bytes per element; 2 kernels;
- ``qkv_proj`` (``QKVParallelLinear``, one merged GEMM, bias in its epilogue), in the weights' format; 1;
- Qwen3's ``q_norm``, ``k_norm`` (``RMSNorm`` per head): read + write q and k, 4 bytes per element; 2;
- ``rotary_emb`` (in place on q and k): 4 bytes per element; 1;
- ``reshape_and_cache_flash``: the ``M`` new K/V rows, read, and written in the KV format; 1;
- attention (``FlashAttentionImpl``, vllm-flash-attn): K and V read once per KV head, ``b (L+q) h_kv d x 2`` x
  KV bytes; ``4 b H q (L+q) d`` FLOPs (a prompt chunk: ``2 b H q^2 d`` causal + ``4 b H q L d`` over the cache),
  each at its published kernel's efficiency (:func:`attention`); 1;
- ``o_proj`` (``RowParallelLinear``), ``gate_up_proj`` (``MergedColumnParallelLinear``), ``act_fn``
  (``SiluAndMul``: read ``2 I``, write ``I``, 6 bytes per element of ``I``), ``down_proj``; 4;
- TP: an all-reduce after ``o_proj`` and after ``down_proj`` (:mod:`lrsim.gpu.collectives`); 2 (an MoE layer
  under expert parallelism keeps both: with TP attention every GPU holds every token, runs its own experts on
  them and ``FusedMoE.forward_impl`` all-reduces the partial sums; under DP attention, ``dp_size > 1``, the
  all-reduces go and the MoE layer dispatches and combines its tokens instead: two all-to-alls);
- fp8 (w8a8): ``scaled_fp8_quant`` of each GEMM's input (read bf16, write 1 byte per element); 4.

An MLA layer (DeepSeek-V2/V3/R1, ``deepseek_v2.py``) runs :mod:`lrsim.gpu.mla`'s operators in place of qkv, rope,
the cache write, attention and o: the replicated ``fused_qkv_a_proj``, the latents' norms, ``q_b_proj``, the
absorbed path (two per-head bmm around FlashMLA over the latent cache, every GPU reading its rows' whole latent)
for a decode or verification pass of up to 128 positions per row, the expanded one (``kv_b_proj`` and
FlashAttention) for a prefill; 5 kernels more per layer, one more quantized linear.

10 kernels per layer (12 with Qwen3's q/k norms; + 2 with TP, + 4 with w8a8), against transformers' 39.  Per
pass: the embedding (``VocabParallelEmbedding``: a gather, and under TP a mask and an all-reduce), the final norm,
the LM head (bf16, vocab-parallel; the logits of every fed position, as speculative verification needs; a
prompt's last position only in a prefill), the logits' all-gather under TP (NCCL), and the sampler (greedy:
logits to fp32 and argmax) with the step's input copies.

**Timing** (the engine release's, :mod:`lrsim.gpu.engines`).  ``kernel_sum`` is the sum of the operators (each a
roofline plus ``t_k``, :mod:`lrsim.gpu.ops`).  ``wall`` is what one engine step takes::

    wall = t_step + max(kernel sum, host launches)

- The host's launches follow the release's CUDA-graph mode: a full graph (one launch, then the eager logits and
  sampler tail), piecewise graphs split at attention (``CompilationConfig.splitting_ops``: a graph and the
  attention call per layer, then the tail), or every kernel eagerly (no graph: beyond the capture size, or a pass
  the mode leaves out).  Each launch costs the fitted ``t_host`` (an assumption: the fit is of transformers'
  eager launches).
- ``t_step`` is the host time per step the device waits for (scheduling, input preparation, the sampled tokens'
  copy back, output processing; with an overlapping scheduler, the gap that stays exposed): each engine's one
  fitted constant (``studies/fit_engines.py``).
"""

from __future__ import annotations

import numpy as np

from . import mla
from .collectives import all_reduce, all_to_all, nccl_all_gather
from .dtypes import BF16
from .kernels import decode_excess_s, prefill_curve
from .moe import MOE_KERNELS, distinct_experts, expert_weight_bytes, experts_per_rank, moe_seconds
from .ops import elementwise, gemm, linear, mem_s
from .setup import Setup

LAYER_KERNELS = 10  # 2 norms, qkv, rope, cache write, attention, o, gate_up, act, down
QK_NORM_KERNELS = 2
PASS_KERNELS = 1 + 1 + 1 + 3 + 4  # embedding, final norm, LM head, sampler (fp32 cast, argmax, copy), input copies
TAIL_LAUNCHES = 1 + 3 + 4  # launched eagerly after the graphs: LM head, sampler, and the input copies before them
GRAPH_LAUNCHES_PER_LAYER = 2  # a piecewise graph and the attention call
DECODE_CURVE_GENERATIONS = ("ampere", "ada", "hopper")  # NVIDIA GPUs, where vLLM's decode runs FA2's flash-decoding


def attention(s: Setup, L, b, q, prefill: bool = False):
    """FlashAttention over the paged cache, per layer, at the published kernels' efficiencies
    (:mod:`lrsim.gpu.kernels`, ``kernels.json`` "attention"): ``max(t_flops, t_bytes)``.

    Bytes ``x``: K and V of ``L + q`` tokens read once per local KV head, in the KV format, plus q in and the output
    out.  Where the engine's decode runs FlashAttention-2's flash-decoding (``decode_curve``: vLLM on Ampere and
    Ada, and on Hopper before 0.7), the 2024 curve that measured it gives the time of an isolated call,
    ``T(x) = x / (u_dec(x) B)`` (by the device's bandwidth); its smallest measured call's time ``T(x_0)`` is the
    floor of an event-timed launch with a flushed L2, which inside an engine's step is the model's fixed kernel
    cost ``t_k``, as for every kernel: ``t_bytes = t_k + T(x) - T(x_0)`` (``T`` held below ``x_0``).  Elsewhere
    (FA3, FlashInfer 0.2+, XQA: no published sweep) ``t_bytes = x / (e_b B) + t_k`` at the GEMM fit's bandwidth,
    as before.

    FLOPs, on ``F`` the dense bf16 peak: a prompt pass (``prefill``) does ``2 b H q^2 d`` causal FLOPs within the
    chunk at ``u_causal(q)`` and ``4 b H q L d`` over the ``L`` cached tokens at ``u_full(L + q)``; a decode or
    verification pass ``4 b H q (L + q) d`` at ``u_full(L + q)`` (the curves' times are of large calls: no ``t_k``
    added).  The FlashAttention generation is the engine's on Hopper (FA3 on vLLM since 0.7 and on SGLang, FA2
    before), FA2 elsewhere.
    """
    a = s.arch
    heads, d = a.heads // s.tp, a.head_dim
    L, b, q = (np.asarray(x, dtype=float) for x in (L, b, q))
    kv = b * (L + q) * s.kv_heads * d * 2 * s.kv_bytes  # K and V, once per local KV head: b (L+q) h_kv d 2 bytes
    qo = 2 * b * q * heads * d * BF16  # q read and the output written: 2 b q H d x 2 bytes
    kernel = s.attention_kernel  # fa2 or fa3 (engine, release, device)
    if s.runtime.decode_curve and kernel == "fa2" and s.device.generation in DECODE_CURVE_GENERATIONS:
        # FlashAttention-2's flash-decoding on an NVIDIA GPU, the 2024 curve: t_k + T(x) - T(x_0)
        t_bytes = s.kernel_s + decode_excess_s(kv + qo, s.device.hbm_tb_s)
    else:  # no published sweep of the engine's decode kernel: x / (e_b B) + t_k, the GEMM fit's bandwidth
        t_bytes = mem_s(s, kv + qo) + s.kernel_s
    pre = prefill_curve(kernel, s.device.generation)
    kv_len = L + q  # keys each query row attends to
    if prefill:
        tri = 2.0 * b * heads * q * q * d  # causal within the chunk: 2 b H q^2 d
        rect = 4.0 * b * heads * q * L * d  # every query row over the cache: 4 b H q L d
        t_flops = (tri / pre.causal(q, 0.0) + rect / pre.full(kv_len, 0.0)) / s.device.flops  # sum F_i / (u_i F)
    else:
        t_flops = 4.0 * b * heads * q * kv_len * d / (pre.full(kv_len, 0.0) * s.device.flops)  # 4bHq(L+q)d/(u F)
    return np.maximum(t_flops, t_bytes)


def moe_mlp(s: Setup, M, local=None) -> dict:
    """One MoE layer's MLP for ``M`` tokens (:mod:`lrsim.gpu.moe`): the router (bf16 GEMM), the routed experts
    (one fused-MoE call reading the experts the pass wakes, priced at its kernel path's published efficiencies,
    :func:`lrsim.gpu.moe.moe_seconds`), the shared experts (a dense gated MLP).

    ``local``: the busiest GPU's own tokens under DP attention (router and shared experts run on them, unsharded;
    dispatch and combine exchange their top-k copies by all-to-all, :func:`lrsim.gpu.collectives.all_to_all`);
    ``M`` otherwise.  Expert parallelism: the slowest GPU reads its woken experts whole
    (:func:`lrsim.gpu.moe.experts_per_rank`) and computes a ``1 / n`` share of the token-expert pairs; without it
    every GPU reads a ``1 / n`` slice of every woken expert.
    """
    a, n = s.arch, s.tp
    local = M if local is None else local
    h, i, k = a.hidden, a.expert_intermediate, a.experts_per_token
    w = expert_weight_bytes(a, s.fmt.weight_bytes)
    if s.ep:
        weights = experts_per_rank(a.experts, k, M, n, s.routing_overlap) * 3 * h * i * w
        acts = M * k * (h + i) * BF16 * 2 / n  # this GPU's token-expert pairs
    else:
        weights = distinct_experts(a.experts, k, M, s.routing_overlap) * 3 * h * i * w / n
        acts = M * k * (h + i) * BF16 * 2
    flops = 2.0 * M * k * 3 * h * i / n  # 2 M k x 3 h i / n: the pairs through w13 (2 h i) and w2 (h i)
    experts = moe_seconds(s, weights + acts, flops)  # t0 + max(F / (u_f P), W / (u_b B)): kernels.json "moe"
    ops = {"router": gemm(s, local, a.experts, h), "experts": experts}
    if a.shared_intermediate:
        si = a.shared_intermediate // s.attn_tp
        ops["shared_experts"] = (linear(s, local, 2 * si, h) + elementwise(s, local * 3 * BF16 * si, 1)
                                 + linear(s, local, h, si))
    if s.dp_attention:
        ops["dispatch_combine"] = 2 * all_to_all(s, local * k * h * BF16)
    return ops


def layer_ops(s: Setup, L, b, q, prefill: bool = False, moe: bool = False, window: int = 0) -> dict:
    """Seconds of each operator of one decoder layer (arrays over the shapes): dense, or ``moe`` (its MLP a mixture
    of experts); ``window``: a sliding-window layer attends to at most that many cached tokens."""
    a, r = s.arch, s.rank  # r: what one GPU runs alone (a TP-1 replica under DP attention)
    br = s.rank_rows(b)
    M, n = br * q, r.tp
    h, hq, hkv, inter = a.hidden, a.q_dim // n, r.kv_heads * a.head_dim, a.intermediate // n
    Lw = np.minimum(L, window) if window else L
    ops = {"norms": elementwise(r, 2 * M * 4 * BF16 * h, 2)}  # fused residual add + RMSNorm: read 2, write 2
    if a.is_mla:  # latent projections, absorbed or expanded attention over the replicated latent (lrsim.gpu.mla)
        ops |= mla.attention_ops(r, Lw, br, q, prefill)
    else:
        ops |= {
            "qkv": linear(r, M, hq + 2 * hkv, h),
            "rope": elementwise(r, M * 2 * BF16 * (hq + hkv), 1),  # in place on q and k
            "kv_write": elementwise(r, M * hkv * 2 * (BF16 + r.kv_bytes), 1),  # reshape_and_cache_flash
            "attention": attention(r, Lw, br, q, prefill),
            "o": linear(r, M, h, hq),
        }
    ops["all_reduce"] = 2 * all_reduce(r, M * h * BF16)  # after o and after the MLP (EP too: FusedMoE's reduce)
    if moe:
        ops |= moe_mlp(s, b * q, M)
    else:
        ops["mlp"] = linear(r, M, 2 * inter, h) + elementwise(r, M * 3 * BF16 * inter, 1) + linear(r, M, h, inter)
    if a.qk_norm:
        ops["qk_norm"] = elementwise(r, M * 2 * BF16 * (hq + hkv), QK_NORM_KERNELS)
    return ops


def layer_groups(a) -> list[tuple[int, bool, int]]:
    """``(layers, moe, window)`` groups of alike layers: dense or MoE MLP, full or sliding-window attention."""
    kinds: dict[tuple[bool, int], int] = {}
    dense, sliding = set(a.dense_layers), set(a.sliding_layers)
    for i in range(a.layers):
        key = (a.is_moe and i not in dense, a.sliding_window if i in sliding else 0)
        kinds[key] = kinds.get(key, 0) + 1
    return [(count, moe, window) for (moe, window), count in kinds.items()]


def forward_ops(s: Setup, L, b, q, prefill: bool = False) -> dict:
    """Seconds of each operator summed over the pass: each group of alike layers x its ops, embedding, LM head,
    sampler."""
    a, r = s.arch, s.rank  # under DP attention the busiest GPU's own rows, unsharded
    br = s.rank_rows(b)
    M = br * q
    rows = br if prefill else M  # logits: a prompt's last position; every fed position of a decode/verify pass
    vocab = -(-a.vocab // r.tp)  # vocab-parallel LM head (ceil)
    ops: dict = {}
    for count, moe, window in layer_groups(a):
        for k, v in layer_ops(s, L, b, q, prefill, moe, window).items():
            ops[k] = ops.get(k, 0.0) + count * v
    ops["embedding"] = elementwise(r, 2 * M * a.hidden * BF16, 1 + 2 * (r.tp > 1)) + all_reduce(r, M * a.hidden * BF16)
    ops["final_norm"] = elementwise(r, M * 4 * BF16 * a.hidden, 1)
    ops["lm_head"] = gemm(r, rows, vocab, a.hidden) + nccl_all_gather(r, rows * a.vocab * BF16)
    # greedy sampler (logits to fp32: read 2 write 4 bytes; argmax: read 4) and the step's 4 input copies
    ops["sampler"] = elementwise(r, rows * a.vocab * (BF16 + 4 + 4), 3 + 4)
    return ops


def kernels(s: Setup) -> int:
    """Kernels one pass runs (launched one by one only beyond the CUDA-graph capture sizes); an MoE layer's MLP
    runs :data:`lrsim.gpu.moe.MOE_KERNELS` instead of 3 (+ 3 for shared experts; + 2, dispatch and combine, under
    DP attention, whose layers run no all-reduce); an MLA layer its absorbed path's
    (:func:`lrsim.gpu.mla.extra_kernels` more, and one more quantized linear)."""
    a, tp = s.arch, s.attn_tp
    quant = (4 + mla.EXTRA_QUANT_KERNELS * a.is_mla) * s.fmt.quant_kernels  # one per quantized linear
    per_layer = LAYER_KERNELS + QK_NORM_KERNELS * a.qk_norm + mla.extra_kernels(a) + 2 * (tp > 1) + quant
    a2a = 2 * (s.dp_attention and s.tp > 1)  # dispatch and combine under DP attention
    moe_extra = a.moe_layers * (MOE_KERNELS - 3 + 3 * bool(a.shared_intermediate) + a2a)
    return a.layers * per_layer + moe_extra + PASS_KERNELS + 3 * (tp > 1)


def host_s(s: Setup, M, q=1.0):
    """Host time to launch one pass of ``M`` tokens, ``q`` per row, as the engine release's CUDA graphs run it."""
    e = s.runtime
    M, q = np.asarray(M, dtype=float), np.asarray(q, dtype=float)
    graphed = (M <= e.capture_tokens) & (e.cuda_graphs != "none")
    full = graphed & ((e.cuda_graphs == "full") | ((q == 1) & (e.cuda_graphs in ("full_and_piecewise",
                                                                                "full_decode_only"))))
    piece = graphed & ~full & (e.cuda_graphs in ("piecewise", "full_and_piecewise"))
    launches = np.where(full, 1 + TAIL_LAUNCHES,
                        np.where(piece, s.arch.layers * GRAPH_LAUNCHES_PER_LAYER + TAIL_LAUNCHES, kernels(s)))
    return launches * s.host_s


def wall_s(s: Setup, kernel_sum, M, q=1.0):
    """One engine step: ``t_step + max(kernel sum, host launches)``."""
    return s.runtime.step_us * 1e-6 + np.maximum(kernel_sum, host_s(s, M, q))
