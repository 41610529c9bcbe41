"""Operator-level hardware model: latency profiles for deployments nobody profiled here.

- :func:`synthesize` (one architecture) and :func:`profile_for_spec` (the ones a command asks for, or every shipped
  one; what ``--hardware model:DEVICE[:tpN][:DTYPE][:ENGINE][:kv-fp8][:wall|kernel]`` resolves to) write modelled
  profiles in the format of ``docs/latency-profile.md``, marked as modelled in their provenance;
  :func:`parse_spec` reads a spec.
- :func:`devices` lists the embedded device specs (datasheet peaks).
- :mod:`lrsim.gpu.engine_vllm` and :mod:`lrsim.gpu.engine_hf` price one forward pass per operator as vLLM and as
  transformers' eager forward run it, from :mod:`lrsim.gpu.ops` (roofline primitives),
  :mod:`lrsim.gpu.collectives` (NCCL and vLLM's custom all-reduce) and :mod:`lrsim.gpu.dtypes` (number formats),
  with :mod:`lrsim.gpu.moe` (mixture-of-experts layers) and :mod:`lrsim.gpu.mla` (multi-head latent attention);
  :mod:`lrsim.gpu.model` dispatches and sizes memory; :mod:`lrsim.gpu.fit` fits the efficiencies on measured
  profiles.

Torch-free.  ``docs/gpu-model.md`` has the model, where each number comes from, and its validation.
"""

from .devices import DeviceSpec, devices, get_device
from .synthesize import parse_spec, profile_for_spec, synthesize

__all__ = ["DeviceSpec", "devices", "get_device", "parse_spec", "profile_for_spec", "synthesize"]
