"""Distributions of step lengths (tokens), request lengths and verifier latencies (seconds) for :mod:`lrsim.sim`.

:class:`Constant`, :class:`Empirical`, :class:`Uniform`, :class:`LogNormal`
and :class:`Exponential` are frozen dataclasses with help text; they
serialise with ``to_dict`` and come back with :func:`dist_from_dict`, and
:func:`parse_dist` reads the command-line syntax :data:`DIST_SYNTAX`.  What a
forward pass costs is not here: see :mod:`lrsim.cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Union

import numpy as np

from .errors import InputError
from .fields import option


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
