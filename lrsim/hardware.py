"""Latency profiles in use: the embedded ones, the resolver (a name or a file), the simulator adapter, c1.

- :func:`load_profile` takes an embedded profile's name (``lrsim profiles``
  lists them) or a path to a profile file, wherever a profile is asked for.
- :class:`ProfileLatency` prices a forward pass from a profile at a fixed
  context with the interface of :mod:`lrsim.latency` (``__call__(batch,
  tokens)`` and ``check``, in **seconds**), so the simulator runs on measured
  hardware costs; as JSON it is ``{"kind": "profile", "profile": NAME|FILE,
  "arch": ..., "context": L, "extrapolate": ...}``.
- :class:`ContextProfileLatency` prices passes as the context grows through
  a request (the simulator's context-aware latency, ``{"kind":
  "profile-context", ...}``).
- :func:`cost_ratio` is the per-token cost ratio ``c1`` of a draft/target pair.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Sequence

from .errors import InputError
from .fields import option
from .interp import EXTRAPOLATION, bracket
from .profile import Profile, read_profile

PROFILE_DIR = Path(__file__).parent / "data" / "profiles"


def embedded() -> dict[str, Path]:
    """Embedded profiles: name -> file (``lrsim/data/profiles/NAME.json``)."""
    return {p.stem: p for p in sorted(PROFILE_DIR.glob("*.json"))}


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int) -> Profile:
    return read_profile(path)


def load_profile(spec: str | os.PathLike | Profile) -> Profile:
    """A profile from an embedded name or a file path (a :class:`Profile` passes through).

    :raises InputError: neither an embedded name nor a readable, valid profile file (one line).
    """
    if isinstance(spec, Profile):
        return spec
    s = str(spec)
    emb = embedded()
    p = emb.get(s) or Path(s).expanduser()
    if not p.is_file():
        raise InputError(f"latency profile {s!r}: neither an embedded profile ({', '.join(emb) or 'none'}) "
                         "nor a file")
    prof = _read(str(p.resolve()), p.stat().st_mtime_ns)
    if s in emb and prof.name != s:
        raise InputError(f"{p}: embedded profile named {prof.name!r} in a file named {s!r}")
    return prof


def cost_ratio(profile: str | Profile, draft: str, target: str, context: float = 0, batch: float = 1,
               extrapolate: str = "error", target_profile: str | Profile | None = None) -> float:
    """``c1``: draft over target time per token of a decode step (q = 1), at the same context and batch.

    ``c1 = T_draft(L, b, 1) / T_target(L, b, 1)``; one decode pass writes one
    token per row, so this is the per-token ratio of :mod:`lrsim.theory`.
    ``target_profile``: the target's profile when it runs elsewhere (default: ``profile``).
    """
    d = load_profile(profile).time_ms(draft, context, batch, 1, extrapolate)
    t = load_profile(target_profile or profile).time_ms(target, context, batch, 1, extrapolate)
    return d / t


@dataclass(frozen=True)
class ProfileLatency:
    """One architecture's forward-pass latency from a profile at a fixed context, in seconds.

    Trilinear in the profile; exact on its grid; outside it per ``extrapolate``.
    """

    profile: str = option("latency profile: an embedded name (`lrsim profiles`) or a file", "")
    arch: str = option("architecture in the profile, e.g. 'qwen2.5-32b'", "")
    context: float = option("tokens in the KV cache during the passes", 0.0)
    extrapolate: str = option("outside the measured range: 'error', 'clamp' or 'linear'", "error")
    kind: ClassVar[str] = "profile"

    def __post_init__(self) -> None:
        if self.extrapolate not in EXTRAPOLATION:
            raise InputError(f"extrapolate must be one of {', '.join(EXTRAPOLATION)}, got {self.extrapolate!r}")
        prof = load_profile(self.profile)
        prof.arch(self.arch)
        object.__setattr__(self, "_profile", prof)

    def __call__(self, batch: int, tokens: int = 1) -> float:
        ms = self._profile.time_ms(self.arch, self.context, batch, tokens, self.extrapolate)  # type: ignore[attr-defined]
        return ms / 1000.0  # ms -> s

    def check(self, batch: int, tokens: int = 1) -> None:
        """Raise :class:`InputError` (one line naming the profile's file and the point) if the pass has no price."""
        self(batch, tokens)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "profile": self.profile, "arch": self.arch, "context": self.context,
                "extrapolate": self.extrapolate}

    @classmethod
    def from_dict(cls, d: dict) -> "ProfileLatency":
        d = {k: v for k, v in d.items() if k != "kind"}
        unknown = set(d) - {"profile", "arch", "context", "extrapolate"}
        if unknown:
            raise InputError(f"profile latency model has no field(s) {', '.join(sorted(unknown))}")
        return cls(**d)


