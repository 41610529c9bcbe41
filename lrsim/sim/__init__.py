"""Discrete-event simulator (SimPy) of one request decoded with Lookahead Reasoning.

What is simulated (times in seconds of whatever unit the latency models use;
with the default models one target step at batch 1 costs ``T = 1``):

- **Target server** (:mod:`.servers`): continuous batching.  One *iteration*
  (forward pass) advances every admitted sequence by one pass and costs
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
  cycle for all positions, or one per pair), latency from a distribution; calls overlap.
- **Acceptance**: a position is accepted if any of its ``W`` candidates is;
  each candidate is accepted with probability ``alpha1``; with probability
  ``correlation`` all ``W`` share one verdict, otherwise they are independent,
  so ``P_W = rho alpha1 + (1 - rho)(1 - (1 - alpha1)^W)`` (pairwise
  correlation of verdicts ``rho``).
- **Scheduling**: ``ar`` (:mod:`.sched_ar`) is target-only decoding (with
  token SD if ``k2 > 1``; the token stream then runs on across step
  boundaries).  ``sync`` (:mod:`.sched_sync`) is Algorithm 1.  ``async``
  (:mod:`.sched_async`) pipelines drafting, target steps and verification.
  ``k1 = 1`` is target-only in both LR modes.  At equal times the target's
  completions are processed before drafter and verifier events (the tie rule
  of :mod:`.servers`).
- **Baseline**: target-only autoregressive decoding at batch 1 of the same
  output steps: each output position costs ``tau(1, 1) * L_t``, ``L_t`` the
  length of the target step written for that position in this run (common
  random numbers).  ``speedup = baseline time / LR time``; its standard error
  and 95% CI come from **batch means** over consecutive cycles (sync cycles,
  async stages, ar steps; 32 batches by default), ratio estimator, delta
  method and Student-t quantile (:func:`lrsim.stats.batch_means`).

Under the paper's assumptions (constant latency, free verifier, constant
step length, i.i.d. acceptance, ``W = 1``, ``token_model = "mean"`` and
``draft_sd`` for the hybrid) the simulated speedups are the closed forms of
:mod:`lrsim.theory`; the tests and ``studies/`` check how closely.

Modules: :mod:`.config` (configuration and validation), :mod:`.streams` and
:mod:`.workload` (random streams, latencies, passes per step), :mod:`.servers`,
:mod:`.events` and the three schedulers (event engine), :mod:`.async_loop` (async on a
dedicated event loop: the event engine's numbers, faster; runs can be continued), :mod:`.renewal`
(sync and ar without events: the same cycles from the same streams),
:mod:`.results` (the cycle log both engines return, every statistic from it),
:mod:`.export` (lr-trace and Chrome trace), :mod:`.engine` (:func:`simulate`).
"""

from .config import ENGINES, JOINS, MAX_DRAFT_BATCH, MODES, STEP_TOKENS, TOKEN_MODELS, SimConfig, validate
from .engine import Continuable, simulate
from .streams import sharing
from .results import CycleLog, SimResult, summarize
from .workload import accept_probability

__all__ = ["ENGINES", "JOINS", "MAX_DRAFT_BATCH", "MODES", "STEP_TOKENS", "TOKEN_MODELS", "Continuable", "CycleLog",
           "SimConfig", "SimResult", "accept_probability", "sharing", "simulate", "summarize", "validate"]
