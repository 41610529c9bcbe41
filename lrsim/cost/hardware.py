"""One hardware spec for every command that prices passes: replay, plan, serve and plan --rate.

A :class:`HardwareSpec` names a latency profile (an embedded name, a file,
``model:DEVICE[:tpN]``, or a :class:`~lrsim.cost.profile.Profile` calibrated
from traces), the target's and the draft's architectures in it, the one
extrapolation policy, the verifier's cost, and the assumptions the user
states (tensor parallelism).  :meth:`HardwareSpec.target` and
:meth:`HardwareSpec.draft` give each mode's :class:`~lrsim.cost.passcost.PassCost`:
a profile with a ``setups`` map prices each mode on the entry its deployment
runs on (llama.cpp: sync modes on 2 threads, lr-async's target and draft on
one thread each), so no mode borrows another's thread layout unless the
profile lacks it (then :meth:`notes` says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..dists import Dist
from ..errors import InputError
from ..fields import option
from .interp import Extrapolation
from .library import load_profile
from .passcost import ProfileCost
from .profile import Profile

ROLES = ("target", "draft")


@dataclass(frozen=True, eq=False)
class HardwareSpec:
    """Where the time goes: a latency profile, the architectures on it, the verifier, the stated assumptions."""

    profile: str | Profile = option("latency profile: an embedded name (`lrsim profiles`), a file, "
                                    "model:DEVICE[:tpN], or a Profile", "")
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

    def __post_init__(self) -> None:
        if not (self.profile and self.target_arch):
            raise InputError("a hardware spec needs a profile and a target architecture")
        if self.verifier_latency is not None and self.judge_arch is not None:
            raise InputError("give a verifier latency or a judge architecture, not both")
        if self.target_tp < 1 or (self.target_tp > 1) != (self.tp_efficiency is not None):
            raise InputError("tensor parallelism is an assumption: give target_tp > 1 together with tp_efficiency")
        if self.tp_efficiency is not None and not 0 < self.tp_efficiency < math.inf:
            raise InputError(f"tp_efficiency must be a finite number > 0, got {self.tp_efficiency!r}")
        if self.prefill is not None and self.prefill not in ("none", "last", "unseen"):
            raise InputError(f"prefill must be none, last or unseen, got {self.prefill!r}")
        prof = load_profile(self.profile)
        object.__setattr__(self, "loaded", prof)
        for arch in (self.target_arch, self.draft_arch, self.judge_arch):
            if arch is not None and not any(n == arch or n.startswith(arch + "@") for n in prof.archs):
                names = sorted({n.split("@", 1)[0] for n in prof.archs})
                raise InputError(f"{prof.where}: no architecture {arch!r} (it has {', '.join(names)})")

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
        return self.loaded.entry(arch, mode, role)

    def target(self, mode: str) -> ProfileCost:
        """The target's pass cost in ``mode``."""
        return ProfileCost(self.loaded, self.entry(mode, "target"), self.extrapolation, self.target_scale)

    def draft(self, mode: str) -> ProfileCost | None:
        """The draft's pass cost in ``mode`` (None without a draft architecture)."""
        if self.draft_arch is None:
            return None
        return ProfileCost(self.loaded, self.entry(mode, "draft"), self.extrapolation)

    def same_setup(self, mode: str, other: str) -> bool:
        """Whether ``mode``'s target runs on the same entry as ``other``'s (e.g. LR vs the ``ar`` baseline)."""
        return self.entry(mode, "target") == self.entry(other, "target")

    def notes(self, mode: str | None = None) -> list[str]:
        """What the timing assumes beyond the profile, one sentence each."""
        p = self.loaded
        out = [f"timing: {p.name} ({p.provenance.device}; {p.timed}); {self.extrapolation.describe()}; rows "
               "beyond the largest measured batch fold into positions; prefill of unseen tokens: "
               f"'{self.kv_prefill}'"]
        out.append(f"assumed: the target's passes are the profile's / ({self.target_tp} x {self.tp_efficiency:g}) "
                   f"(tensor parallelism {self.target_tp}, efficiency {self.tp_efficiency:g}: not measured)"
                   if self.target_tp > 1 else "target as profiled (no tensor parallelism assumed beyond the profile)")
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
