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
experts' bytes per weight: MXFP4 4.25 bits with its scales for gpt-oss), activations ``M k (h + i) x 2`` bytes,
``2 M k x 3 h i / n`` FLOPs; the fused-MoE kernel (grouped GEMM: ``fused_moe`` w13 then w2) is priced at the
dense GEMMs' fitted efficiencies (an assumption: no fused-MoE kernel was timed here).
"""

from __future__ import annotations

import numpy as np

from .archs import ArchConfig

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
