"""Adaptive LR in the simulator (issue 34): a request decoded in segments of output steps, each segment's
configuration chosen by :class:`lrsim.adaptive.Policy` from what the segments before it showed.

A request is a list of :class:`Phase` s (a number of output steps at a step and token acceptance; acceptance that
changes mid-request is two phases).  Each segment runs the chosen configuration on the event simulator
(:class:`lrsim.sim.Continuable` of its :class:`lrsim.sim.SimConfig`): while the choice stays, the same run goes
on, exactly as one run would; a new choice, or a new phase, starts a new run, so LR's pipeline fills again (the
drafts in flight are dropped, as a decoder switching at a step boundary drops them).  A fixed configuration is the
same loop with one choice, so auto and every fixed configuration pay the same phase boundaries.

What the policy observes after a segment (what a decoder sees):

- the verified draft steps accepted and rejected (the run's decisive verdicts: accepts and first rejections);
- the segment's mean step length;
- in ``ar`` segments with token SD (``k2 > 1``), token acceptance: a pass writes ``1 + min(X2, k2 - 1)`` tokens
  (``P(X2 = x) = a2^x (1 - a2)``), so the segment's tokens per pass ``t`` give ``a2`` from
  ``E2(a2, k2) = (1 - a2^k2) / (1 - a2) = t``; the Beta update counts ``tokens - passes`` accepted tokens and
  ``passes (1 - a2^(k2-1))`` rejections, the passes that ended before their last position.  LR segments with
  token SD leave ``a2`` as it is (their target passes include rejected and cancelled rows);
- the segment's output tokens and seconds (:meth:`lrsim.adaptive.Policy.observe_time`): the speed the
  configuration got, which corrects the objective's prediction (:class:`lrsim.adaptive.policy.SpeedModel`;
  :func:`run_workload` shares one model between its requests' policies).

Times are the simulator's seconds; a configuration's speedup over a workload is ``ar``'s seconds over its own on
the same phases and seeds (common random numbers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise

import numpy as np

from ..errors import InputError
from ..sim import Continuable, SimConfig
from ..sim.results import SimResult
from ..theory.costaware import Arm, Costs
from .policy import AutoOptions, Policy


@dataclass(frozen=True)
class Phase:
    """Output steps decoded at one step acceptance ``alpha1`` and token acceptance ``alpha2``."""

    steps: int
    alpha1: float
    alpha2: float = 0.5

    def __post_init__(self) -> None:
        if self.steps < 1 or not 0 <= self.alpha1 <= 1 or not 0 <= self.alpha2 <= 1:
            raise InputError(f"phase: steps >= 1 and acceptances in [0, 1], got {self}")


@dataclass(frozen=True)
class Segment:
    """One segment of a request: what ran, what it cost, what the policy believed when it chose."""

    phase: int
    steps: int
    arm: Arm
    seconds: float
    tokens: int
    accepted: int
    decisive: int
    alpha1_mean: float  #: the policy's posterior mean of step acceptance when it chose (fixed: nan)
    alpha2_mean: float
    request: int = 0


@dataclass
class RequestRun:
    """A request (or several, one after another) decoded segment by segment."""

    segments: list[Segment] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.segments)

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.segments)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.segments)

    @property
    def switches(self) -> int:
        """Changes of configuration inside a request."""
        return sum(1 for a, b in pairwise(self.segments) if a.request == b.request and a.arm != b.arm)

    def steps_by_arm(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.segments:
            out[s.arm.label] = out.get(s.arm.label, 0) + s.steps
        return out


#: builds the simulator's configuration of an arm in a phase (the setup's costs, that phase's acceptance)
ConfigOf = Callable[[Arm, Phase, int, int], SimConfig]  # (arm, phase, steps, seed) -> SimConfig


def token_acceptance(tokens_per_pass: float, k2: int) -> float:
    """``a2`` with ``E2(a2, k2) = tokens_per_pass`` (:func:`lrsim.prediction.calibrate.solve_alpha`); one token a pass or
    fewer gives 0, ``k2`` or more gives 1."""
    from ..prediction.calibrate import solve_alpha

    a2 = solve_alpha(tokens_per_pass, k2)
    return a2 if a2 is not None else (0.0 if tokens_per_pass <= 1 else 1.0)


def _since(r: SimResult, prev: SimResult | None) -> tuple[float, int, int, int, float]:
    """What a run did between two of its results (``prev`` None: from its start): seconds, output tokens,
    accepted drafts, decisive verdicts, target passes."""
    if prev is None:
        return r.sim_time, r.output_tokens, r.accepted, r.decisive, r.target_iterations
    return (r.sim_time - prev.sim_time, r.output_tokens - prev.output_tokens, r.accepted - prev.accepted,
            r.decisive - prev.decisive, r.target_iterations - prev.target_iterations)


def _observe(policy: Policy, arm: Arm, steps: int, tokens: int, acc: int, dec: int, passes: float) -> None:
    """Feed the policy what one segment showed (module doc)."""
    kw = {"accepted": acc, "rejected": dec - acc, "step_tokens": [round(tokens / steps)] * steps}
    if arm.mode == "ar" and arm.k2 > 1 and passes > 0:
        a2 = token_acceptance(tokens / passes, arm.k2)
        kw |= {"tokens_accepted": round(tokens - passes),
               "tokens_drafted": round(tokens - passes + passes * (1 - a2 ** (arm.k2 - 1)))}
    policy.observe(**kw)


def run_request(phases: Sequence[Phase], config_of: ConfigOf, *, arm: Arm | None = None,
                policy: Policy | None = None, segment_steps: int = 4, seed: int = 0, request: int = 0) -> RequestRun:
    """Decode one request of ``phases``: with ``arm`` fixed throughout, or with ``policy`` choosing every
    ``segment_steps`` output steps (module doc).  A run's seed is the request's, its phase's and the step it
    starts at, so a run after a switch draws new verdicts and fixed configurations share their random numbers."""
    if (arm is None) == (policy is None):
        raise InputError("give a fixed arm or a policy, not both")
    if segment_steps < 1:
        raise InputError(f"segment_steps >= 1, got {segment_steps}")
    out = RequestRun()
    for i, ph in enumerate(phases):
        done, live, prev, current = 0, None, None, None
        while done < ph.steps:
            means = (policy.step.mean, policy.token.mean) if policy else (float("nan"), float("nan"))
            choice = arm if arm is not None else policy.choose()
            if choice != current:  # a new run: the pipeline fills again
                live = Continuable(config_of(choice, ph, ph.steps - done, seed + 7919 * i + 104_729 * done))
                current, prev, base = choice, None, done
            n = min(segment_steps, ph.steps - done) if policy else ph.steps - done
            r = live.result(done + n - base)
            seconds, tokens, acc, dec, passes = _since(r, prev)
            if policy:
                _observe(policy, choice, n, tokens, acc, dec, passes)
                policy.observe_time(choice, tokens, seconds, acc, dec)
            out.segments.append(Segment(i, n, choice, seconds, tokens, acc, dec, *means, request))
            prev, done = r, done + n
    return out


def compose_config_of(behaviour, hw, *, steps_cap: int | None = None) -> ConfigOf:
    """The :data:`ConfigOf` of a behaviour (lengths, verifier, prompt) on a hardware setup
    (:func:`lrsim.api.hardware`): :func:`lrsim.prediction.compose.sim_config` of the arm with the phase's acceptance."""
    from ..prediction.compose import sim_config
    from ..trace import Setting

    def config_of(arm: Arm, ph: Phase, steps: int, seed: int) -> SimConfig:
        b = replace(behaviour, alpha1=ph.alpha1, alpha2=ph.alpha2)
        return sim_config(b, hw, Setting(arm.mode, arm.k1, arm.k2), steps if steps_cap is None else steps_cap, seed)

    return config_of


