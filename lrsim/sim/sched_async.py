"""Asynchronous (pipelined) Lookahead Reasoning on the event engine.

Target step ``j`` starts as soon as draft ``j - 1`` exists (step 0 at once);
drafter and target look at most ``k1`` positions past the last verified one;
position ``j`` is verified when draft and target ``j`` both exist; the
verified prefix is committed in order.  The first rejection commits the
target's step there, cancels everything built on the rejected draft and
starts a new *stage*.  ``k1 = 1`` is target-only (a stage per step).  With finite requests, the
step that completes a request ends its stage as a rejection would (the
next request starts with an empty pipeline); async steps are not cut at the
request's end.

Drafter and verifier events call the server's ``catch_up`` first, so the
target's completions at the same instant come first (the tie rule of
:mod:`.servers`).
"""

from __future__ import annotations

from simpy import Timeout

from .events import EventRun
from .servers import DONE, PENDING, RUNNING, Job


class Stage:
    """Async state between two rejections."""

    __slots__ = ("sid", "t0", "drafted", "started", "V", "jobs", "drafts", "verdicts", "base", "left")

    def __init__(self, sid: int, t0: float, left: float):
        self.sid, self.t0 = sid, t0
        self.drafted = self.started = self.V = 0  # drafts done, targets started, verified-accepted prefix
        self.jobs: list[Job] = []
        self.drafts: list[list] = []  # per position: [start, end, lengths, batch, cancelled]
        self.left = [left]  # left[j]: tokens the request has left for position j (after drafts 0..j-1)
        self.verdicts: dict[int, tuple] = {}  # position -> (first accepted branch, row, verify start, end)
        self.base = 0.0


