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

Speed (:class:`SpeedModel`, issue 42): the objective is a model, and a model can be wrong for a workload (LR's
pipeline that never fills in short requests, a host overhead per pass the costs leave out).  So the policy also
learns from the speed it gets: after each segment the caller reports the configuration, the tokens kept and the
seconds (:meth:`Policy.observe_time`), and each configuration's speedup is multiplied by a correction learnt from
its realized time per kept token over the predicted one.  Shared by several policies (one per request), the
correction carries across requests.

Three rules keep the choice from moving on what it cannot learn or what does not pay, and follow acceptance that
changes (issue 42, item 5; the development runs that set them: docs/validation/adaptive.md):

- **Near-ties in lr-async depth go to the deeper one** (``deep_ties``): an lr-async configuration within the switch
  margin ``m`` of a shallower one of its ``k2`` is priced as it,
  ``S'(a) = max(S(a), max {S(b) : b.k1 < a.k1, S(a) (1 + m) >= S(b)})``, and of equal prices the deepest is
  chosen.  The closed form charges every round of the pipeline a pass over ``k1`` rows of equal steps; the priced
  simulator, whose steps vary in length, finds depth beyond the closed form's best nearly free where batches are
  (the modelled GPUs: gamma 8 within 0.7% of the best at step acceptance 0.2 and 0.5, 0.8% above the closed
  form's choice at 0.8) and costly where they are not (a CPU: there the deeper ones fall outside the margin;
  ``python studies/adaptive_check.py --depths``).  ``m`` is already the gain below which the policy does not act
  (a switch); it is also the gap it treats as a tie here, so the rule adds no parameter.  The speed model measures
  a segment against ``S'``, the price it was chosen at (:meth:`Policy.observe_time`).
- **Token acceptance is drawn only once a token verdict was seen** (``draw_token_prior`` False): the
  prior alone is the planner's measured value, and in an LR segment nothing updates it (the simulator's LR
  passes mix rejected and cancelled rows), so Thompson draws of it would move ``k2`` at random for the whole
  request and each move would drop the pipeline.  Step acceptance is always drawn (LR segments teach it).
- **A change of acceptance restarts its estimate** (``changepoint``, a level ``delta``): before a segment's step
  verdicts (``k`` accepted of ``n``) update the posterior ``Beta(a, b)``, they are tested against its predictive
  distribution, the beta-binomial ``P(X = i) = C(n, i) B(a + i, b + n - i) / B(a, b)``; if either tail,
  ``P(X <= k)`` or ``P(X >= k)``, is below ``delta``, acceptance has changed, and the posterior restarts from the
  prior (the new acceptance a fresh draw from what the planner said, as in a changepoint model) before the
  verdicts are added.  Without it the posterior mixes the old and the new acceptance for up to ``memory``
  verdicts, and once the policy has left LR for ``ar`` (which gives no verdicts) that stale mixture is what its
  draws come from.  ``delta`` 0.01 is the usual test level (two tails: at most 2% false alarms a segment).

