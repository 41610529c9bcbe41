"""A serving workload from lr-traces: behaviour, timing and request lengths calibrated from recorded runs.

Any decoder that writes the lr-trace format (``docs/trace-schema.md``: lrref,
or another engine) can feed this, as :mod:`lrsim.prediction.replay` does, through the
same two halves:

- behaviour (:func:`lrsim.prediction.compose.behaviour_from_traces`): step acceptance
  ``alpha1``, token acceptance ``alpha2``, empirical draft and target step
  lengths, the verifier's latency sample, how the sync verifier was called;
- timing (:func:`lrsim.prediction.replay.trace_hardware`): the profile the traces
  calibrate, each mode priced on the setup its own traces ran on (sync modes
  on theirs, lr-async on its own), as replay prices them;
- request lengths: the recorded (prompt, output) pairs, resampled jointly.
"""

from __future__ import annotations

from typing import Sequence

from ..cost.hardware import HardwareSpec
from ..errors import InputError
from ..prediction.compose import sim_config
from ..sim import SimConfig
from ..trace import Setting, Trace


def decode_from_traces(traces: Sequence[Trace], k2: int = 1) -> tuple[SimConfig, HardwareSpec]:
    """Per-request decoding settings calibrated from ``traces`` and the traces' hardware spec (every mode's
    pass costs; the settings carry the async setup's, which :func:`lrsim.serve.config.mode_config` replaces
    per mode)."""
    from dataclasses import replace

    from ..prediction.compose import behaviour_from_traces
    from ..prediction.replay import trace_hardware

    b = behaviour_from_traces(traces)
    hw = trace_hardware(traces, b.alpha2)
    if b.alpha1 != b.alpha1:  # nan: no verified drafts; ar and sd still serve
        b = replace(b, alpha1=0.5)
    sim = sim_config(b, hw, Setting("async", 2, k2), steps=1, seed=0)
    return replace(sim, request_tokens=None), hw


def length_pairs(traces: Sequence[Trace]) -> tuple[tuple[int, int], ...]:
    """(prompt, output) tokens of every recorded request that has both."""
    pairs = tuple((int(r.prompt_tokens), int(r.output_tokens)) for t in traces for r in t.requests
                  if r.prompt_tokens and r.output_tokens)
    if not pairs:
        raise InputError("these traces record no request with both prompt and output tokens")
    return pairs


def placement(traces: Sequence[Trace]) -> dict[str, str]:
    """Per simulator mode, the roles the traces' runs had on the target's device (their setting's ``colocated``;
    a mode recorded with several placements: the one most of its traces had)."""
    from collections import Counter

    from ..trace import recorded_setting

    seen: dict[str, Counter] = {}
    for t in traces:
        s = recorded_setting(t.header)
        seen.setdefault(s.mode, Counter())[s.colocated] += 1
    return {mode: c.most_common(1)[0][0] for mode, c in seen.items()}
