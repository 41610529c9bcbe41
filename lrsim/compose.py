"""Deprecated: moved to :mod:`lrsim.prediction.compose` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.prediction.compose")
