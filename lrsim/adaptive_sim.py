"""Deprecated: moved to :mod:`lrsim.adaptive.sim` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.adaptive.sim")
