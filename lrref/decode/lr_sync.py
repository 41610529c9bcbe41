"""``lr-sync``: one cycle of Algorithm 1 with a W-ary draft tree.

Three named steps: :meth:`SyncCycle.draft_tree` (the draft writes ``gamma``
steps, ``W`` distinct candidates per node, level by level),
:meth:`SyncCycle.target_batch` (the target writes one step per non-terminal
node, all in one batched call) and :meth:`SyncCycle.walk` (from the root,
verify a node's children against its target step; keep the best accepted
child and go on, or commit the target's step at the first rejection).  Every
drafted and target step of the cycle gets a trace row, the discarded ones too.
The two model steps yield their batches as jobs (:mod:`lrref.decode.jobs`), so one
driver runs a single request and another shares batches between requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends.base import StepOut, StepRequest
from ..verify.verifiers import Verdict
from .jobs import DRAFT, TARGET, Job, Steps
from .request import Request
from .seed import step_seed


@dataclass
class _Node:
    """A node of the draft tree: the path of drafts from the cycle's prefix."""

    path: list[int]
    rem: int
    depth: int = -1
    branch: int | None = None
    out: StepOut | None = None
    children: list[_Node] = field(default_factory=list)
    target: StepOut | None = None
    verdict: Verdict | None = None
    vname: str | None = None
    vtimes: tuple[float, float] | None = None

    @property
    def terminal(self) -> bool:
        return self.rem <= 0 or (self.out is not None and self.out.finish == "eos")


class SyncCycle:
    """One lr-sync cycle from ``prefix`` with ``rem`` tokens left; :meth:`run` is a job generator."""

    def __init__(self, req: Request, cycle: int, prefix: list[int], rem: int):
        self.req, self.cycle, self.prefix = req, cycle, prefix
        self.root = _Node([], rem)
        self.nodes: list[_Node] = [self.root]

    def run(self) -> Steps:
        """Draft, write target steps, walk; returns True when the committed output ended with EOS."""
        yield from self.draft_tree()
        yield from self.target_batch()
        return self.walk()

    # -- 1. draft tree ---------------------------------------------------------------------------------
    def draft_tree(self) -> Steps:
        """``gamma`` levels of drafts, ``width`` candidates per non-terminal node, one batched job per level."""
        cfg, req = self.req.cfg, self.req
        frontier = [self.root]
        for depth in range(cfg.gamma):
            jobs = [(n, b) for n in frontier if not n.terminal for b in range(cfg.width)]
            if not jobs:
                break
            reqs = [StepRequest(tuple(self.prefix + n.path), min(cfg.max_step_tokens, n.rem),
                                step_seed(cfg.seed, req.index, self.cycle, depth, len(n.path), b), req.index)
                    for n, b in jobs]
            outs = yield Job(DRAFT, reqs, cfg.draft_ngram_cfg)
            frontier = self._grow(jobs, outs, depth)

    def _grow(self, jobs: list[tuple[_Node, int]], outs: list[StepOut], depth: int) -> list[_Node]:
        """Attach the drafted steps as children, keeping W *distinct* candidates per node."""
        frontier = []
        for (n, _), o in zip(jobs, outs):
            if any(c.out.ids == o.ids for c in n.children):
                continue
            c = _Node(n.path + o.ids, n.rem - o.n_tokens, depth, len(n.children), o)
            n.children.append(c)
            frontier.append(c)
            self.nodes.append(c)
        return frontier

    # -- 2. target batch -------------------------------------------------------------------------------
    def target_batch(self) -> Steps:
        """The target writes one step per non-terminal node, all in one batched job."""
        cfg, req = self.req.cfg, self.req
        tnodes = [n for n in self.nodes if not n.terminal]
        touts = yield Job(TARGET, [StepRequest(tuple(self.prefix + n.path), min(cfg.max_step_tokens, n.rem),
                                               step_seed(cfg.seed, req.index, self.cycle, -1, len(n.path)),
                                               req.index)
                                   for n in tnodes], cfg.ngram_cfg)
        for n, t in zip(tnodes, touts):
            n.target = t
            req.count_target(t)

    # -- 3. walk ---------------------------------------------------------------------------------------
    def walk(self) -> bool:
        """Verify children against their parent's target step down the tree; commit; write every row."""
        req, rows = self.req, self.req.rows
        context = req.context(self.prefix)
        node, done, bonus = self.root, False, None
        while True:
            if not node.children:  # bonus step (all drafts accepted) or nothing drafted here
                bonus = node
                if node.target is not None:
                    rows.write(self.cycle, node.depth + 1, target=node.target, committed="target")
                    done = req.commit(node.target, "target")
                break
            best = self._verify_children(node, context)
            if best is None:  # first rejection: the target's own step at this position
                self._flush_children(node, chosen=None)
                done = req.commit(node.target, "target")
                break
            self._flush_children(node, chosen=best)
            req.res.accepted += 1
            done = req.commit(best.out, "draft")
            node = best
            if done or node.terminal:
                break
        self._flush_unvisited(bonus)
        return done

    def _verify_children(self, node: _Node, context: str) -> _Node | None:
        """Verdicts for a node's children; the chosen accepted child (None: all rejected).

        Several matches: token-identical first, then the highest verifier score, then the lowest branch.
        """
        verdicts, names, vtimes = self.req.verify([(node.target, c.out) for c in node.children], context)
        for c, v, nm in zip(node.children, verdicts, names):
            c.verdict, c.vname, c.vtimes = v, nm, vtimes
        ok = [c for c in node.children if c.verdict.decision]
        if not ok:
            return None
        return min(ok, key=lambda c: (c.vname != "identical", -(c.verdict.score or 0.0), c.branch))

    def _flush_children(self, node: _Node, chosen: _Node | None) -> None:
        """Rows of verified children; with no chosen child, branch 0's row commits the target's step."""
        for c in node.children:
            committed = "draft" if c is chosen else ("target" if chosen is None and c.branch == 0 else None)
            self.req.rows.write(self.cycle, c.depth, branch=c.branch, draft=c.out, target=node.target,
                                verdict=c.verdict, verifier=c.vname, vtimes=c.vtimes, accepted=c is chosen,
                                committed=committed)

    def _flush_unvisited(self, bonus: _Node | None) -> None:
        """Drafts never verified (below a rejection or an unchosen branch): accepted = False.

        Each row carries the target step written at its position (its parent's), and a leaf's own target
        step (the bonus position of its path) gets a target-only row: that work ran in the cycle's batch
        and was thrown away, and the trace must show it (calibration prices the batch from these rows).
        """
        rows = self.req.rows
        stack = [(c, self.root) for c in self.root.children]
        while stack:
            c, parent = stack.pop()
            stack.extend((g, c) for g in c.children)
            if c.verdict is None:
                rows.write(self.cycle, c.depth, branch=c.branch, draft=c.out, target=parent.target)
            if not c.children and c.target is not None and c is not bonus:
                rows.write(self.cycle, c.depth + 1, target=c.target)
