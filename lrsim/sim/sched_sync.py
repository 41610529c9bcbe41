"""Synchronous Lookahead Reasoning (Algorithm 1) on the event engine.

A cycle: the drafter writes ``k1 - 1`` steps back to back; the target writes
``k1`` steps (one per prefix) in one batch; the verifier checks the pairs;
the output is the drafts up to the first rejection ``x`` plus the target's
step at ``x``.  With finite requests every step is cut at the tokens its
request has left.
"""

from __future__ import annotations

import numpy as np

from .events import EventRun


class SyncRun(EventRun):
    """Algorithm 1, one cycle after another (every cycle starts with an idle target)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.drafts: list[list] = []  # the current cycle's drafts

    def current_drafts(self) -> list:
        return self.drafts

    def main(self):
        env, k1 = self.env, self.cfg.k1
        while True:
            self.set_context()
            self.drafts = drafts = []  # this cycle's drafts: [start, end, lengths, batch, abandoned]
            used = 0  # tokens of the drafts so far (they come out of the request's budget)
            for j in range(k1 - 1):  # k1 - 1 drafts back to back on the drafter
                if used >= self.rem:  # the previous draft used up the request: nothing to look ahead
                    break
                ev, rec = self.draft(j, self.rem - used, env.now)
                drafts.append(rec)
                used += rec[2][0]
                yield ev
            nd = len(drafts)
            # the target writes one step per prefix with budget left (k1 steps without a request cap), one batch
            caps = [self.rem - sum(dr[2][0] for dr in drafts[:j]) for j in range(nd + 1)]
            jobs = [self.target_job(j, cap=c) for j, c in enumerate(caps) if c > 0]
            v0 = yield self.srv.run(jobs)  # the batch's last finish: the verifier starts
            verdicts = [self.work.verdicts() for _ in range(nd)]  # (verdicts and verifier times: separate streams)
            x = next((j for j, v in enumerate(verdicts) if v[0] < 0), nd)  # first rejection, or nd
            verdicts = yield from self._verify(verdicts, x, v0)
            self._output(drafts, jobs, verdicts, x)
            if self.stopped:
                return

    def _verify(self, verdicts: list, x: int, v0: float):
        """Run the verifier from ``v0`` (a process fragment); the verdicts with their verify start and end."""
        env, nd = self.env, len(verdicts)
        if self.cfg.verify_calls == "per_pair":
            calls = [self.work.verify_time() for _ in range(nd)]
            ends = v0 + np.cumsum([0.0] + calls[:min(x + 1, nd)])  # pairs 0..x, one after another
            verdicts = [v + (float(ends[j]), float(ends[j + 1])) if j <= x else v + (None, None)
                        for j, v in enumerate(verdicts)]
            if ends[-1] > v0:
                yield self.verify(float(ends[-1] - v0), env.now)
            return verdicts
        if nd and self.work.vtime is not None:
            yield self.verify(self.work.vtime(), env.now)  # one verifier call checks all pairs
        return [v + (v0, env.now) for v in verdicts]

    def _output(self, drafts: list, jobs: list, verdicts: list, x: int) -> None:
        """Commit drafts ``0..x-1`` and the target's step at ``x``; the rest of the batch is waste."""
        nd = len(drafts)
        self.decisive += min(x + 1, nd)
        tokens = sum(drafts[j][2][verdicts[j][0]] for j in range(x))
        steps = x
        if x < len(jobs):  # the target's step at x (a rejection, or the bonus step after nd accepted drafts)
            tokens += jobs[x].tokens
            steps += 1
            self.target_written(jobs[x])
        base = sum(jobs[j].tokens for j in range(min(x + 1, len(jobs))))  # target's own output-position steps
        for job in jobs[x + 1:]:
            self.srv.add_waste(job)  # written from a prefix with a rejected draft
        self.commit(x, tokens, steps)
        if self.rec is not None:
            self.rec.cycle(len(self.cycle_end), drafts, jobs, verdicts, x)
        self.advance_request(tokens)  # a request that is done makes way for the next one, with its own budget
        self.end_cycle(base)
