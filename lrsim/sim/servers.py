"""The target server: continuous batching of target steps (jobs) on SimPy's public API.

**Tie rule.** At equal times the target's completions are processed before
drafter and verifier events, so ties resolve one way whatever the order in
which SimPy queued them.  The server schedules its wake-ups as plain
:class:`simpy.Timeout` events and remembers when the live one is due
(``due``, the same ``now + delay`` sum SimPy computes); a scheduler calls
:meth:`TargetServer.catch_up` first thing in every drafter and verifier
callback, which processes a wake-up due at that very instant at once.  The
wake-up's own event, when SimPy reaches it, is then stale and does nothing.
(Sync and ar never have target work in flight while drafting or verifying.)
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from typing import Callable

import simpy
from simpy import Timeout

PENDING, RUNNING, DONE, CANCELLED = 0, 1, 2, 3


def pro_rata(written: int, passes_done: float, passes: int) -> float:
    """Tokens a running step has written after ``passes_done`` of its ``passes``: its ``written`` tokens pro rata
    (a step writes its tokens evenly over its passes; never more than all of them, never fewer than none)."""
    return min(float(written), written * max(0.0, passes_done) / passes)


class Job:
    """One target step: a sequence on the target server; ``on_done(job, now)`` is called when it is done."""

    __slots__ = ("pos", "tokens", "passes", "written", "work0", "finish", "start", "end", "batch", "work",
                 "on_done", "sid", "state", "wasted", "verdict", "prefill", "rows0")

    def __init__(self, pos: int, tokens: int, passes: float, written: int, prefill: int = 0):
        self.pos, self.tokens, self.passes, self.written = pos, tokens, passes, written
        self.prefill = prefill  # positions its first pass also feeds (draft steps or a prompt it has not seen)
        self.rows0 = 0.0  # the server's sequence-iterations when it joined
        self.start = self.end = None
        self.batch = 0
        self.work = 0.0
        self.state = PENDING
        self.wasted = False
        self.sid = 0


def _tol(w: float) -> float:
    return 1e-9 * max(1.0, abs(w))


class TargetServer:
    """Continuous batching on a work clock.

    ``work`` counts iterations the server has run; every running sequence
    advances with it, so a sequence admitted at work ``w0`` needing ``n``
    passes finishes at work ``w0 + n``.  The clock advances at ``1 / d(b)``
    per second, ``d(b)`` the iteration time of the current batch ``b``.  The
    only event scheduled is the next finish (or, with joins at iteration
    boundaries, the next boundary when someone waits to join or leave).
    Used for batch-dependent latency; :class:`FixedRateServer` handles the
    batch-independent case faster.
    """

    def __init__(self, env: simpy.Environment, iteration_time: Callable[..., float], grid: bool):
        self.env, self.iteration_time, self.grid = env, iteration_time, grid
        self.firsts: list[tuple[float, int]] = []  # (work when their first pass ends, prefill positions)
        self.jobs: list[Job] = []
        self.pending: list[Job] = []  # waiting for the next boundary (batch-dependent d only)
        self.leaving: list[Job] = []  # cancelled, leave at the next boundary (batch-dependent d only)
        self.work = self.t0 = self.d = 0.0
        self.token = 0  # id of the live wake-up event; older ones are stale
        self.due = math.inf  # when the live wake-up event is due (SimPy's now + delay)
        self.wake_at = math.inf  # time of the live wake-up as planned
        self.deferred = False
        self.rowwork = 0.0  # sequence-iterations run so far (integral of the batch over work): mean batches
        self.seq_time = 0.0  # sequence-seconds on the server (sum over sequences of time admitted)
        self.seq_iters = 0.0  # sequence-iterations run
        self.wasted = 0.0  # sequence-iterations on wasted steps
        self.peak = 0
        self._d: dict[int, float] = {}
        self.stalled_until = -math.inf  # the device runs another role's passes until then (colocated roles)
        self.stalled = 0.0  # seconds the target spent stalled

    # -- wake-ups (see the tie rule in the module docstring)

    def _schedule(self, now: float, delay: float) -> None:
        """Make a wake-up ``delay`` after ``now`` the live one (its event calls :meth:`_fire`)."""
        self.token += 1
        ev = Timeout(self.env, delay)
        ev.token = self.token
        ev.callbacks.append(self._fire)
        self.due = now + delay  # the time SimPy gives the event: the same float sum

    def _unschedule(self) -> None:
        """No live wake-up: the scheduled ones are stale."""
        self.token += 1
        self.due = math.inf

    def stall(self, now: float, seconds: float) -> float:
        """Another role runs ``seconds`` of passes on this device from ``now`` (after any stall already queued):
        the target's work clock stops meanwhile (kernels of two processes on one GPU take turns; the time they
        need adds up).  Returns when the other role's passes end."""
        self._advance(now)
        start = max(now, self.stalled_until)
        self.stalled_until = start + seconds
        self.stalled += seconds
        self.t0 = max(self.t0, self.stalled_until)
        self.wake_at = math.inf  # every planned finish moves by the stall
        self._unschedule()
        self._plan()
        return self.stalled_until

    def catch_up(self) -> None:
        """Process a wake-up due now before anything else happens at this instant (the tie rule)."""
        while self.due <= self.env.now:
            self._fire()

    # -- the work clock

    def _advance(self, now: float | None = None) -> float:
        """Run the work clock up to ``now`` (default: SimPy's clock); returns it."""
        if now is None:
            now = self.env.now
        if self.jobs and now > self.t0:
            dw = (now - self.t0) / self.d  # one iteration per d(b) seconds
            self.work += dw
            self.rowwork += dw * len(self.jobs)
        self.t0 = max(now, self.stalled_until)  # a stalled clock resumes when the stall ends
        return now

    def _next_boundary(self) -> float:
        return float(math.ceil(self.work - _tol(self.work)))

    def _on_boundary(self) -> bool:
        return not self.grid or abs(self.work - round(self.work)) <= _tol(self.work)

    def _extra(self) -> int:
        """Prefill positions in the current iteration: the first passes of sequences that feed what they have not
        seen (expired ones are dropped)."""
        if self.firsts:
            w = self.work + _tol(self.work)
            self.firsts = [f for f in self.firsts if f[0] > w]
        return sum(p for _, p in self.firsts)

    def _set_d(self) -> None:
        b = len(self.jobs)
        if b:
            key = (b, self._extra())
            d = self._d.get(key)
            if d is None:
                d = self._d[key] = self.iteration_time(b, key[1]) if key[1] else self.iteration_time(b)
            self.d = d
            if b > self.peak:
                self.peak = b

    def _admit(self, jobs: list[Job], w0: float, t: float) -> None:
        pre = sum(j.prefill for j in jobs)
        if pre:
            self.firsts.append((w0 + 1, pre))  # their first pass, one iteration from w0, also prefills
        for j in jobs:
            j.work0, j.finish, j.start, j.state = w0, w0 + j.passes, t, RUNNING
        self.jobs.extend(jobs)
        for j in jobs:
            j.batch = len(self.jobs)  # until it leaves: then the mean over its iterations (_remove)
            j.rows0 = self.rowwork
        self._set_d()

    def _remove(self, j: Job, w: float, t: float) -> None:
        """Book a sequence that leaves at work ``w``, time ``t``."""
        j.work = max(0.0, w - j.work0)
        if j.work <= 0 and j.finish > j.work0:
            j.start = None  # it never ran an iteration
        else:
            self.seq_time += t - j.start
            if self.rowwork > j.rows0:
                j.batch = (self.rowwork - j.rows0) / j.work  # rows per pass over its passes (lr-trace's target_batch)
        j.end = t
        self.seq_iters += j.work
        if j.wasted:
            self.wasted += j.work

    # -- what schedulers call

    def submit(self, jobs: list[Job]) -> None:
        """Add sequences: at once if the server is idle or at a boundary, else at the next boundary."""
        now = self._advance()
        if not self.jobs:
            if self.grid:
                self.work = self._next_boundary()  # an idle server starts a fresh iteration
            self._admit(jobs, self.work, now)
        elif self._on_boundary():
            self._admit(jobs, self.work, now)
        else:
            self.pending.extend(jobs)
        self._plan()

    def run(self, jobs: list[Job]) -> simpy.Event:
        """Submit ``jobs``; the returned event fires when all of them are done, with the time of the last finish."""
        ev = self.env.event()
        left = [len(jobs)]

        def one_done(_job: Job, now: float) -> None:
            left[0] -= 1
            if left[0] == 0:
                ev.succeed(now)

        for j in jobs:
            j.on_done = one_done
        self.submit(jobs)
        return ev

    def cancel(self, jobs: list[Job]) -> None:
        """Drop sequences; running ones finish the current iteration (``grid``) or leave at once."""
        now = self._advance()
        at_once = self._on_boundary()
        for j in jobs:
            j.wasted = True
            if j.state == PENDING:
                self.pending.remove(j)
            elif j.state == RUNNING:
                if at_once:
                    self.jobs.remove(j)
                    self._remove(j, self.work, now)
                else:
                    self.leaving.append(j)
            j.state = CANCELLED
        self._set_d()
        self._plan()

    def reprice(self) -> None:
        """The iteration time changed (a new cycle or stage at another context): the work clock runs to now at
        the old rate, batch costs are looked up afresh and the next wake-up is planned at the new rate."""
        self._advance()
        self._d.clear()
        self._set_d()
        self._plan()

    def add_waste(self, job: Job) -> None:
        """Count a finished step whose result was thrown away."""
        self.wasted += job.work

    def written_so_far(self, job: Job) -> float:
        """Tokens ``job`` has written by now (its passes so far, pro rata of its tokens)."""
        if job.state == DONE:
            return float(job.written)
        if job.state != RUNNING or not job.passes:
            return 0.0
        return pro_rata(job.written, self._passes_done(job), job.passes)

    def _passes_done(self, job: Job) -> float:
        """Passes the running ``job`` has been through by now."""
        self._advance()
        return max(0.0, self.work - job.work0)

    def close(self) -> None:
        """Book the sequences still running, up to now."""
        now = self._advance()
        for j in self.jobs:
            if j.start is not None and j.start < now:
                self.seq_time += now - j.start
                self.seq_iters += max(0.0, self.work - j.work0)

    # -- a wake-up: finishes, leaves and joins at the current work

    def _fire(self, ev: Timeout | None = None) -> None:
        """The live wake-up (``ev``: its event; ``None``: from :meth:`catch_up`)."""
        if ev is None:
            self.token += 1  # catch_up got here first: the live event is now stale
        elif ev.token != self.token:
            return  # superseded by a later plan, or already processed by catch_up
        now = self._advance(self.due)  # the live wake-up's time is now
        self.due = self.wake_at = math.inf
        w = self.work
        boundary = abs(w - round(w)) <= _tol(w)
        if boundary and self.grid:
            self.work = w = float(round(w))
        finished = self._finish(w + _tol(w), now)
        if self.leaving and boundary:
            for j in self.leaving:
                if j in self.jobs:
                    self.jobs.remove(j)
                    self._remove(j, w, now)
            self.leaving = []
        if self.pending and (boundary or not self.jobs):
            if not self.jobs:
                self.work = w = self._next_boundary()
            pend, self.pending = self.pending, []
            self._admit(pend, w, now)
        self._set_d()
        self.deferred = True
        done = [j for j in finished if j.state == RUNNING]
        for j in done:
            j.state = DONE
        for j in done:  # a callback may end the stage of the others: they check for that
            j.on_done(j, now)
        self.deferred = False
        self._plan()

    def _finish(self, lim: float, now: float) -> list[Job]:
        """Take the sequences whose work is done by ``lim`` off the server."""
        finished = [j for j in self.jobs if j.finish <= lim]
        if finished:
            self.jobs = [j for j in self.jobs if j.finish > lim]
            for j in finished:
                self._remove(j, j.finish, now)
        return finished

    def _plan(self) -> None:
        """Make sure a wake-up comes no later than the next finish (or boundary someone waits for)."""
        if self.deferred:
            return
        if not self.jobs:
            self._unschedule()
            self.wake_at = math.inf
            return
        w = self.work
        nxt = min([j.finish for j in self.jobs]) - w  # iterations to the next finish
        if self.pending or self.leaving:
            nxt = min(nxt, self._next_boundary() - w)  # or to the next iteration boundary
        if self.firsts:
            nxt = min(nxt, min(f for f, _ in self.firsts) - w)  # or to the end of a prefilling first pass
        now = self.env.now
        t = max(now, self.t0) + max(nxt, 0.0) * self.d  # t0 > now while the device runs another role
        if t >= self.wake_at:
            return  # the live wake-up comes first and plans again
        self.wake_at = t
        self._schedule(now, t - now)


