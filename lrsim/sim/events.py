"""The event engine's common part: a run on SimPy events, whatever the scheduler.

A scheduler (:mod:`.sched_ar`, :mod:`.sched_sync`, :mod:`.sched_async`)
subclasses :class:`EventRun` and gives its SimPy process in :meth:`main`;
this class holds the environment, the target server, the counters and the
trace rows, and returns the run's :class:`~.results.CycleLog`.

A run owns its environment, target server, drafter and verifier unless it is
given them: :mod:`lrsim.serve` runs one instance per request on a shared
environment and a shared target server, and overrides :meth:`EventRun.draft`,
:meth:`EventRun.verify` and :meth:`EventRun.finished` to use shared engines.
"""

from __future__ import annotations

import math
import time

import numpy as np
import simpy
from simpy import Timeout

from .config import SimConfig
from .export import Recorder
from .results import CycleLog
from .servers import FixedRateServer, Job, TargetServer
from .workload import Workload


class EventRun:
    """One run on SimPy events: environment, target server, what the run measured."""

    engine = "des"

    def __init__(self, cfg: SimConfig, work: Workload, record: bool, env: simpy.Environment | None = None,
                 srv: TargetServer | None = None):
        self.cfg, self.work = cfg, work
        self.tlen, self.tpasses, self.vtime = work.tlen, work.tpasses, work.vtime  # hot paths: bound once
        self.tau1 = work.tau1
        self.rec = Recorder(cfg, work.tpasses.sampled) if record else None
        self.env = simpy.Environment() if env is None else env
        self.shares = set(cfg.colocated.split("+")) - {"none"}  # roles whose passes stall the target's
        if srv is None:
            server = FixedRateServer if work.fixed_rate and not self.shares else TargetServer  # only it can stall
            srv = server(self.env, work.iteration_time, cfg.join == "iteration")
        self.srv = srv
        self.cycle_end: list[float] = []
        self.cycle_base: list[float] = []
        self.out = self.tokens = self.accepted = self.decisive = 0
        self.done = self.env.event()  # succeeds when the run has its steps
        self.stopped = False
        self.rem = work.next_request()  # tokens the current request has left (inf: one endless request)
        self.in_request = 0  # tokens committed in the current request: the context past its prompt
        self.finite = math.isfinite(self.rem)  # without finite requests the context stays at the prompt
        self.prefill = cfg.prefill  # what the engine feeds besides each step's own positions (SimConfig.prefill)
        prompt = cfg.prompt_tokens if self.prefill != "none" else 0
        self.prompt_due = prompt  # the target's prefill of the first prompt (less what its KV holds: target_job)
        self.row_prompt = 0  # sync, 'unseen': the prompt each further row of this cycle prefills (target_job)
        self.catchup = self.uncached(prompt, cfg.draft_prompt_cached)  # the drafter's

    def main(self):
        """The scheduler's SimPy process (a generator)."""
        raise NotImplementedError

    def current_drafts(self) -> list:
        """The drafts the current cycle (async: stage) holds, ``[start, end, lengths, batch, abandoned]`` each."""
        return []

    def draft_prefill(self, pos: int) -> int:
        """Draft tokens target row ``pos`` feeds before its own step (:attr:`SimConfig.prefill`): none, the draft
        just before it ('last'), or every draft of the cycle before it that its sequence has not seen ('unseen':
        in sync all rows start together, so row j feeds drafts 0..j-1; an async row starts once the row before it
        holds all but the last)."""
        if self.prefill == "none" or pos == 0:
            return 0
        drafts = self.current_drafts()
        if self.prefill == "unseen" and self.cfg.mode == "sync":
            return int(sum(d[2][0] for d in drafts[:pos]))
        if pos - 1 >= len(drafts):
            return 0
        d = int(drafts[pos - 1][2][0])
        return max(0, d - int(self.reused(pos, d)))

    @staticmethod
    def uncached(prompt: int, cached: float) -> int:
        """Tokens of a ``prompt`` a model prefills when its KV already holds the share ``cached`` of it
        (:attr:`SimConfig.prompt_cached`)."""
        return prompt - round(prompt * cached) if cached else prompt

    def reused(self, pos: int, draft_tokens: int) -> float:
        """Tokens of the draft before row ``pos`` it finds in KV another row of the request wrote (none here; the
        async pipeline's rows start one by one, see :meth:`lrsim.sim.sched_async.AsyncRun.reused`)."""
        return 0.0

    def target_job(self, pos: int, carried: bool = False, cap: float = math.inf) -> Job:
        """The next target step, as a job for the server; it stops at the ``cap`` its request has left."""
        L = min(self.tlen(), cap)
        passes, written = self.tpasses.one(L, carried)
        pre = self.draft_prefill(pos)
        if pos == 0:
            self.row_prompt = 0
            if self.prompt_due:  # the request's first step also prefills its prompt (what KV lacks)
                self.row_prompt = self.uncached(self.prompt_due, self.cfg.prompt_cached)
                pre, self.prompt_due = pre + self.row_prompt, 0
                if not (self.prefill == "unseen" and self.cfg.mode == "sync"):
                    self.row_prompt = 0
        elif self.row_prompt:  # sync, 'unseen': each row of a request's first cycle is a sequence
            pre += self.row_prompt  # of its own (lrref's per-sequence KV), so each prefills the prompt too
        return Job(pos, L, passes, written, pre)

    def draft(self, depth: int, cap: float, now: float) -> tuple[simpy.Event, list]:
        """Draft one position on the run's own drafter, from ``now``, at most ``cap`` tokens (its first pass also
        feeds what the drafter has not seen: the prompt, or the target's committed step).

        Returns its event (it fires when the draft is done; ``event.t`` is that
        time) and its record ``[start, end, candidate lengths, batch, abandoned]``.
        """
        d, lens, b = self.work.draft(depth, cap, self.catchup)
        self.catchup = 0
        if "draft" in self.shares:  # on the target's device, the two take turns pass by pass:
            busy = bool(self.srv.jobs)  # the target waits for the draft's passes, each draft pass for an iteration
            turns = d / self.work.draft_pass[1] * self.srv.d if busy and self.work.draft_pass[1] > 0 else 0.0
            d = self.srv.stall(now, d) + turns - now
        ev = Timeout(self.env, d)
        ev.t = now + d  # when it fires (SimPy's own sum)
        return ev, [now, ev.t, lens, b, False]

    def verify(self, seconds: float, now: float) -> simpy.Event:
        """A verifier call of ``seconds`` from ``now`` on the run's own verifier (calls overlap; a colocated one
        stalls the target and queues behind other stalls); ``event.t``: its end."""
        if "verifier" in self.shares:
            seconds = self.srv.stall(now, seconds) - now
        ev = Timeout(self.env, seconds)
        ev.t = now + seconds
        return ev

    def target_written(self, job: Job) -> None:
        """The target's own step ``job`` went into the output (after a rejection, or the bonus step): with
        prefill, the drafter feeds it before its next draft, less the start it shares with the rejected draft its
        KV holds (``SimConfig.overlap_rejected``)."""
        if self.prefill != "none" and not (self.prompt_due and self.in_request == 0):  # not: a request just began
            drafts = self.current_drafts()
            d = drafts[job.pos][2][0] if job.pos < len(drafts) else 0  # the rejected draft there, in its KV
            self.catchup = job.tokens - self.work.overlap(False) * min(job.tokens, d)

    def abandon(self, record: list) -> None:
        """The draft of ``record`` is no longer needed (a private drafter just lets it finish unseen)."""

    def finished(self) -> bool:
        """The run has what it was asked for (``cfg.steps`` output steps)."""
        return self.out >= self.cfg.steps

    def commit(self, n_accepted: int, tokens: int, steps: int) -> None:
        """Output ``steps`` steps of ``tokens`` tokens, ``n_accepted`` of them accepted drafts."""
        self.out += steps
        self.tokens += tokens
        self.accepted += n_accepted

    def advance_request(self, tokens: int) -> bool:
        """``tokens`` more of the current request are out; True when it is done (the next one then starts)."""
        self.rem -= tokens
        if self.finite:
            self.in_request += tokens
        if self.rem <= 0:
            self.rem = self.work.next_request()
            self.in_request = 0
            if self.prefill != "none":  # the next request starts by prefilling its prompt on both models
                self.prompt_due = self.cfg.prompt_tokens
                self.catchup = self.uncached(self.cfg.prompt_tokens, self.cfg.draft_prompt_cached)
            return True
        return False

    def set_context(self) -> None:
        """Price the coming cycle or stage at the current request's context (context-aware latencies only).

        The context is held over the cycle or stage: its ``k1`` prefixes differ by a few draft steps.
        """
        if self.work.set_context(self.in_request):
            self.srv.reprice()
            self.tau1 = self.work.tau1

    def end_cycle(self, base_tokens: int, now: float | None = None) -> None:
        """A cycle ends ``now``; target-only decoding would have written its output positions in ``base_tokens``."""
        self.cycle_end.append(self.env.now if now is None else now)
        self.cycle_base.append(base_tokens * self.tau1)
        if not self.stopped and self.finished():
            self.stopped = True
            self.done.succeed()

    def run(self) -> CycleLog:
        """Run to ``cfg.steps`` output steps; the cycle log."""
        wall = time.perf_counter()
        self.env.process(self.main())
        events = self._events_until_done()
        wall = time.perf_counter() - wall
        self.srv.close()
        if self.rec is not None:
            self.rec.close(self.env.now)
        srv = self.srv
        return CycleLog(np.asarray(self.cycle_end), np.asarray(self.cycle_base), self.out, self.tokens,
                        self.accepted, self.decisive, srv.seq_time, srv.seq_iters, srv.wasted, srv.peak,
                        self.engine, events, wall)

    def _events_until_done(self) -> int:
        """Process events (SimPy's public ``step``) until ``done`` is processed; how many, ``done`` included.

        ``done``'s first callback raises :class:`_Done`, so the loop needs no test per event.
        """
        step, n = self.env.step, 1
        self.done.callbacks.insert(0, _raise_done)
        try:
            while True:
                step()
                n += 1
        except _Done:
            return n


class _Done(Exception):
    """Raised by ``done``'s first callback: the run has its steps."""


def _raise_done(_event: simpy.Event) -> None:
    raise _Done
