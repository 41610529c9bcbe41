"""What an adaptive run did (lrref ``--mode auto`` traces, issue 34): its cycles by configuration, measured, and
the policy's decisions checked against the closed forms (``lrsim replay`` on such traces; no torch).

An auto trace has one :class:`lrsim.trace.ChoiceRecord` per cycle: the configuration the cycle ran, the posterior
means of step and token acceptance and the costs measured when it was chosen.  From them:

- **use**: per configuration, its cycles, the output tokens they committed and their seconds (a cycle's span: its
  first row's start to its last row's end, drafting, target and verifier included; the decoder's own time
  between cycles is not in it, so the configurations' seconds add up to less than the requests' wall time);
- **decisions**: each choice made with estimates is recomputed: every candidate configuration's speedup
  (:func:`lrsim.adaptive.speedup`) at the recorded means and costs.  ``reproduced``: the recorded speedup of the
  chosen configuration is the recomputed one (the trace says what the policy saw); ``greedy``: the choice is the
  best at the means (the others are Thompson draws: exploration); ``regret``: the mean of ``1 - S(chosen) /
  S(best)`` at the means, what exploring cost by the policy's own model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ..errors import InputError
from .policy import Arm, Costs, speedup

REPRODUCED_TOL = 1e-3  #: relative: the recorded speedup is rounded to 4 decimals, the costs to microseconds


@dataclass
class ConfigUse:
    """One configuration's cycles in an auto run."""

    config: str
    cycles: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None


@dataclass
class AutoTraceReport:
    """:func:`check_auto_traces`' result."""

    requests: int
    tokens: int
    wall_s: float  #: the requests' start-to-end seconds, summed
    uses: list[ConfigUse] = field(default_factory=list)
    decisions: int = 0  #: choices made with estimates (the first cycle of a run measures the target: none)
    reproduced: int = 0
    greedy: int = 0
    regret: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self) | {"uses": [asdict(u) | {"tokens_per_s": u.tokens_per_s} for u in self.uses]}

    def format(self) -> str:
        rate = self.tokens / self.wall_s if self.wall_s else 0.0
        lines = [f"auto run: {self.requests} request(s), {self.tokens} tokens in {self.wall_s:.2f} s ({rate:.2f} tok/s)",
                 f"  {'configuration':28s} {'cycles':>6s} {'tokens':>7s} {'seconds':>9s} {'tok/s':>8s}"]
        for u in self.uses:
            rate = f"{u.tokens_per_s:8.2f}" if u.tokens_per_s is not None else f"{'-':>8s}"
            lines.append(f"  {u.config:28s} {u.cycles:6d} {u.tokens:7d} {u.seconds:9.2f} {rate}")
        if self.decisions:
            lines.append(f"  decisions: {self.decisions}; reproduced by the closed forms {self.reproduced}; best at "
                         f"the means {self.greedy} ({self.greedy / self.decisions:.0%}); mean regret at the means "
                         f"{self.regret:.1%}")
        return "\n".join(lines)


def is_auto(trace) -> bool:
    """The trace is an adaptive run's (header mode ``auto``)."""
    return trace.header.mode == "auto"


def _candidates(trace) -> list[Arm]:
    rows = (trace.header.config or {}).get("auto_candidates")
    if not rows:
        raise InputError(f"{trace.path}: an auto trace without its candidate configurations (config.auto_candidates)")
    return [Arm(str(m), int(k1), int(k2)) for m, k1, k2 in rows]


def _cycle_spans(trace) -> dict[tuple[int, int], tuple[float, int]]:
    """(request, cycle) -> (seconds spanned by its rows, output tokens it committed)."""
    lo: dict = defaultdict(lambda: float("inf"))
    hi: dict = defaultdict(lambda: float("-inf"))
    tokens: dict = defaultdict(int)
    for s in trace.steps:
        key = (s.request, s.cycle)
        for a, b in (("draft_start", "draft_end"), ("target_start", "target_end"), ("verify_start", "verify_end")):
            t0, t1 = getattr(s, a), getattr(s, b)
            if t0 is not None and t1 is not None:
                lo[key], hi[key] = min(lo[key], t0), max(hi[key], t1)
        if s.committed == "draft":
            tokens[key] += s.draft_tokens or 0
        elif s.committed == "target":
            tokens[key] += s.target_tokens or 0
    return {k: (max(hi[k] - lo[k], 0.0), tokens[k]) for k in lo}


def check_auto_traces(traces: Sequence) -> AutoTraceReport:
    """:class:`AutoTraceReport` of one or more auto traces (module doc).

    :raises InputError: a trace that is not an auto run's, or one without choice records.
    """
    if not traces:
        raise InputError("no traces")
    rep = AutoTraceReport(0, 0, 0.0)
    uses: dict[str, ConfigUse] = {}
    regret = 0.0
    for t in traces:
        if not is_auto(t):
            raise InputError(f"{t.path}: mode {t.header.mode!r}, not an auto run (lrref --mode auto)")
        if not t.choices:
            raise InputError(f"{t.path}: no choice records")
        cands, draft_sd = _candidates(t), bool((t.header.config or {}).get("draft_ngram", True))
        spans = _cycle_spans(t)
        rep.requests += len(t.requests)
        rep.tokens += sum(r.output_tokens for r in t.requests)
        rep.wall_s += sum(r.end - r.start for r in t.requests)
        for c in t.choices:
            u = uses.setdefault(c.config, ConfigUse(c.config))
            seconds, tokens = spans.get((c.request, c.cycle), (0.0, 0))
            u.cycles, u.tokens, u.seconds = u.cycles + 1, u.tokens + tokens, u.seconds + seconds
            if c.alpha1 is None or c.target_pass_s is None:
                continue
            costs = Costs.affine(c.target_pass_s, c.target_position_s or 0.0, c.draft_token_s or 0.0,
                                 c.verify_pair_s or 0.0, draft_sd)
            s = {a: speedup(a, c.alpha1, c.alpha2, c.step_tokens, costs) for a in cands}
            best = max(s.values())
            got = speedup(Arm(c.mode, c.k1, c.k2), c.alpha1, c.alpha2, c.step_tokens, costs)
            rep.decisions += 1
            rep.reproduced += c.speedup is not None and abs(got - c.speedup) <= REPRODUCED_TOL * max(got, 1.0)
            rep.greedy += got >= best
            regret += 1 - got / best
    rep.uses = sorted(uses.values(), key=lambda u: -u.cycles)
    rep.regret = regret / rep.decisions if rep.decisions else 0.0
    return rep
