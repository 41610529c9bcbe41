"""Deprecated: moved to :mod:`lrsim.prediction.replay` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.prediction.replay")
