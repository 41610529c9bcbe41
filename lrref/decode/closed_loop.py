"""Several requests decoded at once: the rows of all their jobs share one running engine per lane.

A closed loop: ``concurrency`` requests are in flight; when one ends, the
next one starts (its arrival is its start).  Each request is a job generator
(:mod:`lrref.decode.jobs`: the ar/sd step, the lr-sync cycle, the lr-async
pipeline).  The loop

1. starts requests until ``concurrency`` are in flight (each runs to its
   first job, whose rows join its lane's engine at once),
2. runs one forward pass of every lane that has rows (target, then draft:
   the two models take turns on the same cores), which advances the rows of
   every request in it; when no lane has rows and an lr-async request waits
   for a draft, it waits for the draft process instead (up to
   :data:`lrref.decode.jobs.DRAFT_WAIT_S`; the time waited is shared among the
   requests waiting, as their ``wait_s``),
3. resumes, in start order, every request whose job is complete: it
   verifies and commits (inline) and yields its next job, whose rows join the
   next pass, or ends.  An lr-async request is resumed after every pass that
   held its target rows, when drafts arrived for it while none of its rows
   ran, and after a wait it took part in; its row starts, cancellations and
   draft look-ups are answered at once.

So a pass batches the rows of every request that has one in flight, and a
step's ``batch`` in the trace counts them all.  Model time is charged to the
requests of each pass in proportion to their rows in it.  lr-async's drafts
come from the one draft process, whose engine batches the draft rows of every
request (:mod:`lrref.decode.draft_worker`); the loop routes them to their
request by its index and drops those of requests that ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Clock, StepOut
from .draft_worker import DraftWorker
from .jobs import DRAFT_WAIT_S, TARGET, AddRows, Advance, AsyncSteps, CancelRows, Job, Lane, Progress, Steps, TakeDrafts
from .messages import DraftMsg
from .request import Request


@dataclass
class _Flight:
    """One request in flight: its job generator and the rows of its pending job (lr-async: its parked
    :class:`~lrref.decode.jobs.Advance`, its running target rows and what happened since)."""

    req: Request
    steps: Steps | AsyncSteps
    lane: str = ""
    handles: list[int] = field(default_factory=list)
    outs: dict[int, StepOut] = field(default_factory=dict)
    parked: Advance | None = None  # lr-async: waiting for progress
    rows: set[int] = field(default_factory=set)  # lr-async: its target rows running
    finished: list[tuple[int, StepOut]] = field(default_factory=list)  # lr-async: its target rows done since
    drafts: list[DraftMsg] = field(default_factory=list)  # lr-async: drafts that arrived for it
    in_pass: bool = False  # lr-async: its rows were in this round's target pass
    wait_s: float | None = None  # lr-async: its share of this round's wait for drafts (None: it did not wait)

    @property
    def waits_for_drafts(self) -> bool:
        """lr-async, parked with none of its target rows running and asking to wait for a draft."""
        return self.parked is not None and self.parked.wait and not self.rows

    @property
    def ready(self) -> bool:
        """Every row of the pending job has finished (lr-async: there is progress to report)."""
        if self.parked is None:
            return len(self.outs) == len(self.handles)
        return (self.in_pass or bool(self.finished) or self.wait_s is not None
                or (not self.rows and (bool(self.drafts) or not self.parked.wait)))

    def open_rows(self, lane: str) -> int:
        """Rows of the pending job (lr-async: target rows) still running on ``lane``."""
        if self.parked is not None:
            return len(self.rows) if lane == TARGET else 0
        return len(self.handles) - len(self.outs) if self.lane == lane else 0

    def reply(self) -> Any:
        """What the pending job gets back: its steps, or (lr-async) a :class:`~lrref.decode.jobs.Progress`."""
        if self.parked is None:
            return [self.outs[h] for h in self.handles]
        p = Progress(self.finished, [], self.wait_s)
        if self.wait_s is not None:  # what arrived while it waited is the wait's answer
            p.drafts, self.drafts = self.drafts, []
        self.parked, self.finished, self.in_pass, self.wait_s = None, [], False, None
        return p


class ClosedLoop:
    """Requests decoded ``concurrency`` at a time, their rows batched on one engine per lane.

    :param lanes: the decoder's lanes (target; draft when the draft runs in this process).
    :param clock: the trace clock (the engines stamp steps with it).
    :param worker: lr-async's draft process (its drafts are routed to their requests).
    """

    def __init__(self, lanes: dict[str, Lane], clock: Clock, concurrency: int, worker: DraftWorker | None = None):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.lanes, self.concurrency, self.worker = lanes, concurrency, worker
        self.engines = {name: lane.backend.engine(lane.sampling, lane.ngram, clock) for name, lane in lanes.items()}
        self.flights: list[_Flight] = []
        self.owner: dict[tuple[str, int], _Flight] = {}
        self.by_request: dict[int, _Flight] = {}

    def run(self, requests: Iterable[tuple[Request, Steps | AsyncSteps]], done: Callable[[Request], None]) -> None:
        """Decode every request; ``requests`` is consumed lazily (a request is made when it starts)."""
        pending = iter(requests)
        more = True
        while True:
            while more and len(self.flights) < self.concurrency:
                nxt = next(pending, None)
                more = nxt is not None
                if more:
                    f = _Flight(*nxt)
                    self.flights.append(f)
                    self.by_request[f.req.index] = f
                    self._advance(f, None, done)
            if not self.flights:
                return
            if not self._pass() and not any(f.ready for f in self.flights):
                self._wait()
            elif any(f.waits_for_drafts and not f.ready for f in self.flights):  # look once, without waiting
                self._route(self.worker.poll())
            for f in [f for f in self.flights if f.ready]:
                self._advance(f, f.reply(), done)

    def _advance(self, f: _Flight, reply: Any, done: Callable[[Request], None]) -> None:
        """Resume a request with its job's answer until it yields a job that waits (a non-empty batch, an
        lr-async :class:`~lrref.decode.jobs.Advance`) or ends; lr-async's other jobs are answered at once."""
        target = self.engines[TARGET]
        while True:
            try:
                job = f.steps.send(reply)
            except StopIteration:
                self.flights.remove(f)
                self.by_request.pop(f.req.index, None)
                done(f.req)
                return
            match job:
                case Job(lane, reqs) if reqs:
                    f.lane, f.outs = lane, {}
                    f.handles = self.engines[lane].add(reqs)
                    for h in f.handles:
                        self.owner[(lane, h)] = f
                    return
                case Job():
                    reply = []
                case AddRows(reqs):
                    reply = target.add(reqs)
                    f.rows.update(reply)
                    self.owner.update({(TARGET, h): f for h in reply})
                case CancelRows(handles):
                    reply = target.cancel(handles)
                    for h, _ in reply:
                        f.rows.discard(h)
                        self.owner.pop((TARGET, h), None)
                case TakeDrafts():
                    self._route(self.worker.poll())
                    reply, f.drafts = f.drafts, []
                case Advance():
                    f.parked = job
                    return
                case _:
                    raise TypeError(f"not a job: {job!r}")

    def _route(self, msgs: list[DraftMsg]) -> None:
        """Drafts to the requests they are for (those of requests that ended are dropped)."""
        for m in msgs:
            f = self.by_request.get(m.request)
            if f is not None:
                f.drafts.append(m)

    def _wait(self) -> None:
        """No lane has rows: wait for the draft process on behalf of the lr-async requests that wait for a draft,
        sharing the time among them."""
        waiting = [f for f in self.flights if f.waits_for_drafts]
        if self.worker is None or not waiting:
            raise RuntimeError("closed loop stalled: requests in flight but no rows running")
        w0 = time.perf_counter()
        self._route(self.worker.poll(DRAFT_WAIT_S))
        share = (time.perf_counter() - w0) / len(waiting)
        for f in waiting:
            f.wait_s = share

    def _pass(self) -> bool:
        """One forward pass of every lane with rows; finished rows go back to their requests.  False: none ran."""
        ran = False
        for name, eng in self.engines.items():
            if not eng.active:
                continue
            ran = True
            stats = self.lanes[name].backend.stats
            rows = {id(f): f.open_rows(name) for f in self.flights}
            for f in self.flights:
                f.in_pass = f.in_pass or (f.parked is not None and rows[id(f)] > 0)
            s0 = stats.forward_s
            finished = eng.step()
            self._charge(name, stats.forward_s - s0, rows)
            for h, out in finished:
                f = self.owner.pop((name, h))
                if f.parked is not None:
                    f.rows.discard(h)
                    f.finished.append((h, out))
                else:
                    f.outs[h] = out
        return ran

    def _charge(self, lane: str, seconds: float, rows: dict[int, int]) -> None:
        """Share a pass's model seconds among the requests in it, by their rows (``target_s`` / ``draft_s``)."""
        total = sum(rows.values())
        for f in self.flights:
            n = rows.get(id(f), 0)
            if n and total:
                attr = f"{lane}_s"
                setattr(f.req.res, attr, getattr(f.req.res, attr) + seconds * n / total)
