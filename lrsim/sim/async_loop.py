"""Asynchronous LR on a dedicated event loop: the event engine's numbers, several times faster.

:class:`AsyncLoop` runs exactly what :class:`.sched_async.AsyncRun` runs on a :class:`.servers.TargetServer`: the
same draws from the same :class:`~.workload.Workload` streams in the same order, the same floating-point operations
in the same order, the same tie rule, so it returns the same cycle log to the last bit (tests hold the two
against each other).  It covers what planning simulates (:func:`applies`): one candidate per position (``W = 1``),
no prefill, no trace, a batch-dependent target; anything else keeps the SimPy engine.

What makes it faster: one loop instead of SimPy's events and callbacks, the scheduler and the server in one
object (no calls between them on the hot path), and no work that changes nothing.  Drafter and verifier
completions sit in one heap ordered by (time, creation), as SimPy orders them by (time, event id); the target
server's next wake-up is kept beside the heap and goes first at equal times (the tie rule: the SimPy engine's
drafter and verifier callbacks run the server's wake-up due at that instant first).  The SimPy engine also
processes wake-ups a later plan superseded and drafts abandoned at a rejection, as no-ops: here they are never
scheduled, or dropped when they come up.

A run can be continued: :meth:`AsyncLoop.advance` (``steps``) returns the cycle log a run of ``cfg.steps =
steps`` returns, and keeps its state, so a later call with more steps goes on from there instead of starting
over (the planner screens with few steps and continues the best).  Where a shorter run stops, this one takes what
that run would book (its last, partial stage; the server's sequences still running, booked up to that instant)
without touching its own state, and carries on as a longer run does.
"""

from __future__ import annotations

import math
import time
from heapq import heappop, heappush

import numpy as np

from .config import SimConfig
from .results import CycleLog
from .streams import Fixed
from .workload import Workload

_INF = math.inf
PENDING, RUNNING, DONE, CANCELLED = 0, 1, 2, 3  # as in .servers


def applies(cfg: SimConfig, work: Workload, record: bool) -> bool:
    """The configurations this loop runs (engine 'auto'): async, W = 1, no prefill, no trace, a batch-dependent cost,
    nothing sharing the target's device."""
    return (cfg.mode == "async" and cfg.engine == "auto" and not record and cfg.width == 1 and not cfg.tree
            and cfg.prefill == "none" and not work.fixed_rate and getattr(cfg, "colocated", "none") == "none")


class _Job:
    """One target step on the server (:class:`.servers.Job` without what only traces read)."""

    __slots__ = ("pos", "tokens", "passes", "work0", "finish", "start", "state", "wasted", "work", "first", "sid")


