"""Latency profiles: what one forward pass of a model costs on one device and engine (format version 1).

A profile is a JSON file (``docs/latency-profile.md``) holding, per model
architecture, the time in **milliseconds** of one forward pass over a KV
cache of ``context`` tokens, ``batch`` rows, ``positions`` new positions per
row (1 = a decode step; ``q > 1`` = verifying ``q - 1`` speculated tokens or
prefilling a ``q``-token step), on a full rectangular grid; optionally the
prefill time of a prompt by (batch, prompt length), e.g. a judge call; and the
provenance of the numbers.  Acceptance belongs to the models, latency to the
hardware and engine: a profile is the hardware half.

Between grid points the time is trilinear in (context, batch, positions)
(:mod:`lrsim.latency.interp`): a forward pass costs roughly a fixed part (weights
read once), a part per row and position (matmuls), and a part per row,
position and cached token (attention over the cache), and trilinear
interpolation reproduces exactly any cost of the form
``a + b B + c B q + d B L + e B q L`` inside a cell; log axes would not.
Outside the measured range the policy is explicit: ``'error'`` (default),
``'clamp'`` or ``'linear'``.  Points the source did not measure are ``null``
and are never invented.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from ..fields import option
from ..modes import SIM_MODES
from .interp import multilinear

FORMAT = "lr-latency-profile"
VERSION = 1
UNIT = "ms"
TIMED = {"kernel_sum": "sum of the device kernels of the pass (launch overhead excluded: what CUDA graphs approach)",
         "wall": "wall time of the pass, device synchronised (what an eager engine pays)"}
AXES = ("context", "batch", "positions")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENTRY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9][A-Za-z0-9._=-]*)?$")  # ARCH or ARCH@SETUP
SETUP_MODES = SIM_MODES  #: simulator modes a profile's ``setups`` may name (lrsim.modes)
SETUP_ROLES = ("target", "draft")

Times = tuple  # nested tuples of float (ms) or None (not measured)


def _factory(help: str, factory: Any) -> Any:
    """A dataclass field with help text and a mutable default (``lrsim.fields.option`` takes plain defaults)."""
    return field(default_factory=factory, metadata={"help": help})


@dataclass(frozen=True)
class Provenance:
    """Where the numbers come from (``device``, ``engine``, ``dtype`` and ``date`` are required)."""

    device: str = option("device the passes ran on: a GPU name, or the CPU model", "")
    engine: str = option("what ran the passes, e.g. 'transformers 5.17.0 eager, SDPA, DynamicCache'", "")
    dtype: str = option("dtype of weights, activations and KV cache: bfloat16, float16, float32", "")
    date: str = option("measurement date, ISO 8601 (YYYY-MM-DD)", "")
    command: str | None = option("the command that measured (or converted) the numbers")
    source: str | None = option("file the numbers were converted from (null: measured directly)")
    torch: str | None = option("torch version")
    transformers: str | None = option("transformers version")
    cpu: str | None = option("CPU model name of the host")
    threads: int | None = option("torch intra-op threads (CPU runs)")
    warmup: int | None = option("untimed passes before the timed ones, per shape")
    repeats: int | None = option("timed passes per shape")
    statistic: str | None = option("how the repeats make one number, e.g. 'median'")
    notes: tuple[str, ...] = option("caveats, one sentence each", ())
    extra: dict = _factory("other facts (load average, seed, chunk size, ...)", dict)


@dataclass(frozen=True)
class Prefill:
    """Prefill (no cache) of ``prompt`` tokens in ``batch`` rows: ``ms[i][j]`` at ``batch[i]``, ``prompt[j]``."""

    timed: str = option("'kernel_sum' or 'wall' (may differ from the profile's)", "wall")
    batch: tuple[int, ...] = option("rows, strictly increasing", (1,))
    prompt: tuple[int, ...] = option("prompt tokens, strictly increasing", (1,))
    ms: Times = option("ms[i][j] (null: not measured)", ((1.0,),))

    def to_dict(self) -> dict:
        return {"timed": self.timed, "batch": list(self.batch), "prompt": list(self.prompt), "ms": _lists(self.ms)}


@dataclass(frozen=True)
class ArchProfile:
    """One architecture on the profile's device: ``ms[i][j][k]`` at ``context[i]``, ``batch[j]``, ``positions[k]``."""

    name: str = option("architecture name, e.g. 'qwen2.5-32b'", "")
    params: int = option("parameters", 1)
    layers: int = option("decoder layers", 1)
    kv_bytes_per_token: int = option("KV-cache bytes per token at the profile's dtype: 2 x layers x kv_heads x "
                                     "head_dim x bytes", 1)
    context: tuple[int, ...] = option("tokens already in the KV cache, strictly increasing", (0,))
    batch: tuple[int, ...] = option("rows in the pass, strictly increasing", (1,))
    positions: tuple[int, ...] = option("new positions per row, strictly increasing", (1,))
    ms: Times = option("ms[i][j][k]: one pass (null: not measured)", (((1.0,),),))
    missing: tuple[str, ...] = option("why the null points were not measured", ())
    prefill: Prefill | None = option("prefill times by (batch, prompt), or null")

    @property
    def unmeasured(self) -> int:
        """Grid points with no time (null)."""
        return sum(v is None for v in _flat(self.ms))

    def time_ms(self, context: float, batch: float, positions: float,
                extrapolate: str | Sequence[str] = "error") -> float:
        """One pass in ms, trilinear between grid points, exact on them.

        ``extrapolate``: one policy for every axis, or one per axis (context, batch, positions).

        :raises InputError: outside the measured range (per the policy), or a needed point not measured.
        """
        _check_query(context=(context, 0), batch=(batch, 1), positions=(positions, 1))
        try:
            return multilinear((self.context, self.batch, self.positions), lambda i: _at(self.ms, i),
                               (context, batch, positions), extrapolate, AXES,
                               lambda i: f"{self.name} context {self.context[i[0]]} batch {self.batch[i[1]]} "
                                         f"positions {self.positions[i[2]]}"
                                         + _why(self.missing, self.context[i[0]], self.batch[i[1]]))
        except InputError as e:
            raise _located(e, self.name) from None

    def prefill_ms(self, prompt: float, batch: float = 1, extrapolate: str = "error") -> float:
        """Prefill of a ``prompt``-token prompt in ``batch`` rows, in ms (bilinear; same policy).

        :raises InputError: no prefill table, or outside it / not measured.
        """
        if self.prefill is None:
            raise InputError(f"{self.name} has no prefill times")
        _check_query(prompt=(prompt, 1), batch=(batch, 1))
        p = self.prefill
        try:
            return multilinear((p.batch, p.prompt), lambda i: _at(p.ms, i), (batch, prompt), extrapolate,
                               ("prefill batch", "prompt"),
                               lambda i: f"{self.name} prefill batch {p.batch[i[0]]} prompt {p.prompt[i[1]]}")
        except InputError as e:
            raise _located(e, self.name) from None

    def to_dict(self) -> dict:
        d = {"params": self.params, "layers": self.layers, "kv_bytes_per_token": self.kv_bytes_per_token,
             "context": list(self.context), "batch": list(self.batch), "positions": list(self.positions),
             "ms": _lists(self.ms)}
        if self.missing:
            d["missing"] = list(self.missing)
        if self.prefill is not None:
            d["prefill"] = self.prefill.to_dict()
        return d


