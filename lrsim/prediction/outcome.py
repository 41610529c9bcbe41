"""What a prediction returns: :class:`Prediction` (one configuration) and :class:`TracePlan` (a ranked plan).

Shared by replay from traces (:mod:`lrsim.prediction.replay`) and composition with a
latency profile (:mod:`lrsim.prediction.compose`), which are one code path: behaviour
plus a :class:`~lrsim.cost.hardware.HardwareSpec`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from ..errors import InputError
from ..trace import Setting

TINY_C2 = 1e-9  # n-gram drafting cost: already inside the measured cost of a pass


@dataclass
class Prediction:
    """Predicted speedup of one setting over target-only decoding."""

    setting: Setting  #: as simulated: verifier calls and hardware share are those the traces recorded
    speedup: float
    speedup_ci95: tuple[float, float] | None
    tokens_per_second: float  #: predicted, in the traces' time unit
    baseline_tokens_per_second: float
    closed_form: float | None  #: the paper's h(k1, k2) with the calibrated alpha1, c1, alpha2
    alpha1: float
    alpha2: float | None
    c1: float | None
    replicates: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def format_prediction(p: Prediction) -> str:
    s = p.setting
    ci = f" (95% CI {p.speedup_ci95[0]:.3f}-{p.speedup_ci95[1]:.3f}, {p.replicates} bootstrap replicates)" \
        if p.speedup_ci95 else ""
    lines = [
        f"Replay: mode {s.mode}, k1 = {s.k1}, k2 = {s.k2}, W = {s.width}",
        f"  predicted speedup over target-only decoding: {p.speedup:.3f}x{ci}",
        f"  predicted {p.tokens_per_second:.3g} tokens per time unit vs baseline {p.baseline_tokens_per_second:.3g}",
        f"  calibrated alpha1 = {p.alpha1:.3f}" + (f", alpha2 = {p.alpha2:.3f}" if p.alpha2 is not None else "")
        + (f", c1 = {p.c1:.3f}" if p.c1 else ""),
    ]
    if p.closed_form is not None:
        lines.append(f"  paper closed form h(k1, k2) with these numbers: {p.closed_form:.3f}x "
                     "(free verifier, constant step cost and latency)")
    lines += [f"  note: {n}" for n in p.notes]
    return "\n".join(lines)


@dataclass
class TracePlan:
    """Best recorded-workload configuration under a budget, and how the closed-form plan compares."""

    budget: int
    best: Prediction
    ranked: list[dict]  #: every candidate: mode, k1, k2, width, positions, speedup
    closed_form_plan: dict  #: lrsim.planner.plan with the calibrated alpha1, c1, alpha2 (per mode)
    closed_form_choice_simulated: dict  #: the closed-form optimum's (mode, k1, k2) priced by the simulator
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        b = self.best
        d.update(mode=b.setting.mode, k1=b.setting.k1, k2=b.setting.k2, width=b.setting.width,
                 speedup=b.speedup, speedup_ci95=b.speedup_ci95)
        return d


def requested_setting(recorded: Setting | None, mode: str | None = None, k1: int | None = None,
                      k2: int | None = None, width: int | None = None) -> Setting:
    """The configuration to predict (``lrsim replay`` and :func:`lrsim.predict`): each value given, else the
    recorded run's (``recorded``: the first trace's setting), else ``async`` with ``k1 = 4``, ``k2 = 1``,
    ``width = 1``; ``k1`` is the recorded one only for the recorded mode (another mode: 1 for ``ar``, else 4).

    :raises InputError: ``ar`` with ``k1 != 1``.
    """
    mode = mode or (recorded.mode if recorded else "async")
    same = recorded is not None and recorded.mode == mode
    s = Setting(mode, k1 or (recorded.k1 if same else (1 if mode == "ar" else 4)),
                k2 or (recorded.k2 if recorded else 1), width or (recorded.width if recorded else 1))
    if s.mode == "ar" and s.k1 != 1:
        raise InputError("mode ar has k1 = 1")
    return s


def candidates(budget: int, k2_options: Sequence[int], widths: Sequence[int] = (1,)) -> list[Setting]:
    """Every (mode, k1, k2, W) worth simulating: sync needs ``k1 k2 <= M``; async ``k2 <= M`` and
    ``k1 <= M`` (its positions in use depend on the drafter's pace, so the simulator's peak decides)."""
    out = [Setting("ar", 1, k2) for k2 in k2_options if k2 <= budget]
    for k1 in range(2, budget + 1):
        out += [Setting("sync", k1, k2, w) for k2 in k2_options for w in widths if k1 * k2 <= budget]
        out += [Setting("async", k1, k2, w) for k2 in k2_options for w in widths if k2 <= budget]
    return out


def format_trace_plan(tp: TracePlan, top: int = 10, source: str = "traces") -> str:
    lines = [f"Plan from {source}, budget M = {tp.budget} target positions", format_prediction(tp.best), "",
             "  rank  mode   k1  k2  W  positions  simulated speedup"]
    lines += [f"  {i:4d}  {r['mode']:5s} {r['k1']:3d} {r['k2']:3d} {r['width']:2d} {r['positions']:10d}  {r['speedup']:.3f}x"
              for i, r in enumerate(tp.ranked[:top], 1)]
    c = tp.closed_form_choice_simulated
    gives = (f"the simulator gives it {c['simulated_speedup']:.3f}x" if c["simulated_speedup"] is not None
             else "the profile cannot price it (a pass it did not measure)")
    lines += ["", f"  closed-form plan (paper assumptions): {c['mode']} k1 = {c['k1']}, k2 = {c['k2']} promises "
              f"{c['closed_form_speedup']:.3f}x; {gives} (best found: {tp.best.speedup:.3f}x)"]
    lines += [f"  note: {n}" for n in tp.notes]
    return "\n".join(lines)