def costs_of(hw, behaviour) -> Costs:
    """The policy's :class:`lrsim.adaptive.Costs` on a hardware setup: the target's pass over ``n`` positions and
    the draft's token at the prompt's context, the verifier's mean call."""
    from ..prediction.compose import verifier

    ctx = float(behaviour.prompt_tokens)
    target, draft = hw.target("async"), hw.draft("async")
    if draft is None:
        raise InputError("adaptive LR needs a draft model on the hardware (--draft-arch)")
    ver, _ = verifier(hw, behaviour)
    return Costs(lambda n: target.seconds(ctx, 1, n), draft.seconds(ctx, 1, 1), float(ver.mean) if ver else 0.0)


def ar_token_seconds(hw, behaviour) -> float:
    """``ar``'s seconds per token on a hardware setup: its target's pass over one position at the prompt's context
    (on ``ar``'s own setup, which :func:`costs_of`' LR target may not share: a CPU's threads)."""
    return float(hw.target("ar").seconds(float(behaviour.prompt_tokens), 1, 1))


def costs_of_config(cfg: SimConfig) -> Costs:
    """The policy's :class:`lrsim.adaptive.Costs` for a simulator configuration: its target pass over ``n``
    positions and its draft token (:attr:`lrsim.sim.workload.Workload.pass_costs`), its verifier's mean call
    (``verifier_latency``, else ``verifier_cost`` target steps)."""
    from ..sim.workload import Workload

    w = Workload(cfg)
    target, draft, ctx = w.pass_costs
    step_s = w.tau1 * cfg.step_tokens.mean  # one target step at batch 1
    ver = float(cfg.verifier_latency.mean) if cfg.verifier_latency is not None else cfg.verifier_cost * step_s
    return Costs(lambda n: target.seconds(ctx, 1, n), draft.seconds(ctx, 1, 1), ver, cfg.draft_sd)


