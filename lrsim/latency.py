"""What things cost and how long steps are: latency models and distributions for :mod:`lrsim.sim`.

Latency models give the wall time of **one forward pass** (one iteration of a
continuous-batching server) as a function of the batch and of the positions
each sequence computes in that pass:

- :class:`ConstantLatency`: the same time for any batch (the paper's
  assumption "a batch of k target steps costs the same as one").
- :class:`CurveLatency`: a measured or fitted curve ``T(x)`` over the batch or
  over the positions in the pass (``batch * tokens``), piecewise linear.
- :class:`GridLatency`: a table ``T(batch, tokens)``, bilinear.

A latency model may also be *context-aware*: ``context_aware`` true, ``at(committed)`` returning the
pricing function ``f(batch, tokens)`` at that many tokens of the current request past its prompt, and
``check(batch, tokens, committed)`` checking every context up to there; the simulator then prices each
cycle (async: stage) at its request's context (:class:`lrsim.hardware.ContextProfileLatency`).

Distributions (:class:`Constant`, :class:`Empirical`, :class:`Uniform`,
:class:`LogNormal`, :class:`Exponential`) describe step lengths in tokens and
verifier latencies in seconds.  Everything here is a frozen dataclass with help
text, serialises with ``to_dict`` and comes back with :func:`latency_from_dict`
/ :func:`dist_from_dict`, so calibration (a later issue) can fill a table from
measurements and a trace header can say which model made a run.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Union

import numpy as np

from .errors import InputError
from .fields import option

EXTRAPOLATION = ("error", "clamp", "linear")



def _positive(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
        raise InputError(f"{name} must be a finite number > 0, got {v!r}")


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, tuple) else v


class _Serialised:
    """``to_dict``: ``{"kind": ..., field: value, ...}`` with tuples as lists (JSON-ready)."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind} | {f.name: _lists(getattr(self, f.name)) for f in fields(self)}


# ----------------------------------------------------------------------------- latency models


