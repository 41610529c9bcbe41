"""The one pass-cost model: what one forward pass costs, read from a latency profile.

Everything in lrsim that needs a time for a forward pass (the simulator,
serving, replay, planning, the paper check) asks a :class:`PassCost`::

    cost.seconds(context, rows, positions) -> seconds

for one pass over ``rows`` sequences, each computing ``positions`` new
positions (1 = a decode step; ``q > 1``: ``q - 1`` speculated tokens to
verify, or a prefill chunk) over KV caches of ``context`` tokens.  Its one
implementation is :class:`ProfileCost`: an entry of a latency profile
(:mod:`lrsim.latency.profile`), trilinear between the measured points and exact
on them.  Profiles come from measurement (``lrref profile``, the H100 set),
from traces (:mod:`lrsim.cost.fromtraces`), from the GPU hardware model
(``model:DEVICE``) or from a number: :func:`constant` (the paper's "a batch
costs what one sequence costs"), :func:`grid` and :func:`curve` (hand-typed
tables) build one-entry profiles in memory.

Outside the measured grid, one rule and one policy (:class:`Extrapolation`):

- rows beyond the largest measured batch ``b_max`` fold into positions when
  the entry has more than one positions value: ``T(L, b, q) = T(L, b_max,
  q b / b_max)``, the same positions per pass (the matmul work a compute-bound
  device pays; per-row cache reads beyond ``b_max`` rows are under-counted);
- then an axis measured at one value is flat (a profile measured at one
  context is context-independent; one measured batch and positions: every
  pass costs the same);
- what remains outside follows ``extrapolation.above`` (``below`` for a
  context under the first measured one).

``scale`` multiplies every time (e.g. tensor parallelism over ``N`` devices
at efficiency ``E`` as an assumption: ``1 / (N E)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

from ..errors import InputError
from ..latency.interp import Extrapolation, check_policy
from ..latency.profile import ArchProfile, Profile, Provenance
from .library import load_profile

GIVEN = Provenance(device="given", engine="a number or table given by the user", dtype="n/a", date="1970-01-01")

#: passes already priced, shared by every ProfileCost of one profile entry (a HardwareSpec builds a new ProfileCost
#: per simulated configuration): (id(table), policies, scale, context, rows, positions) -> seconds.  The tables are
#: held in _TABLES so that no id is reused while its prices are kept.
_PRICED: dict[tuple, float] = {}
_TABLES: dict[int, object] = {}
_PRICED_MAX = 1 << 16


@runtime_checkable
class PassCost(Protocol):
    """Seconds of one forward pass: ``rows`` sequences, ``positions`` new positions each, ``context`` cached."""

    label: str
    context_free: bool

    def seconds(self, context: float, rows: float, positions: float) -> float: ...

    def check(self, rows: float, positions: float, context_lo: float = 0.0, context_hi: float = 0.0) -> None: ...

    def to_dict(self) -> dict: ...


@dataclass(frozen=True, eq=False)
class ProfileCost:
    """:class:`PassCost` of one entry of a latency profile (see the module docstring for the rules)."""

    profile: Profile
    arch: str
    extrapolation: Extrapolation = field(default_factory=Extrapolation)
    scale: float = 1.0
    source: dict | None = None  #: how it was given, for :meth:`to_dict` (None: a profile's name or file)

    def __post_init__(self) -> None:
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not 0 < self.scale < math.inf:
            raise InputError(f"scale must be a finite number > 0, got {self.scale!r}")
        table = self.profile.arch(self.arch)
        object.__setattr__(self, "table", table)
        object.__setattr__(self, "_cache", {})

    def __eq__(self, other: object) -> bool:
        """Value equality: the same description (``to_dict``) and, for an unnamed source, the same profile."""
        if not isinstance(other, ProfileCost):
            return NotImplemented
        return self.to_dict() == other.to_dict() and (self.source is not None or self.profile == other.profile)

    def __hash__(self) -> int:
        return hash(repr(sorted(self.to_dict().items())))

    @classmethod
    def of(cls, profile: str | Profile, arch: str, extrapolate: str | Extrapolation = "linear",
           below: str = "clamp", scale: float = 1.0) -> "ProfileCost":
        """A profile's entry by name or file (``extrapolate``: a policy, or an :class:`Extrapolation`)."""
        ex = extrapolate if isinstance(extrapolate, Extrapolation) else Extrapolation(extrapolate, below)
        return cls(load_profile(profile), arch, ex, scale)

    @property
    def label(self) -> str:
        """How messages name the cost: ``ARCH in PROFILE``."""
        return f"{self.arch} in {self.profile.where}"

    @property
    def context_free(self) -> bool:
        """True when the entry was measured at one context (every pass costs the same at any context)."""
        return len(self.table.context) == 1

    @property
    def contexts(self) -> tuple[int, ...]:
        return self.table.context

    @property
    def uniform(self) -> bool:
        """True when every pass costs the same (one measured point: rows, positions and context do not matter)."""
        a = self.table
        return len(a.context) == len(a.batch) == len(a.positions) == 1

    def seconds(self, context: float, rows: float, positions: float) -> float:
        """One pass in seconds (errors: one line naming the profile, the entry and the point)."""
        key = (context, rows, positions)
        hit = self._cache.get(key)
        if hit is None:
            ex = self.extrapolation
            shared = (id(self.table), ex.above, ex.below, self.scale, context, rows, positions)
            hit = _PRICED.get(shared)
            if hit is None:
                hit = self._ms(context, rows, positions) * self.scale / 1000.0  # ms -> s
                if len(_PRICED) >= _PRICED_MAX:
                    _PRICED.clear()
                    _TABLES.clear()
                _TABLES[id(self.table)] = self.table
                _PRICED[shared] = hit
            self._cache[key] = hit
            if len(self._cache) > 65536:
                self._cache.clear()
        return hit

    def priced_shapes(self) -> list[tuple[float, float, float]]:
        """The ``(context, rows, positions)`` passes priced so far (what a run asked of this cost; the memo is
        cleared past 65,536 of them)."""
        return list(self._cache)

    def _ms(self, context: float, rows: float, positions: float) -> float:
        a, ex = self.table, self.extrapolation
        L, b, q = context, rows, positions
        if b > a.batch[-1] and len(a.positions) > 1:
            q, b = q * b / a.batch[-1], a.batch[-1]  # fold rows beyond the grid into positions: b q is kept
        L, b, q = (xs[0] if len(xs) == 1 else v for xs, v in ((a.context, L), (a.batch, b), (a.positions, q)))
        policies = (ex.below if L < a.context[0] else ex.above, ex.above, ex.above)
        try:
            return a.time_ms(L, b, q, policies)
        except InputError as e:
            raise InputError(f"{self.profile.where}: {e} (a pass of {rows:g} rows x {positions:g} positions at "
                             f"context {context:.0f})") from None

    def check(self, rows: float, positions: float, context_lo: float = 0.0, context_hi: float = 0.0) -> None:
        """Raise :class:`InputError` unless every pass of up to ``rows`` rows at ``positions``, at every context
        from ``context_lo`` to ``context_hi``, has a price."""
        xs = self.table.context
        for L in sorted({context_lo, context_hi} | {x for x in xs if context_lo < x < context_hi}):
            for b in sorted({1, rows}):
                self.seconds(L, b, positions)

    def to_dict(self) -> dict:
        """JSON-ready: ``source`` when given, else ``{"kind": "profile", "profile": NAME|FILE, "arch": ...}``."""
        if self.source is not None:
            return dict(self.source)
        d = {"kind": "profile", "profile": self.profile.path or self.profile.name, "arch": self.arch,
             "extrapolate": self.extrapolation.above, "below": self.extrapolation.below}
        return d | ({"scale": self.scale} if self.scale != 1.0 else {})


