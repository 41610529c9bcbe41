"""A serving workload from lr-traces: decoding settings and request lengths calibrated from recorded runs.

Any decoder that writes the lr-trace format (``docs/trace-schema.md``: lrref,
or another engine) can feed this, as :mod:`lrsim.replay` does:

- behaviour from every trace: step acceptance ``alpha1``, token acceptance
  ``alpha2``, empirical draft and target step lengths, the verifier's latency
  sample, how the sync verifier was called;
- timing from the traces of one hardware setup (``setting.hardware``;
  default: the lr-async setup, where target and drafter run on devices of
  their own, as the serving model assumes): the target's pass latency
  ``T(batch, k2)`` (:func:`lrsim.replay.target_latency`) and the draft's cost
  per token by batch;
- request lengths: the recorded (prompt, output) pairs, resampled jointly.

Latencies from traces have no context axis: the engines price them
context-free (:class:`lrsim.serve.pricing.ModelPricer`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..calibrate import calibrate
from ..errors import InputError
from ..replay import sim_config, target_latency, verify_calls
from ..sim import SimConfig
from ..trace import Setting, Trace, recorded_setting


def setup_traces(traces: Sequence[Trace], setup: str | None = None) -> tuple[list[Trace], str]:
    """The traces of one hardware setup: ``setup``, else the lr-async one, else the first trace's."""
    labels = [recorded_setting(t.header).hardware for t in traces]
    if setup is None:
        asy = [lab for t, lab in zip(traces, labels) if recorded_setting(t.header).mode == "async"]
        setup = asy[0] if asy else labels[0]
    group = [t for t, lab in zip(traces, labels) if lab == setup]
    if not group:
        raise InputError(f"no trace recorded on hardware setup {setup!r} (have: {', '.join(sorted(set(labels)))})")
    return group, setup


def decode_from_traces(traces: Sequence[Trace], k2: int = 1, setup: str | None = None) -> tuple[SimConfig, str]:
    """Per-request decoding settings calibrated from ``traces`` (target latency priced up to ``k2`` positions)."""
    behaviour = calibrate(traces)
    group, setup = setup_traces(traces, setup)
    timing = calibrate(group)
    target = target_latency(group, traces, k2)
    setting = Setting("async", 2, k2)
    sim = sim_config(behaviour, timing, setting, steps=1, seed=0, target=target, calls=verify_calls(traces))
    return replace(sim, request_tokens=None), setup


def length_pairs(traces: Sequence[Trace]) -> tuple[tuple[int, int], ...]:
    """(prompt, output) tokens of every recorded request that has both."""
    pairs = tuple((int(r.prompt_tokens), int(r.output_tokens)) for t in traces for r in t.requests
                  if r.prompt_tokens and r.output_tokens)
    if not pairs:
        raise InputError("these traces record no request with both prompt and output tokens")
    return pairs