@dataclass(frozen=True)
class Profile:
    """A latency profile: one device and engine, one timing kind, several architectures."""

    name: str = option("profile name (letters, digits, '.', '_', '-'); embedded profiles are found by it", "")
    timed: str = option("what every forward-pass time is: 'kernel_sum' or 'wall'", "wall")
    provenance: Provenance = option("device, engine, dtype, date, command, versions, caveats", Provenance())
    archs: dict = _factory("architecture name -> ArchProfile", dict)
    description: str = option("one sentence: what the profile is for", "")
    setups: dict | None = option("which entry each mode's target and draft run on: {mode: {role: SETUP}} prices "
                                 "role's ARCH at entry 'ARCH@SETUP' (e.g. llama.cpp threads: {'async': {'target': "
                                 "'t1', 'draft': 't1'}}); null: every mode uses the entry named ARCH")
    prefill: str | None = option("what the engine computes besides each step's own positions, for the simulator "
                                 "to add (lrsim.sim.SimConfig.prefill): 'none' (also: entries that already average "
                                 "it in, e.g. calibrated from trace steps), 'last' or 'unseen'; null: not said "
                                 "('none')")
    version: int = option("format version", VERSION)
    path: str | None = option("file it was read from (not written)")

    @property
    def where(self) -> str:
        """How messages name the profile: its file, else its name."""
        return self.path or f"profile {self.name}"

    def arch(self, name: str) -> ArchProfile:
        if name not in self.archs:
            raise InputError(f"{self.where}: no architecture {name!r} (it has {', '.join(self.archs)})")
        return self.archs[name]

    def time_ms(self, arch: str, context: float, batch: float, positions: float, extrapolate: str = "error") -> float:
        """One forward pass in ms; errors are one line naming the profile's file and the point."""
        try:
            return self.arch(arch).time_ms(context, batch, positions, extrapolate)
        except InputError as e:
            raise _located(e, self.where) from None

    def prefill_ms(self, arch: str, prompt: float, batch: float = 1, extrapolate: str = "error") -> float:
        """Prefill of a prompt (e.g. a judge call) in ms; errors name the profile's file."""
        try:
            return self.arch(arch).prefill_ms(prompt, batch, extrapolate)
        except InputError as e:
            raise _located(e, self.where) from None

    def entry(self, arch: str, mode: str, role: str) -> str:
        """The entry that prices ``arch`` as ``role`` in ``mode``: ``ARCH@SETUP`` per :attr:`setups` when the
        profile has it (a role the mode's map leaves out runs on the mode's target setup: ``ar`` names no
        draft), else ``ARCH``."""
        roles = (self.setups or {}).get(mode) or {}
        setup = roles.get(role) or roles.get("target")
        qualified = f"{arch}@{setup}" if setup else None
        return qualified if qualified in self.archs else arch

    def to_dict(self) -> dict:
        prov = {k: v for k, v in _prov_dict(self.provenance).items() if v not in (None, [], {})}
        d = {"format": FORMAT, "version": self.version, "name": self.name, "description": self.description,
             "unit": UNIT, "timed": self.timed, "provenance": prov}
        if self.setups:
            d["setups"] = self.setups
        if self.prefill:
            d["prefill"] = self.prefill
        return d | {"archs": {n: a.to_dict() for n, a in self.archs.items()}}

    def to_json(self) -> str:
        """Compact JSON: one line per innermost row of times."""
        return _compact(json.dumps(self.to_dict(), indent=1)) + "\n"


