"""A continuous-batching engine (vLLM's iteration-level scheduler) on a work clock, shared by many requests.

**Iterations.** Every iteration advances each running row by one pass and
costs ``T(rows, positions, mean context)`` (:mod:`.pricing`).  A row is a
:class:`Row`: ``prefill`` tokens to process first (a prompt, or the draft
tokens an LR target row has not seen), then ``passes`` decode passes of ``q``
positions (1, or ``k2`` with token-level SD).  Following vLLM's scheduler
with chunked prefill, decode rows are scheduled first and prefill rows share
what is left of ``max_num_batched_tokens`` first come, first served (a long
prompt is cut into chunks); the iteration with a row's last prefill chunk
also runs its first decode pass (``q - 1`` more positions), as the logits of
the last prefilled position give the first new token.

**Work clock.** Between changes of the batch (a row joins, finishes, leaves,
moves from prefill to decode, or its chunk changes) every iteration costs the
same, so the engine jumps over the whole segment with one SimPy event, as
:class:`lrsim.sim.servers.TargetServer` does.  The context grows by the
tokens each pass writes; a context-aware price is refreshed at least every
``reprice`` iterations (priced at the segment's start).  A row submitted in
the middle of an iteration joins at the next iteration boundary; a cancelled
row finishes the current iteration and leaves there.  An idle engine starts a
fresh iteration at once.

**Tie rule.** As in :mod:`lrsim.sim.servers`: the engine remembers when its
live wake-up is due (``due``), and :meth:`BatchEngine.catch_up` processes a
wake-up due now before anything else; the schedulers call it first in their
drafter and verifier callbacks.  SimPy's public API only.
"""

from __future__ import annotations

import math

import simpy
from simpy import Timeout

from ..sim.servers import CANCELLED, DONE, PENDING, RUNNING, Job, TargetServer, pro_rata
from .pricing import Pricer

TOL = 1e-9


class Row(Job):
    """One sequence on a :class:`BatchEngine`; ``on_done(row, now)`` is called when its last pass is done."""

    __slots__ = ("q", "ctx", "grow", "chunk", "seen", "owner")

    def __init__(self, pos: int, tokens: int, passes: float, written: int, prefill: int = 0, q: int = 1,
                 ctx: float = 0.0):
        super().__init__(pos, tokens, passes, written, prefill)  # prefill: tokens still to prefill, chunk by chunk
        self.q, self.ctx = q, ctx  # positions per pass, cached tokens
        self.grow = written / passes if passes else 0.0  # context tokens each decode pass adds
        self.chunk = self.seen = 0  # prefill tokens this iteration, prefill tokens done
        self.work = 0.0  # iterations this row has been in (prefill and decode)
        self.owner = None


class EngineStats:
    """What the engine did: busy time, iterations, rows and positions per iteration, waste."""

    __slots__ = ("busy", "iterations", "row_iters", "positions", "wasted_iters", "wasted_tokens", "tokens", "peak")

    def __init__(self) -> None:
        self.busy = self.iterations = self.row_iters = self.positions = 0.0
        self.wasted_iters = self.wasted_tokens = self.tokens = 0.0
        self.peak = 0

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}


