"""What one iteration of a batched engine costs: a mixed batch priced from a latency model or a profile.

An iteration runs ``rows`` sequences; together they compute ``positions``
new positions (a decode row 1, a token-SD row ``k2``, a prefill row its
chunk) over KV caches of ``context`` tokens on average.  Profiles were
measured with uniform rows (``b`` rows of ``q`` positions over ``L`` cached
tokens each), so a mixed batch is priced as the uniform batch with the same
rows, positions and total context:

    T(mixed) = T(L = mean context, b = rows, q = positions / rows)

Beyond the profile's largest batch ``b_max`` the extra rows are folded into
positions, ``T(L, b_max, q b / b_max)``: the same positions per pass (the
matmul work), which is what a GPU pays once it is compute-bound; per-row KV
reads beyond ``b_max`` rows are then under-counted (stated in the README).
The profile's own extrapolation policy applies to what remains outside its
grid (default ``'linear'``), except that a context below the measured range is
priced at the smallest measured context (a pass over fewer cached tokens costs
a little less: this errs on the dear side); a context-free profile (one
context point, e.g. ``h100-ctx0-kernel``) prices every pass at that point.

Latency models of :mod:`lrsim.latency` (``T(batch, tokens)``, no context)
price ``T(rows, positions / rows)``, times the token drafter's share
``1 + c2 (k2 - 1)`` as :mod:`lrsim.sim` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from ..errors import InputError
from ..hardware import load_profile
from ..latency import ConstantLatency, Latency
from ..profile import ArchProfile
from ..sim import SimConfig
from .config import ServeConfig

Price = Callable[[int, float, float], float]


class Pricer(Protocol):
    """Seconds of one iteration of ``rows`` rows computing ``positions`` positions over ``context`` cached tokens."""

    context_free: bool

    def __call__(self, rows: int, positions: float, context: float) -> float: ...


@dataclass(frozen=True)
class ModelPricer:
    """A context-free latency model ``T(batch, tokens per row)`` of :mod:`lrsim.latency`, in seconds."""

    latency: Latency
    factor: float = 1.0  #: 1 + c2 (k2 - 1): the token drafter's calls inside each pass
    context_free: bool = True

    def __call__(self, rows: int, positions: float, context: float) -> float:
        return self.latency(rows, positions / rows) * self.factor  # T(b, q) (1 + c2 (k2 - 1))


@dataclass(frozen=True)
class ProfilePricer:
    """One architecture of a latency profile (:mod:`lrsim.profile`), a mixed batch priced as a uniform one."""

    profile: str  #: an embedded profile's name or a file
    arch: str
    extrapolate: str = "linear"  #: the profile's policy outside its grid
    factor: float = 1.0
    table: ArchProfile = field(init=False, repr=False, compare=False)
    context_free: bool = field(init=False)
    where: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        prof = load_profile(self.profile)
        object.__setattr__(self, "table", prof.arch(self.arch))
        object.__setattr__(self, "context_free", len(self.table.context) == 1)
        object.__setattr__(self, "where", prof.where)

    def __call__(self, rows: int, positions: float, context: float) -> float:
        a = self.table
        b, q = rows, positions / rows
        if b > a.batch[-1]:
            q, b = q * b / a.batch[-1], a.batch[-1]  # fold the rows beyond the grid into positions: b q is kept
        L = a.context[0] if self.context_free else max(context, a.context[0])  # below the grid: its first context
        try:
            return a.time_ms(L, b, q, self.extrapolate) * self.factor / 1000.0  # ms -> s
        except InputError as e:
            raise InputError(f"{self.where}: {e} (a batch of {rows} rows, {positions:g} positions, "
                             f"mean context {context:.0f})") from None


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
    ``draft_sd``)."""
    on = sim.k2 > 1 and (sim.draft_sd or not drafter)
    return 1 + sim.c2 * (sim.k2 - 1) if on else 1.0


def pricers(cfg: ServeConfig, sim: SimConfig, context: float) -> tuple[Pricer, Pricer, SimConfig]:
    """(target, draft) pricers of a run, and ``sim`` with the target's batch-1 time as its latency.

    With a profile, ``sim``'s target latency becomes the profile's decode pass
    at batch 1 and ``context`` tokens, so that ``verifier_cost`` and the default
    draft cost ``c1 T`` keep their meaning (units of the target's step ``T``).
    Without ``draft_arch`` the drafter costs what :mod:`lrsim.sim` gives it.
    """
    tf, df = token_factor(sim), token_factor(sim, drafter=True)
    if cfg.hardware is not None:
        target: Pricer = ProfilePricer(cfg.hardware, cfg.target_arch, cfg.extrapolate, tf)
        sim = replace(sim, target_latency=ConstantLatency(target(1, 1, context) / tf))
    else:
        target = ModelPricer(sim.target_latency or ConstantLatency(1.0 / sim.step_tokens.mean), tf)
    if cfg.hardware is not None and cfg.draft_arch is not None:
        return target, ProfilePricer(cfg.hardware, cfg.draft_arch, cfg.extrapolate, df), sim
    tau1 = (sim.target_latency or ConstantLatency(1.0 / sim.step_tokens.mean))(1, 1)
    dmean = (sim.draft_tokens or sim.step_tokens).mean
    dlat = sim.draft_latency or ConstantLatency(sim.c1 * tau1 * sim.step_tokens.mean / dmean)  # c1 T per draft step
    return target, ModelPricer(dlat, df), sim
