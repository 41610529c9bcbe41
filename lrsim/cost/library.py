"""Where profiles come from: the embedded ones, files, modelled GPUs; listing and one-pass queries.

- :func:`load_profile` takes an embedded profile's name (``lrsim profiles``
  lists them), a path to a profile file, or ``model:DEVICE[:tpN]...`` (a profile
  the GPU hardware model of :mod:`lrsim.gpu` synthesizes), wherever a profile
  is asked for.
- :mod:`lrsim.cost.listing` lists them (``lrsim profiles``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..errors import InputError
from ..latency.profile import Profile, read_profile

PROFILE_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
MODEL_PREFIX = "model:"  #: ``model:DEVICE[:tpN][:DTYPE][:ENGINE]...``: a profile the GPU hardware model synthesizes


def embedded() -> dict[str, Path]:
    """Embedded profiles: name -> file (``lrsim/data/profiles/NAME.json``)."""
    return {p.stem: p for p in sorted(PROFILE_DIR.glob("*.json"))}


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int) -> Profile:
    return read_profile(path)


def is_modelled(spec: str | os.PathLike | Profile) -> bool:
    """Whether ``spec`` names a profile the GPU hardware model synthesizes (``model:...``, or a loaded one)."""
    if isinstance(spec, Profile):
        return bool(spec.provenance.extra.get("modelled")) if spec.provenance.extra else False
    return str(spec).startswith(MODEL_PREFIX)


def load_profile(spec: str | os.PathLike | Profile, archs: tuple[str, ...] | None = None) -> Profile:
    """A profile from an embedded name, a file path or ``model:SPEC`` (a :class:`Profile` passes through).

    ``archs``: for ``model:`` specs, the architectures to synthesize (names, aliases or config paths; default
    every shipped one); a measured profile is read whole.

    :raises InputError: none of these, or an invalid file (one line).
    """
    if isinstance(spec, Profile):
        return spec
    s = str(spec)
    if s.startswith(MODEL_PREFIX):
        return _modelled(s, tuple(archs) if archs else None)
    emb = embedded()
    p = emb.get(s) or Path(s).expanduser()
    if not p.is_file():
        raise InputError(f"latency profile {s!r}: neither an embedded profile ({', '.join(emb) or 'none'}), "
                         f"a file, nor {MODEL_PREFIX}DEVICE[:tpN]")
    prof = _read(str(p.resolve()), p.stat().st_mtime_ns)
    if s in emb and prof.name != s:
        raise InputError(f"{p}: embedded profile named {prof.name!r} in a file named {s!r}")
    return prof


def _modelled(spec: str, archs: tuple[str, ...] | None) -> Profile:
    """``model:SPEC``: the given (else every shipped) architecture(s) on that device, from the GPU hardware model."""
    try:
        from ..gpu import profile_for_spec
    except ImportError:  # the hardware model is not part of this installation
        raise InputError(f"{spec}: no GPU hardware model in this lrsim (lrsim.gpu)") from None
    return profile_for_spec(spec[len(MODEL_PREFIX):], archs)
