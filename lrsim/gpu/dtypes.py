"""Number formats the hardware model prices: what a weight, an activation and a cached K/V element cost in bytes,
and which tensor-core peak a GEMM runs at.

``model:DEVICE[:tpN][:DTYPE]`` names the weights' format (``bf16`` default, ``fp16``, ``fp8``, ``fp8-block``, ``int8``,
``int4``); ``--kv-dtype fp8`` (``:kv-fp8`` in a spec) the KV cache's.  What each means is what vLLM runs for it
(``vllm/model_executor/layers/quantization/``, v0.10.1):

- ``bf16`` / ``fp16``: unquantized linear layers, ``torch.nn.functional.linear`` (cuBLAS): 2 bytes per weight, the
  dense bf16 peak; the only format the ``hf-eager`` engine prices.
- ``fp8``: ``fp8.py``'s ``Fp8LinearMethod`` on a GPU with FP8 tensor cores (Hopper, Ada, Blackwell, CDNA3): FP8
  weights (1 byte, one scale per output channel), activations quantized per token on the fly
  (``scaled_fp8_quant``: one more kernel per GEMM input, reading bf16 and writing 1 byte per element), the GEMM
  at the dense FP8 peak (CUTLASS ``cutlass_scaled_mm``).  On a GPU without FP8 tensor cores (A100) vLLM falls back
  to weight-only FP8 (Marlin ``fp8_marlin``): 1-byte weights, bf16 activations and peak.
- ``int8``: GPTQ 8-bit weights through Marlin (w8a16): ``1 + 2/128`` bytes per weight, bf16 activations and peak.
  An int8 w8a8 checkpoint (CUTLASS int8 GEMMs with per-token activation scales) is priced the same: its
  activation quantization kernels and int8 peak are not modelled.
- ``fp8-block``: block-scaled FP8 (``fp8.py`` with ``weight_block_size``: 128 x 128 weight blocks, activations
  quantized per token in groups of 128): bytes and peak as ``fp8``, its own kernel curve.
- ``int4``: GPTQ/AWQ 4-bit weights through Marlin (``gptq_marlin.py`` / ``awq_marlin.py``), group size 128:
  ``0.5 + 2/128`` bytes per weight (4 bits and an fp16 scale per 128 weights), bf16 activations and peak.

Each format's GEMM runs at its kernel's efficiency curve (:mod:`lrsim.gpu.kernels`, ``lrsim/data/gpus/kernels.json``:
Marlin for int4/int8/FP8 weight-only, CUTLASS for FP8 W8A8 and block FP8, the bf16 fit for bf16/fp16).

The embedding table and the LM head stay bf16 in every format (vLLM quantizes neither by default).  Skinny
GEMMs' split-K partial sums (a term fitted on cuBLAS bf16 GEMMs) are priced for cuBLAS only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

BF16 = 2  # bytes of a bf16/fp16 element: activations, embeddings, LM head, an unquantized KV cache
GROUP = 128  # weights per fp16 scale of the int4 formats (GPTQ / AWQ default group size)


@dataclass(frozen=True)
class Dtype:
    """One weight format as the engine runs it."""

    name: str
    weight_bytes: float  #: bytes per weight of a quantized linear layer, scales included
    act_bytes: float  #: bytes per input element the GEMM reads (1 for w8a8)
    fp8_peak: bool  #: the GEMM runs at the FP8 tensor-core peak (else the bf16 one)
    quant_kernels: int  #: kernels per GEMM input that quantize the activations (w8a8: 1)
    cublas: bool  #: a cuBLAS GEMM (its skinny-GEMM split-K partials are priced)
    kernel: str  #: what runs it, for the profile's notes
    curve: str = ""  #: its kernel's efficiency curve in ``lrsim/data/gpus/kernels.json`` (:mod:`lrsim.gpu.kernels`)

    @property
    def kernel_curve(self) -> str:
        """The format name ``kernels.json`` maps to a curve (its own name unless set)."""
        return self.curve or self.name


_BF16 = Dtype("bf16", BF16, BF16, False, 0, True, "cuBLAS bf16 GEMM (torch.nn.functional.linear)")
DTYPES = {
    "bf16": _BF16,
    "fp16": Dtype("fp16", BF16, BF16, False, 0, True, "cuBLAS fp16 GEMM (torch.nn.functional.linear)"),
    "fp8": Dtype("fp8", 1.0, 1.0, True, 1, False, "w8a8: per-token dynamic activation quantization "
                 "(scaled_fp8_quant) and CUTLASS cutlass_scaled_mm at the FP8 peak"),
    "int8": Dtype("int8", 1.0 + BF16 / GROUP, BF16, False, 0, False, "w8a16 Marlin (GPTQ-Int8, group 128); an "
                  "int8 w8a8 checkpoint is priced the same (its activation quantization is not counted)"),
    "int4": Dtype("int4", 0.5 + BF16 / GROUP, BF16, False, 0, False, "w4a16 Marlin (GPTQ/AWQ, group 128)"),
    "fp8-block": Dtype("fp8-block", 1.0, 1.0, True, 1, False, "block-scaled FP8 (128x128 weight blocks, per-token "
                       "1x128 activation groups: DeepSeek-V3, Qwen3-FP8 checkpoints) at the FP8 peak"),
}
_FP8_WEIGHT_ONLY = Dtype("fp8", 1.0, BF16, False, 0, False, "w8a16 Marlin (fp8_marlin: no FP8 tensor cores)",
                         "fp8-weight-only")
KV_DTYPES = {"auto": BF16, "bf16": BF16, "fp16": BF16, "fp8": 1}


def get_dtype(name: str, has_fp8: bool = True) -> Dtype:
    """The format ``name`` on a device with (``has_fp8``) or without FP8 tensor cores.

    :raises InputError: an unknown format (one line listing the known ones).
    """
    if name not in DTYPES:
        raise InputError(f"unknown dtype {name!r}: known are {', '.join(DTYPES)}")
    return _FP8_WEIGHT_ONLY if name.startswith("fp8") and not has_fp8 else DTYPES[name]


def kv_bytes(name: str) -> int:
    """Bytes per cached K or V element.

    :raises InputError: an unknown KV-cache dtype.
    """
    if name not in KV_DTYPES:
        raise InputError(f"unknown KV-cache dtype {name!r}: known are {', '.join(KV_DTYPES)}")
    return KV_DTYPES[name]
