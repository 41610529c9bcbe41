"""``lrsim serve --modes auto``: each request's configuration chosen when it arrives, from the load it meets
(issue 34 item 3).

**Candidates** (:func:`candidates`): ``ar`` (``sd`` when ``k2 > 1``) and ``lr-async`` with depth ``k1 = 2 .. k1``
(``+sd`` when ``k2 > 1``; depth 1 is ar with a draft beside it).  All share the run's ``k2``, so one target engine prices every row alike (the
token drafter's share ``1 + c2 (k2 - 1)`` is the same for all, as in the fixed ``sd`` and ``lr-async+sd`` runs).
lr-sync is not a candidate: under load its cycles hold ``k1`` rows for a whole verify round, and pipelined LR
dominates it in every serving run we have (and the paper's).

**Objective.** :func:`lrsim.adaptive.speedup`, the closed forms of the single-request policy, with the target's
pass cost priced *at the load the request meets*.  When it arrives the target runs ``B`` rows computing ``P``
positions per iteration (requests waiting for admission count as rows of one position each: they join soon;
every request in the system counts as at least one).
A configuration that puts ``n`` positions into each iteration instead of ar's one makes every iteration cost
``T(P + n)`` instead of ``T(P + 1)``: its own pass takes that long, and each of the ``B`` other rows waits
``T(P + n) - T(P + 1)`` longer per iteration.  Charged with the whole delay it causes,

    T_load(n) = T(P + n) + B (T(P + n) - T(P + 1))

so ``beta(n) = T_load(n) / T_load(1)``.  With ``B = 0`` this is the single-request ``T(n) / T(1)``.  With a
linear cost ``T(m) = a + b m`` and ``B ~ P >> a / b`` (compute-bound), ``beta(n) -> n``: speculation cannot pay
and ar is chosen; with ``b -> 0`` (memory-bound), ``beta -> 1`` and LR keeps paying at any batch.  The draft
token is priced the same way on the draft engine (``D_load = Td(Pd + 1) + Bd (Td(Pd + 1) - Td(Pd))``) and the
verifier call at its mean latency.  Rows past vLLM's ``max_num_seqs`` wait for a later iteration: a
configuration whose rows do not fit beside the ``B`` others pays ``ceil((B + rows) / max_num_seqs)`` iterations
per pass where ar pays ``ceil((B + 1) / max_num_seqs)``.

**Estimates.** Step acceptance is learnt across requests (:class:`lrsim.adaptive.Policy`: a Beta posterior from a
neutral prior, mean 0.5 worth 4 verdicts, plus every verdict so far, of finished and of running LR requests, as an
engine's counters see them; Thompson sampling picks, so an LR that stops paying is still probed as often as the
posterior allows).
Token acceptance is the workload's ``alpha2`` (an engine's n-gram counters see it at once) and the step length
the workload's mean.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..adaptive.policy import Beta, Policy
from ..sim import SimConfig
from ..theory.costaware import Arm, Costs
from .pricing import Pricer
from .request import World

PRIOR_ALPHA1, PRIOR_WEIGHT = 0.5, 4.0  # a neutral prior: the policy knows nothing of the workload's a1


def candidates(sim: SimConfig) -> list[Arm]:
    """ar (token SD inside when ``k2 > 1``) and lr-async at every depth 2..``sim.k1``, all with ``sim.k2``."""
    return [Arm("ar", 1, sim.k2)] + [Arm("async", k, sim.k2) for k in range(2, sim.k1 + 1)]


def config_of(sim: SimConfig, arm: Arm) -> SimConfig:
    """The per-request :class:`SimConfig` of ``arm`` (``sim``: the run's lr-async settings)."""
    return replace(sim, mode=arm.mode, k1=arm.k1, k2=arm.k2)


def load_costs(target: Pricer, draft: Pricer | None, load: tuple[int, float, int, float], context: float,
               verify_s: float, draft_sd: bool, max_rows: float = math.inf, k2: int = 1) -> Costs:
    """:class:`Costs` at the load ``(B, P, Bd, Pd)``: the target's and the draft engine's rows and positions
    per iteration (module doc: each pass charged with the delay it causes the other rows; rows past ``max_rows``,
    vLLM's ``max_num_seqs``, wait for a later iteration; ``n`` positions are ``ceil(n / k2)`` rows)."""
    b, p, bd, pd = load
    t1 = target(b + 1, p + 1, context)  # T(P + 1): ar's iteration

    def target_pass(n: int) -> float:
        tn = target(b + 1, p + n, context)
        rows = math.ceil(n / k2)
        rounds = math.ceil((b + rows) / max_rows) / math.ceil((b + 1) / max_rows) if max_rows < math.inf else 1
        return rounds * (tn + b * (tn - t1))  # T_load(n) = T(P + n) + B (T(P + n) - T(P + 1)), per round

    if draft is None:
        d = 0.0
    else:
        d1 = draft(bd + 1, pd + 1, context)
        d0 = draft(bd, pd, context) if bd > 0 else d1  # an idle drafter: no other row to delay
        d = d1 + bd * (d1 - d0)  # D_load = Td(Pd + 1) + Bd (Td(Pd + 1) - Td(Pd))
    return Costs(target_pass, d, verify_s, draft_sd)


class Chooser:
    """One run's per-arrival choice (module doc).

    :param sim: the run's lr-async per-request settings (``k1`` the deepest candidate, ``k2`` every candidate's).
    :param world: the engines and the admission queue the choice reads.
    :param target, draft: the engines' pricers.
    :param seed: the Thompson draws' seed.
    """

    def __init__(self, sim: SimConfig, world: World, target: Pricer, draft: Pricer | None, seed: int):
        self.sim, self.world, self.target, self.draft = sim, world, target, draft
        self.max_rows = world.target.max_rows  # vLLM's max_num_seqs
        self.context = float(sim.prompt_tokens)
        t1 = target(1, 1.0, self.context)
        if sim.verifier_latency is not None:
            self.verify_s = float(sim.verifier_latency.mean)
        else:  # verifier_cost is in units of T, the target step at batch 1
            self.verify_s = sim.verifier_cost * sim.step_tokens.mean * t1
        self.policy = Policy(load_costs(target, draft, (0, 0.0, 0, 0.0), self.context, self.verify_s,
                                        sim.draft_sd),
                             alpha1=PRIOR_ALPHA1, alpha2=sim.alpha2, prior_weight=PRIOR_WEIGHT,
                             step_tokens=float(sim.step_tokens.mean), candidates=candidates(sim), seed=seed)
        a2 = min(max(sim.alpha2, 1e-3), 1 - 1e-3)
        self.policy.token.a, self.policy.token.b = a2 * 1e6, (1 - a2) * 1e6  # a2 known: draws stay at it
        self.prior = Beta.prior(PRIOR_ALPHA1, PRIOR_WEIGHT)
        self.live: set = set()  #: requests chosen and not finished (arrived at this instant, queued, running)
        self.verdicts = [0, 0]  #: accepted and decisive verdicts of the finished requests

    def load(self) -> tuple[int, float, int, float]:
        """``(B, P, Bd, Pd)`` now: decode rows and their positions, prefilling, joining and queued requests as rows
        of one position each; at least one row of one position per request in the system (requests arriving at
        the same instant have not reached the queue yet)."""
        w = self.world
        eng = w.target
        waiting = len(eng.prefill) + len(eng.pending) + len(w.admission.queue)
        b, p = len(eng.decode) + waiting, sum(r.q for r in eng.decode) + waiting
        b, p = max(b, len(self.live)), max(p, len(self.live))
        d = w.drafter
        bd = len(d.decode) + len(d.prefill) + len(d.pending) if d is not None else 0
        pd = sum(r.q for r in d.decode) + len(d.prefill) + len(d.pending) if d is not None else 0.0
        return b, float(p), bd, float(pd)

    def choose(self) -> SimConfig:
        """The configuration of a request arriving now: the step-acceptance posterior from every verdict so far
        (finished and running requests), the costs at the load now, a Thompson draw."""
        acc = self.verdicts[0] + sum(r.accepted for r in self.live)
        dec = self.verdicts[1] + sum(r.decisive for r in self.live)
        self.policy.step = Beta(self.prior.a + acc, self.prior.b + dec - acc)
        self.policy.costs = load_costs(self.target, self.draft, self.load(), self.context, self.verify_s,
                                       self.sim.draft_sd, self.max_rows, self.sim.k2)
        return config_of(self.sim, self.policy.choose())

    def track(self, request) -> None:
        """``request`` (a :class:`lrsim.serve.request.Served`) now runs the configuration just chosen."""
        self.live.add(request)

    def done(self, request) -> None:
        """``request`` finished: its verdicts join the finished ones'."""
        self.live.discard(request)
        self.verdicts[0] += request.accepted
        self.verdicts[1] += request.decisive


__all__ = ["Chooser", "candidates", "config_of", "load_costs"]
