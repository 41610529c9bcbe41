"""``lr-async``: the pipelined decoder (the draft runs ahead in its own process, :mod:`lrref.decode.draft_worker`).

One loop of named steps until the request ends: :meth:`AsyncPipeline.drain`
(drafts that arrived), :meth:`AsyncPipeline.start_targets` (target step ``j``
joins the running target batch as soon as draft ``j-1`` exists),
:meth:`AsyncPipeline.resolve` (position ``k`` is verified as soon as its target
step is done; accept -> next position, reject -> the target's step is committed
and :meth:`AsyncPipeline.reset_stage` drops stale work and restarts the draft
chain), then :meth:`AsyncPipeline.advance` (one target forward pass, or wait
for a draft when none of the request's target rows runs).  A *stage* is the run
of positions between two rejections; the request's *epoch* numbers its draft
chains (a stage's epoch is its number).

``auto`` runs one stage at a time (``stage=`` the cycle, :func:`lrref.decode.cycles.request_steps`): the
pipeline starts from the request's prefix, stops at its first rejection (or EOS, or the token cap), where no
target row runs and nothing it drafted is kept, idles its draft chain and returns; the next cycle may run any
mode.

The pipeline is a job generator (:data:`lrref.decode.jobs.AsyncJob`): it tells
the draft process what to draft (:mod:`lrref.decode.messages`) and yields what
it needs from the target and the drafts; :func:`lrref.decode.jobs.run_async_direct`
runs one request on its own target engine, :class:`lrref.decode.closed_loop.ClosedLoop`
several, whose target rows share passes and whose drafts share the draft process's.
"""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import StepOut, StepRequest
from .jobs import AddRows, Advance, AsyncSteps, CancelRows, Progress, TakeDrafts
from .messages import Chain, Credit, DraftMsg, Stop, ToWorker
from .request import Request
from .seed import step_seed


