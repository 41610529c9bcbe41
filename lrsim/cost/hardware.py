"""One hardware spec for every command that prices passes: replay, plan, serve and plan --rate.

A :class:`HardwareSpec` names a latency profile (an embedded name, a file,
``model:DEVICE[:tpN][:DTYPE][:ENGINE]...``, or a :class:`~lrsim.latency.profile.Profile`
calibrated from traces), the target's and the draft's architectures in it, the one
extrapolation policy, the verifier's cost, where the draft and the judge run
(placement), and the assumptions the user states (tensor parallelism of a
measured profile).  :meth:`HardwareSpec.target` and :meth:`HardwareSpec.draft`
give each mode's :class:`~lrsim.cost.passcost.PassCost`: a profile with a
``setups`` map prices each mode on the entry its deployment runs on (llama.cpp:
sync modes on 2 threads, lr-async's target and draft on one thread each), so no
mode borrows another's thread layout unless the profile lacks it (then
:meth:`notes` says so).

**Placement** (``draft_hardware``, ``verifier_hardware``), as the paper and the
official code deploy LR: the draft and an LLM judge each run on devices of their
own.  For a modelled target (``model:...``) the default is one GPU of the
target's device at TP 1 in the target's format and engine; any profile spec names
other devices (``model:h100:tp1``, a file); ``colocated`` puts the role on the
target's GPUs (priced on one of them at TP 1), where its passes and the target's
share the device's time: the simulator stalls the target while they run
(:attr:`lrsim.sim.SimConfig.colocated`).  For a measured target profile the draft
and judge default to that profile's entries on devices of their own (as before
placement existed).  TP lives in a ``model:`` spec: ``target_tp`` /
``tp_efficiency`` (an assumption scaling a measured profile) are refused beside one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from ..dists import Dist
from ..errors import InputError
from ..fields import option
from ..latency.interp import Extrapolation
from ..latency.profile import Profile
from .library import is_modelled
from .passcost import ProfileCost, cost_ratio
from .roles import PLACE_COLOCATED, Roles, load_roles, model_text

ROLES = ("target", "draft")
KV_DTYPES = ("fp8",)


@dataclass(frozen=True, eq=False)
class HardwareSpec:
    """Where the time goes: a latency profile, the architectures on it, the verifier, the stated assumptions."""

    profile: str | Profile = option("latency profile: an embedded name (`lrsim profiles`), a file, "
                                    "model:DEVICE[:tpN][:DTYPE][:ENGINE]..., or a Profile", "")
    target_arch: str = option("target architecture in the profile", "")
    draft_arch: str | None = option("draft architecture in the profile (None: the simulator's c1 x the target's "
                                    "step)")
    extrapolation: Extrapolation = field(default_factory=Extrapolation,
                                         metadata={"help": "outside the measured grid (one policy type)"})
    target_tp: int = option("tensor-parallel devices of the target (1: as profiled)", 1)
    tp_efficiency: float | None = option("E: target pass = profiled pass / (target_tp x E); required with "
                                         "target_tp > 1 (an assumption, not a measurement)")
    verifier_latency: Dist | None = option("verifier latency per call, seconds (a distribution)")
    judge_arch: str | None = option("or: an LLM judge architecture, priced by the profile's prefill table")
    judge_prompt_tokens: int | None = option("judge prompt tokens (default: its template plus two mean steps)")
    prefill: str | None = option("what the engine computes besides each step's positions (lrsim.sim.SimConfig."
                                 "prefill): 'none', 'last', 'unseen'; None: what the profile says, else 'none'")
    draft_hardware: str | Profile | None = option("where the draft runs: a profile of devices of its own "
                                                  "(model:..., a file, a name), 'colocated' (the target's GPUs, "
                                                  "sharing their time), or None: a GPU of its own (see module doc)")
    verifier_hardware: str | Profile | None = option("where an LLM judge (judge_arch) runs: as draft_hardware")
    kv_dtype: str | None = option("KV cache of every modelled profile: 'fp8' (None: as each model: spec says)")

    def __post_init__(self) -> None:
        if not (self.profile and self.target_arch):
            raise InputError("a hardware spec needs a profile and a target architecture")
        if self.verifier_latency is not None and self.judge_arch is not None:
            raise InputError("give a verifier latency or a judge architecture, not both")
        modelled = is_modelled(self.profile)
        if modelled and (self.target_tp > 1 or self.tp_efficiency is not None):
            raise InputError("TP lives in the model: spec (model:DEVICE:tpN): --target-tp / --tp-efficiency scale a "
                             "measured profile only, and would apply tensor parallelism twice")
        if self.target_tp < 1 or (self.target_tp > 1) != (self.tp_efficiency is not None):
            raise InputError("tensor parallelism is an assumption: give target_tp > 1 together with tp_efficiency")
        if self.tp_efficiency is not None and not 0 < self.tp_efficiency < math.inf:
            raise InputError(f"tp_efficiency must be a finite number > 0, got {self.tp_efficiency!r}")
        if self.prefill is not None and self.prefill not in ("none", "last", "unseen"):
            raise InputError(f"prefill must be none, last or unseen, got {self.prefill!r}")
        if self.kv_dtype is not None and self.kv_dtype not in KV_DTYPES:
            raise InputError(f"kv_dtype must be fp8 (or None: as the spec says), got {self.kv_dtype!r}")
        measured = [s for s in (self.profile, self.draft_hardware, self.verifier_hardware)
                    if s not in (None, PLACE_COLOCATED) and not model_text(s)]
        if self.kv_dtype is not None and measured:
            raise InputError(f"--kv-dtype {self.kv_dtype} prices a modelled profile (model:...); {measured[0]} is "
                             "measured")
        if self.verifier_hardware is not None and self.judge_arch is None:
            raise InputError("verifier hardware places an LLM judge: give judge_arch too (a verifier latency is "
                             "a number, wherever it runs)")

    @functools.cached_property
    def roles(self) -> Roles:
        """Each role's profile spec and loaded profile (:func:`lrsim.cost.roles.load_roles`, once)."""
        return load_roles(self)

    def load(self) -> HardwareSpec:
        """Load the profiles now (so a missing architecture or a bad spec is reported here); returns ``self``."""
        _ = self.roles
        return self

    @property
    def loaded(self) -> Profile:
        """The target's profile."""
        return self.roles.profiles["target"]

    @property
    def profiles(self) -> dict[str, Profile]:
        """Each role's profile (roles without an architecture have none)."""
        return self.roles.profiles

    @property
    def specs(self) -> dict[str, str | Profile]:
        """What each role runs on, as a user reads it."""
        return self.roles.specs

    @property
    def colocated(self) -> str:
        """Which roles share the target's device: 'none', 'draft', 'verifier' or 'draft+verifier'."""
        roles = [r for r, h in (("draft", self.draft_hardware), ("verifier", self.verifier_hardware))
                 if h == PLACE_COLOCATED]
        return "+".join(roles) or "none"

    def placement(self, role: str) -> str:
        """Where ``role`` ('draft' or 'judge') runs, in words."""
        given = self.draft_hardware if role == "draft" else self.verifier_hardware
        spec = self.specs[role]
        if given == PLACE_COLOCATED:
            return f"colocated on the target's GPUs ({spec}, sharing their time)"
        if spec == self.specs["target"] and not is_modelled(spec):
            return f"the profile's {role} entries, on a device of its own"
        return f"{'given' if given is not None else 'default'}: {spec}, devices of its own"

    @property
    def name(self) -> str:
        """The profile's name."""
        return self.loaded.name

    @property
    def kv_prefill(self) -> str:
        """The simulator's ``prefill`` on this hardware: given, else the profile's, else 'none'."""
        return self.prefill or self.loaded.prefill or "none"

    @property
    def target_scale(self) -> float:
        """Factor on the target's profiled pass times: ``1 / (N E)``."""
        return 1.0 / (self.target_tp * self.tp_efficiency) if self.target_tp > 1 else 1.0

    def entry(self, mode: str, role: str) -> str:
        """The profile entry ``role`` runs on in ``mode`` (``ar``, ``sync`` or ``async``)."""
        arch = self.target_arch if role == "target" else self.draft_arch
        if arch is None:
            raise InputError(f"no {role} architecture given")
        return self.profiles[role].entry(arch, mode, role)

    def target(self, mode: str) -> ProfileCost:
        """The target's pass cost in ``mode``."""
        return ProfileCost(self.loaded, self.entry(mode, "target"), self.extrapolation, self.target_scale)

    def draft(self, mode: str) -> ProfileCost | None:
        """The draft's pass cost in ``mode`` (None without a draft architecture)."""
        if self.draft_arch is None:
            return None
        return ProfileCost(self.profiles["draft"], self.entry(mode, "draft"), self.extrapolation)

    def c1(self, mode: str, context: float = 0.0) -> float:
        """``c1`` on ``mode``'s setup at ``context``: :func:`lrsim.cost.passcost.cost_ratio` of its draft and
        (scaled) target, a decode pass at batch 1."""
        draft = self.draft(mode)
        if draft is None:
            raise InputError("c1 needs a draft architecture (--draft-arch)")
        return cost_ratio(draft, self.target(mode), context)

    @property
    def judge_profile(self) -> Profile:
        """The profile an LLM judge (``judge_arch``) is priced on."""
        return self.profiles.get("judge", self.loaded)

    def same_setup(self, mode: str, other: str) -> bool:
        """Whether ``mode``'s target runs on the same entry as ``other``'s (e.g. LR vs the ``ar`` baseline)."""
        return self.entry(mode, "target") == self.entry(other, "target")

    def notes(self, mode: str | None = None) -> list[str]:
        """What the timing assumes beyond the profile, one sentence each."""
        p = self.loaded
        out = [f"timing: {p.name} ({p.provenance.device}; {p.timed}); {self.extrapolation.describe()}; rows "
               "beyond the largest measured batch fold into positions; prefill of unseen tokens: "
               f"'{self.kv_prefill}'"]
        if is_modelled(self.profile):
            out.append(f"target {self.target_arch}: {self.specs['target']} (tensor parallelism as the spec says)")
        else:
            out.append(f"assumed: the target's passes are the profile's / ({self.target_tp} x "
                       f"{self.tp_efficiency:g}) (tensor parallelism {self.target_tp}, efficiency "
                       f"{self.tp_efficiency:g}: not measured)" if self.target_tp > 1 else
                       "target as profiled (no tensor parallelism assumed beyond the profile)")
        if self.draft_arch is not None:
            out.append(f"draft {self.draft_arch}: {self.placement('draft')}")
        if self.judge_arch is not None:
            out.append(f"judge {self.judge_arch}: {self.placement('judge')}")
        if mode is not None and p.setups:
            for role in ROLES:
                arch = self.target_arch if role == "target" else self.draft_arch
                if arch is None:
                    continue
                e = self.entry(mode, role)
                want = (p.setups.get(mode) or {}).get(role)
                out.append(f"{mode} {role}: no entry {arch}@{want} in the profile, priced on {e} (borrowed)"
                           if want and e != f"{arch}@{want}" else f"{mode} {role}: entry {e}")
        return out
