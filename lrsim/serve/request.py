"""One request of a serving run: lrsim.sim's schedulers on shared engines, from arrival to its last token.

Each request is an instance of the single-request scheduler of its mode
(:class:`lrsim.sim.sched_ar.ArRun`, :class:`~lrsim.sim.sched_sync.SyncRun`,
:class:`~lrsim.sim.sched_async.AsyncRun`: Algorithm 1, and the pipeline with
cancellation of stale target steps) with its own random streams
(:class:`lrsim.sim.workload.Workload`, seeded per request), on the run's
SimPy environment and shared target engine; :class:`Served` replaces its
private drafter and verifier with the shared draft engine and verifier.

Lifecycle (:meth:`Served.lifecycle`): wait for admission; prefill the prompt
on the target (its last chunk writes the first token: time to first token)
and, for LR with ``prefill`` other than 'none', on the draft engine; decode
the other ``output - 1`` tokens; leave.  A target row's context is prompt +
committed tokens + the drafts it is conditioned on; it first prefills the
draft tokens it has not seen (:meth:`lrsim.sim.events.EventRun.draft_prefill`:
``SimConfig.prefill``), and the first draft after the target wrote a step
prefills that step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from ..sim import SimConfig
from ..sim.sched_ar import ArRun
from ..sim.sched_async import AsyncRun
from ..sim.sched_sync import SyncRun
from ..sim.servers import PENDING, RUNNING
from ..sim.workload import Workload
from .admission import Admission
from .config import RequestSpec, ServeConfig, kv_footprint, target_rows
from .engine import BatchEngine, Row
from .verifier import Verifier


@dataclass
class World:
    """What the requests of one run share."""

    env: simpy.Environment
    cfg: ServeConfig
    target: BatchEngine
    drafter: BatchEngine | None
    verifier: Verifier
    admission: Admission
    done: list  #: a record (:data:`RECORD`) per finished request, in order of finishing
    colocated: str = "none"  #: roles on the target's device (:attr:`lrsim.sim.SimConfig.colocated`)
    chooser: object | None = None  #: ``--modes auto``: :class:`lrsim.serve.auto.Chooser`, told of each finished request


RECORD = ("arrival", "admitted", "first_token", "end", "prompt", "output", "accepted", "decisive", "steps", "seed",
          "k1")


class Served:
    """Mixin before a scheduler class: shared engines instead of the private drafter and verifier."""

    spec: RequestSpec
    world: World

    def setup(self, spec: RequestSpec, world: World) -> None:
        self.spec, self.world = spec, world
        self.goal = spec.output - 1  # tokens to decode after the prefill's first token
        self.q = 1 + self.cfg.spec_fill * (self.cfg.k2 - 1)  # positions a pass computes per row (SimConfig)
        self.dq = self.q if self.cfg.draft_sd and self.cfg.k2 > 1 else 1  # drafter's positions per pass
        self.catchup = self.prompt_due = 0  # the lifecycle prefills the prompt; then what the drafter has not seen
        self.draft_row: Row | None = None
        self.t_admit = self.t_first = self.t_end = math.nan
        self.need = (1, kv_footprint(self.cfg, spec.prompt, spec.output))

    # -- what the mode's scheduler knows about its prefix

    def committed(self) -> int:
        return self.tokens

    # -- hooks of lrsim.sim.events.EventRun

    def finished(self) -> bool:
        return self.tokens >= self.goal

    def target_job(self, pos: int, carried: bool = False, cap: float = math.inf) -> Row:
        L = min(self.tlen(), cap)
        passes, written = self.tpasses.one(L, carried)
        drafts = self.current_drafts()
        pre = self.draft_prefill(pos)  # SimConfig.prefill: the draft tokens this row has not seen
        ctx = self.spec.prompt + 1 + self.committed() + sum(d[2][0] for d in drafts[:pos])
        return Row(pos, L, passes, written, prefill=pre, q=self.q, ctx=ctx)

    def draft(self, depth: int, cap: float, now: float) -> tuple[simpy.Event, list]:
        w = self.work
        L = min(w.dlen(), cap)  # the same draws, in the same order, as Workload.draft
        passes = w.dpasses.one(L)[0]
        pre = self.catchup  # the target's committed step, with prefill (EventRun.target_written)
        self.catchup = 0
        ctx = self.spec.prompt + 1 + self.committed() + sum(d[2][0] for d in self.current_drafts())
        row = Row(depth, L, passes, L, prefill=pre, q=self.dq, ctx=ctx)
        ev, rec = self.env.event(), [now, math.nan, [L], 1, False]

        def done(_row: Row, t: float) -> None:
            rec[1] = ev.t = t
            ev.succeed(t)

        row.on_done = done
        self.draft_row = row
        self.world.drafter.submit([row])
        return ev, rec

    def verify(self, seconds: float, now: float) -> simpy.Event:
        w = self.world
        if "verifier" not in w.colocated:
            return w.verifier.call(seconds)
        end = w.target.stall(now, seconds)  # on the target's device: the engines there wait for it
        if w.drafter is not None:
            end = max(end, w.drafter.stall(now, seconds))
        ev = simpy.Timeout(self.env, end - now)
        ev.t = end
        return ev

    def abandon(self, record: list) -> None:
        row = self.draft_row
        if row is not None and row.state in (PENDING, RUNNING):
            row.wasted = True
            self.world.drafter.cancel([row])

    # -- the request's life

    def lifecycle(self):
        """SimPy process: admission, prefills, decoding, departure."""
        env, world, spec = self.env, self.world, self.spec
        yield world.admission.enter(self.need)
        self.t_admit = env.now
        first = world.target.run([Row(0, 1, 1, 1, prefill=spec.prompt, q=1)])
        lr = self.cfg.mode != "ar" and self.cfg.k1 > 1
        drafter = world.drafter if lr and self.cfg.prefill != "none" else None  # with prefill: its prompt too
        dpre = drafter.run([Row(0, 1, 1, 1, prefill=spec.prompt, q=1)]) if drafter is not None else None
        self.t_first = yield first
        if dpre is not None:
            yield dpre
        if self.goal > 0:
            yield from self.main()
        self.t_end = env.now
        world.admission.leave(self.need)
        world.done.append(self.record())
        if world.chooser is not None:
            world.chooser.done(self)

    def record(self) -> tuple:
        """What the run keeps of a finished request (the request itself, with its streams, is let go)."""
        s = self.spec
        return (s.arrival, self.t_admit, self.t_first, self.t_end, s.prompt, s.output, self.accepted,
                self.decisive, self.out, s.seed, target_rows(self.cfg))


class ServedAr(Served, ArRun):
    """Target-only decoding (token SD inside if ``k2 > 1``) of one finite request."""

    def main(self):
        while not self.finished():
            job = self.target_job(0, carried=True, cap=self.goal - self.tokens)
            now = yield self.srv.run([job])
            self.commit(0, job.tokens, 1)
            self.end_cycle(job.tokens, now)


class ServedSync(Served, SyncRun):
    """Algorithm 1 for one finite request."""

    def setup(self, spec: RequestSpec, world: World) -> None:
        super().setup(spec, world)
        self.rem = self.goal  # every draft and target step is cut at the tokens the request has left


class ServedAsync(Served, AsyncRun):
    """Pipelined LR for one finite request."""

    def setup(self, spec: RequestSpec, world: World) -> None:
        super().setup(spec, world)
        self.rem = self.goal  # every draft and target step is cut at the tokens the request has left

    def committed(self) -> int:
        return self.goal - self.st.left[0]  # tokens committed when the stage began



SERVED = {"ar": ServedAr, "sync": ServedSync, "async": ServedAsync}


def make_request(spec: RequestSpec, world: World, sim: SimConfig) -> Served:
    """The scheduler instance of one request (``sim``: the mode's per-request settings with its seed)."""
    cls = SERVED[sim.mode]
    run = cls(sim, Workload(sim), False, env=world.env, srv=world.target)
    run.setup(spec, world)
    return run
