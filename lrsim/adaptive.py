"""Adaptive Lookahead Reasoning: choose the decoding configuration online from what the request shows (issue 34,
the policy; no torch).

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

Estimates (:class:`Beta`): step acceptance ``a1`` and token acceptance ``a2`` are Beta posteriors, updated with
every verified draft step and every drafted token (:meth:`Policy.observe`), from a prior worth ``prior_weight``
observations centred on the planner's or the profile's value.  The choice (:meth:`Policy.choose`) is Thompson
sampling: draw ``a1`` and ``a2`` from the posteriors and take the configuration with the highest speedup under the
draw.  A configuration that cannot pay (its speedup below the best one's under almost every draw) is chosen only
as often as the posterior allows it to be the best, which shrinks as observations accumulate; ``dwell`` keeps a
choice for that many decisions so a decoder does not switch at every step.  :meth:`Policy.best` is the greedy
choice at the posterior means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .theory import draft_limit

A_MAX = 1 - 1e-6  # acceptance is clipped below 1 (the closed forms divide by 1 - a)


@dataclass(frozen=True)
class Arm:
    """One decoding configuration, in the simulator's terms (:class:`lrsim.trace.Setting`)."""

    mode: str  #: ar, sync or async
    k1: int = 1  #: sync: target steps per cycle (gamma + 1); async: steps ahead (gamma); ar: 1
    k2: int = 1  #: positions per target pass with token SD inside (1: none)

    def __post_init__(self) -> None:
        if self.mode not in ("ar", "sync", "async") or self.k1 < 1 or self.k2 < 1:
            raise InputError(f"bad configuration: mode {self.mode!r}, k1 {self.k1}, k2 {self.k2}")
        if (self.mode == "ar") != (self.k1 == 1):
            raise InputError(f"{self.mode} with k1 = {self.k1}: ar has k1 = 1, LR k1 >= 2")

    @property
    def label(self) -> str:
        """lrref's name: ``ar``, ``sd k2=4``, ``lr-sync gamma=3``, ``lr-async gamma=2 +sd k2=4``."""
        sd = f"k2={self.k2}"
        if self.mode == "ar":
            return "ar" if self.k2 == 1 else f"sd {sd}"
        gamma = self.k1 - 1 if self.mode == "sync" else self.k1
        return f"lr-{self.mode} gamma={gamma}" + (f" +sd {sd}" if self.k2 > 1 else "")


def arms(max_gamma: int = 8, k2s: Iterable[int] = (1, 4), modes: Iterable[str] = ("sync", "async")) -> list[Arm]:
    """Every configuration up to ``max_gamma`` drafted steps, with each token-SD width of ``k2s``."""
    k2s = sorted(set(k2s))
    out = [Arm("ar", 1, k2) for k2 in k2s]
    for mode in modes:
        for gamma in range(1, max_gamma + 1):
            k1 = gamma + 1 if mode == "sync" else gamma
            if k1 >= 2:
                out += [Arm(mode, k1, k2) for k2 in k2s]
    return out


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


def expected_kept(a: float, k: int) -> float:
    """``(1 - a^k) / (1 - a)``: what ``k`` chances keep in expectation (``1 + a + ... + a^(k-1)``)."""
    return (1 - a**k) / (1 - a)


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


@dataclass
class Beta:
    """A Beta posterior of an acceptance probability."""

    a: float
    b: float

    @classmethod
    def prior(cls, mean: float, weight: float) -> Beta:
        """A prior centred on ``mean`` worth ``weight`` observations."""
        if not 0 <= mean <= 1 or weight <= 0:
            raise InputError(f"prior: mean in [0, 1] and weight > 0, got {mean}, {weight}")
        m = min(max(mean, 1e-3), 1 - 1e-3)
        return cls(m * weight, (1 - m) * weight)

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    def update(self, successes: int, failures: int, memory: float | None = None) -> None:
        """Add the counts; with ``memory``, then shrink ``a`` and ``b`` alike so they weigh at most ``memory``
        observations (older evidence fades: acceptance that changes mid-request is followed)."""
        if successes < 0 or failures < 0:
            raise ValueError(f"counts must be >= 0, got {successes}, {failures}")
        self.a += successes
        self.b += failures
        if memory is not None and self.a + self.b > memory:
            scale = memory / (self.a + self.b)  # the mean stays, the weight is capped
            self.a, self.b = self.a * scale, self.b * scale

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.beta(self.a, self.b))


