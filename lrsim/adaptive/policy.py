"""Adaptive Lookahead Reasoning: choose the decoding configuration online from what the request shows (issue 34,
the policy; no torch).

Estimates (:class:`Beta`): step acceptance ``a1`` and token acceptance ``a2`` are Beta posteriors, updated with
every verified draft step and every drafted token (:meth:`Policy.observe`), from a prior worth ``prior_weight``
observations centred on the planner's or the profile's value.  The choice (:meth:`Policy.choose`) is Thompson
sampling: draw ``a1`` and ``a2`` from the posteriors and take the configuration with the highest speedup under the
draw.  A configuration that cannot pay (its speedup below the best one's under almost every draw) is chosen only
as often as the posterior allows it to be the best, which shrinks as observations accumulate; ``dwell`` keeps a
choice for that many decisions so a decoder does not switch at every step.  :meth:`Policy.best` is the greedy
choice at the posterior means.

The objective, :func:`lrsim.theory.costaware.speedup`, and the configurations it prices
(:class:`lrsim.theory.costaware.Arm`) live with the closed forms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..modes import LR_MODES, k1_of_gamma
from ..theory.costaware import Arm, Costs, speedup


def arms(max_gamma: int = 8, k2s: Iterable[int] = (1, 4), modes: Iterable[str] = LR_MODES) -> list[Arm]:
    """Every configuration up to ``max_gamma`` drafted steps, with each token-SD width of ``k2s``."""
    k2s = sorted(set(k2s))
    out = [Arm("ar", 1, k2) for k2 in k2s]
    for mode in modes:
        for gamma in range(1, max_gamma + 1):
            k1 = k1_of_gamma(mode, gamma)
            if k1 >= 2:
                out += [Arm(mode, k1, k2) for k2 in k2s]
    return out


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
        of the priced simulator's (:class:`lrsim.adaptive.sim.SimulatedObjective`).
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
        if self.objective is not None:  # e.g. the priced simulator's table (lrsim.adaptive.sim.SimulatedObjective)
            return self.objective(arm, a1, a2)
        return speedup(arm, a1, a2, self.step_tokens, self.costs)

    def _argmax(self, a1: float, a2: float) -> Arm:
        return max(self.candidates, key=lambda arm: self._speedup(arm, a1, a2))


@dataclass(frozen=True)
class AutoOptions:
    """How ``auto`` chooses (:class:`Policy`) and what it chooses among."""

    max_gamma: int = 8  #: deepest LR configuration
    k2s: tuple[int, ...] = (1, 4)  #: token-SD widths
    modes: tuple[str, ...] = LR_MODES  #: LR modes
    dwell: int = 4  #: decisions a choice is kept
    switch_margin: float = 1 / 16  #: gain a new choice needs under the same draw (a switch: ~1 step in 16)
    segment_steps: int = 4  #: output steps per decision
    prior_weight: float = 4.0  #: verdicts the prior is worth
    memory: float | None = 32.0  #: verdicts the posteriors weigh at most
    objective: str = "closed-form"  #: 'closed-form' (lrsim.theory.costaware.speedup) or 'simulated' (lrsim.adaptive.sim.SimulatedObjective)

    def candidates(self) -> list[Arm]:
        return arms(max_gamma=self.max_gamma, k2s=self.k2s, modes=self.modes)
