"""Seeds of the samplers: one per request, cycle, position and branch, the same in every process and run."""

from __future__ import annotations


def step_seed(*parts: int) -> int:
    """Deterministic 63-bit seed from integers (Python's tuple hash of ints is not randomised)."""
    return hash(tuple(int(p) for p in parts)) & 0x7FFF_FFFF_FFFF_FFFF
