"""The cost-aware speedup of a decoding configuration over ``ar``, the adaptive policy's objective
(:mod:`lrsim.adaptive`).

A configuration (:class:`Arm`) is ``ar``, token SD alone (``ar`` with ``k2 > 1``), or LR (``sync`` with ``k1``
target steps per cycle, ``async`` with ``k1`` steps ahead) with or without token SD inside its steps.  Its
objective is its expected speedup over ``ar`` (:func:`speedup`): the paper's closed forms, with the target's
measured batch cost in place of "a batched call costs one call" and the verifier's time added.  In units of one
target step at batch 1 (``L`` tokens, ``L`` passes of one position, ``T(1)`` each):

- ``beta(n) = T(n) / T(1)``: a target pass over ``n`` positions (all rows), from :class:`Costs`;
- ``E2(k2) = (1 - a2^k2) / (1 - a2)``: tokens a pass keeps with ``k2 - 1`` drafted tokens (Leviathan et al.);
- ``tau(r, k2) = beta(r k2) / E2(k2)``: ``r`` target steps written in parallel, token SD inside;
- ``c1 = D / T(1)``: a draft step relative to a target step (draft seconds per token over the target's), over
  ``E2(k2)`` when the draft speculates tokens inside its steps too (``Costs.draft_sd``, the paper's ``h = f g``);
- ``v = V / (L T(1))``: one verifier call on a step pair, relative to a target step.

Then (``E1(k) = (1 - a1^k) / (1 - a1)``, ``X`` the accepted drafts before a rejection, ``P(X = x) = a1^x (1 - a1)``):

- ``ar`` with ``k2``: ``E2(k2) / beta(k2)`` (``k2 = 1``: 1);
- ``sync``: ``E1(k1) / ((k1 - 1) c1 + tau(k1, k2) + (k1 - 1) v)``; with ``beta = 1`` and ``v = 0`` this is
  Theorem 1's ``f_sync`` (:func:`lrsim.theory.f_sync`) times ``g``;
- ``async``: ``(1 + E[X]) / max(d1, d2)`` with ``d1 = tau(p, k2) + c1 E[X] + (1 + E[X]) v``, ``p = min(k1,
  ceil(1/c1))`` (the draft limits the stage) and ``d2 = tau(k1, k2) E[ceil((X+1)/k1)] + c1 E[X mod k1] + (1 +
  E[X]) v`` (the depth limits it); with ``beta = 1`` and ``v = 0``, ``min(S1, S2)`` of Theorem 2
  (:func:`lrsim.theory.s1`, :func:`lrsim.theory.s2`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InputError
from ..modes import SIM_MODES, gamma_of_k1
from .forms import draft_limit, expected_kept

A_MAX = 1 - 1e-6  # acceptance is clipped below 1 (the closed forms divide by 1 - a)


@dataclass(frozen=True)
class Arm:
    """One decoding configuration, in the simulator's terms (:class:`lrsim.trace.Setting`)."""

    mode: str  #: ar, sync or async
    k1: int = 1  #: sync: target steps per cycle (gamma + 1); async: steps ahead (gamma); ar: 1
    k2: int = 1  #: positions per target pass with token SD inside (1: none)

    def __post_init__(self) -> None:
        if self.mode not in SIM_MODES or self.k1 < 1 or self.k2 < 1:
            raise InputError(f"bad configuration: mode {self.mode!r}, k1 {self.k1}, k2 {self.k2}")
        if (self.mode == "ar") != (self.k1 == 1):
            raise InputError(f"{self.mode} with k1 = {self.k1}: ar has k1 = 1, LR k1 >= 2")

    @property
    def label(self) -> str:
        """lrref's name: ``ar``, ``sd k2=4``, ``lr-sync gamma=3``, ``lr-async gamma=2 +sd k2=4``."""
        sd = f"k2={self.k2}"
        if self.mode == "ar":
            return "ar" if self.k2 == 1 else f"sd {sd}"
        gamma = gamma_of_k1(self.mode, self.k1)
        return f"lr-{self.mode} gamma={gamma}" + (f" +sd {sd}" if self.k2 > 1 else "")


@dataclass(frozen=True)
class Costs:
    """What the machine charges, in seconds: a target pass over ``n`` positions (all rows together), a draft
    token, a verifier call on one step pair."""

    target_pass: Callable[[int], float]
    draft_token_s: float
    verify_pair_s: float = 0.0
    draft_sd: bool = True  #: the draft uses the arm's token SD inside its steps (lrref --draft-ngram, sim draft_sd)

    def beta(self, n: int) -> float:
        """``T(n) / T(1)``."""
        return self.target_pass(n) / self.target_pass(1)

    @classmethod
    def affine(cls, t1: float, per_position: float, draft_token_s: float, verify_pair_s: float = 0.0,
               draft_sd: bool = True) -> Costs:
        """``T(n) = t1 + per_position (n - 1)``: ``per_position = 0`` is a free batch (a GPU far from its
        roofline), ``per_position = t1`` a linear one (a CPU)."""
        return cls(lambda n: t1 + per_position * (n - 1), draft_token_s, verify_pair_s, draft_sd)


def speedup(arm: Arm, a1: float, a2: float, step_tokens: float, costs: Costs) -> float:
    """The arm's expected speedup over ``ar`` (module doc)."""
    a1, a2 = min(max(a1, 0.0), A_MAX), min(max(a2, 0.0), A_MAX)
    e2 = expected_kept(a2, arm.k2)
    if arm.mode == "ar":
        return e2 / costs.beta(arm.k2)
    t1 = costs.target_pass(1)
    c1 = costs.draft_token_s / t1 / (e2 if costs.draft_sd else 1.0)  # the draft's steps speculate too
    v = costs.verify_pair_s / (step_tokens * t1)

    def tau(rows: int) -> float:
        return costs.beta(rows * arm.k2) / e2

    k = arm.k1
    if arm.mode == "sync":
        return expected_kept(a1, k) / ((k - 1) * c1 + tau(k) + (k - 1) * v)
    ex = a1 / (1 - a1)  # E[X]
    p = min(k, int(draft_limit(c1))) if c1 > 0 else k  # a draft that costs nothing never limits the stage
    d1 = tau(p) + c1 * ex + (1 + ex) * v
    ceil_rounds = 1 / (1 - a1**k)  # E[ceil((X+1)/k)]
    mod = (a1 - k * a1**k + (k - 1) * a1 ** (k + 1)) / ((1 - a1) * (1 - a1**k))  # E[X mod k]
    d2 = tau(k) * ceil_rounds + c1 * mod + (1 + ex) * v
    return (1 + ex) / max(d1, d2)
