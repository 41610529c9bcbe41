"""What one modelled pass runs on: the architecture, the device, the fitted efficiencies, the engine, the TP degree
and the number formats (:class:`Setup`), and the efficiencies themselves (:class:`Efficiencies`)."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..errors import InputError
from .archs import ArchConfig
from .devices import DeviceSpec
from .dtypes import BF16, Dtype, get_dtype, kv_bytes
from .engines import Engine, engines, get_engine


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
    """What one pass runs on: architecture, device, efficiencies, TP degree, engine and number formats.

    ``engine``: ``hf-eager`` (transformers' eager forward, what the H100 profiles measured; the default here so
    that the fit reproduces) or a serving engine of :mod:`lrsim.gpu.engines` (``vllm``, ``vllm-0.10``, ``sglang``,
    ...); ``dtype``: the linear layers' weights (:mod:`lrsim.gpu.dtypes`); ``kv_dtype``: the KV cache's.

    ``tp`` is the number of GPUs.  ``ep``: an MoE model's routed experts are sharded whole over them (expert
    parallelism, vLLM's ``--enable-expert-parallel``) instead of each expert's width; ``dp_attention`` (with
    ``ep``): every GPU runs the attention, the dense parts and the LM head of its own share of the rows, unsharded
    (vLLM's ``--data-parallel-size n --enable-expert-parallel``, SGLang's ``--enable-dp-attention``), the MoE
    layers exchange tokens by all-to-all.  :attr:`rank` is one GPU's setup for the parts it runs alone.
    """

    arch: ArchConfig
    device: DeviceSpec
    eff: Efficiencies
    tp: int = 1
    engine: str = "hf-eager"
    dtype: str = "bf16"
    kv_dtype: str = "auto"
    routing_overlap: float = 0.0  #: MoE: how alike a pass's tokens route (lrsim.gpu.moe; 0: uniform, the bound)
    ep: bool = False  #: expert parallelism over the ``tp`` GPUs (MoE only)
    dp_attention: bool = False  #: data-parallel attention over the ``tp`` GPUs (with ``ep``)
    release: str = ""  #: the engine release within its line where that matters (vLLM V0: 0.7 took FA3 on Hopper)

    def __post_init__(self) -> None:
        get_engine(self.engine)
        get_dtype(self.dtype)
        kv_bytes(self.kv_dtype)
        self.arch.check_priced(fused=self.runtime.kernels == "fused")  # MoE and MLA on hf-eager: one line
        if not 0.0 <= self.routing_overlap < 1.0:
            raise InputError(f"routing overlap must be in [0, 1), got {self.routing_overlap!r}")
        if self.runtime.kernels == "hf-eager" and (self.dtype not in ("bf16", "fp16")
                                                    or kv_bytes(self.kv_dtype) != BF16):
            raise InputError(f"the hf-eager engine is priced in bf16 only (weights and KV cache), not "
                             f"{self.dtype} / KV {self.kv_dtype}: use the vllm engine for quantized formats")
        check_parallel(self.arch, self.tp, self.engine, self.ep, self.dp_attention)

    @functools.cached_property
    def rank(self) -> Setup:
        """One GPU's setup for what it runs alone: under DP attention a TP-1 replica (attention, dense layers, LM
        head), else this setup."""
        return replace(self, tp=1, ep=False, dp_attention=False) if self.dp_attention else self

    def rank_rows(self, b):
        """Rows the busiest GPU's attention runs: ``ceil(b / n)`` under DP attention (rows spread evenly, an
        assumption of this model: each engine's load balancer places requests), else ``b``."""
        return np.ceil(np.asarray(b, dtype=float) / self.tp) if self.dp_attention else b

    @property
    def attn_tp(self) -> int:
        """The attention's TP degree (:func:`attention_tp`)."""
        return attention_tp(self.tp, self.dp_attention)

    @property
    def layout(self) -> str:
        """The parallel layout in words: ``TP 4``, ``TP 4 + EP 4``, ``DP attention 4 + EP 4``."""
        head = f"DP attention {self.tp}" if self.dp_attention else f"TP {self.tp}"
        return head + (f" + EP {self.tp}" if self.ep else "")

    @property
    def runtime(self) -> Engine:
        """The engine release this setup prices (:mod:`lrsim.gpu.engines`)."""
        return get_engine(self.engine)

    @property
    def kernel_s(self) -> float:
        return 1e-6 * (self.device.kernel_us if self.device.kernel_us is not None else self.eff.kernel_us)

    @property
    def host_s(self) -> float:
        return 1e-6 * (self.device.host_us if self.device.host_us is not None else self.eff.host_us)

    @property
    def fmt(self) -> Dtype:
        """The linear layers' format as this device runs it (FP8 falls back to weight-only without FP8 cores)."""
        return get_dtype(self.dtype, self.device.fp8_flops is not None)

    @property
    def attention_kernel(self) -> str:
        """The FlashAttention generation this pass's attention runs
        (:meth:`lrsim.gpu.engines.Engine.attention_kernel`)."""
        return self.runtime.attention_kernel(self.device.generation, self.release or None)

    @property
    def kv_bytes(self) -> int:
        """Bytes per cached K or V element."""
        return kv_bytes(self.kv_dtype)


    @property
    def kv_heads(self) -> int:
        """KV heads per GPU: ``kv_heads / tp``, or 1 where vLLM replicates them (``tp`` a multiple of them)."""
        return max(1, self.arch.kv_heads // self.tp)


def attention_tp(tp: int, dp_attention: bool) -> int:
    """The attention's TP degree over ``tp`` GPUs: 1 under DP attention (each GPU runs its own rows' attention
    unsharded), else ``tp``.  The one rule :class:`Setup` and :class:`lrsim.gpu.synthesize.ModelSpec` share."""
    return 1 if dp_attention else tp


def check_tp(arch: ArchConfig, tp: int, engine: str = "hf-eager") -> None:
    """:raises InputError: ``tp`` does not divide the attention heads, or the KV heads (one line).

    vLLM also runs a TP degree that is a multiple of the KV heads, replicating them
    (``vllm/model_executor/layers/linear.py``, ``QKVParallelLinear``: ``num_kv_head_replicas``).
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"TP degree must be an integer >= 1, got {tp!r}")
    fused = get_engine(engine).kernels == "fused"  # the serving engines replicate KV heads past TP = KV heads
    kv_ok = arch.kv_heads % tp == 0 or (fused and tp % arch.kv_heads == 0)
    if arch.heads % tp or not kv_ok:
        rule = " (nor is it a multiple of the KV heads, which the engine would replicate)" if fused else ""
        raise InputError(f"TP {tp} does not divide {arch.name}'s {arch.heads} attention heads and {arch.kv_heads} "
                         f"KV heads{rule}")


def check_layout(engine: str, ep: bool, dp_attention: bool) -> None:
    """:raises InputError: DP attention without expert parallelism, or on an engine that has none (one line)."""
    if dp_attention and not ep:
        raise InputError("DP attention (:dpa) is priced with expert parallelism only: write :ep:dpa (MoE layers "
                         "TP-sharded under DP attention are not modelled)")
    if dp_attention and not get_engine(engine).dp_attention:
        has = ", ".join(e.name for e in engines() if e.dp_attention)
        raise InputError(f"engine {engine} has no data-parallel attention (:dpa); {has} do")


def check_parallel(arch: ArchConfig, n: int, engine: str, ep: bool, dp_attention: bool) -> None:
    """:raises InputError: :func:`check_layout`'s, expert parallelism on a dense model or over a GPU count that
    does not divide the routed experts (one line)."""
    check_layout(engine, ep, dp_attention)
    if not ep:
        return
    if not arch.is_moe:
        raise InputError(f"expert parallelism (:ep) needs a mixture-of-experts model; {arch.name} is dense")
    if arch.experts % n:
        raise InputError(f"EP over {n} GPUs does not divide {arch.name}'s {arch.experts} routed experts "
                         f"({arch.experts} % {n} = {arch.experts % n})")