class AsyncRun(EventRun):
    """Pipelined stages; everything happens in event callbacks."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.sid = 0
        self.st: Stage | None = None
        self.drafting = False

    def main(self):
        self._new_stage(self.env.now)
        yield self.done

    def current_drafts(self) -> list:
        return self.st.drafts if self.st is not None else []

    def reused(self, pos: int, draft_tokens: int) -> float:
        """Row ``pos`` starts once draft ``pos - 1`` exists; the row at ``pos - 1`` has by then written part of the
        target's own step there, and the draft repeats its first ``overlap x`` tokens (``SimConfig.overlap_*``, by
        that draft's verdict): that much of the draft need not be prefilled (lrref's per-sequence KV copies the
        longest common prefix)."""
        prev = self.st.jobs[pos - 1] if pos - 1 < len(self.st.jobs) else None
        if prev is None:
            return 0.0
        share = self.work.overlap(prev.verdict[0] >= 0)
        if share <= 0:
            return 0.0
        return min(self.srv.written_so_far(prev), share * min(draft_tokens, prev.tokens))

    # ``now`` is passed along: SimPy's clock is a property, read once per event

    def _new_stage(self, now: float) -> None:
        self.set_context()
        self.sid += 1
        self.st = Stage(self.sid, now, self.rem)  # every step is cut at the tokens its request has left
        self.drafting = False
        self._pump(now)

    def _pump(self, now: float) -> None:
        """Start whatever the gates allow: the drafter and target steps within the look-ahead."""
        st, k1 = self.st, self.cfg.k1
        if self.stopped:
            return
        limit = st.V + k1  # look at most k1 positions past the last verified one
        # k1 = 1: nothing to look ahead; a finite request: nothing past its last token
        if not self.drafting and st.drafted < limit and k1 > 1 and st.left[st.drafted] > 0:
            ev, rec = self.draft(0, st.left[st.drafted], now)
            self.drafting = True
            st.drafts.append(rec)
            st.left.append(st.left[-1] - rec[2][0])
            ev.sid, ev.pos = st.sid, st.drafted
            ev.callbacks.append(self._on_draft)
        if st.started <= st.drafted and st.started < limit and st.left[st.started] > 0:  # target j: drafts 0..j-1
            new = []
            while st.started <= st.drafted and st.started < limit and st.left[st.started] > 0:
                job = self.target_job(st.started, cap=st.left[st.started])
                job.sid, job.on_done = st.sid, self._on_target
                job.verdict = self.work.verdicts()  # drawn in position order, whatever order verification runs in
                new.append(job)
                st.started += 1
            st.jobs += new
            self.srv.submit(new)

    def _on_draft(self, ev: Timeout) -> None:
        now = ev.t
        if self.srv.due <= now:  # the tie rule: the target's completions now come first
            self.srv.catch_up()
        if ev.sid != self.sid or self.stopped:
            return
        st = self.st
        self.drafting = False
        st.drafted = ev.pos + 1
        if ev.pos < st.started and st.jobs[ev.pos].state == DONE:
            self._verify(ev.pos, now)
        self._pump(now)

    def _on_target(self, job: Job, now: float) -> None:
        if job.sid != self.sid or self.stopped:
            return
        if self.cfg.k1 == 1:  # target-only: its step is the output, a stage per step
            self.st.base += job.tokens
            self.commit(0, job.tokens, 1)
            self.advance_request(job.tokens)
            self._end_stage(0, now)
        elif job.pos < self.st.drafted:
            self._verify(job.pos, now)

    def _verify(self, pos: int, now: float) -> None:
        v = self.vtime() if self.vtime is not None else 0.0
        if v <= 0:
            self._on_verdict(pos, now, now)
            return
        ev = self.verify(v, now)
        ev.sid, ev.pos, ev.t0 = self.sid, pos, now
        ev.callbacks.append(self._on_verify_event)

    def _on_verify_event(self, ev: Timeout) -> None:
        if self.srv.due <= ev.t:  # the tie rule: the target's completions now come first
            self.srv.catch_up()
        if ev.sid == self.sid and not self.stopped:
            self._on_verdict(ev.pos, ev.t0, ev.t)

    def _on_verdict(self, pos: int, t0: float, now: float) -> None:
        st = self.st
        st.verdicts[pos] = st.jobs[pos].verdict + (t0, now)
        while st.V < st.started and st.V in st.verdicts:  # commit the verified prefix in order
            j = st.V
            first = st.verdicts[j][0]
            job = st.jobs[j]
            self.decisive += 1
            st.base += job.tokens
            if first < 0:  # rejected: keep the target's step, drop everything built on draft j
                self.commit(0, job.tokens, 1)
                self.advance_request(job.tokens)
                self._end_stage(j, now)
                return
            self.commit(1, st.drafts[j][2][first], 1)
            st.V += 1
            if self.finished():
                self._finish_stage(now)
                return
            if self.advance_request(st.drafts[j][2][first]):  # the request is done: its look-ahead is waste
                self._end_stage(j, now, rejected=False)
                return
        self._pump(now)

    def _end_stage(self, r: int, now: float, rejected: bool = True) -> None:
        """The stage ends at position ``r``: the target's step there is the last output (rejection, or k1 = 1),
        or (``rejected`` False) the accepted draft there ended its request."""
        st, srv = self.st, self.srv
        self.target_written(st.jobs[r])
        if self.drafting:
            st.drafts[-1][1], st.drafts[-1][4] = now, True  # the draft in progress is abandoned
            self.drafting = False
            self.abandon(st.drafts[-1])
        srv.cancel([j for j in st.jobs[r + 1:] if j.state in (PENDING, RUNNING)])
        for j in st.jobs[r + 1:]:
            if j.state == DONE:
                srv.add_waste(j)
        if self.rec is not None:
            self.rec.stage(len(self.cycle_end), st, r if rejected else r + 1, rejected)
        self.end_cycle(st.base, now)
        if not self.stopped:
            self._new_stage(now)

    def _finish_stage(self, now: float) -> None:
        """The run ends inside a stage: close it as a (partial) cycle; nothing in it was rejected."""
        if self.rec is not None:
            self.rec.stage(len(self.cycle_end), self.st, self.st.V, False)
        self.end_cycle(self.st.base, now)
