"""Deprecated: moved to :mod:`lrsim.prediction.vllm_metrics` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.prediction.vllm_metrics")
