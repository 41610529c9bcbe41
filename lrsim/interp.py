"""Multilinear interpolation on a rectangular grid with missing points and an explicit extrapolation policy.

Used by :mod:`lrsim.profile` for forward-pass times over (context, batch,
positions) and prefill times over (batch, prompt).  Along each axis the value
is piecewise linear between neighbouring grid points; over several axes this
is the tensor product (bilinear, trilinear), which is *exact on grid points*
and reproduces any function that is affine in each axis separately.

Outside an axis' range the policy decides: ``'error'`` (default) refuses,
``'clamp'`` uses the end point, ``'linear'`` continues the outermost segment.
A grid point whose value is missing (``nan``) is never invented: a query whose
interpolation needs it is refused whatever the policy.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from .errors import InputError

EXTRAPOLATION = ("error", "clamp", "linear")


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
    if policy not in EXTRAPOLATION:
        raise InputError(f"extrapolation policy must be one of {', '.join(EXTRAPOLATION)}, got {policy!r}")
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
                point: Sequence[float], policy: str, names: Sequence[str],
                missing: Callable[[tuple[int, ...]], str]) -> float:
    """Tensor-product linear interpolation of ``value(index)`` at ``point``.

    ``value`` returns the grid value at an index tuple (``nan`` if missing);
    ``missing(index)`` names a missing point for the error message.

    :raises InputError: a coordinate outside its axis (per ``policy``), a needed
        grid point missing, or a result <= 0 (linear extrapolation below zero).
    """
    brackets = [bracket(xs, x, policy, n) for xs, x, n in zip(axes, point, names)]
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
