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
import math

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
