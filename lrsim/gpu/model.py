"""Operator-level cost of one decoder forward pass on one device (optionally tensor parallel), vectorised over shapes.

A pass of ``b`` rows, ``q`` new positions per row over a KV cache of ``L``
tokens is priced operator by operator, each as a roofline plus fixed costs::

    t(op) = max(FLOPs / (e_f F), bytes / (e_b B)) + kernels x t_k

with ``F`` the dense tensor-core peak and ``B`` the memory bandwidth of the device spec, and a few efficiencies
fitted on measured profiles (:class:`Efficiencies`, :mod:`lrsim.gpu.fit`).  Which operators a pass runs, and
how the host drives them, is the engine's (``Setup.engine``):

- ``vllm`` (:mod:`lrsim.gpu.engine_vllm`): vLLM's model runner, fused kernels, FlashAttention over a paged cache,
  piecewise CUDA graphs, a fitted host time per engine step;
- ``hf-eager`` (:mod:`lrsim.gpu.engine_hf`): transformers' eager forward with SDPA and a ``DynamicCache``, what
  the embedded H100 profiles measured and the efficiencies were fitted on.

Tensor parallelism over ``n`` GPUs (Megatron style): QKV, gate/up and the LM head split their output columns, O
and down their input rows, attention its heads; two all-reduces per layer (after O and after down) and a gather
of the logits, each priced by :mod:`lrsim.gpu.collectives` with the algorithm the engine's library would run.
Timing kinds: ``kernel_sum`` (the device's kernels, back to back) and ``wall`` (what the engine's host makes of
them: eager launches for hf-eager, graphs and a step's host time for vLLM).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import engine_hf, engine_vllm, mla
from .archs import ArchConfig, check_context
from .dtypes import BF16, get_dtype, kv_bytes
from .engine_hf import attention
from .moe import expert_weight_bytes
from .ops import elementwise, gemm
from .setup import Efficiencies, Setup, check_tp

ENGINES = {"fused": engine_vllm, "hf-eager": engine_hf}  #: operator models by the engine's ``kernels``
TIMINGS = ("kernel_sum", "wall")
# each engine's share of the device's memory for weights + KV + activations: lrsim/data/gpus/engines/*.json
# (usable_memory; hf-eager's 0.85 reproduces the H100 run's skips)

__all__ = [
    "ENGINES",
    "Efficiencies",
    "Setup",
    "attention",
    "check_tp",
    "elementwise",
    "expert_bytes",
    "fits",
    "forward_ops",
    "forward_s",
    "gemm",
    "kernels",
    "memory_need",
    "prefill_passes",
    "prefill_s",
]


def _ops(s: Setup):
    """The operator model of the setup's engine."""
    return ENGINES[s.runtime.kernels]


def forward_ops(s: Setup, L, b, q, prefill: bool = False) -> dict:
    """Seconds of each operator summed over the pass, as the setup's engine runs it."""
    return _ops(s).forward_ops(s, L, b, q, prefill)


def kernels(s: Setup) -> int:
    """Kernels one pass runs on the setup's engine."""
    return _ops(s).kernels(s)


def forward_s(s: Setup, L, b, q, timed: str = "kernel_sum", prefill: bool = False):
    """Seconds of one pass: the kernel sum, or the engine's ``wall`` time."""
    if timed not in TIMINGS:
        raise InputError(f"timing kind must be kernel_sum or wall, got {timed!r}")
    L, b, q = (np.asarray(x, dtype=float) for x in (L, b, q))
    total = sum(forward_ops(s, L, b, q, prefill).values())
    return _ops(s).wall_s(s, total, s.rank_rows(b) * q, q) if timed == "wall" else total  # one GPU's tokens


