"""``--mode auto``: the decoder chooses ar, sd, lr-sync(+sd) or lr-async and its depth at every step boundary
(issue 34; lr-async: issue 42).

One request at a time.  Before each cycle (one ar/sd step, one lr-sync cycle, or one lr-async *stage*: the
pipeline from the request's prefix to its first rejection, where no target row runs and no draft is kept, so the
next cycle may run anything) the request's :class:`lrsim.adaptive.Policy` chooses a configuration among those of
``cfg.auto_modes`` (:func:`candidates`; :class:`lrsim.adaptive.Arm`: ``ar``; ``sd`` with ``k2 = ngram + 1``;
``lr-sync`` with ``k1 = gamma + 1``, ``gamma`` in ``1..auto_max_gamma``, with or without n-gram inside its steps;
``lr-async`` with ``k1 = gamma`` in ``2..auto_max_gamma``, without n-gram: its draft process drafts without).
lr-sync's draft runs in the main process beside the target, on ``threads``; lr-async's in the draft process the
decoder starts when lr-async is among the modes (and only then), on ``draft_threads``, while the stage's target
runs on ``target_threads`` (:func:`lrref.decode.cycles.request_steps` sets the target's threads where a cycle's
layout changes).  The cycle runs it
(:func:`lrref.decode.cycles.request_steps` with the tuner as its hook: :meth:`Tuner.begin` sets the arm's
:class:`~lrref.config.DecodeConfig`, :func:`arm_config`) and the policy observes what the cycle showed
(:meth:`Tuner.end`):

- step acceptance: lr-sync's and lr-async's verified drafts, accepted and rejected (token-identical drafts count
  as accepted);
- token acceptance: the n-gram tokens the target's passes proposed and kept;
- step lengths: the committed steps' tokens;
- speed (issue 42): the tokens the cycle kept and its seconds on the decoder's clock (from :meth:`Tuner.begin`'s
  end to :meth:`Tuner.end`: the cycle's drafting, target passes, verifier calls and the host's own work between
  them; an lr-async stage's wall time, its drafting overlapped), to :meth:`lrsim.adaptive.Policy.observe_time`,
  which learns each mode family's realized time per kept token over the one its closed form predicted at the costs
  measured so far (:class:`lrsim.adaptive.policy.SpeedModel`).  A request's first cycle prefills its prompt, a cost
  every configuration pays and no closed form has: its speed is not observed.

The costs are the machine's as measured so far in this decoder (:class:`Meter`, fed every forward pass of the
target and the draft, the draft process's too, and every verifier call; the target's passes in lr-async stages
stay out, :attr:`Meter.target_on`: beside the draft process, on ``target_threads``, the target is another
machine, and what a stage costs is the speed model's to learn from its wall time):

- a target pass over ``n`` positions, ``T(n) = t1 + s (n - 1)``: ``t1`` the mean one-position pass, ``s`` the
  least-squares slope through it over the passes of up to :data:`FIT_MAX_TOKENS` positions (the batches LR and
  n-gram passes make; a pass's cost is not linear in ``n``, and a long prefill's positions are cheaper than a
  batch's few: :meth:`Meter.fit`);
- a draft token ``D``: the draft's mean pass over one position;
- a verifier call on one step pair ``V``: verifier seconds over the pairs it judged.

What has not been measured yet is optimistic: ``s = 0`` (a free batch) before two distinct ``n``, ``D = 0`` and
``V = 0`` before the first draft pass and verifier call.  So LR is tried as soon as its closed form, at the
prior's acceptance, beats ``ar`` with what is known, and priced from then on; the first LR cycle is the cheapest of
the chosen family (:func:`probe`: :data:`PROBE`, lr-sync gamma 1, or lr-async gamma 2; no n-gram), whatever depth
the policy chose, since it only has to measure the draft, a batch and the verifier.  Once LR's costs are measured
it is chosen again only when a Thompson draw of the acceptance makes it pay (:class:`lrsim.adaptive.Policy`).

The costs persist across the decoder's requests (the machine does not change), and so does the speed model (one
:class:`~lrsim.adaptive.policy.SpeedModel` shared by the policies of every request: a closed form that is wrong on
this machine stays disbelieved in the next request; ``AutoOptions.learn_speed`` False: none); each request gets a
policy of its own, its step acceptance prior centred on what the earlier requests showed (the first on
:data:`PRIOR_ALPHA1`), worth ``prior_weight`` verdicts.  Every choice is written to the trace as a
:class:`lrsim.trace.ChoiceRecord` (the configuration, the estimates, the costs and the speed factors that chose
it), before the cycle's rows.
"""

