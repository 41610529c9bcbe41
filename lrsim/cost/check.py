"""Does a latency profile predict the forward passes recorded in lrref traces on the same machine?

For target-only decoding without token speculation (``ar``, ``k2 = 1``) every
forward pass after the prompt is one row and one new position, so the context
of each pass is known from the trace: a step of request ``r`` that starts
after ``G`` generated tokens has ``prompt + G - 1`` tokens cached (the last
sampled token is fed by the step's first pass), and its ``j``-th pass sees
``prompt + G - 1 + j``.  The profile predicts the step as
``sum_j T(prompt + G - 1 + j, b = 1, q = 1)``; the trace records its wall time
(``target_end - target_start``, which also holds the decoder's own per-step
work: sampling, step splitting, KV bookkeeping).  A request's first step is
left out: its first pass is the prompt's prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..errors import InputError
from ..fields import option
from ..latency.profile import Profile
from ..trace import Trace


@dataclass(frozen=True)
class StepPasses:
    """One recorded target step: the context of its first pass, its passes and its wall time."""

    context: int = option("tokens cached before the step's first pass", 0)
    forwards: int = option("forward passes of the step (one new position each)", 1)
    seconds: float = option("recorded wall time of the step (s)", 0.0)


@dataclass(frozen=True)
class PassComparison:
    """Recorded vs profile-predicted time of the same forward passes."""

    profile: str = option("profile name", "")
    arch: str = option("architecture in the profile", "")
    traces: tuple[str, ...] = option("trace files", ())
    steps: int = option("steps compared", 0)
    forwards: int = option("forward passes compared", 0)
    contexts: tuple[int, int] = option("smallest and largest context of those passes", (0, 0))
    measured_s: float = option("recorded time of the steps (s)", 0.0)
    predicted_s: float = option("the profile's time for the same passes (s)", 0.0)

    @property
    def ratio(self) -> float:
        """measured / predicted (1 = perfect agreement)."""
        return self.measured_s / self.predicted_s

    def format(self) -> str:
        per = 1000 / self.forwards  # s per step total -> ms per pass
        return (f"{self.arch} in {self.profile}: {self.forwards} passes ({self.steps} steps, contexts "
                f"{self.contexts[0]}..{self.contexts[1]}): recorded {self.measured_s * per:.2f} ms/pass, profile "
                f"{self.predicted_s * per:.2f} ms/pass, recorded/profile = {self.ratio:.3f} "
                f"({100 * (self.ratio - 1):+.1f}%)")


def ar_steps(trace: Trace) -> list[StepPasses]:
    """The timed steps after the first of every request of an ``ar`` trace without token speculation.

    :raises InputError: the trace is not ``ar`` with ``k2 = 1``, or lacks prompt lengths.
    """
    from ..trace import recorded_setting

    s = recorded_setting(trace.header)
    if s.mode != "ar" or s.k2 != 1:
        raise InputError(f"{trace.path}: needs a target-only trace without n-gram (mode ar, k2 = 1), got "
                         f"{s.mode} with k2 = {s.k2}")
    prompts = {r.request: r.prompt_tokens for r in trace.requests}
    out, generated = [], {}
    for st in sorted(trace.steps, key=lambda x: (x.request, x.cycle)):
        g = generated.get(st.request)
        generated[st.request] = (g or 0) + (st.target_tokens or 0)
        if g is None or st.cancelled or not st.target_forwards or st.target_start is None or st.target_end is None:
            continue
        if prompts.get(st.request) is None:
            raise InputError(f"{trace.path}: request {st.request} has no prompt_tokens")
        out.append(StepPasses(prompts[st.request] + g - 1, st.target_forwards, st.target_end - st.target_start))
    return out


def compare(profile: Profile, arch: str, traces: Sequence[Trace], extrapolate: str = "error") -> PassComparison:
    """Recorded vs predicted time of every pass of :func:`ar_steps` in ``traces``.

    :raises InputError: no comparable step, or a pass outside the profile (per ``extrapolate``).
    """
    steps = [s for t in traces for s in ar_steps(t)]
    if not steps:
        raise InputError("no timed ar step after a request's first in these traces")
    predicted = 0.0
    for s in steps:
        predicted += math.fsum(profile.time_ms(arch, s.context + j, 1, 1, extrapolate)
                               for j in range(s.forwards)) / 1000  # ms -> s
    return PassComparison(profile.name, arch, tuple(t.path for t in traces), len(steps),
                          sum(s.forwards for s in steps),
                          (min(s.context for s in steps), max(s.context + s.forwards - 1 for s in steps)),
                          math.fsum(s.seconds for s in steps), predicted)
