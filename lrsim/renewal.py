"""Vectorised cycle-by-cycle engine for the renewal modes of :mod:`lrsim.des` (sync and ar).

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
- one verifier call, then the output: drafts up to the first rejection ``x``
  and the target's step there.

The engine draws from the very streams :class:`lrsim.des._Sim` sets up, in
the order the event engine consumes them, so both engines return the same
numbers (a test checks this); it only skips the per-event bookkeeping.
It cannot write traces (the event engine does).
"""

from __future__ import annotations

import time

import numpy as np

from .des import SimResult, _Sim


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


def _passes(sim: _Sim, lengths: np.ndarray, stream, sampled: bool) -> np.ndarray:
    """Passes of each step (rows of ``lengths`` in the order the event engine creates them)."""
    if stream is None:
        return lengths.astype(float)
    if not sampled:
        return lengths / sim.mu2  # the mean-field step: L / E[tokens per pass]
    flat = [stream.truncated(int(L))[0] for L in lengths.ravel()]
    return np.asarray(flat, dtype=float).reshape(lengths.shape)


def _sync_block(sim: _Sim, n: int, costs: dict[int, float]) -> dict[str, np.ndarray]:
    """Simulate ``n`` sync cycles (``costs[b]``: target iteration time at batch ``b``); per-cycle arrays."""
    cfg = sim.cfg
    k1, W = cfg.k1, cfg.width
    sampled = not sim.mean_tokens
    sizes = [W ** (j + 1) if cfg.tree else W for j in range(k1 - 1)]  # candidates drafted at each depth
    draft_time = np.zeros(n)
    lens_by_depth = []
    if k1 > 1:
        dl = sim.dlen.take(n * sum(sizes)).reshape(n, sum(sizes))  # cycle-major, like the event engine
        dp = _passes(sim, dl, sim.dpass, sampled)
        at = 0
        for b in sizes:
            lens, p = dl[:, at:at + b], dp[:, at:at + b]
            at += b
            if b == 1:
                draft_time += p[:, 0] * sim.draft_pass[1]
            else:
                draft_time += _shrinking_batch(p, sim.draft_pass)[0]
            lens_by_depth.append(lens)
    lt = sim.tlen.take(n * k1).reshape(n, k1)
    tp = _passes(sim, lt, sim.tpass, sampled)
    target_time, finish_sorted = _shrinking_batch(tp, costs)
    first = sim.verdicts.take(n * (k1 - 1)).reshape(n, k1 - 1)
    rejected = first < 0
    x = np.full(n, k1 - 1)
    if k1 > 1:
        x = np.where(rejected.any(axis=1), rejected.argmax(axis=1), k1 - 1)  # first rejection, or k1 - 1
    if k1 == 1 or sim.vtime is None:
        verify = np.zeros(n)
    elif cfg.verify_calls == "per_pair":
        calls = sim.vtime.take(n * (k1 - 1)).reshape(n, k1 - 1)  # one call per pair, in order ...
        verify = (calls * (np.arange(k1 - 1)[None, :] <= x[:, None])).sum(axis=1)  # ... up to the first rejection
    else:
        verify = sim.vtime.take(n)  # one call checks all pairs
    pos = np.arange(k1)
    kept = pos[None, :] <= x[:, None]  # output positions: drafts before x, the target's step at x
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


def _ar_block(sim: _Sim, n: int, costs: dict[int, float]) -> dict[str, np.ndarray]:
    """Simulate ``n`` target-only steps (the token stream runs on across step boundaries)."""
    lt = sim.tlen.take(n)
    if sim.tpass is None:
        passes = lt.astype(float)
    elif sim.mean_tokens:
        passes = lt / sim.mu2
    else:
        passes = sim.tpass.carried_many(lt).astype(float)
    t = passes * costs[1]
    zeros = np.zeros(n)
    return {"time": t, "steps": np.ones(n, dtype=np.int64), "base": lt, "tokens": lt.astype(float),
            "accepted": zeros, "decisive": zeros, "seq_time": t, "seq_iters": passes, "wasted": zeros}


def run_renewal(sim: _Sim) -> SimResult:
    """Simulate ``sim.cfg`` (sync or ar) cycle by cycle in blocks; the result of the event engine."""
    cfg = sim.cfg
    block = _sync_block if cfg.mode == "sync" else _ar_block
    wall = time.perf_counter()
    costs = {b: sim.srv.iteration_time(b) for b in range(1, cfg.k1 + 1)}
    parts, steps = [], 0
    while steps < cfg.steps:
        per_cycle = max(1.0, sim.expected_steps_per_cycle())
        n = int(min(65536, max(64, 1.1 * (cfg.steps - steps) / per_cycle + 16)))
        part = block(sim, n, costs)
        parts.append(part)
        steps += int(part["steps"].sum())
    c = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    cut = int(np.searchsorted(np.cumsum(c["steps"]), cfg.steps, side="left")) + 1  # the cycle reaching N
    c = {k: v[:cut] for k, v in c.items()}
    sim.cycle_end = np.cumsum(c["time"])
    sim.cycle_base = c["base"] * sim.tau1
    sim.out = int(c["steps"].sum())
    sim.tokens = float(c["tokens"].sum())
    sim.accepted = int(c["accepted"].sum())
    sim.decisive = int(c["decisive"].sum())
    srv = sim.srv
    srv.seq_time, srv.seq_iters, srv.wasted = (float(c[k].sum()) for k in ("seq_time", "seq_iters", "wasted"))
    srv.peak = cfg.k1 if cfg.mode == "sync" else 1
    return sim._result(0, time.perf_counter() - wall, "renewal")