from __future__ import annotations

import statistics
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from lrsim.adaptive.policy import AutoOptions, Policy, arms
from lrsim.modes import NGRAM_SUFFIX, TRACE_MODES, gamma_of_k1
from lrsim.theory.costaware import Arm, Costs, speedup
from lrsim.trace import ChoiceRecord, PassRecord

from ..config import DEFAULT_NGRAM, DecodeConfig
from .request import Request

WINDOW = 64  #: passes of each size (and draft passes, verifier calls) the meter keeps: the latest
FIT_MAX_TOKENS = 64  #: passes over more positions (prefills of prompts and long steps) stay out of the target's fit
PRIOR_ALPHA1 = 0.5  #: the first request's prior step acceptance
PRIOR_ALPHA2 = 0.5  #: the prior token acceptance (n-gram)
PRIOR_STEP_TOKENS = 40.0  #: the prior step length
PROBE = Arm("sync", 2, 1)  #: what runs when the policy first chooses LR: one draft step, a batch of two rows


def candidates(cfg: DecodeConfig) -> list[Arm]:
    """What auto chooses among, of ``cfg.auto_modes``: ``ar``; ``sd`` (``k2 = DEFAULT_NGRAM + 1``); lr-sync with
    gamma ``1..auto_max_gamma``, with and without n-gram inside its steps; lr-async with gamma
    ``2..auto_max_gamma`` (``k1 = gamma``; its draft process drafts without n-gram: no ``+sd``)."""
    modes = cfg.auto_modes
    families = tuple(f for f in ("sync", "async") if TRACE_MODES[f] in modes)  # lrsim's family -> lrref's mode

    def chosen(a: Arm) -> bool:
        if a.mode == "ar":
            return ("sd" if a.k2 > 1 else "ar") in modes
        return a.mode == "sync" or a.k2 == 1  # lr-async's draft process drafts without n-gram

    return [a for a in arms(max_gamma=cfg.auto_max_gamma, k2s=(1, DEFAULT_NGRAM + 1), modes=families) if chosen(a)]


def arm_config(cfg: DecodeConfig, arm: Arm) -> DecodeConfig:
    """The fixed-mode configuration that runs ``arm`` (auto's other settings kept)."""
    ngram = arm.k2 - 1
    if arm.mode == "ar":
        return replace(cfg, mode="sd" if ngram else "ar", ngram=ngram, gamma=1)
    mode = TRACE_MODES[arm.mode]  # lr-sync or lr-async
    return replace(cfg, mode=mode + NGRAM_SUFFIX if ngram else mode, gamma=gamma_of_k1(arm.mode, arm.k1), ngram=ngram)


def probe(arm: Arm, candidates: list[Arm]) -> Arm:
    """What runs when the policy chooses the LR ``arm`` before the draft's cost is measured: the cheapest
    configuration of its family, no n-gram (:data:`PROBE` for lr-sync; lr-async gamma 2)."""
    return min((a for a in candidates if a.mode == arm.mode), key=lambda a: (a.k1, a.k2), default=arm)


