"""The run as an lr-trace (:mod:`lrsim.trace`) and a Chrome/Perfetto trace: step rows, header, files.

A draft is kept as ``[start, end, candidate lengths, batch, cancelled]``; a
verdict as ``(first accepted branch or -1, verdict per branch, verify start,
verify end)`` (start and end ``None`` when the verifier never saw it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..atomic import atomic_write
from ..modes import TRACE_MODES
from ..trace import Header, RequestRecord, Setting, StepRecord, Trace, to_chrome_trace, write_trace
from .config import SimConfig
from .results import SimResult
from .servers import DONE, Job

SOURCE = "lrsim.sim"
HARDWARE = "default"  # every simulated run prices the target with its own latency model


class Recorder:
    """Step rows of one event run, in the order the trace lists them."""

    def __init__(self, cfg: SimConfig, ngram_counts: bool):
        self.width, self.k2 = cfg.width, cfg.k2
        self.ngram_counts = ngram_counts  # passes are sampled: the rows can say what token speculation did
        self.rows: list[StepRecord] = []
        self.stages: list[tuple] = []  # async: (cycle, stage, last position, rejected), rows made at the end

    def row(self, cycle: int, pos: int, branch: int | None, draft: list | None, job: Job | None,
            verdict: tuple | None, accepted: bool, committed: str | None, decision: bool | None = None) -> StepRecord:
        r = StepRecord(request=0, cycle=cycle, position=pos, branch=branch, accepted=accepted, committed=committed)
        if draft is not None:
            r.draft_start, r.draft_end, r.draft_batch = draft[0], draft[1], draft[3]
            r.draft_tokens = int(draft[2][branch or 0])
            r.cancelled = draft[4]
        if job is not None:
            _target_fields(r, job, self.k2 if self.ngram_counts else None)
        if verdict is not None and verdict[2] is not None:
            r.verify_start, r.verify_end, r.verifier = verdict[2], verdict[3], "simulated"
            r.decision = decision
        return r

    def position(self, cycle: int, j: int, draft: list | None, job: Job | None, verdict: tuple | None, x: int,
                 target_at_x: bool = True) -> list[StepRecord]:
        """Rows of position ``j`` (drafts before ``x`` accepted, the target's step kept at ``x``).

        One row per candidate, or one target-only row when nothing was drafted there.
        """
        if draft is None:
            committed = "target" if j == x and target_at_x else None
            return [self.row(cycle, j, None, None, job, None, False, committed)]
        rows = []
        first = verdict[0] if verdict is not None else -2
        for b in range(self.width):
            acc = j < x and b == first
            committed = "draft" if acc else ("target" if j == x and target_at_x and b == 0 else None)
            dec = bool(verdict[1][b]) if verdict is not None and verdict[2] is not None else None  # None: unverified
            rows.append(self.row(cycle, j, b, draft, job, verdict, acc, committed, dec))
        return rows

    def target_only(self, cycle: int, job: Job) -> None:
        """An ar step: the target's step is the output."""
        self.rows.append(self.row(cycle, 0, None, None, job, None, False, "target"))

    def cycle(self, cycle: int, drafts: list, jobs: list[Job], verdicts: list, x: int) -> None:
        """A sync cycle: ``x`` drafts accepted, the target's step at ``x`` kept."""
        for j in range(max(len(drafts), len(jobs))):
            draft = drafts[j] if j < len(drafts) else None
            verdict = verdicts[j] if j < len(drafts) else None
            job = jobs[j] if j < len(jobs) else None
            self.rows += self.position(cycle, j, draft, job, verdict, x)

    def stage(self, cycle: int, stage, x: int, rejected: bool) -> None:
        """An async stage, kept until :meth:`close` (cancelled work gets its end time later)."""
        self.stages.append((cycle, stage, x, rejected))

    def close(self, now: float) -> None:
        """Rows of the async stages, now that cancelled work has its end time."""
        for cycle, st, x, rejected in self.stages:
            for j in range(max(st.started, len(st.drafts))):
                draft = st.drafts[j] if j < len(st.drafts) else None
                job = st.jobs[j] if j < len(st.jobs) else None
                if job is not None and job.start is not None and job.end is None:
                    job.end = now  # still running when the run ended
                if draft is not None and draft[1] > now:
                    draft[1], draft[4] = now, True
                self.rows += self.position(cycle, j, draft, job, st.verdicts.get(j), x, rejected)


def _target_fields(r: StepRecord, job: Job, k2: int | None) -> None:
    """The target step's timing, size and (``k2`` given: sampled passes) token-speculation counts."""
    if job.start is not None:
        r.target_start, r.target_end, r.target_batch = job.start, job.end, job.batch
        r.target_forwards = int(math.ceil(job.work - 1e-9))
    if job.state == DONE:
        r.target_tokens = int(job.tokens)
        if k2 is not None:
            r.ngram_drafted = int(job.passes * (k2 - 1))
            r.ngram_accepted = int(job.written - job.passes)
    else:
        r.cancelled = True


def setting(cfg: SimConfig) -> Setting:
    """The run in the trace header's terms (ar runs one target sequence: ``k1 = W = 1``)."""
    if cfg.mode == "ar":
        return Setting("ar", 1, cfg.k2, 1, cfg.verify_calls, HARDWARE)
    return Setting(cfg.mode, cfg.k1, cfg.k2, cfg.width, cfg.verify_calls, HARDWARE, colocated=cfg.colocated)


def make_trace(res: SimResult, cfg: SimConfig, rows: list[StepRecord], accepted: int) -> Trace:
    """The run as an in-memory :class:`lrsim.trace.Trace`."""
    summary = {k: v for k, v in res.to_dict().items() if k != "config"}
    header = Header(source=SOURCE, mode=TRACE_MODES[res.mode], config=res.config, setting=setting(cfg).to_dict(),
                    backend="des", models={"draft": "simulated", "target": "simulated", "verifier": "simulated"},
                    summary=summary, notes="times in the latency models' unit (T = 1 with default latencies)")
    req = RequestRecord(request=0, start=0.0, end=res.sim_time, output_tokens=res.output_tokens, steps=res.steps,
                        accepted_steps=accepted, finish="max_steps", cycles=res.cycles)
    return Trace(path="", header=header, steps=rows, requests=[req])


def write_outputs(t: Trace, trace: str | Path | None, chrome: str | Path | None) -> None:
    """Write the lr-trace (JSONL) and/or the Chrome trace (JSON), each atomically."""
    if trace is not None:
        write_trace(trace, t.header, t.steps, t.requests)
    if chrome is not None:
        atomic_write(Path(chrome), json.dumps(to_chrome_trace(t), allow_nan=False).encode())