@dataclass(frozen=True)
class ContextProfileLatency:
    """One architecture's forward-pass latency from a profile as the context grows through a request, in seconds.

    The simulator prices each cycle (async: stage) at ``prompt + committed``
    tokens, ``committed`` what the current request has output so far
    (:meth:`at`); ``__call__`` prices at the prompt.  With one measured
    context the costs are context-independent (:attr:`context_aware` is
    False).  Per (batch, positions) the time is piecewise linear in the context
    through the profile's context points, which is the profile's trilinear
    lookup exactly (a multilinear function is linear along each axis).  Below
    the first measured context ``below`` applies, beyond the last (and outside
    batch/positions) ``extrapolate``; a point the profile did not measure is
    never invented.  ``scale`` multiplies every time (an assumption the user
    states, e.g. tensor parallelism over N GPUs at efficiency E: ``1 / (N E)``).
    """

    profile: str = option("latency profile: an embedded name (`lrsim profiles`) or a file", "")
    arch: str = option("architecture in the profile, e.g. 'qwen2.5-32b'", "")
    prompt: int = option("tokens in the KV cache when a request starts (its prompt)", 0)
    extrapolate: str = option("beyond the last measured context, batch or positions: 'error', 'clamp' or 'linear'",
                              "error")
    below: str = option("below the first measured context: 'clamp' (to it), 'error' or 'linear'", "clamp")
    scale: float = option("multiply every time by this (an assumption, e.g. 1 / (N E) for tensor parallelism)", 1.0)
    kind: ClassVar[str] = "profile-context"

    def __post_init__(self) -> None:
        for name in ("extrapolate", "below"):
            if getattr(self, name) not in EXTRAPOLATION:
                raise InputError(f"{name} must be one of {', '.join(EXTRAPOLATION)}, got {getattr(self, name)!r}")
        if isinstance(self.prompt, bool) or not isinstance(self.prompt, int) or self.prompt < 0:
            raise InputError(f"prompt must be an integer >= 0 (tokens), got {self.prompt!r}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not 0 < self.scale < math.inf:
            raise InputError(f"scale must be a finite number > 0, got {self.scale!r}")
        prof = load_profile(self.profile)
        object.__setattr__(self, "_profile", prof)
        object.__setattr__(self, "_xs", prof.arch(self.arch).context)
        object.__setattr__(self, "_curves", {})

    @property
    def context_aware(self) -> bool:
        """True when the profile measured this architecture at more than one context."""
        return len(self._xs) > 1

    @property
    def contexts(self) -> tuple[int, ...]:
        """The measured contexts of this architecture."""
        return self._xs

    def _curve(self, batch: int, tokens: int) -> tuple[float, ...]:
        """ms at each measured context for this (batch, positions); nan where the profile cannot price it."""
        key = (batch, tokens)
        if key not in self._curves:
            out = []
            for L in self._xs:
                try:
                    out.append(self._profile.time_ms(self.arch, L, batch, tokens, self.extrapolate))
                except InputError:
                    out.append(math.nan)
            self._curves[key] = tuple(out)
        return self._curves[key]

    def seconds(self, context: float, batch: int, tokens: int = 1) -> float:
        """One pass at ``context`` tokens in the cache (errors: one line naming the profile's file and the point)."""
        curve, xs = self._curve(batch, tokens), self._xs
        if len(xs) == 1:  # one measured context: context-independent
            ms, context = curve[0], xs[0]
        else:
            try:
                br = bracket(xs, context, self.below if context < xs[0] else self.extrapolate, "context")
                ms = sum(w * curve[i] for i, w in zip(br.indices, br.weights))  # linear in L between points
            except InputError:
                ms = math.nan
        if not ms > 0:  # outside the policy, a point not measured, or extrapolated below zero: say which
            policy = self.below if context < xs[0] else self.extrapolate
            ms = self._profile.time_ms(self.arch, context, batch, tokens, policy)
        return ms * self.scale / 1000.0  # ms -> s

    def __call__(self, batch: int, tokens: int = 1) -> float:
        return self.seconds(self.prompt, batch, tokens)

    def at(self, committed: float) -> Callable[..., float]:
        """Pricing at ``prompt + committed`` tokens: ``f(batch, tokens) -> seconds``."""
        return functools.partial(self.seconds, self.prompt + committed)

    def check(self, batch: int, tokens: int = 1, committed: float = 0.0) -> None:
        """Raise :class:`InputError` unless every context from the prompt to ``prompt + committed`` is priced."""
        lo, hi = self.prompt, self.prompt + committed
        for L in sorted({lo, hi} | {x for x in self._xs if lo < x < hi}):
            self.seconds(L, batch, tokens)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "profile": self.profile, "arch": self.arch, "prompt": self.prompt,
                "extrapolate": self.extrapolate, "below": self.below, "scale": self.scale}

    @classmethod
    def from_dict(cls, d: dict) -> "ContextProfileLatency":
        d = {k: v for k, v in d.items() if k != "kind"}
        unknown = set(d) - {"profile", "arch", "prompt", "extrapolate", "below", "scale"}
        if unknown:
            raise InputError(f"profile-context latency model has no field(s) {', '.join(sorted(unknown))}")
        return cls(**d)


