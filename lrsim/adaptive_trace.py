"""Deprecated: moved to :mod:`lrsim.adaptive.trace` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.adaptive.trace")