class SimulatedObjective:
    """The priced simulator as the policy's objective: each configuration's speedup over ``ar`` simulated once, at
    a grid of step and token acceptances (profile offline, look up online), interpolated bilinearly at a draw
    (clamped to the grid).  ``config_of`` builds the runs (:data:`ConfigOf`); each grid point runs ``steps`` output
    steps with one seed for every configuration (common random numbers)."""

    def __init__(self, config_of: ConfigOf, candidates: Sequence[Arm], steps: int = 400, seed: int = 0,
                 a1_grid: Sequence[float] = tuple(np.round(np.linspace(0.05, 0.95, 10), 2)),
                 a2_grid: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9)):
        from ..sim import simulate

        self.a1, self.a2 = np.asarray(a1_grid, float), np.asarray(a2_grid, float)
        if all(a.k2 == 1 for a in candidates):
            self.a2 = self.a2[:1]  # token acceptance changes nothing without token SD
        self.arms = list(dict.fromkeys([Arm("ar"), *candidates]))  # ar first: the others over it
        self.index = {a: k for k, a in enumerate(self.arms)}
        tps = np.empty((len(self.arms), len(self.a1), len(self.a2)))  # tokens per second
        for k, arm in enumerate(self.arms):
            for i, a1 in enumerate(self.a1):
                for j, a2 in enumerate(self.a2):
                    r = simulate(config_of(arm, Phase(steps, float(a1), float(a2)), steps, seed))
                    tps[k, i, j] = r.output_tokens / r.sim_time
        self.stack = tps / tps[0]  # (arm, a1, a2): speedups over ar
        self._last: tuple[float, float, np.ndarray] | None = None

    def speedups(self, a1: float, a2: float) -> np.ndarray:
        """Every configuration's speedup at (a1, a2), in :attr:`arms` order (the last draw's is kept: a decision
        asks for every configuration at one draw)."""
        if self._last is not None and self._last[:2] == (a1, a2):
            return self._last[2]
        v = self.stack
        for grid, x in ((self.a1, a1), (self.a2, a2)):  # each interpolation removes axis 1: a1, then a2
            if len(grid) == 1:
                v = v[:, 0]
                continue
            x = float(np.clip(x, grid[0], grid[-1]))
            i = min(int(np.searchsorted(grid, x, side="right")) - 1, len(grid) - 2)
            w = (x - grid[i]) / (grid[i + 1] - grid[i])
            v = (1 - w) * v[:, i] + w * v[:, i + 1]
        self._last = (a1, a2, v)
        return v

    def __call__(self, arm: Arm, a1: float, a2: float) -> float:
        return float(self.speedups(a1, a2)[self.index[arm]])


