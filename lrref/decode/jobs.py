"""A request's decoding as a generator of *jobs*: what it needs from the models, answered by a driver.

The ar/sd step (:func:`lrref.decode.cycles.ar_step`) and the lr-sync cycle
(:class:`lrref.decode.lr_sync.SyncCycle`) do not call a backend themselves: they
``yield`` a :class:`Job` and get its steps back, in the order of its requests
(``outs = yield Job(TARGET, reqs)``).

lr-async (:class:`lrref.decode.lr_async.AsyncPipeline`) needs more than whole
batches: its target rows start as drafts arrive and its positions resolve as
single rows finish.  It yields an :data:`AsyncJob`: :class:`AddRows` (start
target rows, answered at once with their handles), :class:`CancelRows` (stop
rows, answered at once with their partial steps), :class:`TakeDrafts` (the
drafts that arrived for it, never waiting) and :class:`Advance` (let the target
run: answered with a :class:`Progress` after one target pass that holds its
rows, or, when none of them runs and it asks to, after waiting for a draft up
to :data:`DRAFT_WAIT_S`).  Its drafts come from the one draft process
(:mod:`lrref.decode.draft_worker`), which the pipeline tells what to draft.

Two drivers answer them:

- :func:`run_direct` (one ar/sd/lr-sync request): each job is one blocking
  ``generate_steps`` call of the lane's backend, exactly the calls the decoder
  makes for a single request; given the draft process, it answers lr-async's
  jobs too (auto's cycles mix both kinds: an lr-async stage between ar/sd/lr-sync
  cycles); :func:`run_async_direct` (one lr-async request): its own running
  target engine, the draft process for its drafts;
- :class:`lrref.decode.closed_loop.ClosedLoop` (several requests): the rows of every
  request's job join one running engine per lane, so the target steps of
  different requests, lr-async's rows too, share forward passes; the drafts of
  the one draft process are routed to their request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, Clock, Engine, Sampling, StepOut, StepRequest
from ..backends.ngram import NgramConfig
from .messages import DraftMsg

if TYPE_CHECKING:
    from .draft_worker import DraftWorker

TARGET, DRAFT = "target", "draft"
DRAFT_WAIT_S = 1.0  # lr-async: the longest wait for a draft before the request looks again (wait_s counts it)


@dataclass(frozen=True)
class Job:
    """One batch of steps to write: ``reqs`` for the model of ``lane`` (``'target'`` or ``'draft'``), with n-gram
    speculation ``ngram`` inside them (None: the lane's; auto's cycles give their arm's, :func:`run_direct`)."""

    lane: str
    reqs: Sequence[StepRequest]
    ngram: NgramConfig | None = None


#: what the mode units are: they yield jobs, receive each job's steps and return their own result
Steps = Generator[Job, list[StepOut], bool]


@dataclass(frozen=True)
class AddRows:
    """lr-async: start target rows now; answered at once with their handles, in order.  ``ngram``: their n-gram
    speculation (None: the lane's; :func:`run_direct` honours it, as a :class:`Job`'s)."""

    reqs: tuple[StepRequest, ...]
    ngram: NgramConfig | None = None


@dataclass(frozen=True)
class CancelRows:
    """lr-async: stop target rows now; answered at once with ``[(handle, partial step)]`` (finish
    ``'cancelled'``) of those still running, in the engine's order."""

    handles: tuple[int, ...]


@dataclass(frozen=True)
class TakeDrafts:
    """lr-async: the drafts (and cancelled drafts) that arrived for the request, as a list; never waits."""


@dataclass(frozen=True)
class Advance:
    """lr-async: let the target run; answered with a :class:`Progress` after one target pass that holds the
    request's rows, or, when none of them runs and ``wait``, after waiting (up to :data:`DRAFT_WAIT_S`) for a
    draft."""

    wait: bool


@dataclass
class Progress:
    """What happened for an lr-async request during an :class:`Advance`."""

    finished: list[tuple[int, StepOut]] = field(default_factory=list)  #: its target rows that finished
    drafts: list[DraftMsg] = field(default_factory=list)  #: drafts read while it waited (none when it did not)
    wait_s: float | None = None  #: its share of the time waited for drafts (None: it did not wait)


AsyncJob = AddRows | CancelRows | TakeDrafts | Advance
#: lr-async's pipeline: it yields :data:`AsyncJob` s, receives their answers and returns True at EOS
AsyncSteps = Generator[AsyncJob, Any, bool]


@dataclass(frozen=True)
class Lane:
    """A model and how its steps are generated (one per lane of a decoder)."""

    backend: Backend
    sampling: Sampling
    ngram: NgramConfig


def run_direct(steps: Steps | AsyncSteps, lanes: dict[str, Lane], clock: Clock, worker: DraftWorker | None = None,
               request: int | None = None) -> bool:
    """Answer every job of ``steps`` with one ``generate_steps`` call of its lane (with the job's n-gram
    configuration when it gives one); with the draft process ``worker``, the lr-async jobs of request ``request``
    too (:class:`AsyncAnswers`: a running target engine per n-gram configuration, made when first asked for);
    returns what ``steps`` returns."""
    target = lanes[TARGET]
    engines: dict[NgramConfig, Engine] = {}

    def engine(ngram: NgramConfig | None) -> Engine:
        ngram = ngram or target.ngram
        if ngram not in engines:
            engines[ngram] = target.backend.engine(target.sampling, ngram, clock)
        return engines[ngram]

    answer = AsyncAnswers(engine, worker, request) if worker is not None else None
    reply: Any = None
    try:
        while True:
            job = steps.send(reply)
            if isinstance(job, Job):
                lane = lanes[job.lane]
                reply = lane.backend.generate_steps(job.reqs, lane.sampling, job.ngram or lane.ngram, clock)
            elif answer is not None:
                reply = answer(job)
            else:
                raise TypeError(f"not a job (lr-async's need the draft process): {job!r}")
    except StopIteration as stop:
        return stop.value


class AsyncAnswers:
    """The answers to one request's lr-async jobs (:data:`AsyncJob`): its target rows on the engine ``engine(ngram)``
    gives for their :class:`AddRows` (the stage's: one stage at a time, so the rows running are that engine's),
    its drafts from the draft process ``worker`` (drafts of other requests are dropped)."""

    def __init__(self, engine: Callable[[NgramConfig | None], Engine], worker: DraftWorker, request: int):
        self.engine, self.worker, self.request = engine, worker, request
        self.eng: Engine | None = None  # the engine of the latest AddRows

    def __call__(self, job: AsyncJob) -> Any:
        worker, request = self.worker, self.request
        match job:
            case AddRows(reqs, ngram):
                self.eng = self.engine(ngram)
                return self.eng.add(reqs)
            case CancelRows(handles):
                return self.eng.cancel(handles) if self.eng is not None else []
            case TakeDrafts():
                return [m for m in worker.poll() if m.request == request]
            case Advance(wait):
                reply = Progress()
                if self.eng is not None and self.eng.active:
                    reply.finished = self.eng.step()
                elif wait:
                    w0 = time.perf_counter()
                    reply.drafts = [m for m in worker.poll(DRAFT_WAIT_S) if m.request == request]
                    reply.wait_s = time.perf_counter() - w0
                return reply
            case _:
                raise TypeError(f"not an lr-async job: {job!r}")


def run_async_direct(steps: AsyncSteps, eng: Engine, worker: DraftWorker, request: int) -> bool:
    """Answer every job of one lr-async request (:data:`AsyncJob`) with its own target engine ``eng`` and the draft
    process ``worker`` (drafts of other requests are dropped); returns what ``steps`` returns."""
    answer = AsyncAnswers(lambda ngram: eng, worker, request)
    answer.eng = eng
    reply: Any = None
    try:
        while True:
            reply = answer(steps.send(reply))
    except StopIteration as stop:
        return stop.value
