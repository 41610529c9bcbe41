"""Vectorised cycle-by-cycle engine for the renewal modes (sync and ar).

In sync mode every cycle starts with an idle target server (Algorithm 1
waits for the whole batch and the verifier before drafting again), and in ar
mode every step does; so cycles are independent and each one's duration is a
formula of its own draws:

- drafting: the ``k1 - 1`` positions back to back; a position with ``b``
  candidates whose passes are ``p_(1) <= ... <= p_(b)`` costs
  ``sum_i (p_(i) - p_(i-1)) * t_d(b - i + 1)`` (the batch shrinks as
  candidates finish);
- the target batch: the same formula over the ``k1`` target steps with the
  iteration time ``d(b)``; every step starts at once on the idle server;
- the verifier (one call, or one per pair up to the first rejection), then
  the output: drafts up to the first rejection ``x`` and the target's step there.

The engine draws from the same :class:`~.workload.Workload` streams as the
event engine, in the order the event engine consumes them, so both return
the same numbers (a test checks this); it only skips the per-event
bookkeeping.  It cannot write traces (the event engine does).
"""

from __future__ import annotations

import time

import numpy as np

from .config import SimConfig
from .results import CycleLog
from .workload import Workload, expected_steps_per_cycle

BLOCK_MAX, BLOCK_MIN = 65536, 64  # cycles simulated per block