@dataclass
class AutoResult:
    """``auto`` and every fixed configuration it chooses among, on the same requests and random numbers
    (:func:`run_workload`); each run holds every request's segments, one request after another."""

    auto: RequestRun
    fixed: dict[Arm, RequestRun]
    requests: tuple[tuple[Phase, ...], ...]

    @staticmethod
    def tokens_per_second(run: RequestRun) -> float:
        return run.tokens / run.seconds

    @property
    def ar(self) -> RequestRun:
        return self.fixed[Arm("ar")]

    @property
    def best(self) -> Arm:
        """The fixed configuration with the most tokens per second on these requests (an oracle)."""
        return max(self.fixed, key=lambda a: self.tokens_per_second(self.fixed[a]))

    def speedup(self, run: RequestRun) -> float:
        """Tokens per second over ``ar``'s on the same requests."""
        return self.tokens_per_second(run) / self.tokens_per_second(self.ar)

    @property
    def switches(self) -> int:
        return self.auto.switches

    def phase_oracle(self) -> tuple[tuple[Arm, ...], float]:
        """An oracle that also knows where acceptance changes: in each phase (by its index in the requests) the fixed
        configuration with the most tokens per second there, and its speedup over ``ar`` over the whole workload
        (``sum tokens / sum seconds`` of those phases, over ``ar``'s).  Every run starts afresh at a phase
        boundary (:func:`run_request`), so its switches cost nothing: no policy that learns acceptance from
        verdicts can beat it but by luck.  With one phase per request it is :attr:`best`."""
        n = max(len(r) for r in self.requests)
        per = {a: np.zeros((n, 2)) for a in self.fixed}  # (phase, [tokens, seconds])
        for a, run in self.fixed.items():
            for s in run.segments:
                per[a][s.phase] += (s.tokens, s.seconds)
        chosen = tuple(max(self.fixed, key=lambda a: per[a][i, 0] / per[a][i, 1]) for i in range(n))
        tokens = sum(per[a][i, 0] for i, a in enumerate(chosen))
        seconds = sum(per[a][i, 1] for i, a in enumerate(chosen))
        return chosen, tokens / seconds / self.tokens_per_second(self.ar)

    def to_dict(self) -> dict:
        best = self.best
        return {"requests": len(self.requests), "phases": [[vars(p) for p in r] for r in self.requests],
                "auto_speedup": self.speedup(self.auto), "best_fixed": best.label,
                "best_fixed_speedup": self.speedup(self.fixed[best]),
                "auto_over_best": self.speedup(self.auto) / self.speedup(self.fixed[best]),
                "auto_steps": self.auto.steps_by_arm(), "switches": self.switches,
                "decisions": [{"request": s.request, "phase": s.phase, "steps": s.steps, "config": s.arm.label,
                               "alpha1_mean": s.alpha1_mean, "alpha2_mean": s.alpha2_mean,
                               "seconds": s.seconds} for s in self.auto.segments],
                "fixed": {a.label: self.speedup(r) for a, r in self.fixed.items()}}

    def format(self) -> str:
        best = self.best
        if len(self.requests) == 1:
            on = ", ".join(f"{p.steps} steps at alpha1 {p.alpha1:g}" for p in self.requests[0])
        else:
            steps = sum(p.steps for r in self.requests for p in r)
            on = f"{len(self.requests)} requests, {steps} steps"
        used = ", ".join(f"{k} {v}" for k, v in sorted(self.auto.steps_by_arm().items(), key=lambda kv: -kv[1]))
        top = sorted(self.fixed, key=lambda a: -self.speedup(self.fixed[a]))[:5]
        lines = [f"auto on {on}",
                 f"  speedup over ar      {self.speedup(self.auto):.3f}x  ({self.switches} switches)",
                 (f"  best fixed (oracle)  {best.label}: {self.speedup(self.fixed[best]):.3f}x  "
                  f"(auto / best {self.speedup(self.auto) / self.speedup(self.fixed[best]):.3f})"),
                 f"  steps by config      {used}",
                 "  fixed, best five     " + ", ".join(f"{a.label} {self.speedup(self.fixed[a]):.3f}x" for a in top)]
        return "\n".join(lines)