class Meter:
    """The machine's costs as measured so far (module doc): the decoder hands it every pass record
    (:meth:`record`, beside the trace's) and every verifier call (:meth:`verified`)."""

    def __init__(self):
        self.passes: dict[int, deque[float]] = defaultdict(lambda: deque(maxlen=WINDOW))  # positions -> seconds
        self.target_on = True  #: the target's passes are measured (False: an lr-async stage runs, module doc)
        self.draft: deque[float] = deque(maxlen=WINDOW)  #: the draft's one-position passes (LR's costs known once any)
        self.verify: deque[tuple[int, float]] = deque(maxlen=WINDOW)  # verifier calls: (pairs, seconds)

    def record(self, rec: PassRecord) -> None:
        """One forward pass: the target's (at most :data:`FIT_MAX_TOKENS` positions, while :attr:`target_on`) go to
        its fit, the draft's over one position (in this process or the draft process) to its token cost; the
        verifier's own model passes are in its calls' time."""
        if rec.engine == "target" and rec.tokens <= FIT_MAX_TOKENS and self.target_on:
            self.passes[rec.tokens].append(rec.seconds)
        elif rec.engine == "draft" and rec.tokens == 1:
            self.draft.append(rec.seconds)

    def verified(self, pairs: int, seconds: float) -> None:
        """A verifier call judged ``pairs`` step pairs in ``seconds``."""
        self.verify.append((pairs, seconds))

    def fit(self) -> tuple[float, float] | None:
        """``(t1, s)`` of ``T(n) = t1 + s (n - 1)``: ``t1`` the median pass over one position (else the smallest
        ``n`` seen), ``s`` the least-squares slope through ``(1, t1)`` over the passes of more positions,
        ``s = sum c (n-1) (t - t1) / sum c (n-1)^2`` (``c`` passes at median ``t`` per distinct ``n``), never below
        0; ``s = 0`` before a second ``n`` (optimism); None before any pass.  Each ``n`` keeps its latest
        :data:`WINDOW` passes: a warm-up or a busy spell fades, and the median ignores a few slow passes."""
        pts = sorted((n, len(d), statistics.median(d)) for n, d in self.passes.items() if d)
        if not pts:
            return None
        n0, _, t1 = pts[0]
        t1 = t1 if n0 == 1 else t1 / n0  # no one-position pass yet: a per-position share of the smallest
        sxx = sum(c * (n - 1) ** 2 for n, c, _ in pts[1:])
        s = max(sum(c * (n - 1) * (t - t1) for n, c, t in pts[1:]) / sxx, 0.0) if sxx > 0 else 0.0
        return t1, s

    def costs(self, draft_sd: bool) -> Costs | None:
        """:class:`lrsim.adaptive.Costs` as measured (optimistic where not yet: module doc); None before the
        target's first pass."""
        f = self.fit()
        if f is None:
            return None
        t1, s = f
        draft = statistics.median(self.draft) if self.draft else 0.0
        pairs = sum(n for n, _ in self.verify)
        verify = sum(sec for _, sec in self.verify) / pairs if pairs else 0.0  # per pair, over the latest calls
        return Costs.affine(t1, s, draft, verify, draft_sd)


@dataclass
class _Seen:
    """Counters of a request before a cycle (what :meth:`Tuner.end` takes the difference of)."""

    accepted: int
    verified: int
    drafted: int
    kept: int
    steps: int
    verify_s: float
    tokens: int


def _seen(req: Request) -> _Seen:
    r = req.res
    return _Seen(r.accepted, r.verified, r.ngram_drafted, r.ngram_accepted, len(r.steps), r.verify_s, len(r.ids))