@dataclass(frozen=True)
class ConstantLatency(_Serialised):
    """One forward pass costs ``seconds`` whatever the batch (the paper's assumption, up to the budget M)."""

    seconds: float = option("wall time of one forward pass (s)", 1.0)
    kind: ClassVar[str] = "constant"

    def __post_init__(self) -> None:
        _positive("seconds", self.seconds)

    def __call__(self, batch: int, tokens: int = 1) -> float:
        return self.seconds

    def check(self, batch: int, tokens: int = 1) -> None:
        """Raise :class:`InputError` if the model cannot price this pass (never, here)."""


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float, extrapolate: str, what: str) -> float:
    """Piecewise-linear ``y(x)``; outside ``[xs[0], xs[-1]]`` per ``extrapolate``."""
    if len(xs) == 1:
        if x != xs[0] and extrapolate == "error":
            raise InputError(f"{what} {x:g} is outside the latency table (only {xs[0]:g})")
        return ys[0]
    if x < xs[0] or x > xs[-1]:
        if extrapolate == "error":
            raise InputError(f"{what} {x:g} is outside the latency table ({xs[0]:g}..{xs[-1]:g}); "
                             "extend the table or set extrapolate to 'clamp' or 'linear'")
        if extrapolate == "clamp":
            return ys[0] if x < xs[0] else ys[-1]
        i = 1 if x < xs[0] else len(xs) - 1  # linear: continue the outermost segment
    else:
        i = min(max(bisect.bisect_right(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)  # y = y0 + slope * (x - x0)
    if y <= 0:
        raise InputError(f"latency table extrapolates to {y:g} s at {what} {x:g}")
    return y


def _check_axis(name: str, xs: tuple, ys: tuple) -> None:
    if len(xs) == 0 or len(xs) != len(ys):
        raise InputError(f"latency table needs as many {name} values as seconds, at least one")
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise InputError(f"latency table {name} values must increase strictly")
    for y in ys:
        _positive("latency table seconds", y)


@dataclass(frozen=True)
class CurveLatency(_Serialised):
    """Measured or fitted ``T(x)``, piecewise linear, where ``x`` is the batch or the positions in the pass.

    ``axis = "positions"`` prices a pass by ``batch * tokens`` (sequences times
    positions per sequence), which is what a GPU (or CPU) mostly pays for;
    ``axis = "batch"`` ignores the tokens per sequence.
    """

    x: tuple[float, ...] = option("abscissae, strictly increasing (batch sizes or positions)", (1.0,))
    seconds: tuple[float, ...] = option("wall time of one forward pass at each x (s)", (1.0,))
    axis: str = option("'positions' (batch x tokens per sequence) or 'batch'", "positions")
    extrapolate: str = option("outside the table: 'error', 'clamp' or 'linear' (continue the last segment)", "error")
    kind: ClassVar[str] = "curve"

    def __post_init__(self) -> None:
        object.__setattr__(self, "x", tuple(float(v) for v in self.x))
        object.__setattr__(self, "seconds", tuple(float(v) for v in self.seconds))
        _check_axis("x", self.x, self.seconds)
        if self.axis not in ("positions", "batch"):
            raise InputError(f"curve axis must be 'positions' or 'batch', got {self.axis!r}")
        if self.extrapolate not in EXTRAPOLATION:
            raise InputError(f"extrapolate must be one of {', '.join(EXTRAPOLATION)}, got {self.extrapolate!r}")

    def __call__(self, batch: int, tokens: int = 1) -> float:
        x = batch * tokens if self.axis == "positions" else batch
        return _interp(self.x, self.seconds, x, self.extrapolate, self.axis)

    def check(self, batch: int, tokens: int = 1) -> None:
        """Raise :class:`InputError` (one line) if a pass with this batch and tokens is outside the table."""
        self(batch, tokens)


@dataclass(frozen=True)
class GridLatency(_Serialised):
    """A table ``T(batch, tokens)`` (tokens = positions per sequence in the pass), bilinear between grid points."""

    batch: tuple[float, ...] = option("batch sizes (rows), strictly increasing", (1.0,))
    tokens: tuple[float, ...] = option("positions per sequence (columns), strictly increasing", (1.0,))
    seconds: tuple[tuple[float, ...], ...] = option("seconds[i][j]: one pass at batch[i] and tokens[j] (s)", ((1.0,),))
    extrapolate: str = option("outside the grid: 'error', 'clamp' or 'linear'", "error")
    kind: ClassVar[str] = "grid"

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", tuple(float(v) for v in self.batch))
        object.__setattr__(self, "tokens", tuple(float(v) for v in self.tokens))
        object.__setattr__(self, "seconds", tuple(tuple(float(v) for v in row) for row in self.seconds))
        if len(self.seconds) != len(self.batch) or any(len(r) != len(self.tokens) for r in self.seconds):
            raise InputError("grid latency: seconds must have one row per batch and one column per tokens value")
        for row in self.seconds:
            _check_axis("tokens", self.tokens, row)
        _check_axis("batch", self.batch, tuple(r[0] for r in self.seconds))
        if self.extrapolate not in EXTRAPOLATION:
            raise InputError(f"extrapolate must be one of {', '.join(EXTRAPOLATION)}, got {self.extrapolate!r}")

    def __call__(self, batch: int, tokens: int = 1) -> float:
        # interpolate along tokens in every row, then along batch
        col = tuple(_interp(self.tokens, row, tokens, self.extrapolate, "tokens") for row in self.seconds)
        return _interp(self.batch, col, batch, self.extrapolate, "batch")

    def check(self, batch: int, tokens: int = 1) -> None:
        self(batch, tokens)


Latency = Union[ConstantLatency, CurveLatency, GridLatency]
LATENCY_KINDS = {c.kind: c for c in (ConstantLatency, CurveLatency, GridLatency)}


def latency_from_dict(d: dict) -> Latency:
    """Inverse of ``to_dict``: ``{"kind": "curve", "x": [...], "seconds": [...], ...}``.

    A ``"scale"`` key multiplies every time (e.g. ``0.001`` for a table in ms).
    ``{"kind": "profile", "profile": NAME|FILE, "arch": ..., "context": L}``: a measured latency profile
    (:class:`lrsim.hardware.ProfileLatency`); ``{"kind": "profile-context", ..., "prompt": P}``: the same with
    the context growing through each request (:class:`lrsim.hardware.ContextProfileLatency`).
    """
    if isinstance(d, dict) and d.get("kind") in ("profile", "profile-context"):
        from .hardware import ContextProfileLatency, ProfileLatency

        return (ProfileLatency if d["kind"] == "profile" else ContextProfileLatency).from_dict(d)
    if not isinstance(d, dict) or d.get("kind") not in LATENCY_KINDS:
        raise InputError(f"latency model needs 'kind' in {', '.join(LATENCY_KINDS)}")
    d = dict(d)
    cls = LATENCY_KINDS[d.pop("kind")]
    scale = float(d.pop("scale", 1.0))
    known = {f.name for f in fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise InputError(f"{cls.kind} latency model has no field(s) {', '.join(sorted(unknown))}")
    if scale != 1.0:
        if cls is ConstantLatency:
            d["seconds"] = float(d.get("seconds", 1.0)) * scale
        elif cls is CurveLatency:
            d["seconds"] = [float(v) * scale for v in d["seconds"]]
        else:
            d["seconds"] = [[float(v) * scale for v in row] for row in d["seconds"]]
    try:
        return cls(**d)
    except TypeError as e:
        raise InputError(f"bad {cls.kind} latency model: {e}") from None


def load_latency(spec: str) -> Latency:
    """A latency model from a command-line value: a number (constant seconds), inline JSON, or a JSON file."""
    spec = spec.strip()
    try:
        seconds = float(spec)
    except ValueError:
        seconds = None
    if seconds is not None:
        return ConstantLatency(seconds)
    if spec.startswith("{"):
        text = spec
    else:
        p = Path(spec)
        if not p.is_file():
            raise InputError(f"latency model {spec!r}: not a number, JSON object or file")
        text = _read(p, f"latency model {spec!r}")
    try:
        return latency_from_dict(json.loads(text))
    except json.JSONDecodeError as e:
        raise InputError(f"latency model {spec[:60]!r}: invalid JSON ({e.msg})") from None


# ----------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class Constant(_Serialised):
    """Always ``value``."""

    value: float = option("the value", 1.0)
    kind: ClassVar[str] = "constant"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value) and self.value >= 0):
            raise InputError(f"constant must be a finite number >= 0, got {self.value!r}")

    @property
    def mean(self) -> float:
        return float(self.value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))