def run_workload(requests: Sequence[Sequence[Phase]], config_of: ConfigOf, costs: Costs, alpha1: float,
                 alpha2: float, step_tokens: float, options: AutoOptions = AutoOptions(), seed: int = 0,
                 progress: Callable[[int, int], None] | None = None, ar_token_s: float | None = None,
                 table: SimulatedObjective | None = None) -> AutoResult:
    """``auto`` on every request (a policy of its own each, its prior at ``alpha1`` and ``alpha2``: what a
    planner is given) and every fixed configuration, request ``i`` with seed ``seed + i`` in all of them.  With
    ``options.learn_speed`` the policies share one :class:`lrsim.adaptive.policy.SpeedModel`: the speed each
    configuration got in earlier requests corrects the objective in later ones (acceptance stays per request);
    ``ar_token_s``: ``ar``'s seconds per token, the unit of predicted times (:class:`Policy`, :func:`ar_token_seconds`);
    ``table``: with ``options.objective`` 'simulated', a :class:`SimulatedObjective` built already (of these
    candidates, on this setup), shared between workloads instead of priced again."""
    if not requests:
        raise InputError("no requests to simulate")
    cands = options.candidates()
    if options.objective not in ("closed-form", "simulated"):
        raise InputError(f"objective: 'closed-form' or 'simulated', got {options.objective!r}")
    if table is not None and set(table.arms) != {Arm("ar"), *cands}:
        raise InputError("the simulated objective's table prices other configurations than these options'")
    objective = None
    if options.objective == "simulated":
        objective = table if table is not None else SimulatedObjective(config_of, cands, seed=seed)
    auto, fixed, speed = RequestRun(), {a: RequestRun() for a in cands}, options.speed_model()
    for i, phases in enumerate(requests):
        pol = Policy(costs, alpha1=alpha1, alpha2=alpha2, prior_weight=options.prior_weight, step_tokens=step_tokens,
                     candidates=cands, dwell=options.dwell, seed=seed + i, switch_margin=options.switch_margin,
                     memory=options.memory, objective=objective, speed=speed, ar_token_s=ar_token_s,
                     **options.rules())
        auto.segments += run_request(phases, config_of, policy=pol, segment_steps=options.segment_steps,
                                     seed=seed + i, request=i).segments
        for a in cands:
            fixed[a].segments += run_request(phases, config_of, arm=a, seed=seed + i, request=i).segments
        if progress:
            progress(i + 1, len(requests))
    return AutoResult(auto, fixed, tuple(tuple(r) for r in requests))


def simulate_auto(base: SimConfig, phases: Sequence[Phase], options: AutoOptions = AutoOptions(),
                  seed: int = 0) -> AutoResult:
    """``lrsim simulate --mode auto``: one request of ``phases`` on ``base``'s costs, the prior at ``base.alpha1``
    and ``base.alpha2``."""

    def config_of(arm: Arm, ph: Phase, steps: int, s: int) -> SimConfig:
        return replace(base, mode=arm.mode, k1=arm.k1, k2=arm.k2, alpha1=ph.alpha1, alpha2=ph.alpha2, steps=steps,
                       seed=s)

    return run_workload([phases], config_of, costs_of_config(base), base.alpha1, base.alpha2,
                        base.step_tokens.mean, options, seed)


def requests_from_traces(traces: Sequence, alpha2: float) -> list[list[Phase]]:
    """One phase per recorded request with verified drafts: its output steps at its own step acceptance
    (first-branch drafts with a verdict, not cancelled: accepted over verified) and token acceptance ``alpha2``."""
    out = []
    for t in traces:
        verdicts: dict[int, list[bool]] = {}
        for s in t.steps:
            if s.decision is not None and not s.cancelled and (s.branch or 0) == 0:
                verdicts.setdefault(s.request, []).append(bool(s.decision))
        for r in t.requests:
            v = verdicts.get(r.request)
            if v and r.steps:
                out.append([Phase(r.steps, sum(v) / len(v), alpha2)])
    if not out:
        raise InputError("no request in these traces has a verified draft: auto needs LR traces "
                         "(lr-sync or lr-async) for each request's step acceptance")
    return out


def parse_phases(text: str, alpha2: float = 0.5) -> list[Phase]:
    """``STEPS:ALPHA1[:ALPHA2],...`` (e.g. ``30:0.8,30:0.3``): acceptance that changes mid-request; ``alpha2``
    where a phase does not give it."""
    out = []
    for part in text.split(","):
        bits = part.strip().split(":")
        try:
            if len(bits) not in (2, 3):
                raise ValueError
            out.append(Phase(int(bits[0]), float(bits[1]), float(bits[2]) if len(bits) == 3 else alpha2))
        except ValueError:
            raise InputError(f"phase {part!r}: expected STEPS:ALPHA1[:ALPHA2], e.g. 30:0.8") from None
    return out
