"""Deprecated: moved to :mod:`lrsim.prediction.calibrate` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.prediction.calibrate")
