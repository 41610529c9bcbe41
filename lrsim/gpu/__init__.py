"""Operator-level hardware model: latency profiles for GPUs nobody profiled here, at any tensor-parallel degree.

- :func:`synthesize` (one architecture) and :func:`profile_for_spec` (every
  shipped architecture; what ``--hardware model:DEVICE[:tpN][:eager]``
  resolves to) write modelled profiles in the format of
  ``docs/latency-profile.md``, marked as modelled in their provenance.
- :func:`devices` lists the embedded device specs (datasheet peaks).
- :mod:`lrsim.gpu.model` prices one forward pass per operator,
  :mod:`lrsim.gpu.fit` fits its efficiencies on measured profiles.

Torch-free.  ``docs/gpu-model.md`` has the model, its assumptions and its validation.
"""

from .devices import DeviceSpec, devices, get_device
from .synthesize import parse_spec, profile_for_spec, synthesize

__all__ = ["DeviceSpec", "devices", "get_device", "parse_spec", "profile_for_spec", "synthesize"]