@dataclass
class Policy:
    """Thompson sampling over :func:`arms` with :func:`speedup` as the objective (module doc).

    :param costs: the machine's costs (a latency profile's passes, or those observed so far).
    :param alpha1: prior mean of step acceptance; ``alpha2``: of token acceptance.
    :param prior_weight: observations the priors are worth.
    :param step_tokens: tokens per step (updated with every observed step: a running mean).
    :param dwell: decisions a choice is kept for before the next draw.
    :param memory: observations the posteriors weigh at most (step verdicts; token verdicts ``memory`` times
        the step length): older ones fade, so acceptance that changes mid-request is followed (None: all count).
    :param objective: ``(arm, a1, a2) -> speedup`` in place of :func:`speedup` (the closed forms), e.g. a table
        of the priced simulator's (:class:`lrsim.adaptive_sim.SimulatedObjective`).
    :param switch_margin: how much faster (a share) the draw's best must be than the current choice, under the
        same draw, to replace it (0: always the draw's best).
    """

    costs: Costs
    alpha1: float = 0.5
    alpha2: float = 0.5
    prior_weight: float = 4.0
    step_tokens: float = 40.0
    candidates: list[Arm] = field(default_factory=arms)
    dwell: int = 1
    seed: int = 0
    switch_margin: float = 0.0
    memory: float | None = None
    objective: Callable[[Arm, float, float], float] | None = None

    def __post_init__(self) -> None:
        if self.dwell < 1 or self.step_tokens <= 0 or not self.candidates:
            raise InputError("dwell >= 1, step_tokens > 0 and at least one configuration are needed")
        if not 0 <= self.switch_margin < 1:
            raise InputError(f"switch_margin in [0, 1), got {self.switch_margin}")
        if self.memory is not None and self.memory < self.prior_weight:
            raise InputError(f"memory must be >= prior_weight ({self.prior_weight}), got {self.memory}")
        self.step = Beta.prior(self.alpha1, self.prior_weight)
        self.token = Beta.prior(self.alpha2, self.prior_weight)
        self.rng = np.random.default_rng(self.seed)
        self.steps_seen = 0
        self.current: Arm | None = None
        self.left = 0

    def observe(self, accepted: int = 0, rejected: int = 0, tokens_accepted: int = 0, tokens_drafted: int = 0,
                step_tokens: Iterable[int] = ()) -> None:
        """What the decoder saw since the last call: verified draft steps accepted / rejected, drafted tokens
        and those accepted, the lengths of committed steps."""
        self.step.update(accepted, rejected, self.memory)
        self.token.update(tokens_accepted, tokens_drafted - tokens_accepted,
                          None if self.memory is None else self.memory * self.step_tokens)  # tokens: per step
        for n in step_tokens:
            self.steps_seen += 1
            self.step_tokens += (n - self.step_tokens) / (self.steps_seen + 1)  # the prior step length counts once

    def best(self) -> Arm:
        """The configuration with the highest speedup at the posterior means."""
        return self._argmax(self.step.mean, self.token.mean)

    def choose(self) -> Arm:
        """The configuration to run next: first the best at the prior means; then the current one while it
        dwells, else a Thompson draw, whose best replaces the current configuration only if it is faster by more
        than ``switch_margin`` under the same draw (a switch drops the drafts in flight: near-ties do not pay)."""
        if self.current is None:  # the first choice: the best at the prior means (the planner's)
            self.current, self.left = self.best(), self.dwell
        elif self.left <= 0:
            a1, a2 = self.step.sample(self.rng), self.token.sample(self.rng)
            best = self._argmax(a1, a2)
            if self._speedup(best, a1, a2) > (1 + self.switch_margin) * self._speedup(self.current, a1, a2):
                self.current = best
            self.left = self.dwell
        self.left -= 1
        return self.current

    def _speedup(self, arm: Arm, a1: float, a2: float) -> float:
        if self.objective is not None:  # e.g. the priced simulator's table (lrsim.adaptive_sim.SimulatedObjective)
            return self.objective(arm, a1, a2)
        return speedup(arm, a1, a2, self.step_tokens, self.costs)

    def _argmax(self, a1: float, a2: float) -> Arm:
        return max(self.candidates, key=lambda arm: self._speedup(arm, a1, a2))