def cost_ratio(draft: PassCost, target: PassCost, context: float = 0.0, rows: float = 1) -> float:
    """``c1`` of the closed forms: draft over target time of one decode pass (one token per row), same context.

    ``c1 = T_draft(L, b, 1) / T_target(L, b, 1)``; one decode pass writes one
    token per row, so this is the per-token ratio of :mod:`lrsim.theory`.
    """
    return draft.seconds(context, rows, 1) / target.seconds(context, rows, 1)


# ----------------------------------------------------------------------------- costs from numbers


def _table(name: str, batch: Sequence[float], positions: Sequence[float], ms) -> Profile:
    arch = ArchProfile(name, 1, 1, 1, (0,), tuple(batch), tuple(positions), (ms,))
    return Profile(name, "wall", GIVEN, {name: arch}, f"{name} pass cost given as numbers")


def _axis(name: str, xs: Sequence[float], ys: Sequence[float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    xs, ys = tuple(float(v) for v in xs), tuple(float(v) for v in ys)
    if not xs or len(xs) != len(ys):
        raise InputError(f"latency table needs as many {name} values as seconds, at least one")
    if any(b <= a for a, b in zip(xs, xs[1:])) or xs[0] < 1:
        raise InputError(f"latency table {name} values must be >= 1 and increase strictly")
    for y in ys:
        if isinstance(y, bool) or not (math.isfinite(y) and y > 0):
            raise InputError(f"latency table seconds must be finite numbers > 0, got {y!r}")
    return xs, ys


def constant(seconds: float) -> ProfileCost:
    """Every pass costs ``seconds`` whatever its rows, positions and context (the paper's assumption)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (math.isfinite(seconds)
                                                                                   and seconds > 0):
        raise InputError(f"seconds must be a finite number > 0, got {seconds!r}")
    prof = _table("constant", (1,), (1,), ((seconds * 1000.0,),))
    return ProfileCost(prof, "constant", Extrapolation("clamp", "clamp"), source={"kind": "constant",
                                                                                    "seconds": seconds})


def grid(batch: Sequence[float], tokens: Sequence[float], seconds, extrapolate: str = "error") -> ProfileCost:
    """A hand-typed table ``seconds[i][j]`` at ``batch[i]`` rows and ``tokens[j]`` positions per row (any context)."""
    check_policy("extrapolate", extrapolate)
    bs, _ = _axis("batch", batch, [r[0] if len(r) else math.nan for r in seconds])
    ts = tuple(float(v) for v in tokens)
    rows = [_axis("tokens", ts, r)[1] for r in seconds]
    prof = _table("grid", bs, ts, tuple(tuple(v * 1000.0 for v in r) for r in rows))
    return ProfileCost(prof, "grid", Extrapolation(extrapolate, "clamp"),
                       source={"kind": "grid", "batch": list(bs), "tokens": list(ts),
                               "seconds": [list(r) for r in rows], "extrapolate": extrapolate})


def curve(x: Sequence[float], seconds: Sequence[float], axis: str = "positions",
          extrapolate: str = "error") -> ProfileCost:
    """A hand-typed curve ``T(x)``: ``axis = 'positions'`` prices a pass by ``rows x positions`` (one row of that
    many positions, the fold rule), ``axis = 'batch'`` by its rows alone (positions ignored)."""
    check_policy("extrapolate", extrapolate)
    if axis not in ("positions", "batch"):
        raise InputError(f"curve axis must be 'positions' or 'batch', got {axis!r}")
    xs, ys = _axis("x", x, seconds)
    ms = tuple(v * 1000.0 for v in ys)
    if axis == "positions":
        prof = _table("curve", (1,), xs, (ms,))
    else:
        prof = _table("curve", xs, (1,), tuple((v,) for v in ms))
    return ProfileCost(prof, "curve", Extrapolation(extrapolate, "clamp"),
                       source={"kind": "curve", "x": list(xs), "seconds": list(ys), "axis": axis,
                               "extrapolate": extrapolate})


def cost_from_dict(d: dict) -> ProfileCost:
    """Inverse of ``to_dict``, and the JSON a user types for ``--target-latency``/``--draft-latency``.

    ``{"kind": "constant", "seconds": S}``, ``{"kind": "grid", "batch": [...], "tokens": [...], "seconds":
    [[...]], "extrapolate": ...}``, ``{"kind": "curve", "x": [...], "seconds": [...], "axis": ...}``, or
    ``{"kind": "profile", "profile": NAME|FILE|model:DEVICE, "arch": ..., "extrapolate": ..., "below": ...,
    "scale": ...}``.  A ``"scale"`` key multiplies every time of a table (e.g. ``0.001`` for one in ms).
    ``"kind": "profile-context"`` (older traces) reads as ``"profile"``; its ``prompt`` is dropped (the
    simulator's ``prompt_tokens`` holds it now).
    """
    if not isinstance(d, dict) or "kind" not in d:
        raise InputError("latency model needs 'kind': constant, grid, curve or profile")
    d = dict(d)
    kind = d.pop("kind")
    try:
        cost = _from_fields(kind, d)
    except KeyError as e:
        raise InputError(f"{kind} latency model needs {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"bad {kind} latency model: {e}") from None
    if d:
        raise InputError(f"{kind} latency model has no field(s) {', '.join(sorted(d))}")
    return cost


def _from_fields(kind: str, d: dict) -> ProfileCost:
    """The cost of one ``kind``, popping the fields it uses from ``d`` (what is left is unknown)."""
    if kind in ("profile", "profile-context"):
        for old in ("prompt", "context"):  # older traces' fields; the simulator's prompt_tokens holds the prompt
            d.pop(old, None)
        return ProfileCost.of(d.pop("profile"), d.pop("arch"), d.pop("extrapolate", "linear"),
                              d.pop("below", "clamp"), float(d.pop("scale", 1.0)))
    scale = float(d.pop("scale", 1.0))
    if kind == "constant":
        return constant(float(d.pop("seconds", 1.0)) * scale)
    if kind == "grid":
        secs = [[float(v) * scale for v in row] for row in d.pop("seconds")]
        return grid(d.pop("batch"), d.pop("tokens"), secs, d.pop("extrapolate", "error"))
    if kind == "curve":
        secs = [float(v) * scale for v in d.pop("seconds")]
        return curve(d.pop("x"), secs, d.pop("axis", "positions"), d.pop("extrapolate", "error"))
    raise InputError(f"unknown latency model kind {kind!r}: expected constant, grid, curve or profile")


def load_cost(spec: str) -> ProfileCost:
    """A pass cost from a command-line value: a number (constant seconds), inline JSON, or a JSON file."""
    import json
    from pathlib import Path

    spec = spec.strip()
    try:
        seconds = float(spec)
    except ValueError:
        seconds = None
    if seconds is not None:
        return constant(seconds)
    if spec.startswith("{"):
        text = spec
    else:
        p = Path(spec)
        if not p.is_file():
            raise InputError(f"latency model {spec!r}: not a number, JSON object or file")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"latency model {spec!r}: cannot read {p} ({e})") from None
    try:
        return cost_from_dict(json.loads(text))
    except json.JSONDecodeError as e:
        raise InputError(f"latency model {spec[:60]!r}: invalid JSON ({e.msg})") from None