def _located(e: InputError, where: str) -> InputError:
    text = str(e)
    return e if text.startswith(where) else InputError(f"{where}: {text}")


def _why(missing: Sequence[str], *numbers: int) -> str:
    """The 'missing' notes that mention all of ``numbers`` (else the first one), in parentheses."""
    hits = [m for m in missing if all(re.search(rf"(?<![0-9.]){n}(?![0-9.])", m) for n in numbers)]
    hits = hits or list(missing[:1]) + ([f"{len(missing) - 1} more note(s)"] if len(missing) > 1 else [])
    return f" ({'; '.join(hits)})" if hits else ""


def _check_query(**values: tuple[float, float]) -> None:
    for name, (v, lo) in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < lo:
            raise InputError(f"{name} must be a finite number >= {lo}, got {v!r}")


def _at(ms: Times, idx: tuple[int, ...]) -> float:
    v = ms
    for i in idx:
        v = v[i]
    return math.nan if v is None else float(v)


def _lists(v: Any) -> Any:
    return [_lists(x) for x in v] if isinstance(v, (tuple, list)) else v


def _prov_dict(p: Provenance) -> dict:
    from dataclasses import fields

    return {f.name: _lists(getattr(p, f.name)) for f in fields(p)}


def _compact(text: str) -> str:
    """Put every innermost list of numbers (or nulls) on one line: profiles stay small and readable."""
    return re.sub(r"\[([-+0-9.eE,\snul]*)\]", lambda m: "[" + re.sub(r"\s+", "", m.group(1)).replace(",", ", ") + "]",
                  text)


# ----------------------------------------------------------------------------- reading and validation

_TOP_KEYS = {"format", "version", "name", "description", "unit", "timed", "provenance", "setups", "prefill",
             "archs"}
PREFILLS = ("none", "last", "unseen")
_ARCH_KEYS = {"params", "layers", "kv_bytes_per_token", *AXES, "ms", "missing", "prefill"}
_PREFILL_KEYS = {"timed", "batch", "prompt", "ms"}
_PROV_TEXT = ("device", "engine", "dtype", "date")
_PROV_OPTIONAL_TEXT = ("command", "source", "torch", "transformers", "cpu", "statistic")
_PROV_COUNTS = ("threads", "warmup", "repeats")