All three are on in :class:`AutoOptions` (``lrsim simulate / replay --mode auto``,
:func:`lrsim.adaptive.sim.run_workload`, ``studies/adaptive_check.py``; with ``learn_speed`` False, the policy
before issue 42, none of them: :meth:`AutoOptions.rules`) and off in a :class:`Policy` built without them (lrref's
tuner, ``lrsim serve``'s per-request choice), which behave as before.

The objective, :func:`lrsim.theory.costaware.speedup`, and the configurations it prices
(:class:`lrsim.theory.costaware.Arm`) live with the closed forms.
"""

from __future__ import annotations

import math
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
class SpeedModel:
    """What each configuration's realized time per kept token is, over what the objective predicted: the log
    ratio ``x = log(realized / predicted)`` of every segment (:meth:`observe`), estimated on two levels.

    - A configuration's **family** (its mode: ``ar``, ``sync``, ``async``): what a family's closed form gets wrong
      (a pipeline that never fills in short requests, a target slower beside its draft) it gets wrong at every
      depth.  The family's segments, shrunk by a prior worth ``prior_weight`` segments: to 0 (no correction) for
      ``ar``, to ``ar``'s estimate for the LR families (what makes ``ar`` slower than predicted, a prompt's prefill
      or a context that grows, makes them slower too: a family never run is ranked against ``ar`` as the
      objective ranks it, not favoured by ``ar``'s error).
    - The **configuration**: its own segments, shrunk to its family's estimate by a prior worth ``arm_weight``
      segments (depths differ from each other less than families do, and one segment's ratio is noisy).  The
      default, ``inf``, leaves the configurations of a family one correction: on the development runs of
      ``studies/adaptive_check.py`` (seeds 0 and 1) a prior of 8 segments learnt noise on the modelled GPUs
      (auto / best 0.963 and 0.968 against 0.971 and 0.972 without).

    Older segments fade: every weight and sum is multiplied by ``1 - 1/memory`` before a segment is added, so the
    estimates weigh at most ``memory`` segments.  The correction multiplies a speedup by ``exp(-estimate)``
    (:meth:`factor`).  A Thompson draw (:meth:`draw`) moves each family's estimate by a normal of standard
    deviation ``spread / sqrt(weight + prior_weight)``: a family never run is drawn the widest, so it is tried when
    a draw makes it pay (exploration at the price of a segment, not one per configuration); ``spread`` 0 (the
    default; draws explored lr-sync on the GPUs more than it paid): the estimates alone.  One model shared by several policies carries the correction across their requests.
    """

    prior_weight: float = 1.0
    memory: float = 16.0
    spread: float = 0.0
    arm_weight: float = math.inf

    def __post_init__(self) -> None:
        if self.prior_weight <= 0 or self.arm_weight <= 0 or self.memory < 1 or self.spread < 0:
            raise InputError(f"speed model: prior_weight and arm_weight > 0, memory >= 1 and spread >= 0, got "
                             f"{self.prior_weight:g}, {self.arm_weight:g}, {self.memory:g}, {self.spread:g}")
        self.stats: dict[object, list[float]] = {}  # family (str) or Arm -> [weight, weighted sum of log ratios]

    def observe(self, arm: Arm, log_ratio: float, weight: float = 1.0) -> None:
        """One segment of ``arm``: its realized time per kept token over the predicted one, as a log."""
        if not math.isfinite(log_ratio) or weight <= 0:
            raise InputError(f"speed model: a finite log ratio and a weight > 0, got {log_ratio}, {weight}")
        keep = 1 - 1 / self.memory
        for key in (arm.mode, arm):
            w, s = self.stats.get(key, (0.0, 0.0))
            self.stats[key] = [w * keep + weight, s * keep + weight * log_ratio]

    def weight(self, key: Arm | str) -> float:
        """The segments (faded) a configuration or a family (its mode) was seen in."""
        return self.stats.get(key, (0.0, 0.0))[0]

    def family_estimate(self, mode: str) -> float:
        """The log ratio expected of a mode family (``ar``, ``sync``, ``async``): its segments shrunk to ``ar``'s
        estimate (``ar``'s to 0) by ``prior_weight``."""
        w0 = self.prior_weight
        wr, sr = self.stats.get("ar", (0.0, 0.0))
        ref = sr / (wr + w0) if mode != "ar" else 0.0  # ar's error: what every family's time shares (prefill)
        wf, sf = self.stats.get(mode, (0.0, 0.0))
        return (sf + w0 * ref) / (wf + w0)

    def family_factor(self, mode: str) -> float:
        """What a family's predicted speedups are multiplied by: ``exp(-family_estimate)`` (a configuration's
        own, :meth:`factor`, differs only with a finite ``arm_weight``)."""
        return math.exp(-self.family_estimate(mode))

    def estimate(self, arm: Arm, family_shift: float = 0.0) -> float:
        """The log ratio expected of ``arm`` (0: the objective is right); ``family_shift`` moves its family's."""
        family = self.family_estimate(arm.mode) + family_shift
        if math.isinf(self.arm_weight):  # no per-configuration deviation: the family's correction
            return family
        w, s = self.stats.get(arm, (0.0, 0.0))
        return (s + self.arm_weight * family) / (w + self.arm_weight)

    def factor(self, arm: Arm) -> float:
        """What ``arm``'s predicted speedup is multiplied by: ``exp(-estimate)``."""
        return math.exp(-self.estimate(arm))

    def draw(self, arms: Iterable[Arm], rng: np.random.Generator) -> dict[Arm, float]:
        """A Thompson draw of every arm's factor: one normal per family (class doc), in the order families first
        appear in ``arms``."""
        arms = list(arms)
        if self.spread == 0:  # the estimates alone: no random numbers drawn
            return {a: self.factor(a) for a in arms}
        shift = {}
        for mode in dict.fromkeys(a.mode for a in arms):
            sd = self.spread / math.sqrt(self.weight(mode) + self.prior_weight)
            shift[mode] = sd * float(rng.standard_normal())
        return {a: math.exp(-self.estimate(a, shift[a.mode])) for a in arms}


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
    :param speed: the correction learnt from realized speed (:class:`SpeedModel`, fed by :meth:`observe_time`;
        one model may be shared by several policies); None: the objective alone, as before issue 42.
    :param ar_token_s: the seconds ``ar`` takes per token on this machine, the unit a configuration's predicted
        time per token is taken in (``ar_token_s / S``); None: ``costs.target_pass(1)``.  They differ where LR's
        target runs on another setup than ``ar``'s (lr-async's target on fewer threads, the draft beside it).
    :param deep_ties: a near-tie (within ``switch_margin``) among lr-async depths of one ``k2`` goes to the deepest
        (module doc); with ``switch_margin`` 0 only exact ties.  The default False keeps the first of the best, as
        before issue 42's item 5, for the callers that build a policy themselves (lrref's tuner, ``lrsim serve``);
        :class:`AutoOptions` turns it on.
    :param draw_token_prior: draw token acceptance from its posterior before any token verdict was seen (the
        default, as before); :class:`AutoOptions` turns it off: its prior mean until then (module doc).
    :param changepoint: the level below which a segment's step verdicts, under the posterior's predictive
        distribution, restart the step-acceptance posterior from the prior (module doc); None (the default, as
        before): no test.
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
    speed: SpeedModel | None = None
    ar_token_s: float | None = None
    deep_ties: bool = False
    draw_token_prior: bool = True
    changepoint: float | None = None

    def __post_init__(self) -> None:
        if self.dwell < 1 or self.step_tokens <= 0 or not self.candidates:
            raise InputError("dwell >= 1, step_tokens > 0 and at least one configuration are needed")
        if not 0 <= self.switch_margin < 1:
            raise InputError(f"switch_margin in [0, 1), got {self.switch_margin}")
        if self.ar_token_s is not None and not self.ar_token_s > 0:
            raise InputError(f"ar_token_s must be > 0, got {self.ar_token_s}")
        if self.memory is not None and self.memory < self.prior_weight:
            raise InputError(f"memory must be >= prior_weight ({self.prior_weight}), got {self.memory}")
        if self.changepoint is not None and not 0 < self.changepoint < 0.5:
            raise InputError(f"changepoint: a test level in (0, 0.5), got {self.changepoint}")
        self.step = Beta.prior(self.alpha1, self.prior_weight)
        self.token = Beta.prior(self.alpha2, self.prior_weight)
        self.rng = np.random.default_rng(self.seed)
        self.steps_seen = 0
        self.tokens_seen = 0  # token verdicts observed (drafted tokens)
        self.changes = 0  # changes of step acceptance detected (changepoint)
        self.current: Arm | None = None
        self.left = 0
        self._chosen_factor = 1.0  # the speed factor of the current choice when it was made

    def observe(self, accepted: int = 0, rejected: int = 0, tokens_accepted: int = 0, tokens_drafted: int = 0,
                step_tokens: Iterable[int] = ()) -> None:
        """What the decoder saw since the last call: verified draft steps accepted / rejected, drafted tokens
        and those accepted, the lengths of committed steps.  With :attr:`changepoint`, step verdicts the posterior
        finds improbable (:meth:`surprise` below the level) restart it from the prior first (module doc)."""
        if self.changepoint is not None and accepted + rejected > 0 and \
                self.surprise(accepted, accepted + rejected) < self.changepoint:
            self.step = Beta.prior(self.alpha1, self.prior_weight)  # a new acceptance: a fresh draw from the prior
            self.changes += 1
            self.left = 0  # what the current choice was made for has changed: the next decision is a draw
        self.step.update(accepted, rejected, self.memory)
        self.token.update(tokens_accepted, tokens_drafted - tokens_accepted,
                          None if self.memory is None else self.memory * self.step_tokens)  # tokens: per step
        self.tokens_seen += tokens_drafted
        for n in step_tokens:
            self.steps_seen += 1
            self.step_tokens += (n - self.step_tokens) / (self.steps_seen + 1)  # the prior step length counts once

    def surprise(self, accepted: int, verdicts: int) -> float:
        """How improbable ``accepted`` of ``verdicts`` step verdicts are under the step posterior ``Beta(a, b)``:
        the smaller tail of its predictive beta-binomial, ``min(P(X <= k), P(X >= k))`` with
        ``P(X = i) = C(n, i) B(a + i, b + n - i) / B(a, b)``,
        ``log B(x, y) = lgamma(x) + lgamma(y) - lgamma(x + y)``."""
        if not 0 <= accepted <= verdicts:
            raise InputError(f"surprise: 0 <= accepted <= verdicts, got {accepted}, {verdicts}")
        a, b, n = self.step.a, self.step.b, verdicts

        def log_beta(x: float, y: float) -> float:
            return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

        pmf = [math.comb(n, i) * math.exp(log_beta(a + i, b + n - i) - log_beta(a, b)) for i in range(n + 1)]
        return min(sum(pmf[:accepted + 1]), sum(pmf[accepted:]))

    def observe_time(self, arm: Arm, tokens: int, seconds: float, accepted: int = 0, verdicts: int = 0) -> None:
        """A segment that ran ``arm`` kept ``tokens`` tokens in ``seconds``: its realized time per token over the
        predicted one, ``ar_token_s / S`` (``ar``'s seconds per token, by default its pass over one position
        ``T(1)``, over the objective's speedup), to :attr:`speed` (without one: nothing).  ``S`` is taken at the
        segment's own step acceptance where it had verdicts (``accepted`` of ``verdicts``, shrunk to the posterior
        mean by ``prior_weight`` verdicts) and the posterior mean of token acceptance: so what the correction
        learns is the objective's error, not the luck of the segment's drafts or acceptance the posterior has not
        caught up with yet.  With :attr:`deep_ties`, ``S`` is the speedup the configuration was ranked by (a deep
        lr-async credited with the shallower one it ties, :meth:`_scores`), so the correction its family learns is
        measured against the price that chose it."""
        if tokens < 0 or seconds < 0 or not 0 <= accepted <= verdicts:
            raise InputError(f"observe_time: tokens, seconds >= 0 and 0 <= accepted <= verdicts, got {tokens}, "
                             f"{seconds}, {accepted}, {verdicts}")
        if self.speed is None or tokens == 0 or seconds == 0:
            return
        a1 = (accepted + self.prior_weight * self.step.mean) / (verdicts + self.prior_weight)
        unit = self.ar_token_s if self.ar_token_s is not None else self.costs.target_pass(1)
        shallower = [b for b in self.candidates if b.mode == "async" == arm.mode and b.k2 == arm.k2 and b.k1 < arm.k1]
        s = self._scores(a1, self.token.mean, arms=[arm, *shallower], corrected=False)[arm]  # as it was ranked
        predicted = unit / max(s, 1e-9)
        self.speed.observe(arm, math.log(seconds / tokens / predicted))

    def best(self) -> Arm:
        """The configuration with the highest speedup at the posterior means (and the speed model's estimates)."""
        return self._argmax(self.step.mean, self.token.mean)

    def choose(self) -> Arm:
        """The configuration to run next: first the best at the prior means; then the current one while it
        dwells, else a Thompson draw, whose best replaces the current configuration only if it is faster by more
        than ``switch_margin`` under the same draw (a switch drops the drafts in flight: near-ties do not pay).
        A choice the speed it got has disproved (:meth:`disproved`) stops dwelling: the next decision is a draw."""
        if self.current is None:  # the first choice: the best at the prior means (the planner's)
            self.current, self.left = self.best(), self.dwell
            self._chosen_factor = self.speed.factor(self.current) if self.speed is not None else 1.0
        elif self.left <= 0 or self.disproved():
            a1 = self.step.sample(self.rng)
            seen = self.tokens_seen > 0 or self.draw_token_prior  # a prior nothing has updated is not drawn
            a2 = self.token.sample(self.rng) if seen else self.token.mean
            drawn = self.speed.draw(self.candidates, self.rng) if self.speed is not None else None
            score = self._scores(a1, a2, drawn)
            best = self._pick(score)
            if score[best] > (1 + self.switch_margin) * self._score_of(self.current, score, a1, a2, drawn):
                self.current = best
            self.left = self.dwell
            self._chosen_factor = self.speed.factor(self.current) if self.speed is not None else 1.0
        self.left -= 1
        return self.current

    def disproved(self) -> bool:
        """The current choice is slower than the objective said when it was chosen (its speed factor fell by more
        than ``switch_margin`` since) and, with what that speed taught, no longer within ``switch_margin`` of the
        best at the posterior means: what it was chosen for has not happened (always False without a speed model)."""
        if self.speed is None or self.current is None:
            return False
        if self.speed.factor(self.current) * (1 + self.switch_margin) >= self._chosen_factor:
            return False
        a1, a2 = self.step.mean, self.token.mean
        score = self._scores(a1, a2)
        return self._score_of(self.current, score, a1, a2) * (1 + self.switch_margin) < max(score.values())

    def _model(self, arm: Arm, a1: float, a2: float) -> float:
        """The objective's speedup, uncorrected."""
        if self.objective is not None:  # e.g. the priced simulator's table (lrsim.adaptive.sim.SimulatedObjective)
            return self.objective(arm, a1, a2)
        return speedup(arm, a1, a2, self.step_tokens, self.costs)

    def _speedup(self, arm: Arm, a1: float, a2: float, drawn: dict[Arm, float] | None = None) -> float:
        """The objective's speedup times the speed model's factor (``drawn``: a Thompson draw's factors)."""
        s = self._model(arm, a1, a2)
        if self.speed is None:
            return s
        return s * (drawn[arm] if drawn is not None and arm in drawn else self.speed.factor(arm))

    def _scores(self, a1: float, a2: float, drawn: dict[Arm, float] | None = None, arms: Iterable[Arm] | None = None,
                corrected: bool = True) -> dict[Arm, float]:
        """Each configuration's speedup (of ``arms``, by default the candidates), times the speed model's factor
        (``corrected``; ``drawn``: a Thompson draw's); with :attr:`deep_ties`, an lr-async configuration is credited
        with the speedup of any shallower one of its ``k2`` that it is within the switch margin ``m`` of:
        ``S'(a) = max(S(a), max {S(b) : b.k1 < a.k1, S(a) (1 + m) >= S(b)})`` (module doc)."""
        arms = self.candidates if arms is None else list(arms)
        s = {arm: self._speedup(arm, a1, a2, drawn) if corrected else self._model(arm, a1, a2) for arm in arms}
        if not self.deep_ties:
            return s
        out, groups = dict(s), {}
        for arm in arms:
            if arm.mode == "async":
                groups.setdefault(arm.k2, []).append(arm)
        for group in groups.values():
            for a in group:
                for b in group:
                    if b.k1 < a.k1 and s[a] * (1 + self.switch_margin) >= s[b] > out[a]:
                        out[a] = s[b]  # the closed form underprices depth by up to m: a tie, the deeper priced as it
        return out

    def _score_of(self, arm: Arm, score: dict[Arm, float], a1: float, a2: float,
                  drawn: dict[Arm, float] | None = None) -> float:
        """``arm``'s score in ``score``, or its own speedup when it is not a candidate."""
        return score[arm] if arm in score else self._speedup(arm, a1, a2, drawn)

    def _pick(self, score: dict[Arm, float]) -> Arm:
        """The configuration of the highest score: the first of equals in candidate order, or with
        :attr:`deep_ties` the deepest of them (a credited deep lr-async ties with the shallower best exactly)."""
        if not self.deep_ties:
            return max(score, key=score.__getitem__)
        return max(score, key=lambda arm: (score[arm], arm.k1))

    def _argmax(self, a1: float, a2: float, drawn: dict[Arm, float] | None = None) -> Arm:
        return self._pick(self._scores(a1, a2, drawn))


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
    #: correct the objective by the speed each configuration gets (SpeedModel); False: as before issue 42 (item 5's
    #: rules off too: rules())
    learn_speed: bool = True
    speed_prior: float = 1.0  #: segments the speed model's prior (no correction) is worth
    speed_memory: float = 16.0  #: segments the speed model weighs at most (older ones fade)
    speed_spread: float = 0.0  #: the speed model's Thompson spread of a family (log ratio, over sqrt(segments + prior))
    speed_arm_weight: float = math.inf  #: segments a configuration's own correction needs to weigh as much as its family's (inf: the family's alone)
    deep_ties: bool = True  #: a near-tie (within switch_margin) among lr-async depths: the deepest (Policy.deep_ties)
    draw_token_prior: bool = False  #: draw token acceptance before a token verdict was seen (Policy.draw_token_prior)
    changepoint: float | None = 0.01  #: test level of a change in step acceptance (Policy.changepoint; None: no test)

    def candidates(self) -> list[Arm]:
        return arms(max_gamma=self.max_gamma, k2s=self.k2s, modes=self.modes)

    def rules(self) -> dict:
        """Issue 42 item 5's rules as :class:`Policy` keywords (``deep_ties``, ``draw_token_prior``,
        ``changepoint``); with ``learn_speed`` False, the policy as before issue 42: none of them."""
        if not self.learn_speed:
            return {"deep_ties": False, "draw_token_prior": True, "changepoint": None}
        return {"deep_ties": self.deep_ties, "draw_token_prior": self.draw_token_prior,
                "changepoint": self.changepoint}

    def speed_model(self) -> SpeedModel | None:
        """A fresh :class:`SpeedModel` of these options (None without ``learn_speed``): share it between the
        policies of a workload's requests so that what one learnt carries to the next."""
        if not self.learn_speed:
            return None
        return SpeedModel(self.speed_prior, self.speed_memory, self.speed_spread, self.speed_arm_weight)