# ----------------------------------------------------------------------------- listing


def _axes(a) -> str:
    pre = " +prefill" if a.prefill is not None else ""
    miss = f" ({a.unmeasured} points not measured)" if a.unmeasured else ""
    return (f"L {','.join(map(str, a.context))}; b {','.join(map(str, a.batch))}; "
            f"q {','.join(map(str, a.positions))}{pre}{miss}")


def describe(p: Profile) -> str:
    """One line: name first, then device, engine, timing kind, dtype, date, and architectures with their axes."""
    groups: dict[str, list[str]] = {}
    for name, a in p.archs.items():
        groups.setdefault(_axes(a), []).append(name)
    archs = " | ".join(f"{', '.join(names)}: {axes}" for axes, names in groups.items())
    v = p.provenance
    return f"{p.name}  {v.device} | {v.engine} | {p.timed} | {v.dtype} | {v.date} | {archs}"


def summary(p: Profile) -> dict:
    """JSON-ready summary of a profile (``lrsim profiles --json``)."""
    v = p.provenance
    return {"name": p.name, "path": p.path, "description": p.description, "timed": p.timed, "device": v.device,
            "engine": v.engine, "dtype": v.dtype, "date": v.date,
            "archs": {n: {"context": list(a.context), "batch": list(a.batch), "positions": list(a.positions),
                          "prefill": a.prefill is not None, "missing": list(a.missing)} for n, a in p.archs.items()}}


def profiles_report(specs: Sequence[str], as_json: bool = False, arch: str | None = None, context: float = 0,
                    batch: float = 1, positions: float = 1, draft: str | None = None,
                    extrapolate: str = "error") -> str:
    """``lrsim profiles``: list profiles (default: the embedded ones), or with ``arch`` price one pass in each."""
    profs = [load_profile(s) for s in (specs or embedded())]
    if arch is None:
        return json.dumps([summary(p) for p in profs], indent=1) if as_json else "\n".join(map(describe, profs))
    rows = []
    for p in profs:
        row = {"profile": p.name, "arch": arch, "context": context, "batch": batch, "positions": positions,
               "ms": p.time_ms(arch, context, batch, positions, extrapolate), "timed": p.timed}
        if draft:
            row |= {"draft": draft, "c1": cost_ratio(p, draft, arch, context, batch, extrapolate)}
        rows.append(row)
    if as_json:
        return json.dumps(rows, indent=1)
    return "\n".join(f"{r['profile']}  {arch} context {context:g} batch {batch:g} positions {positions:g}: "
                     f"{r['ms']:.3f} ms ({r['timed']})" + (f"; c1 ({draft}/{arch}, q = 1) = {r['c1']:.4f}"
                                                            if draft else "") for r in rows)