class BatchEngine:
    """Continuous batching with chunked prefill on a work clock (see the module docstring)."""

    def __init__(self, env: simpy.Environment, price: Pricer, budget: float = math.inf,
                 reprice: float = math.inf, max_rows: float = math.inf):
        self.env, self.price, self.budget, self.max_rows = env, price, budget, max_rows
        self.reprice = math.inf if price.context_free else reprice  # a context-free price never drifts
        self.decode: list[Row] = []  # rows in their decode passes
        self.prefill: list[Row] = []  # rows still prefilling, first come first served
        self.pending: list[Row] = []  # join at the next boundary with a free row, first come first served
        self.leaving: list[Row] = []  # cancelled mid-iteration: leave at the next boundary
        self.work = 0  # iterations run up to the current segment's start (an integer)
        self.t0 = 0.0  # the current segment's start time
        self.d = 0.0  # seconds per iteration in the current segment
        self.n = 0  # iterations the current segment runs unless something interrupts it
        self.rows = 0  # rows in the current segment's iterations
        self.pos = 0.0  # positions per iteration in the current segment
        self.token = 0  # id of the live wake-up; older ones are stale
        self.due = math.inf  # when the live wake-up is due (SimPy's now + delay)
        self.deferred = False
        self.stats = EngineStats()
        self.partner: BatchEngine | None = None  # another engine on this device (a colocated drafter)
        self.own_d = 0.0  # seconds per iteration of this engine's own batch (d without the partner's share)
        self.stalled_until = -math.inf  # the device runs a colocated verifier's passes until then
        self.credit = 0.0  # seconds of an interrupted iteration already run (a stall resumes it)

    # -- what schedulers call

    def submit(self, rows: list[Row]) -> None:
        """Add rows: at once if the engine is idle or at an iteration boundary, else at the next boundary."""
        for r in rows:
            r.state = PENDING
        self.pending.extend(rows)
        self._changed()

    run = TargetServer.run  #: submit rows; an event that fires with the last finish's time when all are done

    def cancel(self, rows: list[Row]) -> None:
        """Drop rows: pending ones at once, running ones after the current iteration (their work is waste)."""
        for r in rows:
            r.wasted = True
            if r.state == PENDING:
                self.pending.remove(r)
                r.state = CANCELLED
            elif r.state == RUNNING:
                r.state = CANCELLED
                self.leaving.append(r)
        self._changed()

    def add_waste(self, row: Row) -> None:
        """A finished row whose result was thrown away."""
        self.stats.wasted_iters += row.work
        self.stats.wasted_tokens += row.written

    def written_so_far(self, row: Row) -> float:
        """Tokens ``row`` has written by now: its decode passes so far, pro rata of its tokens."""
        if row.state == DONE:
            return float(row.written)
        if row.state != RUNNING or row.prefill > 0 or not row.passes or row not in self.decode:
            return 0.0
        k = math.floor((self.env.now - self.t0) / self.d + TOL) if self.d > 0 else 0  # iterations in this segment
        return pro_rata(row.written, self.work + k - row.work0, row.passes)

    def catch_up(self) -> None:
        """Process a wake-up due now before anything else happens at this instant (the tie rule)."""
        while self.due <= self.env.now:
            self._fire()

    @property
    def busy(self) -> bool:
        return bool(self.decode or self.prefill or self.leaving)

    # -- sharing the device (colocated roles)

    def share_with(self, other: BatchEngine) -> None:
        """Put ``other`` on this engine's device: while both run, they take turns an iteration each, so each
        iteration of either lasts its own time plus the other's (kernels of two engines on one GPU add up)."""
        self.partner, other.partner = other, self

    def stall(self, now: float, seconds: float) -> float:
        """Another role runs ``seconds`` of passes on this device from ``now`` (after the stalls already queued):
        this engine's clock stops meanwhile (kernels of two processes on one GPU take turns; their times add up,
        and the iteration in progress keeps what it had done).  Returns when the other role's passes end."""
        start = max(now, self.stalled_until)
        self.stalled_until = start + seconds
        if not self.busy or self.deferred or self.d <= 0:
            return self.stalled_until  # the next segment starts after it (_plan)
        if self.t0 > now:  # already waiting for an earlier stall: this one queues after it
            self.t0 += seconds
            self._schedule(self.t0 + self.n * self.d)
            return self.stalled_until
        k = min(math.floor((now - self.t0) / self.d + TOL), self.n)  # whole iterations done
        b = self.t0 + k * self.d
        self._close_segment(k, b)
        self.credit = now - b  # what the iteration in progress had done: it resumes, not restarts
        self._settle_all(now)
        return self.stalled_until

    def partner_changed(self) -> None:
        """The partner's batch changed: reprice from the next iteration boundary (at once if idle)."""
        if not self.busy or self.deferred or self.d <= 0:
            return
        k = math.ceil((self.env.now - self.t0) / self.d - TOL)
        if 0 <= k < self.n:
            self.n = k
            self._schedule(self.t0 + k * self.d)

    # -- the work clock

    def _boundary_now(self) -> int | None:
        """Iterations since the segment's start if now is an iteration boundary, else None."""
        if not self.busy:
            return 0
        k = (self.env.now - self.t0) / self.d
        kr = round(k)
        return kr if abs(k - kr) <= TOL * max(1.0, k) else None

    def _changed(self) -> None:
        """Rows were added or cancelled: act now at a boundary, else wake up at the next one."""
        if self.deferred:
            return  # inside a wake-up: it plans once its callbacks are done
        if self.due <= self.env.now:
            self._fire()  # the tie rule: the wake-up due now comes first (it also takes the new rows in)
            return
        k = self._boundary_now()
        if k is not None and k >= self.n > 0:
            self._fire()  # the planned wake-up, reached up to rounding: the same as its event, a hair early
            return
        if k is not None:
            self._close_segment(k, self.env.now)
            self._settle_all(self.env.now)
            return
        if not self._room() and not self.leaving:
            return  # a full engine: pending rows join when a row leaves (an event of its own)
        k = math.ceil((self.env.now - self.t0) / self.d)  # the next boundary
        if k < self.n:
            self.n = k
            self._schedule(self.t0 + k * self.d)

    def _schedule(self, t: float) -> None:
        """Make a wake-up at ``t`` the live one."""
        now = self.env.now
        self.token += 1
        ev = Timeout(self.env, max(t - now, 0.0))
        ev.token = self.token
        ev.callbacks.append(self._fire)
        self.due = now + max(t - now, 0.0)  # the time SimPy gives the event: the same float sum

    def _fire(self, ev: Timeout | None = None) -> None:
        """The live wake-up (``ev``: its event; None: from :meth:`catch_up`): the segment's planned end."""
        if ev is None:
            self.token += 1  # catch_up got here first: the live event is now stale
        elif ev.token != self.token:
            return
        now = self.due
        self.due = math.inf
        self._close_segment(self.n, now)
        self._settle_all(now)

    def _settle_all(self, now: float) -> None:
        """At a boundary: settle, call back the finished rows (their callbacks may submit or cancel rows, which
        act at this boundary), until nothing more finishes now; then plan the next segment."""
        self.deferred = True
        done = self._settle(now)
        while done:
            for r in done:
                r.on_done(r, now)
            done = self._settle(now)
        self.deferred = False
        self._plan(now)

    def _close_segment(self, k: int, now: float) -> None:
        """``k`` iterations of the current segment ran: book them, advance prefills, move the clock."""
        st = self.stats
        st.busy += k * self.own_d  # this engine's own time (a colocated partner's share is the partner's)
        st.iterations += k
        st.row_iters += k * self.rows
        st.positions += k * self.pos
        for r in self.prefill:
            if r.chunk:
                r.seen += r.chunk * k
                r.prefill -= r.chunk * k
                r.work += k
        self.work += k
        self.t0 = now
        self.n = 0

    def _settle(self, now: float) -> list[Row]:
        """At a boundary: finished prefills start decoding, finished and cancelled rows leave, pending rows join.

        Returns the rows that finished now (their callbacks are the caller's).
        """
        w = self.work
        for r in [r for r in self.prefill if r.prefill <= 0]:
            self.prefill.remove(r)
            r.work0 = w - 1  # its last prefill iteration ran its first pass
            r.finish = w - 1 + r.passes
            self.decode.append(r)
        done = [r for r in self.decode if r.finish <= w and r.state == RUNNING]
        if done:
            self.decode = [r for r in self.decode if r.finish > w or r.state != RUNNING]
        for r in done:
            self._book(r, w, now)
            r.state = DONE
        if self.leaving:
            self._leave(w, now)
        if self.pending:
            self._join(w, now)
            now_done = [r for r in self.decode if r.finish <= w and r.state == RUNNING]  # steps of 0 passes
            if now_done:
                self.decode = [r for r in self.decode if r.finish > w or r.state != RUNNING]
                for r in now_done:
                    self._book(r, w, now)
                    r.state = DONE
                done += now_done
        return done

    def _book(self, r: Row, w: int, now: float) -> None:
        """A row leaves at work ``w``: its decode iterations and tokens."""
        passes = max(0.0, min(w, r.finish) - r.work0) if r.prefill <= 0 else 0.0
        r.work += passes
        r.end = now
        written = r.grow * passes
        self.stats.tokens += written
        if r.wasted:
            self.stats.wasted_iters += r.work
            self.stats.wasted_tokens += written

    def _leave(self, w: int, now: float) -> None:
        for r in self.leaving:
            if r in self.decode:
                self.decode.remove(r)
                self._book(r, w, now)
            elif r in self.prefill:
                self.prefill.remove(r)
                self.stats.wasted_iters += r.work
        self.leaving = []

    def _room(self) -> bool:
        return len(self.decode) + len(self.prefill) < self.max_rows

    def _join(self, w: int, now: float) -> None:
        """Pending rows join, first come first served, while the engine has rows to spare (``max_rows``)."""
        n = 0
        for r in self.pending:
            if not self._room():
                break
            n += 1
            r.state, r.start = RUNNING, now
            if r.prefill > 0:
                self.prefill.append(r)
            else:
                r.work0, r.finish = w, w + r.passes
                self.decode.append(r)
        del self.pending[:n]

    # -- planning a segment

    def _plan(self, now: float) -> None:
        """Price the batch as it is now and schedule the end of the segment (the next change)."""
        self.token += 1  # any live wake-up is stale
        self.due = math.inf
        now = max(now, self.stalled_until - self.credit)  # a colocated verifier holds the device until then
        self.credit = 0.0
        self.t0 = now
        if not (self.decode or self.prefill):
            was = self.own_d
            self.n, self.d, self.rows, self.pos, self.own_d = 0, 0.0, 0, 0.0, 0.0
            if was and self.partner is not None:
                self.partner.partner_changed()
            return
        w = self.work
        rows, pos, ctx, n = len(self.decode), 0.0, 0.0, self.reprice
        for r in self.decode:
            pos += r.q
            ctx += r.ctx + r.grow * (w - r.work0)  # the context grows by the tokens each pass writes
            n = min(n, r.finish - w)
        left = self.budget - pos
        for r in self.prefill:  # chunked prefill: what the decode rows leave of the token budget, in order
            c = min(r.prefill, left) if left > 0 else 0
            r.chunk = c
            if c > 0:
                left -= c
                rows += 1
                pos += c
                ctx += r.ctx + r.seen
                if c >= r.prefill:
                    pos += r.q - 1  # the last chunk's iteration also runs the row's first pass
                    n = 1
                else:
                    n = min(n, math.ceil(r.prefill / c) - 1)  # until its last chunk
        self.rows, self.pos = rows, pos
        self.stats.peak = max(self.stats.peak, rows)
        was, self.own_d = self.own_d, self.price(rows, pos, ctx / rows)
        share = self.partner.own_d if self.partner is not None and self.partner.busy else 0.0
        self.d = self.own_d + share  # a colocated partner's iteration in between each of ours
        self.n = int(max(1, n))
        self._schedule(now + self.n * self.d)
        if self.partner is not None and was != self.own_d:
            self.partner.partner_changed()
