"""One row of a step engine: its step splitter, n-gram proposal, counters, and the :class:`StepOut` it ends as.

Shared by the engines that run their own decode loop (:mod:`lrref.backends.hf`,
:mod:`lrref.backends.llamacpp`), so that a step's forward passes, mean batch,
n-gram counts and times mean the same in every backend's trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .base import StepOut
from .ngram import NgramConfig, propose
from .steps import StepSplitter


@dataclass(kw_only=True)
class StepRow:
    """A row generating one step (engines subclass it with their cache state)."""

    handle: int
    ids: list[int]  # prefix + generated
    pending: list[int]  # known tokens not fed to the model yet
    splitter: StepSplitter
    start: float  # trace clock
    cached_tokens: int = 0  # prefix tokens whose KV came from the prefix cache
    forwards: int = 0
    batch_sum: int = 0
    drafted: int = 0
    accepted: int = 0
    busy: float = 0.0  # seconds of the forward passes the row took part in
    request: int | None = None  # the request the row belongs to (pass records)

    def proposal(self, ngram: NgramConfig) -> list[int]:
        """The n-gram proposal of the next pass (one token of the step always comes from the model)."""
        left = self.splitter.cap - len(self.splitter.ids) - 1
        return propose(self.ids, ngram, left) if ngram.k and left > 0 else []

    def take(self, new: Sequence[int], proposed: int, batch: int) -> None:
        """A pass of ``batch`` rows verified ``proposed`` proposals and gave ``new`` (the accepted ones + one token
        from the model): feed them to the step (up to its end) and count."""
        n_acc = len(new) - 1
        self.forwards += 1
        self.batch_sum += batch
        self.drafted += proposed
        used = self.splitter.extend(new)
        self.accepted += min(n_acc, used)
        self.ids += new[:used]
        self.pending = [new[used - 1]] if used == len(new) else []

    def out(self, decode: Callable[[Sequence[int]], str], end: float, reason: str | None = None) -> StepOut:
        """The step as generated so far (``reason``: finish other than the splitter's, e.g. ``'cancelled'``)."""
        ids = self.splitter.ids
        return StepOut(ids=list(ids), text=decode(ids), finish=reason or self.splitter.finish, forwards=self.forwards,
                       ngram_drafted=self.drafted, ngram_accepted=self.accepted, start=self.start, end=end,
                       batch=round(self.batch_sum / self.forwards) if self.forwards else 0,
                       cached_tokens=self.cached_tokens, busy_s=self.busy)