def prefill_passes(P: int, b: int = 1, chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(L, q)`` of each pass that prefills ``b`` prompts of ``P`` tokens with at most ``chunk`` tokens a step
    (vLLM's ``max_num_batched_tokens``; None or 0: one pass).  The rows move in lockstep, ``q = chunk // b`` tokens
    each a step (an approximation: vLLM's scheduler fills the budget request by request; the FLOPs, the passes
    and the cache each pass attends to come out the same when every prompt is as long), pass ``i`` at
    ``L_i = i q`` cached tokens: ``ceil(P / q)`` passes."""
    if P < 1 or b < 1:
        raise InputError(f"a prompt of {P} tokens in {b} rows: both must be >= 1")
    if not chunk or b * P <= chunk:
        return np.zeros(1), np.full(1, float(P))
    q = max(1, int(chunk) // b)  # tokens per row a step
    L = np.arange(0, P, q, dtype=float)  # L_i = i q
    return L, np.minimum(q, P - L)  # q_i = min(q, P - L_i)


def prefill_s(s: Setup, P: int, b: int = 1, timed: str = "wall", chunk: int | None = None,
              max_model_len: int | None = None, release: str | None = None, check: bool = True) -> float:
    """Seconds to prefill ``b`` prompts of ``P`` tokens as the setup's engine runs it: in chunks of its
    ``prefill_chunk`` (:meth:`lrsim.gpu.engines.Engine.chunk_tokens`: by release, device and ``max_model_len``,
    which defaults to what vLLM derives from the config, :attr:`ArchConfig.max_context`), each chunk one engine
    step attending to the cache written so far; ``chunk`` overrides the engine's (0: one pass).

    :raises InputError: ``P`` beyond the positions the architecture reaches (``check``; :func:`check_context`).
    """
    a = s.arch
    if check:
        check_context(a, P, max_model_len)
    mml = max_model_len if max_model_len is not None else a.max_context
    c = s.runtime.chunk_tokens(s.device, mml, release) if chunk is None else chunk
    L, q = prefill_passes(int(P), int(b), c)
    return float(np.sum(forward_s(s, L, float(b), q, timed, prefill=True)))  # sum_i t(L_i, q_i)


def routed_params(arch: ArchConfig) -> int:
    """Parameters of an MoE model's routed experts, every layer's (0 for a dense model)."""
    return arch.moe_layers * arch.experts * arch.expert_params


def expert_bytes(arch: ArchConfig, dtype: str = "bf16") -> float:
    """Bytes of an MoE model's routed experts, every layer's, in their format (0 for a dense model)."""
    return routed_params(arch) * expert_weight_bytes(arch, get_dtype(dtype).weight_bytes)


def weight_bytes(arch: ArchConfig, dtype: str = "bf16") -> float:
    """Bytes of all the weights: the decoder layers in ``dtype`` (an MoE model's routed experts in their own
    format where the checkpoint quantizes only them: gpt-oss's MXFP4), embeddings and LM head in bf16."""
    f = get_dtype(dtype).weight_bytes
    body = arch.params - arch.embedding_params * (2 - arch.tied) - arch.hidden  # every layer, all experts
    return (body - routed_params(arch)) * f + expert_bytes(arch, dtype) + (arch.params - body) * BF16


def memory_need(arch: ArchConfig, L, b, q, tp: int = 1, dtype: str = "bf16", kv_dtype: str = "auto",
                dp_attention: bool = False):
    """Bytes per GPU: weights / n + KV of ``b (L + q)`` tokens on the local KV heads + the pass's largest
    activations (fp32 logits, MLP, norms).

    Expert parallelism holds ``E / n`` whole experts per GPU: the same bytes as a ``1 / n`` slice of each, so
    ``weights / n`` too.  DP attention (with it): the routed experts / n, everything else whole on every GPU,
    and the KV and activations of the busiest GPU's ``ceil(b / n)`` rows on all the KV heads.

    MLA (:mod:`lrsim.gpu.mla`): the latent cache is replicated, every GPU holding its rows' whole latent (vLLM
    counts one KV head per rank), and the replicated input projections and bf16 absorbed copies are added
    (:func:`lrsim.gpu.mla.extra_weight_bytes`)."""
    L, b, q = (np.asarray(x, dtype=float) for x in (L, b, q))
    if dp_attention:
        ex = expert_bytes(arch, dtype)
        weights, b, tp = weight_bytes(arch, dtype) - ex + ex / tp, np.ceil(b / tp), 1
    else:
        weights = weight_bytes(arch, dtype) / tp
    weights = weights + mla.extra_weight_bytes(arch, tp, get_dtype(dtype).weight_bytes)
    M = b * q
    acts = M * (arch.vocab * 4 + 3 * arch.intermediate * BF16 + 4 * arch.hidden * 4) / tp
    # KV heads per GPU (replicated past the KV heads); MLA's latent is one "KV head" every GPU holds whole
    kv_share = 1.0 if arch.is_mla else max(1, arch.kv_heads // tp) / arch.kv_heads
    kv = arch.kv_bytes_per_token(kv_bytes(kv_dtype)) * b * (L + q) * kv_share
    return weights + kv + acts


def usable_share(s: Setup) -> float:
    """The share of the device's memory the setup's engine gives to weights, KV and activations."""
    return s.runtime.usable_memory


def usable_bytes(s: Setup) -> float:
    """The share of the device's memory the engine gives to weights, KV and activations, in bytes."""
    return usable_share(s) * s.device.memory_bytes


def setup_memory(s: Setup, L, b, q):
    """:func:`memory_need` of the setup's architecture, TP degree and formats."""
    return memory_need(s.arch, L, b, q, s.tp, s.dtype, s.kv_dtype, s.dp_attention)


def fits(s: Setup, L, b, q):
    """True where the pass fits the engine's usable share of the device's memory."""
    return setup_memory(s, L, b, q) <= usable_bytes(s)