class Tuner:
    """The decoder's adaptive state: the cost meter and the speed model (every request) and a policy per request.

    :param cfg: the auto configuration (its seed, its ``auto_max_gamma``, its other settings for every arm).
    :param options: the policy's options (:class:`lrsim.adaptive.sim.AutoOptions`: prior weight, switch margin,
        memory, ``learn_speed`` and the speed model's; one decision per cycle, ``dwell`` 1).
    :param clock: seconds, what a cycle's speed is timed by; None: the request's clock (the decoder's trace clock,
        ``time.perf_counter``).  A test gives a model's clock (passes reported, not slept).
    """

    def __init__(self, cfg: DecodeConfig, options: AutoOptions | None = None,
                 clock: Callable[[], float] | None = None):
        self.cfg, self.options, self.meter = cfg, options or AutoOptions(), Meter()
        self.arms = candidates(cfg)
        self.configs = {arm: arm_config(cfg, arm) for arm in [Arm("ar"), *self.arms]}  #: each arm's fixed-mode
        # configuration (ar's too: a request's first cycle measures the target with it, whatever the modes)
        self.speed = self.options.speed_model()  #: shared by every request's policy (None: learn_speed off)
        self.clock = clock
        self.accepted, self.verified = 0, 0  # every cycle so far: a new request's prior
        self.policy: Policy | None = None  # the current request's, made at its first choice with measured costs
        self.request, self.prior_a1 = 0, PRIOR_ALPHA1
        self._before: _Seen | None = None  # the request's counters when the running cycle began
        self._running: tuple[Arm, int, float] = (Arm("ar"), 0, 0.0)  # the running cycle's arm, index and start

    def begin(self, req: Request, cycle: int) -> None:
        """Before a cycle (:class:`lrref.decode.cycles.CycleHook`): choose, write the choice record, set
        ``req.cfg`` to the arm's configuration.  A request's first cycle gives it a policy of its own (module
        doc)."""
        if cycle == 0:
            self.request, self.policy = req.index, None
            self.prior_a1 = (self.accepted + 1) / (self.verified + 2) if self.verified else PRIOR_ALPHA1  # Laplace
        arm, record = self.choose()
        record.request, record.cycle = req.index, cycle
        req.rows.choice(record)
        req.cfg = self.configs[arm]
        self.meter.target_on = not req.cfg.draft_process  # lr-async's target runs beside the draft process
        self._before = _seen(req)
        self._running = (arm, cycle, self._now(req))

    def _now(self, req: Request) -> float:
        return self.clock() if self.clock is not None else req.clock()

    def choose(self) -> tuple[Arm, ChoiceRecord]:
        """The next cycle's configuration and its record: ``ar`` before the target's first pass (it measures the
        target), then the request's policy's choice on the costs measured so far."""
        costs = self.meter.costs(self.cfg.draft_ngram)
        if costs is None:
            return Arm("ar"), ChoiceRecord(config="ar")
        if self.policy is None:
            o = self.options
            self.policy = Policy(costs, alpha1=self.prior_a1, alpha2=PRIOR_ALPHA2, prior_weight=o.prior_weight,
                                 step_tokens=PRIOR_STEP_TOKENS, candidates=self.arms, dwell=1,
                                 seed=self.cfg.seed + self.request, switch_margin=o.switch_margin, memory=o.memory,
                                 speed=self.speed)
        pol = self.policy
        pol.costs = costs  # the latest measurements
        arm = pol.choose()
        if arm.mode != "ar" and not self.meter.draft:  # LR before its costs are known: the cheapest probe
            arm = probe(arm, self.arms)
        a1, a2 = pol.step.mean, pol.token.mean
        t1 = costs.target_pass(1)
        return arm, ChoiceRecord(config=arm.label, mode=arm.mode, k1=arm.k1, k2=arm.k2, alpha1=round(a1, 4),
                                 alpha2=round(a2, 4), step_tokens=round(pol.step_tokens, 2),
                                 speedup=round(speedup(arm, a1, a2, pol.step_tokens, costs), 4),
                                 best=pol.best().label, target_pass_s=round(t1, 6),
                                 target_position_s=round(costs.target_pass(2) - t1, 6),
                                 draft_token_s=round(costs.draft_token_s, 6),
                                 verify_pair_s=round(costs.verify_pair_s, 6), speed_factors=self.speed_factors())

    def speed_factors(self) -> dict[str, float] | None:
        """What the speed model multiplies each mode family's speedups by now (rounded), None without one."""
        if self.speed is None:
            return None
        return {mode: round(self.speed.family_factor(mode), 4) for mode in dict.fromkeys(a.mode for a in self.arms)}

    def end(self, req: Request) -> None:
        """After a cycle: what it showed since :meth:`begin`, to the request's policy (acceptance, step lengths and,
        but for a request's first cycle, speed: module doc) and the meter; ``req.cfg`` back to auto's."""
        arm, cycle, t0 = self._running
        seconds = self._now(req) - t0
        before, now, r = self._before, _seen(req), req.res
        accepted, verified = now.accepted - before.accepted, now.verified - before.verified
        if verified:  # token-identical pairs skip the verifier: the mean over all pairs is what a pair costs
            self.meter.verified(verified, now.verify_s - before.verify_s)
        self.accepted += accepted
        self.verified += verified
        if self.policy is not None:
            self.policy.observe(accepted=accepted, rejected=verified - accepted,
                                tokens_accepted=now.kept - before.kept, tokens_drafted=now.drafted - before.drafted,
                                step_tokens=[len(s.ids) for s in r.steps[before.steps:]])
            if cycle > 0:  # the first cycle prefilled the prompt
                self.policy.costs = self.meter.costs(self.cfg.draft_ngram) or self.policy.costs  # with this cycle's
                self.policy.observe_time(arm, now.tokens - before.tokens, max(seconds, 0.0), accepted, verified)
        req.cfg = self.cfg
        self.meter.target_on = True
