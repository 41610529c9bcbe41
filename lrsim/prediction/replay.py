"""Replay recorded workloads in the simulator: predict the speedup of other configurations from traces.

Replay is composition (:mod:`lrsim.prediction.compose`) with both halves from the traces:

- **behaviour** (:func:`lrsim.prediction.compose.behaviour_from_traces`): step acceptance
  ``alpha1``, token acceptance ``alpha2``, empirical draft and target step
  lengths, request lengths, the verifier's calls and recorded latency;
- **timing**: the latency profile the traces calibrate
  (:func:`lrsim.cost.fromtraces.profile_from_traces`: per hardware setup, the
  target's effective cost per pass ``T(b, q)`` and the draft's cost per
  pass), wrapped in a :class:`~lrsim.cost.hardware.HardwareSpec` whose
  ``setups`` price each mode on the setup its traces ran on.

``lrsim calibrate --profile-out`` writes the same profile; ``lrsim replay
--hardware FILE`` on it gives the same answer as replay on the traces.
``speedup = ar seconds per token / predicted seconds per token``, ``ar`` on
its own setup.  Each half is calibrated once per prediction or plan.  Its 95%
interval is a bootstrap (:func:`lrsim.prediction.compose.predict` with ``retime``):
resample (request, cycle) blocks of every trace with replacement, recalibrate
behaviour and timing, simulate with a new seed; the percentile interval
covers both calibration and simulation noise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..cost.hardware import HardwareSpec
from ..errors import InputError
from ..trace import Setting, Trace, read_trace, recorded_setting
from . import compose
from .compose import resample_blocks, trace_hardware
from .outcome import TINY_C2, Prediction, TracePlan

__all__ = ["TINY_C2", "closed_form_plan", "plan_from_traces", "predict", "predict_files", "resample_blocks",
           "trace_hardware"]


def _calibrated(traces: Sequence[Trace]) -> tuple[compose.Behaviour, HardwareSpec]:
    """Both halves from the traces, each calibrated once: the behaviour, and the profile it times
    (:func:`lrsim.prediction.compose.trace_hardware`, re-exported here)."""
    b = compose.behaviour_from_traces(traces)
    return b, trace_hardware(traces, b.alpha2)


def _borrowed(traces: Sequence[Trace], mode: str) -> list[str]:
    if any(recorded_setting(t.header).mode == mode for t in traces):
        return []
    return [f"no {mode} trace: timing borrowed from another mode's setup (see the entry above)"]


def predict(traces: Sequence[Trace], setting: Setting, steps: int = 20_000, seed: int = 0,
            bootstrap: int = 20, correlation: float = 0.0, progress: bool = False) -> Prediction:
    """Predicted speedup of ``setting`` on the workload the traces recorded.

    Only the mode, ``k1``, ``k2`` and width of ``setting`` are asked for: the
    verifier calls and the timing's hardware setup come from the traces.
    """
    traces = list(traces)
    b, hw = _calibrated(traces)
    p = compose.predict(b, hw, setting, steps, seed, bootstrap, correlation, progress, traces=traces, retime=True)
    p.notes = _borrowed(traces, setting.mode) + p.notes
    calls = b.verify_calls if setting.mode == "sync" else "one"
    p.setting = replace(p.setting, verify_calls=calls)
    return p


def plan_from_traces(traces: Sequence[Trace], budget: int, k2_max: int = 8, steps: int = 4000, seed: int = 0,
                     bootstrap: int = 20, progress: bool = False, workers: int | None = 1) -> TracePlan:
    """Rank every configuration under ``budget`` by simulated speedup on the recorded workload
    (:func:`lrsim.prediction.compose.plan` on the traces' own behaviour and profile; ``workers`` as there)."""
    traces = list(traces)
    b, hw = _calibrated(traces)
    if b.alpha1 is None or not 0 <= b.alpha1 <= 1:
        raise InputError("these traces hold no verified drafts: cannot plan LR")
    return compose.plan(b, hw, budget, k2_max, steps, seed, bootstrap, progress=progress, traces=traces, retime=True,
                        workers=workers)


def closed_form_plan(traces: Sequence[Trace], budget: int, steps: int = 4000, seed: int = 0) -> tuple[dict, dict]:
    """The paper's plan (:func:`lrsim.planner.plan`) on the calibrated alpha1, c1, alpha2, and its choice priced.

    Returns ``({mode: {k1, k2, speedup}} for sync and async, {mode, k1, k2,
    simulated_speedup, closed_form_speedup})``.
    """
    b, hw = _calibrated(list(traces))
    if not 0 <= b.alpha1 <= 1:
        raise InputError("these traces hold no verified drafts: cannot plan LR")
    return compose.closed_form_plan_of(b, hw, budget, steps, seed)


def predict_files(paths: Sequence[str], setting: Setting | None = None, **kw) -> tuple[Prediction, list[str]]:
    """Read traces and predict ``setting`` (default: the first trace's own configuration)."""
    traces = [read_trace(p) for p in paths]
    warnings = [w for t in traces for w in t.warnings]
    return predict(traces, setting or recorded_setting(traces[0].header), **kw), warnings