@dataclass(frozen=True)
class Empirical(_Serialised):
    """Resample (with replacement) a measured sample, e.g. step lengths from a trace."""

    values: tuple[float, ...] = option("the sample", (1.0,))
    kind: ClassVar[str] = "empirical"

    def __post_init__(self) -> None:
        vals = tuple(float(v) for v in self.values)
        if not vals or not all(math.isfinite(v) and v >= 0 for v in vals):
            raise InputError("empirical sample must be a non-empty list of finite numbers >= 0")
        object.__setattr__(self, "values", vals)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values), size=n)


@dataclass(frozen=True)
class Uniform(_Serialised):
    """Uniform on ``[low, high]``; step lengths round it to whole tokens."""

    low: float = option("lower end", 0.0)
    high: float = option("upper end", 1.0)
    kind: ClassVar[str] = "uniform"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and 0 <= self.low <= self.high):
            raise InputError(f"uniform needs 0 <= low <= high, got {self.low!r}, {self.high!r}")

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size=n)


@dataclass(frozen=True)
class LogNormal(_Serialised):
    """Log-normal with the given mean and coefficient of variation (sd / mean)."""

    mean_value: float = option("mean", 1.0)
    cv: float = option("coefficient of variation, sd / mean", 0.5)
    kind: ClassVar[str] = "lognormal"

    def __post_init__(self) -> None:
        _positive("lognormal mean", self.mean_value)
        if not (math.isfinite(self.cv) and self.cv >= 0):
            raise InputError(f"lognormal cv must be a finite number >= 0, got {self.cv!r}")

    @property
    def mean(self) -> float:
        return float(self.mean_value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        s2 = math.log1p(self.cv**2)  # sigma^2 = ln(1 + cv^2)
        mu = math.log(self.mean_value) - s2 / 2  # E = exp(mu + sigma^2/2)
        return rng.lognormal(mu, math.sqrt(s2), size=n)


@dataclass(frozen=True)
class Exponential(_Serialised):
    """Exponential with the given mean."""

    mean_value: float = option("mean", 1.0)
    kind: ClassVar[str] = "exponential"

    def __post_init__(self) -> None:
        _positive("exponential mean", self.mean_value)

    @property
    def mean(self) -> float:
        return float(self.mean_value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean_value, size=n)


Dist = Union[Constant, Empirical, Uniform, LogNormal, Exponential]
DIST_KINDS = {c.kind: c for c in (Constant, Empirical, Uniform, LogNormal, Exponential)}
DIST_SYNTAX = "N | const:N | empirical:A,B,C | empirical:@FILE | uniform:LO,HI | lognormal:MEAN,CV | exp:MEAN"


def dist_from_dict(d: dict) -> Dist:
    """Inverse of ``to_dict``: ``{"kind": "lognormal", "mean_value": 52, "cv": 0.5}``."""
    if not isinstance(d, dict) or d.get("kind") not in DIST_KINDS:
        raise InputError(f"distribution needs 'kind' in {', '.join(DIST_KINDS)}")
    d = dict(d)
    cls = DIST_KINDS[d.pop("kind")]
    try:
        return cls(**d)
    except TypeError as e:
        raise InputError(f"bad {cls.kind} distribution: {e}") from None


def _read(p: Path, what: str) -> str:
    """A model file's text; a file that cannot be read as UTF-8 is bad input."""
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{what}: cannot read {p} ({e})") from None


def _numbers(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise InputError(f"{what}: expected numbers, got {text[:60]!r}") from None


def parse_dist(spec: str) -> Dist:
    """A distribution from a command-line value (syntax: ``DIST_SYNTAX``)."""
    spec = spec.strip()
    kind, _, arg = spec.partition(":")
    if not arg:
        return Constant(*_numbers(kind, "distribution"))
    kind = {"const": "constant", "exp": "exponential"}.get(kind, kind)
    if kind == "empirical" and arg.startswith("@"):
        p = Path(arg[1:])
        if not p.is_file():
            raise InputError(f"empirical sample file {p} not found")
        arg = _read(p, "empirical sample file")
    nums = _numbers(arg, kind)
    arity = {"constant": 1, "uniform": 2, "lognormal": 2, "exponential": 1}
    if kind == "empirical":
        return Empirical(tuple(nums))
    if kind not in arity:
        raise InputError(f"unknown distribution {kind!r}: expected {DIST_SYNTAX}")
    if len(nums) != arity[kind]:
        raise InputError(f"{kind} takes {arity[kind]} number(s), got {len(nums)}")
    return DIST_KINDS[kind](*nums)
