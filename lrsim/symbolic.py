"""Deprecated: moved to :mod:`lrsim.theory.symbolic` (kept one release)."""

from ._moved import alias

alias(__name__, "lrsim.theory.symbolic")
