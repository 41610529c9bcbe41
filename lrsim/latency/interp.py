"""Multilinear interpolation on a rectangular grid with missing points, and the one extrapolation policy type.

Used by :mod:`lrsim.latency.profile` for forward-pass times over (context,
batch, positions) and prefill times over (batch, prompt).  Along each axis
the value is piecewise linear between neighbouring grid points; over several
axes this is the tensor product (bilinear, trilinear), which is *exact on grid
points* and reproduces any function that is affine in each axis separately.

Outside an axis' range a policy decides (:data:`POLICIES`): ``'error'``
refuses, ``'clamp'`` uses the end point, ``'linear'`` continues the outermost
segment.  An axis measured at one value only is *flat*: the value holds for
every coordinate on it only where the caller pins it there
(:class:`lrsim.cost.passcost.ProfileCost` does for context and positions).  A grid point whose value is missing
(``nan``) is never invented: a query whose interpolation needs it is refused
whatever the policy.  :class:`Extrapolation` is the policy pair every command
uses: one policy beyond the last measured value of any axis, one below the
first measured context.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import InputError
from ..fields import option

POLICIES = ("error", "clamp", "linear")
EXTRAPOLATION = POLICIES  # older name


def check_policy(name: str, policy: str) -> str:
    """``policy`` if it is one of :data:`POLICIES`, else a one-line :class:`InputError` naming ``name``."""
    if policy not in POLICIES:
        raise InputError(f"{name} must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


@dataclass(frozen=True)
class Extrapolation:
    """What a lookup does outside the measured grid: the one policy type of every command (``--extrapolate``,
    ``--below-context``)."""

    above: str = option("beyond the last measured context, batch or positions: 'linear' (continue the outermost "
                        "segment), 'clamp' (hold the end value) or 'error' (refuse)", "linear")
    below: str = option("below the first measured context: 'clamp' (price at it), 'linear' or 'error'", "clamp")

    def __post_init__(self) -> None:
        check_policy("extrapolate", self.above)
        check_policy("below-context", self.below)

    def describe(self) -> str:
        """One phrase for notes: ``beyond the grid 'linear', below the first context 'clamp'``."""
        return f"beyond the measured grid '{self.above}', below the first measured context '{self.below}'"


@dataclass(frozen=True)
class Bracket:
    """Where a query falls on one axis: grid indices and their weights (weights sum to 1)."""

    indices: tuple[int, ...]
    weights: tuple[float, ...]


def bracket(xs: Sequence[float], x: float, policy: str, axis: str) -> Bracket:
    """The grid points of axis ``xs`` (strictly increasing) that carry ``x``, and their weights.

    On a grid point: that point alone with weight 1 (so interpolation there is
    exact and never touches a neighbour).  Inside: the two neighbours,
    ``w1 = (x - x0) / (x1 - x0)``.  Outside: per ``policy``.

    :raises InputError: outside the range with ``policy = 'error'``, or ``'linear'`` on a one-point axis.
    """
    check_policy("extrapolation policy", policy)
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return Bracket((i,), (1.0,))
    if xs[0] < x < xs[-1]:
        return _segment(xs, i, x)
    where = f"{axis} {x:g} is outside the measured {_span(xs)}"
    if policy == "error":
        raise InputError(f"{where} (extrapolation policy 'error'; use 'clamp' or 'linear' to go beyond)")
    if policy == "clamp":
        return Bracket((0 if x < xs[0] else len(xs) - 1,), (1.0,))
    if len(xs) < 2:
        raise InputError(f"{where}: 'linear' extrapolation needs two measured {axis} values")
    return _segment(xs, 1 if x < xs[0] else len(xs) - 1, x)


def _segment(xs: Sequence[float], i: int, x: float) -> Bracket:
    """Points ``i - 1`` and ``i`` with linear weights (outside ``[0, 1]`` when extrapolating)."""
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])  # y = (1 - t) y0 + t y1
    return Bracket((i - 1, i), (1.0 - t, t))


def _span(xs: Sequence[float]) -> str:
    return f"value {xs[0]:g}" if len(xs) == 1 else f"range {xs[0]:g}..{xs[-1]:g}"


def multilinear(axes: Sequence[Sequence[float]], value: Callable[[tuple[int, ...]], float],
                point: Sequence[float], policy: str | Sequence[str], names: Sequence[str],
                missing: Callable[[tuple[int, ...]], str]) -> float:
    """Tensor-product linear interpolation of ``value(index)`` at ``point``.

    ``policy``: one policy for every axis, or one per axis.  ``value`` returns
    the grid value at an index tuple (``nan`` if missing); ``missing(index)``
    names a missing point for the error message.

    :raises InputError: a coordinate outside its axis (per its policy), a needed
        grid point missing, or a result <= 0 (linear extrapolation below zero).
    """
    policies = [policy] * len(axes) if isinstance(policy, str) else list(policy)
    brackets = [bracket(xs, x, p, n) for xs, x, p, n in zip(axes, point, policies, names)]
    total = 0.0
    for corner in itertools.product(*(zip(b.indices, b.weights) for b in brackets)):
        idx = tuple(i for i, _ in corner)
        w = math.prod(wt for _, wt in corner)  # weight of a corner = product of its axis weights
        if w == 0.0:
            continue
        v = value(idx)
        if math.isnan(v):
            raise InputError(f"{missing(idx)} was not measured, and this query needs it")
        total += w * v
    if not total > 0:
        raise InputError(f"extrapolation gives {total:g} (<= 0) at "
                         + ", ".join(f"{n} {x:g}" for n, x in zip(names, point)))
    return total
