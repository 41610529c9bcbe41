"""The hardware model's operator primitives, vectorised over shapes: a GEMM and a memory-bound kernel, each a
roofline plus fixed costs::

    t(op) = max(FLOPs / (e_f F), bytes / (e_b B)) + kernels x t_k

``F`` the GEMM's tensor-core peak (bf16, or FP8 for w8a8), ``B`` the memory bandwidth, ``e_f``, ``e_b`` and
``t_k`` fitted (:class:`~lrsim.gpu.setup.Efficiencies`, on cuBLAS bf16 GEMMs).  A GEMM in a quantized format runs
its own kernel: ``e_b`` and ``e_f`` are scaled by that kernel's published efficiency ratios, by its rows ``M``
(:mod:`lrsim.gpu.kernels`).  Both engines build their layers from these.
"""

from __future__ import annotations

import numpy as np

from .dtypes import BF16, DTYPES, Dtype
from .kernels import curve_for
from .setup import Setup


def mem_s(s: Setup, nbytes):
    """Seconds to move ``nbytes`` at the achieved bandwidth ``e_b B``."""
    return nbytes / (s.eff.bandwidth * s.device.bandwidth)


def elementwise(s: Setup, nbytes, kernels: int):
    """Memory-bound kernels: ``bytes / (e_b B) + k t_k``."""
    return mem_s(s, nbytes) + kernels * s.kernel_s


def gemm(s: Setup, M, N: int, K: int, kernels: int = 1, fmt: Dtype | None = None):
    """``[M x K] @ [K x N]``: ``max(2MNK / (e_f r_f F), bytes / (e_b r_b B)) + k t_k``.

    ``r_b``, ``r_f``: the format's kernel curve at ``M`` rows on this device (:mod:`lrsim.gpu.kernels`; 1 for bf16).

    Bytes: the weights once (``N K`` x the format's bytes per weight), the inputs (``M K`` x its activation bytes)
    and the bf16 outputs (``M N x 2``); a cuBLAS GEMM adds its skinny-GEMM split-K partials, ``N min(M, r_s) s_b``.
    ``fmt`` None: bf16 (the LM head, and every GEMM of the hf-eager engine).
    """
    f = fmt or DTYPES["bf16"]
    flops = 2.0 * M * N * K
    nbytes = f.weight_bytes * N * K + f.act_bytes * M * K + BF16 * M * N
    if f.cublas:
        nbytes = nbytes + N * np.minimum(M, s.eff.splitk_rows) * s.eff.splitk_bytes  # skinny GEMMs' partial sums
    peak = s.device.fp8_flops if f.fp8_peak else s.device.flops
    r_b, r_f = curve_for(f.kernel_curve).ratios(M, s.device.hbm_tb_s)
    return np.maximum(flops / (s.eff.flops * r_f * peak), mem_s(s, nbytes) / r_b) + kernels * s.kernel_s


def linear(s: Setup, M, N: int, K: int):
    """A quantizable linear layer of the vllm engine in the setup's format, with its activation quantization.

    w8a8 first quantizes the ``M x K`` input (read bf16, write 1 byte, one kernel: ``scaled_fp8_quant``).
    """
    f = s.fmt
    quant = elementwise(s, M * K * (BF16 + f.act_bytes), f.quant_kernels) if f.quant_kernels else 0.0
    return gemm(s, M, N, K, fmt=f) + quant
