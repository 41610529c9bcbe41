"""The loader of a :class:`~lrsim.cost.hardware.HardwareSpec`: where each role's passes are priced, and its profile.

A hardware spec is data (a profile spec, architectures, placement); :func:`load_roles` turns it into the
profile each role (``target``, ``draft``, ``judge``) is priced on:

- a ``model:`` spec is parsed once into a :class:`~lrsim.gpu.synthesize.ModelSpec`; the default place of a draft or
  judge is the same spec at TP 1 (one GPU of the target's device, format and engine), derived from the parsed spec,
  not from its text; ``kv_dtype`` sets the KV cache of every modelled role;
- a measured profile (a name, a file, a :class:`Profile`) is read whole, and is its draft's and judge's too;
- roles on the same spec share one loaded profile, synthesized for all of their architectures at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from ..errors import InputError
from ..latency.profile import Profile
from .library import MODEL_PREFIX, is_modelled, load_profile

if TYPE_CHECKING:
    from ..gpu.synthesize import ModelSpec

PLACE_COLOCATED = "colocated"  #: the placement keyword: on the target's device
ALL_ROLES = ("target", "draft", "judge")


class Placed(Protocol):
    """What the loader reads of a :class:`~lrsim.cost.hardware.HardwareSpec`."""

    profile: str | Profile
    target_arch: str
    draft_arch: str | None
    judge_arch: str | None
    draft_hardware: str | Profile | None
    verifier_hardware: str | Profile | None
    kv_dtype: str | None


@dataclass(frozen=True)
class Roles:
    """What each role runs on: ``specs`` as a user reads them (``model:...`` canonical, a name, a file or a
    Profile), ``profiles`` loaded."""

    specs: dict[str, str | Profile]
    profiles: dict[str, Profile]


def model_text(spec: object) -> bool:
    """Whether ``spec`` is a ``model:`` spec still to parse (not a loaded :class:`Profile`, modelled or not)."""
    return is_modelled(spec) and not isinstance(spec, Profile)


def _model(text: str, kv_dtype: str | None) -> ModelSpec:
    """A ``model:`` spec parsed once, with the spec-wide KV-cache dtype; checked as :func:`parse_spec` checks."""
    from ..gpu.synthesize import check_spec, parse_spec

    m = parse_spec(text)
    if kv_dtype is None or m.kv_dtype == kv_dtype:
        return m
    m = replace(m, kv_dtype=kv_dtype)
    check_spec(MODEL_PREFIX + m.text(), m)
    return m


def _source(hw: Placed, given, target: str | Profile | ModelSpec | None = None) -> str | Profile | ModelSpec:
    """What a role runs on: ``given`` (a spec), or for None / 'colocated' the ``target``'s device at TP 1."""
    if given is None or given == PLACE_COLOCATED:
        return target if isinstance(target, (str, Profile)) else replace(target, tp=1)  # measured: as profiled
    if model_text(given):
        return _model(str(given), hw.kv_dtype)
    return given  # measured (HardwareSpec refuses kv_dtype beside one)


def _shown(source: str | Profile | ModelSpec) -> str | Profile:
    """A source as the user reads it: ``model:`` + the canonical spec for a modelled one."""
    if isinstance(source, (str, Profile)):
        return source
    return MODEL_PREFIX + source.text()


def _load(source: str | Profile | ModelSpec, archs: tuple[str, ...]) -> Profile:
    if isinstance(source, (str, Profile)):
        return load_profile(source, archs)
    from ..gpu.synthesize import profile_for_model

    return profile_for_model(source, archs or None)


def load_roles(hw: Placed) -> Roles:
    """Each role's profile spec and loaded profile (a role without an architecture loads none).

    :raises InputError: a spec that cannot be read or synthesized, an architecture the profile lacks (one line).
    """
    target = _source(hw, hw.profile)  # a model: spec parsed here, once
    sources = {"target": target, "draft": _source(hw, hw.draft_hardware, target),
               "judge": _source(hw, hw.verifier_hardware, target)}
    archs = {"target": hw.target_arch, "draft": hw.draft_arch, "judge": hw.judge_arch}
    loaded: dict[str, Profile] = {}
    for role in ALL_ROLES:
        if archs[role] is None and role != "target":
            continue
        same = [r for r in loaded if sources[r] == sources[role]]
        want = tuple(dict.fromkeys(archs[r] for r in ALL_ROLES if archs[r] is not None
                                   and sources[r] == sources[role]))
        loaded[role] = loaded[same[0]] if same else _load(sources[role], want)
    for role, prof in loaded.items():
        arch = archs[role]
        if arch is not None and not any(n == arch or n.startswith(arch + "@") for n in prof.archs):
            names = sorted({n.split("@", 1)[0] for n in prof.archs})
            raise InputError(f"{prof.where}: no architecture {arch!r} (it has {', '.join(names)})")
    return Roles({r: _shown(s) for r, s in sources.items()}, loaded)