class _Reader:
    """Validation of one file: every error is one line naming the file and the JSON path of the problem."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, path: str, msg: str) -> InputError:
        return InputError(f"{self.where}: {path}: {msg}" if path else f"{self.where}: {msg}")

    def get(self, d: dict, key: str, path: str) -> Any:
        if key not in d:
            raise self.fail(path, f"missing {key!r}")
        return d[key]

    def keys(self, d: Any, allowed: set, path: str) -> dict:
        """``d`` must be an object whose keys are ``allowed`` (or comments starting with '_')."""
        if not isinstance(d, dict):
            raise self.fail(path, f"expected an object, got {type(d).__name__}")
        unknown = sorted(k for k in d if k not in allowed and not str(k).startswith("_"))
        if unknown:
            raise self.fail(path, f"unknown key(s) {', '.join(map(repr, unknown))}")
        return d

    def count(self, v: Any, path: str, lo: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise self.fail(path, f"expected an integer >= {lo}, got {v!r}")
        return v

    def text(self, v: Any, path: str, optional: bool = False) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not v.strip():
            raise self.fail(path, f"expected a non-empty string, got {v!r}")
        return v


def _axis(r: _Reader, d: dict, key: str, path: str, lo: int) -> tuple[int, ...]:
    """A non-empty, strictly increasing list of integers >= ``lo``."""
    if key not in d:
        raise r.fail(path, f"missing axis {key!r}")
    v = d[key]
    if not isinstance(v, list) or not v:
        raise r.fail(f"{path}.{key}", f"expected a non-empty list, got {v!r}")
    xs = tuple(r.count(x, f"{path}.{key}", lo) for x in v)
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise r.fail(f"{path}.{key}", f"values must increase strictly, got {list(xs)}")
    return xs


def _times(r: _Reader, v: Any, shape: tuple[int, ...], path: str) -> Times:
    """Nested lists of the given shape; leaves are times in ms (finite, > 0) or null."""
    if not shape:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise r.fail(path, f"time must be a number > 0 ({UNIT}) or null, got {v!r}")
        return float(v)
    if not isinstance(v, list) or len(v) != shape[0]:
        n = len(v) if isinstance(v, list) else type(v).__name__
        raise r.fail(path, f"expected a list of {shape[0]} (one per axis value), got {n}")
    return tuple(_times(r, x, shape[1:], f"{path}[{i}]") for i, x in enumerate(v))


def _flat(t: Any) -> list:
    return [y for x in t for y in _flat(x)] if isinstance(t, tuple) else [t]


def _prefill(r: _Reader, d: Any, path: str) -> Prefill:
    r.keys(d, _PREFILL_KEYS, path)
    timed = r.get(d, "timed", path)
    if timed not in TIMED:
        raise r.fail(f"{path}.timed", f"expected one of {', '.join(TIMED)}, got {timed!r}")
    b, p = _axis(r, d, "batch", path, 1), _axis(r, d, "prompt", path, 1)
    ms = _times(r, r.get(d, "ms", path), (len(b), len(p)), f"{path}.ms")
    return Prefill(timed, b, p, ms)


def _arch(r: _Reader, name: str, d: Any) -> ArchProfile:
    path = f"archs.{name}"
    if not _ENTRY.match(name):
        raise r.fail(path, "architecture names use letters, digits, '.', '_' and '-' (and '@SETUP' for an entry "
                           "measured on one setup, e.g. 'qwen2.5-1.5b@t2')")
    r.keys(d, _ARCH_KEYS, path)
    sizes = [r.count(r.get(d, k, path), f"{path}.{k}", 1) for k in ("params", "layers", "kv_bytes_per_token")]
    axes = [_axis(r, d, "context", path, 0), _axis(r, d, "batch", path, 1), _axis(r, d, "positions", path, 1)]
    ms = _times(r, r.get(d, "ms", path), tuple(len(a) for a in axes), f"{path}.ms")
    values = _flat(ms)
    missing = d.get("missing", [])
    if not isinstance(missing, list) or not all(isinstance(m, str) and m.strip() for m in missing):
        raise r.fail(f"{path}.missing", "expected a list of sentences")
    if all(v is None for v in values) and not missing:  # all null is kept only with the reason (not priced here)
        raise r.fail(f"{path}.ms", "no measured time")
    if None in values and not missing:
        raise r.fail(f"{path}.ms", "has unmeasured points (null) but no 'missing' note says why")
    pre = _prefill(r, d["prefill"], f"{path}.prefill") if d.get("prefill") is not None else None
    return ArchProfile(name, *sizes, *axes, ms, tuple(missing), pre)


def _provenance(r: _Reader, d: Any) -> Provenance:
    names = set(_PROV_TEXT + _PROV_OPTIONAL_TEXT + _PROV_COUNTS + ("notes", "extra"))
    r.keys(d, names, "provenance")
    kw: dict[str, Any] = {k: r.text(r.get(d, k, "provenance"), f"provenance.{k}") for k in _PROV_TEXT}
    if not re.match(r"^\d{4}-\d{2}-\d{2}", kw["date"]):
        raise r.fail("provenance.date", f"expected an ISO 8601 date (YYYY-MM-DD...), got {kw['date']!r}")
    kw |= {k: r.text(d.get(k), f"provenance.{k}", optional=True) for k in _PROV_OPTIONAL_TEXT}
    kw |= {k: None if d.get(k) is None else r.count(d[k], f"provenance.{k}", 0) for k in _PROV_COUNTS}
    notes = d.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise r.fail("provenance.notes", "expected a list of strings")
    extra = d.get("extra", {})
    if not isinstance(extra, dict):
        raise r.fail("provenance.extra", "expected an object")
    return Provenance(**kw, notes=tuple(notes), extra=extra)


def profile_from_dict(d: Any, where: str = "profile", path: str | None = None) -> Profile:
    """Validate a parsed profile.

    :param where: how errors name the source (its file).
    :raises InputError: one line naming ``where`` and the problem (a missing axis, a time <= 0, an unknown
        version, unsorted axes, ...).
    """
    r = _Reader(where)
    r.keys(d, _TOP_KEYS, "")
    if d.get("format") != FORMAT:
        raise r.fail("format", f"expected {FORMAT!r}, got {d.get('format')!r}: not a latency profile")
    if d.get("version") != VERSION:
        raise r.fail("version", f"unknown version {d.get('version')!r} (this lrsim reads version {VERSION})")
    name = r.text(r.get(d, "name", ""), "name")
    if not _NAME.match(name):
        raise r.fail("name", f"profile names use letters, digits, '.', '_' and '-', got {name!r}")
    if r.get(d, "unit", "") != UNIT:
        raise r.fail("unit", f"times must be in {UNIT!r}, got {d['unit']!r}")
    timed = r.get(d, "timed", "")
    if timed not in TIMED:
        raise r.fail("timed", f"expected one of {', '.join(TIMED)}, got {timed!r}")
    prov = _provenance(r, r.get(d, "provenance", ""))
    archs = r.get(d, "archs", "")
    if not isinstance(archs, dict) or not archs:
        raise r.fail("archs", "expected a non-empty object (architecture name -> times)")
    parsed = {n: _arch(r, n, a) for n, a in archs.items()}
    prefill = d.get("prefill")
    if prefill is not None and prefill not in PREFILLS:
        raise r.fail("prefill", f"expected one of {', '.join(PREFILLS)} or null, got {prefill!r}")
    return Profile(name, timed, prov, parsed, str(d.get("description") or ""), _setups(r, d.get("setups"), parsed),
                   prefill, VERSION, path)


def _setups(r: _Reader, d: Any, archs: dict) -> dict | None:
    """``{mode: {role: SETUP}}``: modes among :data:`SETUP_MODES`, roles among :data:`SETUP_ROLES`, and some entry
    ``ARCH@SETUP`` for every setup named."""
    if d is None:
        return None
    r.keys(d, set(SETUP_MODES), "setups")
    have = {n.split("@", 1)[1] for n in archs if "@" in n}
    for mode, roles in d.items():
        r.keys(roles, set(SETUP_ROLES), f"setups.{mode}")
        for role, setup in roles.items():
            if setup not in have:
                raise r.fail(f"setups.{mode}.{role}", f"no entry ARCH@{setup} in archs (setups present: "
                                                      f"{', '.join(sorted(have)) or 'none'})")
    return {m: dict(v) for m, v in d.items()}


def read_profile(path: str | Path) -> Profile:
    """Read and validate a profile file.

    :raises InputError: unreadable, not JSON, or invalid (one line naming the file).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read latency profile: {e.strerror or e}") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: invalid JSON ({e.msg}, line {e.lineno})") from None
    return profile_from_dict(d, str(p), str(p))


def write_profile(profile: Profile, path: str | Path) -> None:
    """Validate (by reading back what would be written) and write atomically: never half a file."""
    from ..atomic import atomic_write

    text = profile.to_json()
    profile_from_dict(json.loads(text), f"profile {profile.name} (not written to {path})")
    atomic_write(Path(path), text.encode("utf-8"))