class AsyncLoop:
    """Pipelined stages (:mod:`.sched_async`) on a continuous-batching target (:class:`.servers.TargetServer`)."""

    engine = "des"

    def __init__(self, cfg: SimConfig, work: Workload):
        self.cfg, self.work, self.k1 = cfg, work, cfg.k1
        self.tlen, self.verdicts, self.vtime = work.tlen, work.verdicts.first_only, work.vtime
        tp, dp = work.tpasses, work.dpasses
        # passes of a fresh step: the stream's own method when there is one (PassModel.one, one call less)
        self.tone = tp.stream.truncated if tp.sampled else (lambda L: tp.one(L, False))
        self.dlen, self.dpasses_one = work.dlen, (dp.stream.truncated if dp.sampled else dp.one)
        self.dstream = dp.stream is not None
        self.tfixed = work.tlen.value if isinstance(work.tlen, Fixed) else None  # constant step lengths
        self.dfixed = work.dlen.value if isinstance(work.dlen, Fixed) else None
        self.dpass = work.draft_pass[1]
        self.tau1 = work.tau1
        self.grid = cfg.join == "iteration"
        # the target server (TargetServer's state; the work clock is ``w``)
        self.jobs: list[_Job] = []
        self.nf = _INF  # the earliest finish (work) among jobs: min(j.finish for j in jobs), kept up to date
        self.pending: list[_Job] = []
        self.leaving: list[_Job] = []
        self.w = self.t0 = self.d = 0.0
        self.due = self.wake_at = _INF
        self.deferred = False
        self.seq_time = self.seq_iters = self.wasted = 0.0
        self.peak = 0
        self._d: dict[int, float] = {}
        # the run (EventRun's and AsyncRun's state; the stage's fields on the run itself)
        self.heap: list[tuple] = []
        self.seq = 0
        self.cycle_end: list[float] = []
        self.cycle_base: list[float] = []
        self.out = self.tokens = self.accepted = self.decisive = 0
        self.rem = work.next_request()
        self.in_request = 0
        self.finite = math.isfinite(self.rem)
        # without finite requests no step is cut, so the i-th target (draft) step has the i-th length of its stream:
        # lengths and passes come in blocks (Passes.truncated_many: the same numbers, shared under sharing())
        self.tblock = tp.stream if tp.sampled and not self.finite else None
        self.dblock = dp.stream if dp.sampled and not self.finite else None
        self.tL: list[int] = []
        self.tP: list[int] = []
        self.dL: list[int] = []
        self.dP: list[int] = []
        self.ti = self.di = 0
        self.sid = 0
        self.V = self.drafted = self.started = 0
        self.sjobs: list[_Job] = []
        self.sdl: list[int] = []  # the stage's draft lengths by position
        self.left: list[float] = []
        self.verd: dict[int, int] = {}
        self.base = 0.0
        self.drafting = False
        self.begun = False
        self.target = 0
        self.snap: CycleLog | None = None
        self.events = 2  # SimPy's count includes the process start and the final event
        self.wall = 0.0

    # -- the loop

    def can_reach(self, steps: int) -> bool:
        """Whether :meth:`advance` can still stop at ``steps`` (this run has fewer output steps so far)."""
        return steps > self.out or not self.begun

    def advance(self, steps: int) -> CycleLog:
        """Run on until ``steps`` output steps: the cycle log of a run of that many steps (the run goes on)."""
        if not self.can_reach(steps):
            raise ValueError(f"this run is past {steps} steps already ({self.out})")
        wall = time.perf_counter()
        self.target, self.snap = steps, None
        if not self.begun:
            self.begun = True
            self._new_stage(0.0)
        heap, n = self.heap, 0
        while self.snap is None:
            n += 1
            if heap and heap[0][0] < self.due:
                t, _, verify, sid, pos = heappop(heap)
                if sid != self.sid:
                    continue  # a draft abandoned at a rejection, or a verdict on a position of an ended stage
                if verify:
                    self._on_verdict(pos, t)
                else:  # a draft is done
                    self.drafting = False
                    self.drafted = pos + 1
                    if pos < self.started and self.sjobs[pos].state == DONE:
                        self._verify(pos, t)
                    self._pump(t)
            elif self.due < _INF:
                self._fire()
            else:
                raise RuntimeError("the simulated pipeline ran out of events")
        self.events += n
        self.wall += time.perf_counter() - wall
        snap = self.snap
        snap.wall, snap.events = self.wall, self.events
        return snap

    def _checkpoint(self, now: float, partial: bool) -> None:
        """The run reached ``target`` steps: keep what a run of that many steps returns.

        ``partial``: it ends inside a stage, closed as a (partial) cycle; the
        sequences still running are booked up to ``now`` (TargetServer.close), here on copies.
        """
        end, base = list(self.cycle_end), list(self.cycle_base)
        if partial:
            end.append(now)
            base.append(self.base * self.tau1)
        w, jobs = self.w, self.jobs
        if jobs and now > self.t0:
            w += (now - self.t0) / self.d
        seq_time, seq_iters = self.seq_time, self.seq_iters
        for j in jobs:
            if j.start < now:
                seq_time += now - j.start
                seq_iters += max(0.0, w - j.work0)
        self.snap = CycleLog(np.asarray(end), np.asarray(base), self.out, self.tokens, self.accepted, self.decisive,
                             seq_time, seq_iters, self.wasted, self.peak, self.engine, 0, 0.0)

    # -- the scheduler (AsyncRun)

    def _new_stage(self, now: float) -> None:
        if self.work.set_context(self.in_request):  # EventRun.set_context
            self._reprice(now)
            self.tau1, self.dpass = self.work.tau1, self.work.draft_pass[1]
        self.sid += 1
        self.V = self.drafted = self.started = 0
        self.sjobs, self.sdl, self.left, self.verd, self.base = [], [], [self.rem], {}, 0.0
        self.drafting = False
        self._pump(now)

    _BLOCK = 256  # steps per block of lengths and passes

    def _lengths(self, fixed: int | None, draws, n: int) -> list[int]:
        return [fixed] * n if fixed is not None else draws.take(n).tolist()

    def _pump(self, now: float) -> None:
        k1, left, drafted = self.k1, self.left, self.drafted
        limit = self.V + k1
        if not self.drafting and drafted < limit and k1 > 1 and left[drafted] > 0:
            if self.dblock is not None:  # the next draft step's length and passes, from the block
                i = self.di
                if i >= len(self.dL):
                    self.dL = self._lengths(self.dfixed, self.dlen, self._BLOCK)
                    self.dP, i = self.dblock.truncated_many(self.dL), 0
                L, passes = self.dL[i], self.dP[i]
                self.di = i + 1
                d = passes * self.dpass + 0.0
            else:
                cap = left[drafted]
                L = self.dfixed if self.dfixed is not None else self.dlen()
                if cap < L:  # min(L, cap)
                    L = cap
                # Workload.draft (W = 1, no prefill)
                d = (self.dpasses_one(L)[0] if self.dstream else L) * self.dpass + 0.0
            self.drafting = True
            self.sdl.append(L)
            left.append(left[-1] - L)
            self.seq += 1
            heappush(self.heap, (now + d, self.seq, False, self.sid, drafted))
        started = self.started
        if started <= drafted and started < limit and left[started] > 0:
            new, sid, tlen, tone, verdicts, fixed = [], self.sid, self.tlen, self.tone, self.verdicts, self.tfixed
            block = self.tblock
            while started <= drafted and started < limit and left[started] > 0:
                j = _Job()
                if block is not None:  # the next target step's length and passes, from the block
                    i = self.ti
                    if i >= len(self.tL):
                        self.tL = self._lengths(fixed, tlen, self._BLOCK)
                        self.tP, i = block.truncated_many(self.tL), 0
                    j.tokens, j.passes = self.tL[i], self.tP[i]
                    self.ti = i + 1
                else:
                    cap = left[started]
                    L = fixed if fixed is not None else tlen()
                    if cap < L:
                        L = cap
                    j.tokens, j.passes = L, tone(L)[0]
                j.pos = started
                j.state, j.wasted, j.sid, j.first = PENDING, False, sid, verdicts()
                new.append(j)
                started += 1
            self.started = started
            self.sjobs += new
            self._submit(new, now)

    def _on_target(self, job: _Job, now: float) -> None:
        if job.sid != self.sid:
            return
        if self.k1 == 1:  # target-only: its step is the output, a stage per step
            self.base += job.tokens
            self.out += 1
            self.tokens += job.tokens
            self._advance_request(job.tokens)
            self._end_stage(0, now)
        elif job.pos < self.drafted:
            self._verify(job.pos, now)

    def _verify(self, pos: int, now: float) -> None:
        v = self.vtime() if self.vtime is not None else 0.0
        if v <= 0:
            self._on_verdict(pos, now)
            return
        self.seq += 1
        heappush(self.heap, (now + v, self.seq, True, self.sid, pos))

    def _on_verdict(self, pos: int, now: float) -> None:
        verd, sjobs = self.verd, self.sjobs
        verd[pos] = sjobs[pos].first
        while self.V < self.started and self.V in verd:  # commit the verified prefix in order
            j = self.V
            job = sjobs[j]
            self.decisive += 1
            self.base += job.tokens
            if verd[j] < 0:  # rejected: keep the target's step, drop everything built on draft j
                self.out += 1
                self.tokens += job.tokens
                self._advance_request(job.tokens)
                self._end_stage(j, now)
                return
            L = self.sdl[j]
            self.out += 1
            self.tokens += L
            self.accepted += 1
            self.V += 1
            if self.out >= self.target and self.snap is None:
                self._checkpoint(now, True)
            if self._advance_request(L):  # the request is done: its look-ahead is waste
                self._end_stage(j, now)
                return
        self._pump(now)

    def _advance_request(self, tokens: int) -> bool:
        self.rem -= tokens
        if self.finite:
            self.in_request += tokens
        if self.rem <= 0:
            self.rem = self.work.next_request()
            self.in_request = 0
            return True
        return False

    def _end_stage(self, r: int, now: float) -> None:
        self.drafting = False  # a draft in progress is abandoned (its completion is dropped)
        rest = self.sjobs[r + 1:]
        self._cancel([j for j in rest if j.state == PENDING or j.state == RUNNING], now)
        for j in rest:
            if j.state == DONE:
                self.wasted += j.work
        self.cycle_end.append(now)  # EventRun.end_cycle
        self.cycle_base.append(self.base * self.tau1)
        if self.out >= self.target and self.snap is None:
            self._checkpoint(now, False)
        self._new_stage(now)

    # -- the target server (TargetServer, the same operations in the same order)

    def _fire(self) -> None:
        now = self.due
        jobs = self.jobs
        if jobs and now > self.t0:
            self.w += (now - self.t0) / self.d
        self.t0 = now
        self.due = self.wake_at = _INF
        w = self.w
        r = round(w)
        boundary = abs(w - r) <= 1e-9 * (w if w > 1.0 else 1.0)  # _tol(w): the work clock is >= 0
        if boundary and self.grid:
            self.w = w = float(r)
        lim = w + 1e-9 * (w if w > 1.0 else 1.0)
        finished = None
        left = False  # sequences left: the batch (and iteration time) may have changed
        if self.nf <= lim:
            finished = [j for j in jobs if j.finish <= lim]
            self.jobs = jobs = [j for j in jobs if j.finish > lim]
            for j in finished:
                self._remove(j, j.finish, now)
            self.nf = min([j.finish for j in jobs]) if jobs else _INF
            left = True
        if self.leaving and boundary:
            for j in self.leaving:
                if j in jobs:
                    jobs.remove(j)
                    self._remove(j, w, now)
            self.leaving = []
            self.nf = min([j.finish for j in jobs]) if jobs else _INF
            left = True
        if self.pending and (boundary or not jobs):
            if not jobs:
                x = self.w
                self.w = w = float(math.ceil(x - 1e-9 * (x if x > 1.0 else 1.0)))
            pend, self.pending = self.pending, []
            self._admit(pend, w, now)  # sets the iteration time
        elif left:
            self._set_d()  # (TargetServer sets it on every wake-up: the same value when nothing changed)
        if finished:
            self.deferred = True
            done = [j for j in finished if j.state == RUNNING]
            for j in done:
                j.state = DONE
            for j in done:  # a callback may end the stage of the others: they check for that
                self._on_target(j, now)
            self.deferred = False
        # _plan(now), inlined: nothing planned since the wake-up (callbacks run deferred), so wake_at is inf
        jobs = self.jobs
        if jobs:
            w = self.w
            nxt = self.nf - w  # iterations to the next finish
            if self.pending or self.leaving:
                nxt = min(nxt, float(math.ceil(w - 1e-9 * (w if w > 1.0 else 1.0))) - w)  # or to the next boundary
            t = now + (nxt if nxt > 0.0 else 0.0) * self.d
            self.wake_at = t
            self.due = now + (t - now)

    def _remove(self, j: _Job, w: float, t: float) -> None:
        jw = w - j.work0
        if not jw > 0.0:  # max(0.0, w - work0)
            jw = 0.0
        j.work = jw
        if not (jw <= 0 and j.finish > j.work0):  # else it never ran an iteration
            self.seq_time += t - j.start
        self.seq_iters += jw
        if j.wasted:
            self.wasted += jw

    def _admit(self, jobs: list[_Job], w0: float, t: float) -> None:
        nf = self.nf
        for j in jobs:
            j.work0, j.finish, j.start, j.state = w0, w0 + j.passes, t, RUNNING
            if j.finish < nf:
                nf = j.finish
        self.nf = nf
        running = self.jobs
        running.extend(jobs)
        b = len(running)  # _set_d(), inlined
        d = self._d.get(b)
        if d is None:
            d = self._d[b] = self.work.iteration_time(b)
        self.d = d
        if b > self.peak:
            self.peak = b

    def _set_d(self) -> None:
        b = len(self.jobs)
        if b:
            d = self._d.get(b)
            if d is None:
                d = self._d[b] = self.work.iteration_time(b)
            self.d = d
            if b > self.peak:
                self.peak = b

    def _submit(self, jobs: list[_Job], now: float) -> None:
        running = self.jobs
        if running:
            if now > self.t0:
                self.w += (now - self.t0) / self.d
            self.t0 = now
            w = self.w
            if self.grid and abs(w - round(w)) > 1e-9 * (w if w > 1.0 else 1.0):  # not on a boundary: wait for it
                self.pending.extend(jobs)
                if not self.deferred:
                    self._plan(now)
                return
        else:
            self.t0 = now
            if self.grid:  # an idle server starts a fresh iteration
                x = self.w
                self.w = float(math.ceil(x - 1e-9 * (x if x > 1.0 else 1.0)))
            w = self.w
        nf = self.nf
        for j in jobs:  # _admit(jobs, w, now), inlined
            j.work0, j.finish, j.start, j.state = w, w + j.passes, now, RUNNING
            if j.finish < nf:
                nf = j.finish
        self.nf = nf
        running.extend(jobs)
        b = len(running)
        d = self._d.get(b)
        if d is None:
            d = self._d[b] = self.work.iteration_time(b)
        self.d = d
        if b > self.peak:
            self.peak = b
        if not self.deferred:  # _plan(now), inlined (jobs is not empty)
            nxt = self.nf - w
            if self.pending or self.leaving:
                nxt = min(nxt, float(math.ceil(w - 1e-9 * (w if w > 1.0 else 1.0))) - w)
            t = now + (nxt if nxt > 0.0 else 0.0) * d
            if t < self.wake_at:
                self.wake_at = t
                self.due = now + (t - now)

    def _cancel(self, jobs: list[_Job], now: float) -> None:
        if self.jobs and now > self.t0:
            self.w += (now - self.t0) / self.d
        self.t0 = now
        w = self.w
        at_once = not self.grid or abs(w - round(w)) <= 1e-9 * (w if w > 1.0 else 1.0)
        removed = False
        for j in jobs:
            j.wasted = True
            if j.state == PENDING:
                self.pending.remove(j)
            elif j.state == RUNNING:
                if at_once:
                    self.jobs.remove(j)
                    self._remove(j, self.w, now)
                    removed = True
                else:
                    self.leaving.append(j)
            j.state = CANCELLED
        if removed:
            self.nf = min([j.finish for j in self.jobs]) if self.jobs else _INF
        self._set_d()
        if not self.deferred:
            self._plan(now)

    def _reprice(self, now: float) -> None:
        if self.jobs and now > self.t0:
            self.w += (now - self.t0) / self.d
        self.t0 = now
        self._d.clear()
        self._set_d()
        self._plan(now)

    def _plan(self, now: float) -> None:
        if self.deferred:
            return
        jobs = self.jobs
        if not jobs:
            self.due = self.wake_at = _INF
            return
        w = self.w
        nxt = self.nf - w  # iterations to the next finish
        if self.pending or self.leaving:
            nxt = min(nxt, float(math.ceil(w - 1e-9 * (w if w > 1.0 else 1.0))) - w)  # or to the next boundary
        t = now + (nxt if nxt > 0.0 else 0.0) * self.d
        if t >= self.wake_at:
            return  # the live wake-up comes first and plans again
        self.wake_at = t
        self.due = now + (t - now)  # the time SimPy would give the event: the same float sum
