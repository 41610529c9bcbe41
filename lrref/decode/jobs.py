"""A request's decoding as a generator of *jobs*: batches of step requests for one lane (target or draft).

The ar/sd step (:func:`lrref.decode.decoder.ar_step`) and the lr-sync cycle
(:class:`lrref.decode.lr_sync.SyncCycle`) do not call a backend themselves: they
``yield`` a :class:`Job` and get its steps back, in the order of its requests
(``outs = yield Job(TARGET, reqs)``).  Two drivers answer them:

- :func:`run_direct` (one request): each job is one blocking
  ``generate_steps`` call of the lane's backend, exactly the calls the decoder
  makes for a single request;
- :class:`lrref.decode.closed_loop.ClosedLoop` (several requests): the rows of every
  request's job join one running engine per lane, so the target steps of
  different requests share forward passes.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from ..backends.base import Backend, Clock, Sampling, StepOut, StepRequest
from ..backends.ngram import NgramConfig

TARGET, DRAFT = "target", "draft"


@dataclass(frozen=True)
class Job:
    """One batch of steps to write: ``reqs`` for the model of ``lane`` (``'target'`` or ``'draft'``)."""

    lane: str
    reqs: Sequence[StepRequest]


#: what the mode units are: they yield jobs, receive each job's steps and return their own result
Steps = Generator[Job, list[StepOut], bool]


@dataclass(frozen=True)
class Lane:
    """A model and how its steps are generated (one per lane of a decoder)."""

    backend: Backend
    sampling: Sampling
    ngram: NgramConfig


def run_direct(steps: Steps, lanes: dict[str, Lane], clock: Clock) -> bool:
    """Answer every job of ``steps`` with one ``generate_steps`` call of its lane; returns what ``steps`` returns."""
    outs: list[StepOut] | None = None
    try:
        while True:
            job = steps.send(outs)
            lane = lanes[job.lane]
            outs = lane.backend.generate_steps(job.reqs, lane.sampling, lane.ngram, clock)
    except StopIteration as stop:
        return stop.value
