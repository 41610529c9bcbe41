"""Discrete-event simulator (SimPy) of one request decoded with Lookahead Reasoning.

What is simulated (times in seconds of whatever unit the latency models use;
with the default models one target step at batch 1 costs ``T = 1``):

- **Target server**: continuous batching.  One *iteration* (forward pass)
  advances every admitted sequence by one pass and costs
  ``tau(batch, k2) * (1 + c2 (k2 - 1))``: the target's pass over ``k2``
  positions plus ``k2 - 1`` token-drafter calls at ``c2`` each.  Without
  token-level SD (``k2 = 1``) a pass writes one token; with it a pass writes
  ``min(X2, k2 - 1) + 1`` tokens, ``P(X2 = x) = alpha2^x (1 - alpha2)``.
  A step of ``L`` tokens is one sequence that needs as many passes as it takes
  to reach ``L`` tokens (tokens of the last pass past the step boundary are
  discarded: an LR target step stops at ``\\n\\n``).  With ``join =
  "iteration"`` a sequence submitted mid-iteration joins at the next iteration
  boundary and a cancelled one leaves there (as in vLLM); ``"immediate"`` is
  the fluid idealisation (join and leave at once).
- **Drafter**: its own device; drafts one position at a time, ``W``
  candidates as one batch (``tree``: ``W^(j+1)`` at depth ``j``, sync only),
  with its own per-pass latency; with ``draft_sd`` it uses the same token-level
  speculation inside its steps (the paper's assumption behind ``h = f g``).
- **Verifier**: its own device, one call per position (sync: one call per
  cycle for all positions), latency from a distribution; calls overlap.
- **Acceptance**: a position is accepted if any of its ``W`` candidates is;
  each candidate is accepted with probability ``alpha1``; with probability
  ``correlation`` all ``W`` share one verdict, otherwise they are independent,
  so ``P_W = rho alpha1 + (1 - rho)(1 - (1 - alpha1)^W)`` (pairwise
  correlation of verdicts ``rho``).
- **Scheduling**: ``ar`` is target-only decoding (with token SD if ``k2 > 1``;
  the token stream then runs on across step boundaries).  ``sync`` is
  Algorithm 1: draft ``k1 - 1`` steps, then the target writes ``k1`` steps in
  one batch, verify, keep the drafts up to the first rejection plus the
  target's step there.  ``async``: target step ``j`` starts as soon as draft
  ``j - 1`` exists (step 0 at once); drafter and target look at most ``k1``
  positions past the last verified one; position ``j`` is verified when draft
  and target ``j`` both exist; at the first rejection the target's step is
  committed, everything that depends on the rejected draft is cancelled and a
  new stage starts.  ``k1 = 1`` is target-only in both modes (nothing to look
  ahead: no draft, no verifier).  At equal times the target's completions are
  processed before drafter and verifier events, so ties resolve one way.
- **Baseline**: target-only autoregressive decoding at batch 1 of the same
  output steps: each output position costs ``tau(1, 1) * L_t``, ``L_t`` the
  length of the target step written for that position in this run (common
  random numbers).  ``speedup = baseline time / LR time``; its 95% CI comes
  from **batch means** over consecutive cycles (sync cycles, async stages, ar
  steps; 32 batches by default), ratio estimator with a delta-method standard
  error and Student-t quantile.

Under the paper's assumptions (constant latency, free verifier, constant
step length, i.i.d. acceptance, ``W = 1``, ``token_model = "mean"`` and
``draft_sd`` for the hybrid) the simulated speedups are the closed forms of
:mod:`lrsim.theory`; the tests and ``studies/`` check how closely.

Sync and ar runs without a trace go to :mod:`lrsim.renewal`, which computes
the same cycles from the same random streams without events (same results).
"""

from __future__ import annotations

import json
import math
import time
from bisect import bisect_left
from dataclasses import dataclass, field, fields
from heapq import heappop, heappush
from pathlib import Path
from typing import Any, Callable

import numpy as np
import simpy
from simpy.events import URGENT, Timeout

from . import theory
from .fields import option
from .latency import (
    Constant,
    ConstantLatency,
    Dist,
    Latency,
    dist_from_dict,
    latency_from_dict,
)

MODES = ("ar", "sync", "async")
TRACE_MODES = {"ar": "ar", "sync": "lr-sync", "async": "lr-async"}
TOKEN_MODELS = ("sampled", "mean")
JOINS = ("iteration", "immediate")
ENGINES = ("auto", "des", "renewal")
MAX_DRAFT_BATCH = 4096
STEP_TOKENS = 52  # default step length: ~52 tokens per step measured in MEASUREMENTS.md



# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulated run depends on (serialised into the trace header)."""

    mode: str = option("'ar' (target only), 'sync' (Algorithm 1) or 'async' (pipelined LR)", "async")
    alpha1: float = option("step acceptance probability of one draft candidate, in [0, 1]", 0.6)
    c1: float = option("draft/target time per step at batch 1 (sets the draft latency unless draft_latency is given)", 0.1)
    k1: int = option("sync: target steps per cycle (drafted steps + 1); async: look-ahead depth", 4)
    alpha2: float = option("token acceptance probability of token-level SD, in [0, 1]", 0.6)
    c2: float = option("token drafter/target time per token (n-gram lookup: small, e.g. 0.01)", 0.05)
    k2: int = option("positions per target pass: token-level SD drafts k2 - 1 tokens (1 = no token SD)", 1)
    width: int = option("W: draft candidates per position", 1)
    correlation: float = option("rho: probability that all W candidates share one verdict (0 = independent)", 0.0)
    tree: bool = option("draft the full W^(j+1) tree at depth j instead of W candidates per position (sync only)", False)
    verifier_cost: float = option("verifier latency per call in units of T (target step time at batch 1)", 0.0)
    verifier_latency: Dist | None = option("verifier latency per call (s), a distribution; overrides verifier_cost")
    request_tokens: Dist | None = option("sync: output tokens per request; requests run back to back and every draft and "
                                     "target step is cut at the tokens its request has left (lrref's max_tokens). "
                                     "None: one endless request", None)
    verify_calls: str = option("sync: 'one' verifier call checks all pairs of a cycle; 'per_pair': one call per pair, "
                           "in order, up to the first rejection (lrref's sync decoder)", "one")
    step_tokens: Dist = option("tokens per target step (rounded, >= 1)", Constant(STEP_TOKENS))
    draft_tokens: Dist | None = option("tokens per draft step; None: same distribution as step_tokens")
    target_latency: Latency | None = option("target forward-pass latency; None: constant, so that T = 1")
    draft_latency: Latency | None = option("draft forward-pass latency; None: constant, c1 T per mean draft step")
    draft_sd: bool = option("the drafter uses the same token-level SD inside its steps (paper's h = f g)", True)
    token_model: str = option("token SD passes: 'sampled' (geometric per pass) or 'mean' (L / E[tokens per pass])",
                          "sampled")
    join: str = option("'iteration': sequences join/leave the target batch at iteration boundaries; "
                   "'immediate': at once", "iteration")
    budget: int | None = option("M: target positions at once (sequences x k2); None = no limit")
    steps: int = option("output steps to simulate", 10_000)
    engine: str = option("'auto' (renewal for sync and ar without a trace, else des), 'des' or 'renewal'", "auto")
    seed: int = option("random seed", 0)
    batches: int = option("batches for the batch-means confidence interval", 32)

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict:
        """JSON-ready dict (nested models as ``{"kind": ..., ...}``)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "SimConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown simulation parameter(s): {', '.join(sorted(unknown))}")
        kw = dict(d)
        for name in ("verifier_latency", "step_tokens", "draft_tokens"):
            if isinstance(kw.get(name), dict):
                kw[name] = dist_from_dict(kw[name])
        for name in ("target_latency", "draft_latency"):
            if isinstance(kw.get(name), dict):
                kw[name] = latency_from_dict(kw[name])
        return cls(**kw)


def _plain(v: Any) -> Any:
    return v.to_dict() if hasattr(v, "to_dict") else v


def _int(name: str, v: Any, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def _unit(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise ValueError(f"{name} must lie in [0, 1], got {v!r}")


def validate(cfg: SimConfig) -> None:
    """Raise ``ValueError`` with a one-line message for an invalid or over-budget configuration."""
    if cfg.mode not in MODES:
        raise ValueError(f"unknown mode {cfg.mode!r}: expected one of {', '.join(MODES)}")
    for name in ("alpha1", "alpha2", "correlation"):
        _unit(name, getattr(cfg, name))
    for name in ("c1", "c2"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    if not (isinstance(cfg.verifier_cost, (int, float)) and math.isfinite(cfg.verifier_cost)
            and cfg.verifier_cost >= 0):
        raise ValueError(f"verifier_cost must be a finite number >= 0, got {cfg.verifier_cost!r}")
    for name, lo in (("k1", 1), ("k2", 1), ("width", 1), ("steps", 1), ("batches", 2)):
        _int(name, getattr(cfg, name), lo)
    _int("seed", cfg.seed, 0)
    if cfg.token_model not in TOKEN_MODELS:
        raise ValueError(f"token_model must be one of {', '.join(TOKEN_MODELS)}, got {cfg.token_model!r}")
    if cfg.request_tokens is not None and (cfg.mode == "async" or cfg.engine == "renewal" or cfg.width > 1):
        raise ValueError("request_tokens is modelled for sync and ar with W = 1 on the event engine only")
    if cfg.verify_calls not in ("one", "per_pair"):
        raise ValueError(f"verify_calls must be 'one' or 'per_pair', got {cfg.verify_calls!r}")
    if cfg.join not in JOINS:
        raise ValueError(f"join must be one of {', '.join(JOINS)}, got {cfg.join!r}")
    if cfg.token_model == "mean" and cfg.k2 > 1 and cfg.join != "immediate":
        raise ValueError("token_model 'mean' gives fractional passes, which have no iteration boundaries: "
                         "use join 'immediate'")
    if cfg.engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {cfg.engine!r}")
    if cfg.engine == "renewal" and cfg.mode == "async":
        raise ValueError("the renewal engine computes sync and ar only (async is not a renewal process)")
    if cfg.tree and cfg.mode != "sync":
        raise ValueError("tree drafting (W^(j+1) candidates at depth j) is modelled for sync mode only")
    if cfg.step_tokens.mean <= 0 or (cfg.draft_tokens is not None and cfg.draft_tokens.mean <= 0):
        raise ValueError("step lengths must have a mean > 0 tokens")
    if cfg.budget is not None:
        _int("budget", cfg.budget, 1)
        seqs = 1 if cfg.mode == "ar" else cfg.k1
        if seqs * cfg.k2 > cfg.budget:
            raise ValueError(f"over budget: {seqs} target sequence(s) x k2 = {cfg.k2} positions = "
                             f"{seqs * cfg.k2} > M = {cfg.budget}")
    batch = max_draft_batch(cfg)
    if batch > MAX_DRAFT_BATCH:
        raise ValueError(f"draft batch {batch} (W = {cfg.width}, tree depth {cfg.k1 - 1}) exceeds {MAX_DRAFT_BATCH}")
    tk = cfg.k2
    for b in range(1, (1 if cfg.mode == "ar" else cfg.k1) + 1):
        _priced(cfg.target_latency, "target", b, tk)
    _priced(cfg.target_latency, "target", 1, 1)  # the autoregressive baseline
    if cfg.mode != "ar" and cfg.k1 > 1:
        for b in range(1, batch + 1):
            _priced(cfg.draft_latency, "draft", b, tk if cfg.draft_sd else 1)


def _priced(lat: Latency | None, who: str, batch: int, tokens: int) -> None:
    if lat is not None:
        try:
            lat.check(batch, tokens)
        except ValueError as e:
            raise ValueError(f"{who} latency at batch {batch}, {tokens} token(s)/sequence: {e}") from None


def max_draft_batch(cfg: SimConfig) -> int:
    """Largest drafter batch: ``W`` per position, or ``W^(k1-1)`` at the deepest tree level."""
    return cfg.width ** max(cfg.k1 - 1, 1) if cfg.tree else cfg.width


def accept_probability(alpha1: float, width: int, correlation: float) -> float:
    """``P_W = rho alpha + (1 - rho)(1 - (1 - alpha)^W)``: some candidate of ``W`` is accepted."""
    return correlation * alpha1 + (1 - correlation) * (1 - (1 - alpha1) ** width)


# ----------------------------------------------------------------------------- results


@dataclass
class SimResult:
    """What one run measured (all times in the latency models' unit)."""

    mode: str
    speedup: float  #: baseline time / LR time for the same output steps
    speedup_ci95: tuple[float | None, float | None]  #: batch-means 95% CI (None if too few cycles)
    theory_speedup: float | None  #: closed form at (P_W, c1_eff): f_sync/f_async(k1) * g(k2), or g(k2) for ar
    acceptance_rate: float | None  #: accepted / decisive verdicts (accepts + first rejections)
    accept_probability: float  #: P_W of the acceptance model
    accepted_per_cycle: float  #: accepted drafts per cycle (stage in async)
    steps_per_cycle: float  #: output steps per cycle
    steps: int  #: output steps simulated
    cycles: int
    output_tokens: int
    sim_time: float  #: simulated time to the last committed step
    baseline_time: float  #: target-only decoding of the same steps
    target_utilisation: float  #: mean positions in use / capacity (M, or k1 k2)
    wasted_target_work: float  #: share of target sequence-iterations on cancelled or rejected-branch steps
    peak_positions: int  #: most target positions in use at once
    c1_eff: float  #: draft step / target step time at batch 1 (mean lengths, draft batch W)
    engine: str  #: 'des' (SimPy events) or 'renewal' (vectorised cycles, sync and ar; same results)
    events: int  #: SimPy events processed (0 for the renewal engine)
    wall_seconds: float
    events_per_second: float
    config: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["speedup_ci95"] = list(self.speedup_ci95)
        return d

    def row(self) -> dict:
        """Flat scalars for tables (sweeps): the CI as two columns, no config."""
        d = {k: v for k, v in self.to_dict().items() if k not in ("config", "speedup_ci95")}
        d["ci_low"], d["ci_high"] = self.speedup_ci95
        return d


# ----------------------------------------------------------------------------- random streams


class _Draws:
    """Scalar draws from a vectorised sampler, refilled in blocks (one numpy call per draw costs ~1 us)."""

    __slots__ = ("fn", "n", "buf", "i")

    def __init__(self, fn: Callable[[int], np.ndarray], n: int = 4096):
        self.fn, self.n, self.buf, self.i = fn, n, [], 0

    def __call__(self):
        if self.i >= len(self.buf):
            self.buf, self.i = self.fn(self.n).tolist(), 0
        v = self.buf[self.i]
        self.i += 1
        return v

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` draws at once: the same values ``n`` calls would return."""
        parts, need = [], n
        while need > 0:
            if self.i >= len(self.buf):
                self.buf, self.i = self.fn(self.n).tolist(), 0
            k = min(need, len(self.buf) - self.i)
            parts.append(self.buf[self.i:self.i + k])
            self.i += k
            need -= k
        return np.asarray([v for part in parts for v in part])


class _Fixed:
    """A constant draw (a constant step length), with the interface of :class:`_Draws`."""

    def __init__(self, value: int):
        self.value = value

    def __call__(self) -> int:
        return self.value

    def take(self, n: int) -> np.ndarray:
        return np.full(n, self.value)


def _lengths(dist: Dist, rng: np.random.Generator) -> _Draws | _Fixed:
    """Step lengths in whole tokens (>= 1)."""
    if isinstance(dist, Constant):
        return _Fixed(max(1, round(dist.value)))
    return _Draws(lambda n: np.maximum(1, np.rint(dist.sample(rng, n))).astype(np.int64))


class _Passes:
    """Forward passes of token-level SD: pass i writes ``Y_i = min(X2, k2 - 1) + 1`` tokens.

    ``C`` is the running sum of a block-refilled stream of ``Y``; a step of
    ``L`` tokens starting at stream index ``p`` ends at the first ``q`` with
    ``C[q] >= C[p] + L`` (``truncated``: a new sequence whose extra tokens are
    dropped) or ``C[q] >= need + L`` (``carried``: one long sequence).
    """

    def __init__(self, rng: np.random.Generator, alpha2: float, k2: int, block: int = 8192):
        self.rng, self.alpha2, self.k2, self.block = rng, alpha2, k2, block
        self.C, self.p, self.need = [0], 0, 0

    def _extend(self) -> None:
        if self.alpha2 >= 1:
            y = np.full(self.block, self.k2)
        else:  # numpy's geometric counts trials to the first success: X2 + 1 with success prob 1 - alpha2
            y = np.minimum(self.rng.geometric(1 - self.alpha2, size=self.block) - 1, self.k2 - 1) + 1
        if self.p > 4 * self.block:
            del self.C[: self.p]
            self.p = 0
        self.C.extend((np.cumsum(y) + self.C[-1]).tolist())

    def _to(self, need: int) -> tuple[int, int]:
        while self.C[-1] < need:
            self._extend()
        hi = min(len(self.C), self.p + need - self.C[self.p] + 1)  # a pass writes >= 1 token
        q = bisect_left(self.C, need, self.p, hi)
        passes, tokens = q - self.p, self.C[q] - self.C[self.p]
        self.p = q
        return passes, tokens

    def truncated(self, L: int) -> tuple[int, int]:
        """(passes, tokens written including the discarded tail) for a fresh step of ``L`` tokens."""
        return self._to(self.C[self.p] + L)

    def carried(self, L: int) -> tuple[int, int]:
        """Passes that complete the next ``L`` tokens of a continuing stream."""
        self.need += L
        return self._to(self.need)

    def carried_many(self, lengths: np.ndarray) -> np.ndarray:
        """Passes of consecutive steps of one stream: the same as ``carried`` called for each length."""
        needs = self.need + np.cumsum(lengths)
        while self.C[-1] < needs[-1]:
            self._extend()
        q = np.searchsorted(np.asarray(self.C[self.p:]), needs, side="left") + self.p
        passes = np.diff(np.concatenate(([self.p], q)))
        self.p, self.need = int(q[-1]), int(needs[-1])
        return passes


class _Verdicts:
    """Verdicts for the ``W`` candidates of a position: returns (first accepted branch or -1, verdict row)."""

    def __init__(self, rng: np.random.Generator, alpha: float, width: int, rho: float, n: int = 4096):
        self.rng, self.alpha, self.width, self.rho, self.n = rng, alpha, width, rho, n
        self.first: list[int] = []
        self.rows: list = []
        self.i = 0

    def _fill(self) -> None:
        r, n, w = self.rng, self.n, self.width
        shared = r.random(n) < self.rho  # the position's candidates share one verdict
        common = r.random(n) < self.alpha
        v = np.where(shared[:, None], common[:, None], r.random((n, w)) < self.alpha)  # (n, W) verdicts
        anyv = v.any(axis=1)
        self.first = np.where(anyv, v.argmax(axis=1), -1).tolist()
        self.rows = v.tolist()
        self.i = 0

    def __call__(self) -> tuple[int, list]:
        if self.i >= len(self.first):
            self._fill()
        i = self.i
        self.i += 1
        return self.first[i], self.rows[i]

    def take(self, n: int) -> np.ndarray:
        """First accepted branch (or -1) of the next ``n`` positions, as ``n`` calls would give."""
        out, need = [], n
        while need > 0:
            if self.i >= len(self.first):
                self._fill()
            k = min(need, len(self.first) - self.i)
            out += self.first[self.i:self.i + k]
            self.i += k
            need -= k
        return np.asarray(out, dtype=np.int64)


# ----------------------------------------------------------------------------- target server

PENDING, RUNNING, DONE, CANCELLED = 0, 1, 2, 3


class _Job:
    """One target step: a sequence on the target server."""

    __slots__ = ("pos", "tokens", "passes", "written", "work0", "finish", "start", "end", "batch", "work",
                 "on_done", "sid", "state", "wasted", "verdict")

    def __init__(self, pos: int, tokens: int, passes: float, written: int):
        self.pos, self.tokens, self.passes, self.written = pos, tokens, passes, written
        self.start = self.end = None
        self.batch = 0
        self.work = 0.0
        self.state = PENDING
        self.wasted = False
        self.sid = 0


def _tol(w: float) -> float:
    return 1e-9 * max(1.0, abs(w))


class _TargetEvent(simpy.Event):
    """A timeout with SimPy's URGENT priority: at equal times the target's completions are processed
    before drafter and verifier events, so ties resolve the same way whatever the event order."""

    def __init__(self, env: simpy.Environment, delay: float):
        self.env, self.callbacks = env, []
        self._ok, self._value = True, None  # a triggered event, as simpy.Timeout makes it
        env.schedule(self, URGENT, delay)


class _TargetServer:
    """Continuous batching on a work clock.

    ``work`` counts iterations the server has run; every running sequence
    advances with it, so a sequence admitted at work ``w0`` needing ``n``
    passes finishes at work ``w0 + n``.  The clock advances at ``1 / d(b)``
    per second, ``d(b)`` the iteration time of the current batch ``b``.  The
    only event scheduled is the next finish (or, with joins at iteration
    boundaries, the next boundary when someone waits to join or leave).
    Used for batch-dependent latency; :class:`_FixedRateServer` handles the
    batch-independent case faster.
    """

    def __init__(self, env: simpy.Environment, iteration_time: Callable[[int], float], grid: bool):
        self.env, self.iteration_time, self.grid = env, iteration_time, grid
        self.jobs: list[_Job] = []
        self.pending: list[_Job] = []  # waiting for the next boundary (batch-dependent d only)
        self.leaving: list[_Job] = []  # cancelled, leave at the next boundary (batch-dependent d only)
        self.work = self.t0 = self.d = 0.0
        self.token = 0
        self.wake_at = math.inf  # time of the live wake-up
        self.deferred = False
        self.seq_time = 0.0  # sequence-seconds on the server (sum over sequences of time admitted)
        self.seq_iters = 0.0  # sequence-iterations run
        self.wasted = 0.0  # sequence-iterations on wasted steps
        self.peak = 0
        self._d: dict[int, float] = {}

    def _advance(self) -> None:
        now = self.env._now
        if self.jobs and now > self.t0:
            self.work += (now - self.t0) / self.d  # one iteration per d(b) seconds
        self.t0 = now

    def _next_boundary(self) -> float:
        return float(math.ceil(self.work - _tol(self.work)))

    def _on_boundary(self) -> bool:
        return not self.grid or abs(self.work - round(self.work)) <= _tol(self.work)

    def _set_d(self) -> None:
        b = len(self.jobs)
        if b:
            d = self._d.get(b)
            if d is None:
                d = self._d[b] = self.iteration_time(b)
            self.d = d
            if b > self.peak:
                self.peak = b

    def _admit(self, jobs: list[_Job], w0: float, t: float) -> None:
        for j in jobs:
            j.work0, j.finish, j.start, j.state = w0, w0 + j.passes, t, RUNNING
        self.jobs.extend(jobs)
        for j in jobs:
            j.batch = len(self.jobs)
        self._set_d()

    def _remove(self, j: _Job, w: float, t: float) -> None:
        """Book a sequence that leaves at work ``w``, time ``t``."""
        j.work = max(0.0, w - j.work0)
        if j.work <= 0 and j.finish > j.work0:
            j.start = None  # it never ran an iteration
        else:
            self.seq_time += t - j.start
        j.end = t
        self.seq_iters += j.work
        if j.wasted:
            self.wasted += j.work

    def submit(self, jobs: list[_Job]) -> None:
        """Add sequences: at once if the server is idle or at a boundary, else at the next boundary."""
        self._advance()
        now = self.env._now
        if not self.jobs:
            if self.grid:
                self.work = self._next_boundary()  # an idle server starts a fresh iteration
            self._admit(jobs, self.work, now)
        elif self._on_boundary():
            self._admit(jobs, self.work, now)
        else:
            self.pending.extend(jobs)
        self._plan()

    def run(self, jobs: list[_Job]) -> simpy.Event:
        """Submit ``jobs``; the returned event fires when all of them are done."""
        ev = self.env.event()
        left = [len(jobs)]

        def one_done(_job: _Job) -> None:
            left[0] -= 1
            if left[0] == 0:
                ev.succeed()

        for j in jobs:
            j.on_done = one_done
        self.submit(jobs)
        return ev

    def cancel(self, jobs: list[_Job]) -> None:
        """Drop sequences; running ones finish the current iteration (``grid``) or leave at once."""
        self._advance()
        at_once = self._on_boundary()
        for j in jobs:
            j.wasted = True
            if j.state == PENDING:
                self.pending.remove(j)
            elif j.state == RUNNING:
                if at_once:
                    self.jobs.remove(j)
                    self._remove(j, self.work, self.env._now)
                else:
                    self.leaving.append(j)
            j.state = CANCELLED
        self._set_d()
        self._plan()

    def add_waste(self, job: _Job) -> None:
        """Count a finished step whose result was thrown away."""
        self.wasted += job.work

    def _wake(self, ev: simpy.Event) -> None:
        if ev.token != self.token:  # superseded by a later plan
            return
        self.wake_at = math.inf
        self._advance()
        w = self.work
        boundary = abs(w - round(w)) <= _tol(w)
        if boundary and self.grid:
            self.work = w = float(round(w))
        now, lim = self.env._now, w + _tol(w)
        finished = [j for j in self.jobs if j.finish <= lim]
        if finished:
            self.jobs = [j for j in self.jobs if j.finish > lim]
            for j in finished:
                self._remove(j, j.finish, now)
        if self.leaving and boundary:
            for j in self.leaving:
                if j in self.jobs:
                    self.jobs.remove(j)
                    self._remove(j, w, now)
            self.leaving = []
        if self.pending and (boundary or not self.jobs):
            if not self.jobs:
                self.work = w = self._next_boundary()
            pend, self.pending = self.pending, []
            self._admit(pend, w, now)
        self._set_d()
        self.deferred = True
        done = [j for j in finished if j.state == RUNNING]
        for j in done:
            j.state = DONE
        for j in done:  # a callback may end the stage of the others: they check for that
            j.on_done(j)
        self.deferred = False
        self._plan()

    def _plan(self) -> None:
        """Make sure a wake-up comes no later than the next finish (or boundary someone waits for)."""
        if self.deferred:
            return
        if not self.jobs:
            self.token += 1
            self.wake_at = math.inf
            return
        w = self.work
        nxt = min([j.finish for j in self.jobs]) - w  # iterations to the next finish
        if self.pending or self.leaving:
            nxt = min(nxt, self._next_boundary() - w)  # or to the next iteration boundary
        t = self.env._now + max(nxt, 0.0) * self.d
        if t >= self.wake_at:
            return  # the live wake-up comes first and plans again
        self.token += 1
        self.wake_at = t
        ev = _TargetEvent(self.env, t - self.env._now)
        ev.token = self.token
        ev.callbacks.append(self._wake)

    def close(self) -> None:
        """Book the sequences still running, up to now."""
        self._advance()
        now = self.env._now
        for j in self.jobs:
            if j.start is not None and j.start < now:
                self.seq_time += now - j.start
                self.seq_iters += max(0.0, self.work - j.work0)


class _FixedRateServer(_TargetServer):
    """The target server when an iteration costs the same at every batch size.

    Then a sequence's finish time is fixed when it is admitted (``start +
    passes * d``, ``start`` the next iteration boundary with ``grid``): the
    server keeps the finishes in a heap and schedules one event for the
    earliest (all sequences finishing then complete together); cancelled
    sequences are dropped from the heap without an event.  Same timing and
    bookkeeping as :class:`_TargetServer` (a test holds the two against each other).
    """

    def __init__(self, env: simpy.Environment, iteration_time: Callable[[int], float], grid: bool):
        super().__init__(env, iteration_time, grid)
        self.d = iteration_time(1)
        self.live: set[_Job] = set()
        self.heap: list[tuple[float, int, _Job]] = []
        self.seq = 0
        self.armed = math.inf  # time of the scheduled event
        self.epoch = 0.0  # start of the current iteration grid (an idle server starts a fresh one)
        self.last_leave = -math.inf  # when the last cancelled sequence leaves its iteration
        self.busy_until = -math.inf  # the server is busy until then (latest finish or leave)

    def _start_time(self, now: float) -> float:
        """When a sequence submitted now runs its first iteration."""
        if now >= self.busy_until:
            self.epoch = now  # idle: a fresh iteration starts now
            return now
        if not self.grid:
            return now
        n = (now - self.epoch) / self.d
        return self.epoch + math.ceil(n - _tol(n)) * self.d  # the next iteration boundary

    def submit(self, jobs: list[_Job]) -> None:
        now = self.env._now
        t = self._start_time(now)
        for j in jobs:
            self.live.add(j)
            j.start, j.state, j.work0 = t, RUNNING, 0.0
            j.finish = f = t + j.passes * self.d
            if f > self.busy_until:
                self.busy_until = f
            heappush(self.heap, (f, self.seq, j))
            self.seq += 1
        # those still running when the new ones start (at t = now every live one is: finishes at now
        # were processed first, their events being URGENT)
        batch = len(self.live) if t == now else sum(1 for j in self.live if j.finish > t)
        for j in jobs:
            j.batch = batch
        if batch > self.peak:
            self.peak = batch
        self._arm()

    def _arm(self) -> None:
        """Schedule an event at the earliest live finish, unless one comes by then."""
        heap = self.heap
        while heap and heap[0][2].state != RUNNING:
            heappop(heap)
        if heap and heap[0][0] < self.armed:
            self.armed = heap[0][0]
            self.token += 1
            ev = _TargetEvent(self.env, self.armed - self.env._now)
            ev.token = self.token
            ev.callbacks.append(self._done)

    def _done(self, ev: simpy.Event) -> None:
        if ev.token != self.token:  # superseded by an earlier one
            return
        self.armed = math.inf
        heap, lim = self.heap, self.env._now + _tol(self.env._now)
        done = []
        while heap and heap[0][0] <= lim:
            j = heappop(heap)[2]
            if j.state == RUNNING:
                done.append(j)
        for j in done:
            self.live.discard(j)
            j.state, j.end, j.work = DONE, j.finish, j.passes
            self.seq_time += j.finish - j.start
            self.seq_iters += j.passes
        for j in done:  # a callback may end the stage of the others: they check for that
            j.on_done(j)
        self._arm()

    def cancel(self, jobs: list[_Job]) -> None:
        now = self.env._now
        for j in jobs:
            if j.state != RUNNING:
                continue
            self.live.discard(j)
            j.state, j.wasted = CANCELLED, True
            if now <= j.start:  # it never ran an iteration
                j.start, j.end, j.work = None, now, 0.0
                continue
            n = (now - self.epoch) / self.d
            end = self.epoch + math.ceil(n - _tol(n)) * self.d if self.grid else now  # it ends its iteration
            j.end, j.work = end, (end - j.start) / self.d
            self.last_leave = max(self.last_leave, end)
            self.seq_time += end - j.start
            self.seq_iters += j.work
            self.wasted += j.work
        self.busy_until = max([self.last_leave] + [j.finish for j in self.live])

    def close(self) -> None:
        """Book the sequences still running, up to now."""
        now = self.env._now
        for j in self.live:
            if j.start < now:
                self.seq_time += now - j.start
                self.seq_iters += (now - j.start) / self.d


# ----------------------------------------------------------------------------- the simulation


class _Stage:
    """Async state between two rejections."""

    __slots__ = ("sid", "t0", "drafted", "started", "V", "jobs", "drafts", "verdicts", "base")

    def __init__(self, sid: int, t0: float):
        self.sid, self.t0 = sid, t0
        self.drafted = self.started = self.V = 0  # drafts done, targets started, verified-accepted prefix
        self.jobs: list[_Job] = []
        self.drafts: list[list] = []  # per position: [start, end, lengths, batch, cancelled]
        self.verdicts: dict[int, tuple] = {}  # position -> (first accepted branch, row, verify start, end)
        self.base = 0.0


class _Sim:
    def __init__(self, cfg: SimConfig, record: bool):
        self.cfg, self.record = cfg, record
        self.env = simpy.Environment()
        ss = np.random.SeedSequence(cfg.seed)
        r_acc, r_tlen, r_dlen, r_tpass, r_dpass, r_ver, r_req = (np.random.default_rng(s) for s in ss.spawn(7))
        tlat = cfg.target_latency or ConstantLatency(1.0 / cfg.step_tokens.mean)
        self.tau1 = tlat(1, 1)  # baseline: seconds per token, target alone at batch 1
        T = self.tau1 * cfg.step_tokens.mean  # mean target step time at batch 1
        dtokens = cfg.draft_tokens or cfg.step_tokens
        dlat = cfg.draft_latency or ConstantLatency(cfg.c1 * T / dtokens.mean)
        sd = cfg.k2 > 1
        self.sd_factor = 1 + cfg.c2 * (cfg.k2 - 1) if sd else 1.0  # a pass also pays k2 - 1 drafter calls
        self.mu2 = sum(cfg.alpha2**i for i in range(cfg.k2))  # E[tokens per pass] = E[min(X2, k2-1) + 1]
        self.c1_eff = dlat(cfg.width, 1) * dtokens.mean / T  # draft step (batch W) / target step, batch 1
        it = (lambda b: tlat(b, cfg.k2) * self.sd_factor)  # noqa: E731
        grid = cfg.join == "iteration"
        self.srv = (_FixedRateServer(self.env, it, grid) if isinstance(tlat, ConstantLatency)
                    else _TargetServer(self.env, it, grid))
        self.tlen = _lengths(cfg.step_tokens, r_tlen)
        self.dlen = _lengths(dtokens, r_dlen)
        self.rlen = _lengths(cfg.request_tokens, r_req) if cfg.request_tokens is not None else None
        self.rem = self.rlen() if self.rlen is not None else math.inf  # tokens the current request has left
        self.tpass = _Passes(r_tpass, cfg.alpha2, cfg.k2) if sd else None
        self.dpass = _Passes(r_dpass, cfg.alpha2, cfg.k2) if sd and cfg.draft_sd else None
        dsd = self.sd_factor if sd and cfg.draft_sd else 1.0
        dk = cfg.k2 if sd and cfg.draft_sd else 1
        self.draft_pass = {b: dlat(b, dk) * dsd for b in range(1, max_draft_batch(cfg) + 1)}  # by batch
        self.verdicts = _Verdicts(r_acc, cfg.alpha1, cfg.width, cfg.correlation)
        vdist = cfg.verifier_latency or (Constant(cfg.verifier_cost * T) if cfg.verifier_cost > 0 else None)
        self.vtime = _Draws(lambda n: vdist.sample(r_ver, n), 1024) if vdist and vdist.mean > 0 else None
        self.mean_tokens = cfg.token_model == "mean"
        # what the run measures
        self.cycle_end: list[float] = []
        self.cycle_base: list[float] = []
        self.out = 0
        self.tokens = 0
        self.accepted = self.decisive = 0
        self.rows: list = []
        self.stages: list = []  # async stages kept for the trace
        self.sid = 0
        self.done = self.env.event()
        self.stopped = False

    # -- pieces shared by the schedulers

    def expected_steps_per_cycle(self) -> float:
        """``E[min(X, k1 - 1) + 1] = sum_{i < k1} P_W^i`` in sync mode; 1 in ar mode."""
        cfg = self.cfg
        if cfg.mode != "sync":
            return 1.0
        pw = accept_probability(cfg.alpha1, cfg.width, cfg.correlation)
        return sum(pw**i for i in range(cfg.k1))

    def _target_job(self, pos: int, carried: bool = False, cap: float = math.inf) -> _Job:
        L = min(self.tlen(), cap)  # a step stops at the tokens its request has left
        if self.tpass is None:
            return _Job(pos, L, L, L)  # one token per pass
        if self.mean_tokens:
            return _Job(pos, L, L / self.mu2, L)  # the paper's mean-field step: L / E[Y] passes
        passes, written = self.tpass.carried(L) if carried else self.tpass.truncated(L)
        return _Job(pos, L, passes, written)

    def _draft(self, depth: int, cap: float = math.inf) -> tuple[float, list[int], int]:
        """Duration, candidate lengths and batch of drafting one position (W candidates as one batch)."""
        cfg = self.cfg
        b = cfg.width ** (depth + 1) if cfg.tree else cfg.width
        if b == 1 and self.dpass is None:  # the common case, kept short
            L = min(self.dlen(), cap)
            return L * self.draft_pass[1], [L], 1
        lens = [min(self.dlen(), cap) for _ in range(b)]
        if self.dpass is None:
            passes = lens
        elif self.mean_tokens:
            passes = [L / self.mu2 for L in lens]
        else:
            passes = [self.dpass.truncated(L)[0] for L in lens]
        if b == 1:
            return passes[0] * self.draft_pass[1], lens, 1
        t, prev = 0.0, 0
        for i, p in enumerate(sorted(passes)):  # the batch shrinks as candidates finish
            t += (p - prev) * self.draft_pass[b - i]
            prev = p
        return t, lens, b

    def _commit(self, n_accepted: int, tokens: int, steps: int) -> None:
        self.out += steps
        self.tokens += tokens
        self.accepted += n_accepted

    def _end_cycle(self, base_tokens: int) -> None:
        self.cycle_end.append(self.env._now)
        self.cycle_base.append(base_tokens * self.tau1)
        if self.out >= self.cfg.steps and not self.stopped:
            self.stopped = True
            self.done.succeed()

    # -- ar: target-only decoding

    def _ar(self):
        srv = self.srv
        while True:
            job = self._target_job(0, carried=True)
            yield srv.run([job])
            self._commit(0, job.tokens, 1)
            if self.record:
                self.rows.append(self._row(len(self.cycle_end), 0, None, None, job, None, False, "target"))
            self._end_cycle(job.tokens)
            if self.stopped:
                return

    # -- sync: Algorithm 1

    def _sync(self):
        cfg, srv, env = self.cfg, self.srv, self.env
        k1 = cfg.k1
        while True:
            drafts, used = [], 0  # used: tokens of the drafts so far (they come out of the request's budget)
            for j in range(k1 - 1):  # k1 - 1 drafts back to back on the drafter
                if used >= self.rem:  # the previous draft used up the request: nothing to look ahead
                    break
                d, lens, b = self._draft(j, self.rem - used)
                drafts.append([env._now, env._now + d, lens, b, False])
                used += lens[0]
                yield env.timeout(d)
            nd = len(drafts)
            # the target writes one step per prefix with budget left (k1 steps without a request cap), one batch
            caps = [self.rem - sum(dr[2][0] for dr in drafts[:j]) for j in range(nd + 1)]
            jobs = [self._target_job(j, cap=c) for j, c in enumerate(caps) if c > 0]
            yield srv.run(jobs)
            v0 = env._now
            verdicts = [self.verdicts() for _ in range(nd)]  # (verdicts and verifier times: separate streams)
            x = next((j for j, v in enumerate(verdicts) if v[0] < 0), nd)  # first rejection, or nd
            if cfg.verify_calls == "per_pair":
                calls = [self.vtime() if self.vtime is not None else 0.0 for _ in range(nd)]
                ends = v0 + np.cumsum([0.0] + calls[:min(x + 1, nd)])  # pairs 0..x, one after another
                verdicts = [v + (float(ends[j]), float(ends[j + 1])) if j <= x else v + (None, None)
                            for j, v in enumerate(verdicts)]
                if ends[-1] > v0:
                    yield env.timeout(float(ends[-1] - v0))
            else:
                if nd and self.vtime is not None:
                    yield env.timeout(self.vtime())  # one verifier call checks all pairs
                verdicts = [v + (v0, env._now) for v in verdicts]
            self.decisive += min(x + 1, nd)
            tokens = sum(drafts[j][2][verdicts[j][0]] for j in range(x))
            steps = x
            if x < len(jobs):  # the target's step at x (a rejection, or the bonus step after nd accepted drafts)
                tokens += jobs[x].tokens
                steps += 1
            base = sum(jobs[j].tokens for j in range(min(x + 1, len(jobs))))  # target's own output-position steps
            for job in jobs[x + 1:]:
                srv.add_waste(job)  # written from a prefix with a rejected draft
            self._commit(x, tokens, steps)
            if self.record:
                self._record_positions(drafts, jobs, verdicts, x)
            self.rem -= tokens
            if self.rem <= 0:  # the request is done: the next one starts with its own budget
                self.rem = self.rlen()
            self._end_cycle(base)
            if self.stopped:
                return

    # -- async: pipelined stages

    def _new_stage(self) -> None:
        self.sid += 1
        self.st = _Stage(self.sid, self.env._now)
        self.drafting = False
        self._pump()

    def _pump(self) -> None:
        """Start whatever the gates allow: the drafter and target steps within the look-ahead."""
        st, k1 = self.st, self.cfg.k1
        if self.stopped:
            return
        limit = st.V + k1  # look at most k1 positions past the last verified one
        if not self.drafting and st.drafted < limit and k1 > 1:  # k1 = 1: nothing to look ahead
            d, lens, b = self._draft(0)
            self.drafting = True
            now = self.env._now
            st.drafts.append([now, now + d, lens, b, False])
            ev = Timeout(self.env, d)
            ev.sid, ev.pos = st.sid, st.drafted
            ev.callbacks.append(self._on_draft)
        if st.started <= st.drafted and st.started < limit:  # target j needs drafts 0..j-1
            new = []
            while st.started <= st.drafted and st.started < limit:
                job = self._target_job(st.started)
                job.sid, job.on_done = st.sid, self._on_target
                job.verdict = self.verdicts()  # drawn in position order, whatever order verification runs in
                new.append(job)
                st.started += 1
            st.jobs += new
            self.srv.submit(new)

    def _on_draft(self, ev: Timeout) -> None:
        if ev.sid != self.sid or self.stopped:
            return
        st = self.st
        self.drafting = False
        st.drafted = ev.pos + 1
        if ev.pos < st.started and st.jobs[ev.pos].state == DONE:
            self._verify(ev.pos)
        self._pump()

    def _on_target(self, job: _Job) -> None:
        if job.sid != self.sid or self.stopped:
            return
        if self.cfg.k1 == 1:  # target-only: its step is the output, a stage per step
            self.st.base += job.tokens
            self._commit(0, job.tokens, 1)
            self._end_stage(0)
        elif job.pos < self.st.drafted:
            self._verify(job.pos)

    def _verify(self, pos: int) -> None:
        v = self.vtime() if self.vtime is not None else 0.0
        if v <= 0:
            self._on_verdict(pos, self.env._now)
            return
        ev = Timeout(self.env, v)
        ev.sid, ev.pos, ev.t0 = self.sid, pos, self.env._now
        ev.callbacks.append(self._on_verify_event)

    def _on_verify_event(self, ev: Timeout) -> None:
        if ev.sid == self.sid and not self.stopped:
            self._on_verdict(ev.pos, ev.t0)

    def _on_verdict(self, pos: int, t0: float) -> None:
        st = self.st
        st.verdicts[pos] = st.jobs[pos].verdict + (t0, self.env._now)
        while st.V < st.started and st.V in st.verdicts:  # commit the verified prefix in order
            j = st.V
            first = st.verdicts[j][0]
            job = st.jobs[j]
            self.decisive += 1
            st.base += job.tokens
            if first < 0:  # rejected: keep the target's step, drop everything built on draft j
                self._commit(0, job.tokens, 1)
                self._end_stage(j)
                return
            self._commit(1, st.drafts[j][2][first], 1)
            st.V += 1
            if self.out >= self.cfg.steps:
                self._finish_stage()
                return
        self._pump()

    def _end_stage(self, r: int) -> None:
        """The stage ends at position ``r``: the target's step there is the last output (rejection, or k1 = 1)."""
        st, srv = self.st, self.srv
        if self.drafting:
            st.drafts[-1][1], st.drafts[-1][4] = self.env._now, True  # the draft in progress is abandoned
            self.drafting = False
        srv.cancel([j for j in st.jobs[r + 1:] if j.state in (PENDING, RUNNING)])
        for j in st.jobs[r + 1:]:
            if j.state == DONE:
                srv.add_waste(j)
        if self.record:
            self.stages.append((len(self.cycle_end), st, r, True))
        self._end_cycle(st.base)
        if not self.stopped:
            self._new_stage()

    def _finish_stage(self) -> None:
        """The run ends inside a stage: close it as a (partial) cycle; nothing in it was rejected."""
        if self.record:
            self.stages.append((len(self.cycle_end), self.st, self.st.V, False))
        self._end_cycle(self.st.base)

    def _async(self):
        self._new_stage()
        yield self.done

    # -- trace rows

    def _row(self, cycle, pos, branch, draft, job, verdict, accepted, committed, decision=None):
        from .trace import StepRecord

        r = StepRecord(request=0, cycle=cycle, position=pos, branch=branch, accepted=accepted, committed=committed)
        if draft is not None:
            r.draft_start, r.draft_end, r.draft_batch = draft[0], draft[1], draft[3]
            r.draft_tokens = int(draft[2][branch or 0])
            r.cancelled = draft[4]
        if job is not None:
            if job.start is not None:
                r.target_start, r.target_end, r.target_batch = job.start, job.end, job.batch
                r.target_forwards = int(math.ceil(job.work - 1e-9))
            if job.state == DONE:
                r.target_tokens = int(job.tokens)
                if self.tpass is not None and not self.mean_tokens:
                    r.ngram_drafted = int(job.passes * (self.cfg.k2 - 1))
                    r.ngram_accepted = int(job.written - job.passes)
            else:
                r.cancelled = True
        if verdict is not None and verdict[2] is not None:
            r.verify_start, r.verify_end, r.verifier = verdict[2], verdict[3], "simulated"
            r.decision = decision
        return r

    def _position_rows(self, cycle, j, draft, job, verdict, x, target_at_x=True):
        """Rows of position ``j`` (drafts before ``x`` accepted, the target's step kept at ``x``).

        One row per candidate, or one target-only row when nothing was drafted there.
        """
        if draft is None:
            committed = "target" if j == x and target_at_x else None
            return [self._row(cycle, j, None, None, job, None, False, committed)]
        rows = []
        first = verdict[0] if verdict is not None else -2
        for b in range(self.cfg.width):
            acc = j < x and b == first
            committed = "draft" if acc else ("target" if j == x and target_at_x and b == 0 else None)
            dec = bool(verdict[1][b]) if verdict is not None and verdict[2] is not None else None  # None: unverified
            rows.append(self._row(cycle, j, b, draft, job, verdict, acc, committed, dec))
        return rows

    def _record_positions(self, drafts, jobs, verdicts, x) -> None:
        cycle = len(self.cycle_end)
        for j in range(max(len(drafts), len(jobs))):
            draft = drafts[j] if j < len(drafts) else None
            verdict = verdicts[j] if j < len(drafts) else None
            job = jobs[j] if j < len(jobs) else None
            self.rows += self._position_rows(cycle, j, draft, job, verdict, x)

    def _stage_rows(self) -> None:
        """Rows of the async stages, built after the run so that cancelled work has its end time."""
        now = self.env._now
        for cycle, st, x, rejected in self.stages:
            for j in range(max(st.started, len(st.drafts))):
                draft = st.drafts[j] if j < len(st.drafts) else None
                job = st.jobs[j] if j < len(st.jobs) else None
                if job is not None and job.start is not None and job.end is None:
                    job.end = now  # still running when the run ended
                if draft is not None and draft[1] > now:
                    draft[1], draft[4] = now, True
                self.rows += self._position_rows(cycle, j, draft, job, st.verdicts.get(j), x, rejected)

    # -- run

    def run(self) -> SimResult:
        cfg, env = self.cfg, self.env
        proc = {"ar": self._ar, "sync": self._sync, "async": self._async}[cfg.mode]
        wall = time.perf_counter()
        env.process(proc())
        env.run(until=self.done)
        wall = time.perf_counter() - wall
        self.srv.close()
        events = next(env._eid) - len(env._queue)  # events scheduled minus those still queued
        if self.stages:
            self._stage_rows()
        return self._result(events, wall, "des")

    def _result(self, events: int, wall: float, engine: str) -> SimResult:
        cfg, srv = self.cfg, self.srv
        end = np.asarray(self.cycle_end)
        base = np.asarray(self.cycle_base)
        sim_time = float(end[-1])
        speedup, lo, hi = batch_means(end, base, cfg.batches)
        cycles = len(end)
        seqs = 1 if cfg.mode == "ar" else cfg.k1
        capacity = cfg.budget if cfg.budget is not None else seqs * cfg.k2
        pw = accept_probability(cfg.alpha1, cfg.width, cfg.correlation)
        return SimResult(
            mode=cfg.mode,
            speedup=speedup,
            speedup_ci95=(lo, hi),
            theory_speedup=self._theory(pw),
            acceptance_rate=self.accepted / self.decisive if self.decisive else None,
            accept_probability=pw,
            accepted_per_cycle=self.accepted / cycles,
            steps_per_cycle=self.out / cycles,
            steps=self.out,
            cycles=cycles,
            output_tokens=int(self.tokens),
            sim_time=sim_time,
            baseline_time=float(base.sum()),
            target_utilisation=srv.seq_time * cfg.k2 / (capacity * sim_time) if sim_time > 0 else 0.0,
            wasted_target_work=srv.wasted / srv.seq_iters if srv.seq_iters else 0.0,
            peak_positions=srv.peak * cfg.k2,
            c1_eff=self.c1_eff,
            engine=engine,
            events=int(events),
            wall_seconds=wall,
            events_per_second=events / wall if wall > 0 else 0.0,
            config=cfg.to_dict(),
        )

    def _theory(self, pw: float) -> float | None:
        cfg = self.cfg
        g = 1.0
        if cfg.k2 > 1:
            if not 0 < cfg.alpha2 < 1:
                return None
            g = float(theory.g(cfg.alpha2, cfg.c2, cfg.k2))
        if cfg.mode == "ar":
            return g
        if not 0 < pw < 1:
            return None
        f = theory.f_step(pw, self.c1_eff, cfg.k1, cfg.mode)
        return float(f) * g


def batch_means(end: np.ndarray, base: np.ndarray, batches: int) -> tuple[float, float | None, float | None]:
    """Ratio ``sum(base) / end[-1]`` and its 95% CI from batch means over consecutive cycles.

    Cycle ``i`` ends at ``end[i]`` and would take ``base[i]`` without
    speculation.  Cycles are grouped into ``B = min(batches, n)`` consecutive
    batches; with batch sums ``b_g`` and durations ``t_g``,
    ``se = sd(b_g - R t_g) / (mean(t_g) sqrt(B))`` and the interval is
    ``R +- t_{0.975, B-1} se``.  Fewer than two cycles give no interval.
    """
    n = len(end)
    R = float(base.sum() / end[-1])
    B = min(batches, n)
    if B < 2:
        return R, None, None
    from scipy.special import stdtrit

    edges = np.linspace(0, n, B + 1).astype(int)
    t_end = end[edges[1:] - 1]
    t_g = np.diff(np.concatenate(([0.0], t_end)))  # duration of each batch
    b_g = np.add.reduceat(base, edges[:-1])
    se = float(np.std(b_g - R * t_g, ddof=1) / (t_g.mean() * math.sqrt(B)))
    q = float(stdtrit(B - 1, 0.975))
    return R, R - q * se, R + q * se


# ----------------------------------------------------------------------------- public entry points


def simulate(cfg: SimConfig, trace: str | Path | None = None, chrome: str | Path | None = None) -> SimResult:
    """Run one simulation; optionally write its lr-trace (JSONL) and a Chrome/Perfetto trace (JSON).

    Both files are written atomically, after the run.
    """
    record = trace is not None or chrome is not None
    sim = _Sim(cfg, record=record)
    if cfg.engine == "renewal" or (cfg.engine == "auto" and cfg.mode != "async" and not record
                                   and cfg.request_tokens is None):
        from .renewal import run_renewal

        res = run_renewal(sim)
    else:
        res = sim.run()
    if trace is not None or chrome is not None:
        write_outputs(sim, res, trace, chrome)
    return res


def make_trace(sim: _Sim, res: SimResult):
    """The run as an in-memory :class:`lrsim.trace.Trace`."""
    from .trace import Header, RequestRecord, Trace

    summary = {k: v for k, v in res.to_dict().items() if k != "config"}
    header = Header(source="lrsim.des", mode=TRACE_MODES[res.mode], config=res.config, backend="des",
                    models={"draft": "simulated", "target": "simulated", "verifier": "simulated"},
                    summary=summary, notes="times in the latency models' unit (T = 1 with default latencies)")
    req = RequestRecord(request=0, start=0.0, end=res.sim_time, output_tokens=res.output_tokens, steps=res.steps,
                        accepted_steps=sim.accepted, finish="max_steps", cycles=res.cycles)
    return Trace(path="", header=header, steps=sim.rows, requests=[req])


def write_outputs(sim: _Sim, res: SimResult, trace: str | Path | None, chrome: str | Path | None) -> None:
    from .atomic import atomic_write
    from .trace import to_chrome_trace, write_trace

    t = make_trace(sim, res)
    if trace is not None:
        write_trace(trace, t.header, t.steps, t.requests)
    if chrome is not None:
        atomic_write(Path(chrome), json.dumps(to_chrome_trace(t), allow_nan=False).encode())
