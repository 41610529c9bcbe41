"""What a run measured: the cycle log both engines return, and the one function that turns it into a result."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from ..stats import batch_means
from ..theory import forms as theory
from .config import SimConfig, target_sequences
from .workload import accept_probability


@dataclass
class CycleLog:
    """A run as both engines record it: per-cycle times, totals, and the target server's bookkeeping."""

    end: np.ndarray  #: time each cycle ended (sync cycle, async stage, ar step)
    base: np.ndarray  #: time target-only decoding takes for each cycle's output positions
    steps: int  #: output steps
    tokens: float  #: output tokens
    accepted: int  #: accepted drafts
    decisive: int  #: decisive verdicts (accepts and first rejections)
    seq_time: float  #: sequence-seconds on the target server
    seq_iters: float  #: sequence-iterations the target ran
    wasted: float  #: sequence-iterations on cancelled or rejected-branch steps
    peak: int  #: most target sequences at once
    engine: str  #: 'des' or 'renewal'
    events: int  #: events processed (SimPy's, or the async loop's; 0 for the renewal engine)
    wall: float  #: wall seconds of the run


@dataclass
class SimResult:
    """What one run measured (all times in the latency models' unit)."""

    mode: str
    speedup: float  #: baseline time / LR time for the same output steps
    speedup_ci95: tuple[float | None, float | None]  #: batch-means 95% CI (None if too few cycles)
    speedup_se: float | None  #: batch-means standard error of the speedup (None if too few cycles)
    theory_speedup: float | None  #: closed form at (P_W, c1_eff): f_sync/f_async(k1) * g(k2), or g(k2) for ar
    acceptance_rate: float | None  #: accepted / decisive verdicts (accepts + first rejections)
    accepted: int  #: accepted drafts
    decisive: int  #: decisive verdicts (accepts and first rejections)
    accept_probability: float  #: P_W of the acceptance model
    accepted_per_cycle: float  #: accepted drafts per cycle (stage in async)
    steps_per_cycle: float  #: output steps per cycle
    steps: int  #: output steps simulated
    cycles: int
    output_tokens: int
    sim_time: float  #: simulated time to the last committed step
    baseline_time: float  #: target-only decoding of the same steps
    target_utilisation: float  #: mean positions in use / capacity (M, or k1 k2)
    wasted_target_work: float  #: share of target sequence-iterations on cancelled or rejected-branch steps
    peak_positions: int  #: most target positions in use at once
    target_iterations: float  #: sequence-iterations the target ran (ar: its passes)
    c1_eff: float  #: draft step / target step time at batch 1 (mean lengths, draft batch W)
    engine: str  #: 'des' (events: SimPy's, or async's dedicated loop, same results) or 'renewal' (sync and ar)
    events: int  #: events processed (SimPy's, or the async loop's; 0 for the renewal engine)
    wall_seconds: float
    events_per_second: float
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["speedup_ci95"] = list(self.speedup_ci95)
        return d

    def row(self) -> dict:
        """Flat scalars for tables (sweeps): the CI as two columns, no config."""
        d = {k: v for k, v in self.to_dict().items() if k not in ("config", "speedup_ci95")}
        d["ci_low"], d["ci_high"] = self.speedup_ci95
        return d


def summarize(cfg: SimConfig, log: CycleLog, c1_eff: float) -> SimResult:
    """Every statistic of a run, from its cycle log (the same for both engines)."""
    sim_time = float(log.end[-1])
    est = batch_means(log.end, log.base, cfg.batches)
    cycles = len(log.end)
    capacity = cfg.budget if cfg.budget is not None else target_sequences(cfg) * cfg.k2
    pw = accept_probability(cfg.alpha1, cfg.width, cfg.correlation)
    return SimResult(
        mode=cfg.mode,
        speedup=est.ratio,
        speedup_ci95=(est.lo, est.hi),
        speedup_se=est.se,
        theory_speedup=theory_speedup(cfg, pw, c1_eff),
        acceptance_rate=log.accepted / log.decisive if log.decisive else None,
        accepted=int(log.accepted),
        decisive=int(log.decisive),
        accept_probability=pw,
        accepted_per_cycle=log.accepted / cycles,
        steps_per_cycle=log.steps / cycles,
        steps=log.steps,
        cycles=cycles,
        output_tokens=int(log.tokens),
        sim_time=sim_time,
        baseline_time=float(log.base.sum()),
        target_utilisation=log.seq_time * cfg.k2 / (capacity * sim_time) if sim_time > 0 else 0.0,  # mean use / M
        wasted_target_work=log.wasted / log.seq_iters if log.seq_iters else 0.0,
        peak_positions=log.peak * cfg.k2,
        target_iterations=float(log.seq_iters),
        c1_eff=c1_eff,
        engine=log.engine,
        events=int(log.events),
        wall_seconds=log.wall,
        events_per_second=log.events / log.wall if log.wall > 0 else 0.0,
        config=cfg.to_dict(),
    )


def theory_speedup(cfg: SimConfig, pw: float, c1_eff: float) -> float | None:
    """The closed form at the run's parameters: ``f(P_W, c1_eff, k1) g(alpha2, c2, k2)`` (``g`` alone in ar)."""
    g = 1.0
    if cfg.k2 > 1:
        if not 0 < cfg.alpha2 < 1:
            return None
        g = float(theory.g(cfg.alpha2, cfg.c2, cfg.k2))
    if cfg.mode == "ar":
        return g
    if not 0 < pw < 1:
        return None
    return float(theory.f_step(pw, c1_eff, cfg.k1, cfg.mode)) * g
