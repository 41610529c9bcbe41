"""What one iteration of a batched engine costs: a mixed batch priced by the one pass cost (:mod:`lrsim.cost`).

An iteration runs ``rows`` sequences; together they compute ``positions``
new positions (a decode row 1, a token-SD row ``k2``, a prefill row its
chunk) over KV caches of ``context`` tokens on average.  Profiles are
measured with uniform rows (``b`` rows of ``q`` positions over ``L`` cached
tokens each), so a mixed batch is priced as the uniform batch with the same
rows, positions and total context:

    T(mixed) = T(L = mean context, b = rows, q = positions / rows)

by the mode's :class:`~lrsim.cost.passcost.PassCost` (its rules beyond the
grid, e.g. rows past the largest measured batch folded into positions, are
the cost's), times the token drafter's share ``1 + c2 (k2 - 1)`` as
:mod:`lrsim.sim` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cost.passcost import PassCost, constant
from ..errors import InputError
from ..sim import SimConfig


@dataclass(frozen=True)
class Pricer:
    """Seconds of one iteration of ``rows`` rows computing ``positions`` positions over ``context`` cached tokens."""

    cost: PassCost
    factor: float = 1.0  #: 1 + c2 (k2 - 1): the token drafter's calls inside each pass

    @property
    def context_free(self) -> bool:
        return self.cost.context_free

    def __call__(self, rows: int, positions: float, context: float) -> float:
        return self.cost.seconds(context, rows, positions / rows) * self.factor  # T(L, b, q) (1 + c2 (k2 - 1))


def check_pricer(price: Pricer, who: str, rows: int, positions: tuple[float, ...], context: float) -> None:
    """Price the corners a run can reach (1 and ``rows`` rows, each positions count) now, not mid-run."""
    for b in sorted({1, rows}):
        for q in positions:
            try:
                price(b, b * q, context)
            except InputError as e:
                raise InputError(f"{who}: {e}") from None


def token_factor(sim: SimConfig, drafter: bool = False) -> float:
    """``1 + c2 (k2 - 1)``: a pass with token SD also pays ``k2 - 1`` token-drafter calls (the drafter: with
    ``draft_sd``); ``c2`` is in units of a pass, as in :mod:`lrsim.sim`."""
    on = sim.k2 > 1 and (sim.draft_sd or not drafter)
    return 1 + sim.c2 * (sim.k2 - 1) if on else 1.0


def pricers(sim: SimConfig) -> tuple[Pricer, Pricer]:
    """(target, draft) pricers of a mode's per-request settings: their pass costs, or the simulator's defaults
    (a constant target pass with ``T = 1`` per mean step; a draft of ``c1 T`` per mean draft step)."""
    target = sim.target_latency or constant(1.0 / sim.step_tokens.mean)
    tau1 = target.seconds(sim.prompt_tokens, 1, 1)
    dmean = (sim.draft_tokens or sim.step_tokens).mean
    draft = sim.draft_latency or constant(sim.c1 * tau1 * sim.step_tokens.mean / dmean)  # c1 T per draft step
    return Pricer(target, token_factor(sim)), Pricer(draft, token_factor(sim, drafter=True))
