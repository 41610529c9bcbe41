"""Several requests decoded at once: the rows of all their jobs share one running engine per lane.

A closed loop: ``concurrency`` requests are in flight; when one ends, the
next one starts (its arrival is its start).  Each request is a job generator
(:mod:`lrref.decode.jobs`: the ar/sd step, the lr-sync cycle).  The loop

1. starts requests until ``concurrency`` are in flight (each runs to its
   first job, whose rows join its lane's engine at once),
2. runs one forward pass of every lane that has rows (target, then draft:
   the two models take turns on the same cores), which advances the rows of
   every request in it,
3. resumes, in start order, every request whose job is complete: it
   verifies and commits (inline) and yields its next job, whose rows join the
   next pass, or ends.

So a pass batches the rows of every request that has one in flight, and a
step's ``batch`` in the trace counts them all.  Model time is charged to the
requests of each pass in proportion to their rows in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..backends.base import Clock, StepOut
from .jobs import Job, Lane, Steps
from .request import Request


@dataclass
class _Flight:
    """One request in flight: its job generator and the rows of its pending job."""

    req: Request
    steps: Steps
    lane: str = ""
    handles: list[int] = field(default_factory=list)
    outs: dict[int, StepOut] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Every row of the pending job has finished."""
        return len(self.outs) == len(self.handles)

    def open_rows(self, lane: str) -> int:
        """Rows of the pending job still running on ``lane``."""
        return len(self.handles) - len(self.outs) if self.lane == lane else 0


class ClosedLoop:
    """Requests decoded ``concurrency`` at a time, their rows batched on one engine per lane.

    :param lanes: the decoder's lanes (target; draft when the draft runs in this process).
    :param clock: the trace clock (the engines stamp steps with it).
    """

    def __init__(self, lanes: dict[str, Lane], clock: Clock, concurrency: int):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.lanes, self.concurrency = lanes, concurrency
        self.engines = {name: lane.backend.engine(lane.sampling, lane.ngram, clock) for name, lane in lanes.items()}
        self.flights: list[_Flight] = []
        self.owner: dict[tuple[str, int], _Flight] = {}

    def run(self, requests: Iterable[tuple[Request, Steps]], done: Callable[[Request], None]) -> None:
        """Decode every request; ``requests`` is consumed lazily (a request is made when it starts)."""
        pending = iter(requests)
        more = True
        while True:
            while more and len(self.flights) < self.concurrency:
                nxt = next(pending, None)
                more = nxt is not None
                if more:
                    self.flights.append(_Flight(*nxt))
                    self._advance(self.flights[-1], None, done)
            if not self.flights:
                return
            self._pass()
            for f in [f for f in self.flights if f.ready]:
                self._advance(f, [f.outs[h] for h in f.handles], done)

    def _advance(self, f: _Flight, outs: list[StepOut] | None, done: Callable[[Request], None]) -> None:
        """Resume a request with its job's steps until it yields a non-empty job (submitted) or ends."""
        while True:
            try:
                job: Job = f.steps.send(outs)
            except StopIteration:
                self.flights.remove(f)
                done(f.req)
                return
            if job.reqs:
                break
            outs = []
        f.lane, f.outs = job.lane, {}
        f.handles = self.engines[job.lane].add(job.reqs)
        for h in f.handles:
            self.owner[(job.lane, h)] = f

    def _pass(self) -> None:
        """One forward pass of every lane with rows; finished rows go back to their requests."""
        ran = False
        for name, eng in self.engines.items():
            if not eng.active:
                continue
            ran = True
            stats = self.lanes[name].backend.stats
            rows = {id(f): f.open_rows(name) for f in self.flights}
            s0 = stats.forward_s
            finished = eng.step()
            self._charge(name, stats.forward_s - s0, rows)
            for h, out in finished:
                self.owner.pop((name, h)).outs[h] = out
        if not ran and not any(f.ready for f in self.flights):
            raise RuntimeError("closed loop stalled: requests in flight but no rows running")

    def _charge(self, lane: str, seconds: float, rows: dict[int, int]) -> None:
        """Share a pass's model seconds among the requests in it, by their rows (``target_s`` / ``draft_s``)."""
        total = sum(rows.values())
        for f in self.flights:
            n = rows.get(id(f), 0)
            if n and total:
                attr = f"{lane}_s"
                setattr(f.req.res, attr, getattr(f.req.res, attr) + seconds * n / total)
