"""The one builder of trace step rows (:class:`lrsim.trace.StepRecord`) for every mode.

A row is one drafted candidate at one position, or one target-only step:
committed (``committed = 'draft'/'target'``), verified (``verdict`` and its
times), discarded (neither) or cancelled before it finished (``cancelled``).
It carries the timing of the draft and/or target step it describes.
"""

from __future__ import annotations

from lrsim.trace import ChoiceRecord, StepRecord, TraceWriter

from ..backends.base import StepOut
from ..verify.verifiers import Verdict


def step_row(request: int, cycle: int, position: int, *, draft: StepOut | None = None,
             target: StepOut | None = None, branch: int | None = None, verdict: Verdict | None = None,
             verifier: str | None = None, vtimes: tuple[float, float] | None = None, accepted: bool = False,
             committed: str | None = None, cancelled: bool = False, text: bool = False) -> StepRecord:
    """The trace row of one position: the draft's and the target's step, the verdict, what happened to it.

    :param vtimes: (start, end) of the verifier call that judged the draft.
    :param text: include the step texts (``log_text``).
    """
    rec = StepRecord(request=request, cycle=cycle, position=position, branch=branch, verifier=verifier,
                     accepted=accepted, committed=committed, cancelled=cancelled)
    if vtimes is not None:
        rec.verify_start, rec.verify_end = vtimes
    if verdict is not None:
        rec.score, rec.decision = verdict.score, verdict.decision
    if draft is not None:
        rec.draft_start, rec.draft_end, rec.draft_tokens, rec.draft_batch = (draft.start, draft.end, draft.n_tokens,
                                                                             draft.batch)
        rec.draft_busy = draft.busy_s or None
        rec.draft_forwards = draft.forwards or None
        rec.draft_text = draft.text if text else None
    if target is not None:
        rec.target_start, rec.target_end, rec.target_tokens, rec.target_batch = (target.start, target.end,
                                                                                 target.n_tokens, target.batch)
        rec.target_busy = target.busy_s or None
        rec.target_forwards, rec.ngram_drafted, rec.ngram_accepted = (target.forwards, target.ngram_drafted,
                                                                      target.ngram_accepted)
        rec.target_text = target.text if text else None
    return rec


class Rows:
    """Writes one request's rows into a trace (nothing without a trace)."""

    def __init__(self, trace: TraceWriter | None, request: int, text: bool = False):
        self.trace, self.request, self.text = trace, request, text

    def write(self, cycle: int, position: int, **kw) -> None:
        """:func:`step_row` for this request, written at once (keywords as there)."""
        if self.trace is not None:
            self.trace.step(step_row(self.request, cycle, position, text=self.text, **kw))

    def choice(self, rec: ChoiceRecord) -> None:
        """auto's choice for a cycle of this request (:mod:`lrref.decode.auto`), written at once."""
        if self.trace is not None:
            self.trace.choice(rec)