class FixedRateServer(TargetServer):
    """The target server when an iteration costs the same at every batch size.

    Then a sequence's finish time is fixed when it is admitted (``start +
    passes * d``, ``start`` the next iteration boundary with ``grid``): the
    server keeps the finishes in a heap and schedules one event for the
    earliest (all sequences finishing then complete together); cancelled
    sequences are dropped from the heap without an event.  Same timing and
    bookkeeping as :class:`TargetServer` (a test holds the two against each other).
    """

    def __init__(self, env: simpy.Environment, iteration_time: Callable[[int], float], grid: bool):
        super().__init__(env, iteration_time, grid)
        self.d = iteration_time(1)
        self.live: dict[Job, None] = {}  # running sequences in admission order (a deterministic close)
        self.heap: list[tuple[float, int, Job]] = []
        self.seq = 0
        self.armed = math.inf  # time of the scheduled event
        self.epoch = 0.0  # start of the current iteration grid (an idle server starts a fresh one)
        self.last_leave = -math.inf  # when the last cancelled sequence leaves its iteration
        self.busy_until = -math.inf  # the server is busy until then (latest finish or leave)

    def _start_time(self, now: float) -> float:
        """When a sequence submitted now runs its first iteration."""
        if now >= self.busy_until:
            self.epoch = now  # idle: a fresh iteration starts now
            return now
        if not self.grid:
            return now
        n = (now - self.epoch) / self.d
        return self.epoch + math.ceil(n - _tol(n)) * self.d  # the next iteration boundary

    def submit(self, jobs: list[Job]) -> None:
        now = self.env.now
        t = self._start_time(now)
        for j in jobs:
            self.live[j] = None
            j.start, j.state, j.work0 = t, RUNNING, 0.0
            j.finish = f = t + j.passes * self.d
            if f > self.busy_until:
                self.busy_until = f
            heappush(self.heap, (f, self.seq, j))
            self.seq += 1
        # those still running when the new ones start (at t = now every live one is: finishes due now
        # were processed first, by the tie rule)
        batch = len(self.live) if t == now else sum(1 for j in self.live if j.finish > t)
        for j in jobs:
            j.batch = batch
        if batch > self.peak:
            self.peak = batch
        self._arm(now)

    def _arm(self, now: float) -> None:
        """Schedule an event at the earliest live finish, unless one comes by then."""
        heap = self.heap
        while heap and heap[0][2].state != RUNNING:
            heappop(heap)
        if heap and heap[0][0] < self.armed:
            self.armed = heap[0][0]
            self._schedule(now, self.armed - now)

    def _fire(self, ev: Timeout | None = None) -> None:
        if ev is None:
            self.token += 1  # catch_up got here first: the live event is now stale
        elif ev.token != self.token:
            return  # superseded by an earlier one, or already processed by catch_up
        now = self.due  # the live wake-up's time is now
        self.due = self.armed = math.inf
        heap, lim = self.heap, now + _tol(now)
        done = []
        while heap and heap[0][0] <= lim:
            j = heappop(heap)[2]
            if j.state == RUNNING:
                done.append(j)
        for j in done:
            del self.live[j]
            j.state, j.end, j.work = DONE, j.finish, j.passes
            self.seq_time += j.finish - j.start
            self.seq_iters += j.passes
        for j in done:  # a callback may end the stage of the others: they check for that
            j.on_done(j, now)
        self._arm(now)

    def cancel(self, jobs: list[Job]) -> None:
        now = self.env.now
        for j in jobs:
            if j.state != RUNNING:
                continue
            del self.live[j]
            j.state, j.wasted = CANCELLED, True
            if now <= j.start:  # it never ran an iteration
                j.start, j.end, j.work = None, now, 0.0
                continue
            n = (now - self.epoch) / self.d
            end = self.epoch + math.ceil(n - _tol(n)) * self.d if self.grid else now  # it ends its iteration
            j.end, j.work = end, (end - j.start) / self.d
            self.last_leave = max(self.last_leave, end)
            self.seq_time += end - j.start
            self.seq_iters += j.work
            self.wasted += j.work
        self.busy_until = max([self.last_leave] + [j.finish for j in self.live])

    def _passes_done(self, job: Job) -> float:
        return max(0.0, (self.env.now - job.start) / self.d)  # one pass per iteration of d since it started

    def reprice(self) -> None:
        """Never needed: this server serves a constant iteration time (:class:`TargetServer` handles the rest)."""
        raise TypeError("FixedRateServer has a constant iteration time")

    def close(self) -> None:
        """Book the sequences still running, up to now."""
        now = self.env.now
        for j in self.live:
            if j.start < now:
                self.seq_time += now - j.start
                self.seq_iters += (now - j.start) / self.d