class AsyncPipeline:
    """The lr-async decoding of one request; :meth:`run` is its job generator.

    :param send: sends a message to the draft process (:meth:`lrref.decode.draft_worker.DraftWorker.send`).
    :param stage: None: decode to the request's end, stage after stage; a number: run that one stage (its rows'
        cycle, its chain's epoch) from the request's prefix and return (auto's cycle).
    """

    def __init__(self, req: Request, send: Callable[[ToWorker], None], stage: int | None = None):
        self.req, self.send = req, send
        self.single = stage is not None  # one stage, then return
        self.prefix, self.k = req.prefix(), 0
        self.epoch = self.stage = stage or 0
        self.rem_stage = req.left  # tokens left when the stage started
        self.over = False  # one stage: it ended at a rejection
        self.drafts: dict[int, StepOut] = {}  # position -> draft step of this stage
        self.running: dict[int, int] = {}  # target row handle -> position
        self.tdone: dict[int, StepOut] = {}  # position -> finished target step, not resolved yet
        self.finished = False  # EOS committed
        self.context = req.context(req.prompt)

    def run(self) -> AsyncSteps:
        """Decode to EOS or the token cap (one stage: or its first rejection), then cancel what still runs and
        idle the request's draft chain; returns True at EOS."""
        cfg, res = self.req.cfg, self.req.res
        self._chain()
        while not self.finished:
            yield from self.drain()
            yield from self.start_targets()
            yield from self.resolve()
            if self.finished or self.over or len(res.ids) >= cfg.max_tokens:
                break
            yield from self.advance()
        if self.finished:
            res.finish = "eos"
        yield from self._stop()
        return self.finished

    def _chain(self) -> None:
        """Ask the draft process for a new draft chain from the stage's prefix."""
        cfg = self.req.cfg
        self.send(Chain(self.req.index, self.epoch, tuple(self.prefix), self.rem_stage, cfg.gamma,
                        step_seed(cfg.seed, self.req.index, self.stage)))

    # -- 1. drain --------------------------------------------------------------------------------------
    def drain(self) -> AsyncSteps:
        """Keep this epoch's drafts; write a cancelled row for a stale or cancelled one."""
        msgs: list[DraftMsg] = yield TakeDrafts()
        for m in msgs:
            if m.current(self.epoch):
                self.drafts[m.position] = m.step
            else:  # a stage's epoch is its number: the row goes to the stage that drafted it
                self.req.rows.write(m.epoch, m.position, branch=0, draft=m.step, cancelled=True)

    # -- 2. start targets ------------------------------------------------------------------------------
    def start_targets(self) -> AsyncSteps:
        """Add target step j for every position up to ``k + gamma`` whose prefix (drafts < j) exists."""
        cfg, req = self.req.cfg, self.req
        started = set(self.running.values()) | set(self.tdone)
        new = []
        for j in range(self.k, self.k + cfg.gamma + 1):
            if j in started:
                continue
            if j > 0 and (j - 1 not in self.drafts or self.drafts[j - 1].finish == "eos"):
                break
            used = sum(self.drafts[i].n_tokens for i in range(j))
            cap = min(cfg.max_step_tokens, self.rem_stage - used)
            if cap <= 0:
                break
            ids = tuple(self.prefix + [t for i in range(j) for t in self.drafts[i].ids])
            new.append((j, StepRequest(ids, cap, step_seed(cfg.seed, req.index, self.stage, -1, j), req.index)))
        if new:
            handles = yield AddRows(tuple(r for _, r in new), cfg.ngram_cfg)
            for (j, _), h in zip(new, handles):
                self.running[h] = j

    # -- 3. resolve ------------------------------------------------------------------------------------
    def resolve(self) -> AsyncSteps:
        """Resolve position k while its target step is done: accept the draft and go on, or reset the stage."""
        req, res = self.req, self.req.res
        while self.k in self.tdone and not self.finished:
            t = self.tdone.pop(self.k)
            req.count_target(t)
            d = self.drafts.get(self.k)
            if self._check(t, d):
                res.accepted += 1
                self.finished = req.commit(d, "draft")
                self.k += 1
                self.send(Credit(req.index, self.epoch, 1))
            else:
                self.finished = req.commit(t, "target")
                yield from self.reset_stage()
                break
            if len(res.ids) >= req.cfg.max_tokens:
                break

    def _check(self, t: StepOut, d: StepOut | None) -> bool:
        """Verify draft k against target step k and write the row; no draft yet: the target's step is final."""
        req = self.req
        if d is None:  # the draft is behind: no need to wait for it
            req.rows.write(self.stage, self.k, target=t, committed="target")
            return False
        verdicts, names, vtimes = req.verify([(t, d)], self.context)
        v = verdicts[0]
        req.rows.write(self.stage, self.k, branch=0, draft=d, target=t, verdict=v, verifier=names[0], vtimes=vtimes,
                       accepted=v.decision, committed="draft" if v.decision else "target")
        return v.decision

    # -- 4. reset stage --------------------------------------------------------------------------------
    def reset_stage(self) -> AsyncSteps:
        """After a rejection at k: cancel stale target and draft work (rows: cancelled), start a new stage (one
        stage: end it)."""
        req, rows = self.req, self.req.rows
        stale = tuple(h for h, j in self.running.items() if j > self.k)
        if stale:
            for h, o in (yield CancelRows(stale)):
                rows.write(self.stage, self.running.pop(h), target=o, cancelled=True)
        for j, o in sorted(self.tdone.items()):
            rows.write(self.stage, j, target=o, cancelled=True)
        self.tdone.clear()
        for j in [j for j in self.drafts if j > self.k]:
            rows.write(self.stage, j, branch=0, draft=self.drafts[j], cancelled=True)
        self.drafts.clear()
        if self.single:
            self.over = True
            return
        self.prefix, self.k, self.stage, self.epoch = req.prefix(), 0, self.stage + 1, self.epoch + 1
        self.rem_stage = req.left
        if not self.finished and self.rem_stage > 0:
            self._chain()

    # -- 5. advance ------------------------------------------------------------------------------------
    def advance(self) -> AsyncSteps:
        """One target forward pass; with none of the request's target rows running, wait (up to
        :data:`lrref.decode.jobs.DRAFT_WAIT_S`) for the next draft."""
        p: Progress = yield Advance(wait=self.k not in self.tdone)
        for h, o in p.finished:
            self.tdone[self.running.pop(h)] = o
        if p.wait_s is not None:
            self.req.res.wait_s += p.wait_s
            for m in p.drafts:  # only this epoch's drafts (stale messages read here get no row)
                if m.current(self.epoch):
                    self.drafts[m.position] = m.step

    def _stop(self) -> AsyncSteps:
        """Cancel the target steps still running (rows: cancelled) and idle the request's draft chain (the
        driver adds its draft time)."""
        if self.running:
            for h, o in (yield CancelRows(tuple(self.running))):
                self.req.rows.write(self.stage, self.running[h], target=o, cancelled=True)
        self.send(Stop(self.req.index))