def _shrinking_batch(passes: np.ndarray, cost: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """Duration of each row's batch and each item's finish time, ``cost[b]`` the time of a pass at batch ``b``.

    ``passes``: (rows, b).  Sorting each row, the batch runs ``p_(1)`` passes at
    batch ``b``, then ``p_(2) - p_(1)`` at ``b - 1``, and so on.
    """
    rows, b = passes.shape
    order = np.sort(passes, axis=1)
    steps = np.diff(np.concatenate((np.zeros((rows, 1)), order), axis=1), axis=1)  # p_(i) - p_(i-1)
    per_pass = np.array([cost[b - i] for i in range(b)])  # the batch shrinks by one at each finish
    finish_sorted = np.cumsum(steps * per_pass, axis=1)
    return finish_sorted[:, -1], finish_sorted


def _drafting(work: Workload, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Drafting time of ``n`` sync cycles and the candidate lengths drafted at each depth, (n, b) each."""
    cfg = work.cfg
    sizes = [cfg.width ** (j + 1) if cfg.tree else cfg.width for j in range(cfg.k1 - 1)]  # candidates per depth
    draft_time = np.zeros(n)
    lens_by_depth = []
    if cfg.k1 > 1:
        dl = work.dlen.take(n * sum(sizes)).reshape(n, sum(sizes))  # cycle-major, like the event engine
        dp = work.dpasses.many(dl)
        at = 0
        for b in sizes:
            lens, p = dl[:, at:at + b], dp[:, at:at + b]
            at += b
            if b == 1:
                draft_time += p[:, 0] * work.draft_pass[1]
            else:
                draft_time += _shrinking_batch(p, work.draft_pass)[0]
            lens_by_depth.append(lens)
    return draft_time, lens_by_depth


def _verifying(work: Workload, n: int, x: np.ndarray) -> np.ndarray:
    """Verifier time of ``n`` sync cycles whose first rejection is at ``x``."""
    cfg, k1 = work.cfg, work.cfg.k1
    if k1 == 1 or work.vtime is None:
        return np.zeros(n)
    if cfg.verify_calls == "per_pair":
        calls = work.vtime.take(n * (k1 - 1)).reshape(n, k1 - 1)  # one call per pair, in order ...
        return (calls * (np.arange(k1 - 1)[None, :] <= x[:, None])).sum(axis=1)  # ... up to the first rejection
    return work.vtime.take(n)  # one call checks all pairs


def _sync_block(work: Workload, n: int, costs: dict[int, float]) -> dict[str, np.ndarray]:
    """Simulate ``n`` sync cycles (``costs[b]``: target iteration time at batch ``b``); per-cycle arrays."""
    k1 = work.cfg.k1
    draft_time, lens_by_depth = _drafting(work, n)
    lt = work.tlen.take(n * k1).reshape(n, k1)
    tp = work.tpasses.many(lt)
    target_time, finish_sorted = _shrinking_batch(tp, costs)
    first = work.verdicts.take(n * (k1 - 1)).reshape(n, k1 - 1)
    rejected = first < 0
    x = np.full(n, k1 - 1)
    if k1 > 1:
        x = np.where(rejected.any(axis=1), rejected.argmax(axis=1), k1 - 1)  # first rejection, or k1 - 1
    verify = _verifying(work, n, x)
    kept = np.arange(k1)[None, :] <= x[:, None]  # output positions: drafts before x, the target's step at x
    tokens = lt[np.arange(n), x].astype(float)
    for j, lens in enumerate(lens_by_depth):  # accepted drafts count with their own length
        branch = np.clip(first[:, j], 0, None)
        tokens += np.where(j < x, lens[np.arange(n), branch], 0)
    return {
        "time": draft_time + target_time + verify,
        "steps": x + 1,
        "base": (lt * kept).sum(axis=1),
        "tokens": tokens,
        "accepted": x,
        "decisive": np.minimum(x + 1, k1 - 1),
        "seq_time": finish_sorted.sum(axis=1),
        "seq_iters": tp.sum(axis=1),
        "wasted": (tp * ~kept).sum(axis=1),
    }


def _ar_block(work: Workload, n: int, costs: dict[int, float]) -> dict[str, np.ndarray]:
    """Simulate ``n`` target-only steps (the token stream runs on across step boundaries)."""
    lt = work.tlen.take(n)
    passes = work.tpasses.many(lt, carried=True)
    t = passes * costs[1]
    zeros = np.zeros(n)
    return {"time": t, "steps": np.ones(n, dtype=np.int64), "base": lt, "tokens": lt.astype(float),
            "accepted": zeros, "decisive": zeros, "seq_time": t, "seq_iters": passes, "wasted": zeros}


def run_renewal(cfg: SimConfig, work: Workload) -> CycleLog:
    """Simulate ``cfg`` (sync or ar) cycle by cycle in blocks; the cycle log the event engine would give."""
    return RenewalRun(cfg, work).advance(cfg.steps)


class RenewalRun:
    """A renewal run that can be continued: :meth:`advance` (steps) gives the cycle log of a run of that many steps.

    Every stream is drawn in order whatever the block sizes, so cycle ``i`` is the same in every run of this
    configuration: a longer run draws more blocks after the ones it has and cuts where its steps are reached.
    """

    def __init__(self, cfg: SimConfig, work: Workload):
        self.cfg, self.work = cfg, work
        self.block = _sync_block if cfg.mode == "sync" else _ar_block
        self.costs = {b: work.iteration_time(b) for b in range(1, cfg.k1 + 1)}
        self.per_cycle = max(1.0, expected_steps_per_cycle(cfg))
        self.parts: list[dict[str, np.ndarray]] = []
        self.steps = 0  # output steps of the cycles drawn so far
        self.wall = 0.0

    def can_reach(self, target: int) -> bool:
        """Always: the cycles drawn so far are cut wherever a run of ``target`` steps ends."""
        return True

    def advance(self, target: int) -> CycleLog:
        """The cycle log of a run of ``target`` output steps (drawing the cycles it lacks)."""
        wall = time.perf_counter()
        while self.steps < target:
            n = int(min(BLOCK_MAX, max(BLOCK_MIN, 1.1 * (target - self.steps) / self.per_cycle + 16)))
            part = self.block(self.work, n, self.costs)
            self.parts.append(part)
            self.steps += int(part["steps"].sum())
        parts = self.parts
        c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        cut = int(np.searchsorted(np.cumsum(c["steps"]), target, side="left")) + 1  # the cycle reaching N
        c = {k: v[:cut] for k, v in c.items()}
        cfg, work = self.cfg, self.work
        self.wall += time.perf_counter() - wall
        return CycleLog(end=np.cumsum(c["time"]), base=c["base"] * work.tau1, steps=int(c["steps"].sum()),
                        tokens=float(c["tokens"].sum()), accepted=int(c["accepted"].sum()),
                        decisive=int(c["decisive"].sum()),
                        seq_time=float(c["seq_time"].sum()), seq_iters=float(c["seq_iters"].sum()),
                        wasted=float(c["wasted"].sum()), peak=cfg.k1 if cfg.mode == "sync" else 1,
                        engine="renewal", events=0, wall=self.wall)
