"""``lr-async``: the pipelined decoder (the draft runs ahead in its own process, :mod:`lrref.decode.draft_worker`).

One loop of named steps until the request ends: :meth:`AsyncPipeline.drain`
(drafts that arrived), :meth:`AsyncPipeline.start_targets` (target step ``j``
joins the running target batch as soon as draft ``j-1`` exists),
:meth:`AsyncPipeline.resolve` (position ``k`` is verified as soon as its target
step is done; accept -> next position, reject -> the target's step is committed
and :meth:`AsyncPipeline.reset_stage` drops stale work and restarts the draft
chain), then :meth:`AsyncPipeline.advance` (one target forward pass, or wait
for a draft when the target is idle).  A *stage* is the run of positions
between two rejections; the worker's *epoch* numbers its chains.
"""

from __future__ import annotations

import time

from ..backends.base import StepOut, StepRequest
from .draft_worker import DraftWorker
from .request import Request
from .seed import step_seed


class AsyncPipeline:
    """The lr-async decoding of one request.

    :param worker: the draft process (its model is loaded once per decoder).
    """

    def __init__(self, req: Request, worker: DraftWorker):
        cfg = req.cfg
        self.req, self.worker = req, worker
        self.eng = req.target.engine(cfg.sampling, cfg.ngram_cfg, req.clock)
        self.prefix, self.epoch, self.stage, self.k = list(req.prompt), 0, 0, 0
        self.rem_stage = cfg.max_tokens  # tokens left when the stage started
        self.drafts: dict[int, StepOut] = {}  # position -> draft step of this stage
        self.running: dict[int, int] = {}  # engine handle -> position
        self.tdone: dict[int, StepOut] = {}  # position -> finished target step, not resolved yet
        self.finished = False  # EOS committed
        self.context = req.context(req.prompt)

    def run(self) -> None:
        """Decode to EOS or the token cap, then cancel what still runs and idle the worker."""
        cfg, res = self.req.cfg, self.req.res
        self._chain()
        while not self.finished:
            self.drain()
            self.start_targets()
            self.resolve()
            if self.finished or len(res.ids) >= cfg.max_tokens:
                break
            self.advance()
        if self.finished:
            res.finish = "eos"
        self._stop()

    def _chain(self) -> None:
        """Ask the worker for a new draft chain from the stage's prefix."""
        cfg = self.req.cfg
        self.worker.send("chain", self.epoch, self.prefix, self.rem_stage, cfg.gamma,
                         step_seed(cfg.seed, self.req.index, self.stage), self.req.index)

    # -- 1. drain --------------------------------------------------------------------------------------
    def drain(self) -> None:
        """Keep this epoch's drafts; write a cancelled row for a stale or cancelled one."""
        for msg in self.worker.poll():
            if msg[0] == "draft" and msg[1] == self.epoch:
                self.drafts[msg[2]] = msg[3]
            elif msg[0] in ("draft", "cancelled"):
                cycle = self.stage if msg[1] == self.epoch else max(0, self.stage - 1)
                self.req.rows.write(cycle, msg[2], branch=0, draft=msg[3], cancelled=True)

    # -- 2. start targets ------------------------------------------------------------------------------
    def start_targets(self) -> None:
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
        for (j, _), h in zip(new, self.eng.add([r for _, r in new])):
            self.running[h] = j

    # -- 3. resolve ------------------------------------------------------------------------------------
    def resolve(self) -> None:
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
                self.worker.send("credit", self.epoch, 1)
            else:
                self.finished = req.commit(t, "target")
                self.reset_stage()
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
    def reset_stage(self) -> None:
        """After a rejection at k: cancel stale target and draft work (rows: cancelled), start a new stage."""
        req, rows = self.req, self.req.rows
        stale = [h for h, j in self.running.items() if j > self.k]
        for h, o in self.eng.cancel(stale):
            rows.write(self.stage, self.running.pop(h), target=o, cancelled=True)
        for j, o in sorted(self.tdone.items()):
            rows.write(self.stage, j, target=o, cancelled=True)
        self.tdone.clear()
        for j in [j for j in self.drafts if j > self.k]:
            rows.write(self.stage, j, branch=0, draft=self.drafts[j], cancelled=True)
        self.drafts.clear()
        self.prefix, self.k, self.stage, self.epoch = req.prefix(), 0, self.stage + 1, self.epoch + 1
        self.rem_stage = req.left
        if not self.finished and self.rem_stage > 0:
            self._chain()

    # -- 5. advance ------------------------------------------------------------------------------------
    def advance(self) -> None:
        """One target forward pass; with nothing running, wait (up to 1 s) for the next draft."""
        if self.eng.active:
            for h, o in self.eng.step():
                self.tdone[self.running.pop(h)] = o
        elif self.k not in self.tdone:
            w0 = time.perf_counter()
            msgs = self.worker.poll(timeout=1.0)
            self.req.res.wait_s += time.perf_counter() - w0
            for msg in msgs:  # only this epoch's drafts (stale messages read here get no row)
                if msg[0] == "draft" and msg[1] == self.epoch:
                    self.drafts[msg[2]] = msg[3]

    def _stop(self) -> None:
        """Cancel the target steps still running (rows: cancelled), idle the worker, add its draft time."""
        for h, o in self.eng.cancel(list(self.running)):
            self.req.rows.write(self.stage, self.running[h], target=o, cancelled=True)
        self.worker.send("idle")
        self.req.res.draft_s += self.worker.new_forward_s()
