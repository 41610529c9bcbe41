"""The simulator's configuration: :class:`SimConfig`, its validation and the names it accepts."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..cost.passcost import PassCost, cost_from_dict
from ..dists import Constant, Dist, Empirical, LogNormal, Uniform, dist_from_dict
from ..errors import InputError
from ..fields import option
from ..modes import COLOCATED, SIM_MODES, VERIFY_CALLS

MODES = SIM_MODES
TOKEN_MODELS = ("sampled", "mean")
JOINS = ("iteration", "immediate")
PREFILLS = ("none", "last", "unseen")
ENGINES = ("auto", "des", "renewal")
MAX_DRAFT_BATCH = 4096
STEP_TOKENS = 52  # default step length: ~52 tokens per step measured in MEASUREMENTS.md
DIST_FIELDS = ("verifier_latency", "step_tokens", "draft_tokens", "request_tokens", "overlap_accepted",
               "overlap_rejected")
LATENCY_FIELDS = ("target_latency", "draft_latency")


@dataclass(frozen=True)
class SimConfig:
    """Everything one simulated run depends on (serialised into the trace header)."""

    mode: str = option("'ar' (target only), 'sync' (Algorithm 1) or 'async' (pipelined LR)", "async")
    alpha1: float = option("step acceptance probability of one draft candidate, in [0, 1]", 0.6)
    c1: float = option("draft/target time per step at batch 1 (sets the draft latency unless draft_latency is given)",
                       0.1)
    k1: int = option("sync: target steps per cycle (drafted steps + 1); async: look-ahead depth", 4)
    alpha2: float = option("token acceptance probability of token-level SD, in [0, 1]", 0.6)
    c2: float = option("token drafter/target time per token (n-gram lookup: small, e.g. 0.01)", 0.05)
    k2: int = option("positions per target pass: token-level SD drafts k2 - 1 tokens (1 = no token SD)", 1)
    spec_fill: float = option("share of the k2 - 1 speculative positions a pass computes on average: what it is "
                              "priced at, 1 + spec_fill (k2 - 1) positions per row (n-gram lookup proposes fewer "
                              "when it finds a short match or none; 1: always k2 - 1, as a draft model does)", 1.0)
    width: int = option("W: draft candidates per position", 1)
    correlation: float = option("rho: probability that all W candidates share one verdict (0 = independent)", 0.0)
    tree: bool = option("draft the full W^(j+1) tree at depth j instead of W candidates per position (sync only)",
                        False)
    verifier_cost: float = option("verifier latency per call in units of T (target step time at batch 1)", 0.0)
    verifier_latency: Dist | None = option("verifier latency per call (s), a distribution; overrides verifier_cost")
    request_tokens: Dist | None = option("output tokens per request; requests run back to back.  sync: every draft "
                                         "and target step is cut at the tokens its request has left (lrref's "
                                         "max_tokens); async: likewise, and the step that completes a request ends its stage; "
                                         "ar: steps are not cut.  A context-aware latency prices each cycle at the "
                                         "tokens its request has committed.  None: one endless request", None)
    verify_calls: str = option("sync: 'one' verifier call checks all pairs of a cycle; 'per_pair': one call per pair, "
                               "in order, up to the first rejection (lrref's sync decoder)", "one")
    step_tokens: Dist = option("tokens per target step (rounded, >= 1)", Constant(STEP_TOKENS))
    draft_tokens: Dist | None = option("tokens per draft step; None: same distribution as step_tokens")
    target_latency: PassCost | None = option("target forward-pass cost (lrsim.cost); None: constant, so that T = 1")
    draft_latency: PassCost | None = option("draft forward-pass cost (lrsim.cost); None: constant, c1 T per mean "
                                            "draft step")
    prompt_tokens: int = option("tokens in the KV cache when a request starts: a context-aware cost prices each "
                                "cycle (async: stage) at prompt + the tokens its request has committed", 0)
    prefill: str = option("what the engine computes besides each step's own positions: 'none' (the paper's "
                          "assumption, the closed forms'), 'last' (an LR target row prefills the one draft step "
                          "just before it; prefix caching shares the rest), 'unseen' (every draft step no earlier "
                          "pass of its sequence computed, lrref's per-sequence KV: a sync row j prefills drafts "
                          "0..j-1, and in a request's first cycle the prompt too, an async row the draft it adds); "
                          "with 'last' and 'unseen' the drafter prefills "
                          "the target's committed step after it, and each request starts by prefilling its prompt "
                          "on both (event engine only)", "none")
    prompt_cached: float = option("with prefill: share of each request's prompt the target already holds in its KV "
                                  "when the request starts, so its first pass prefills only the rest (another run of "
                                  "the same request left it: lrref's bench runs a problem's modes one after another "
                                  "on one engine); 0: it prefills the whole prompt", 0.0)
    draft_prompt_cached: float = option("the same for the drafter", 0.0)
    overlap_accepted: Dist | None = option("with prefill, async: share of a draft step's tokens the target's own step "
                                           "at its position repeats from its start, when the draft is accepted: a "
                                           "target row conditioned on that draft finds that much of it in the KV "
                                           "the earlier row wrote (as far as that row has written); None: 0")
    overlap_rejected: Dist | None = option("the same when the draft is rejected")
    colocated: str = option("roles that share the target's device: 'none' (each on devices of its own, the paper's "
                            "deployment), 'draft', 'verifier' or 'draft+verifier': they take turns with the target "
                            "pass by pass (a draft pass waits for the target's iteration in progress, the target "
                            "for the draft's passes and the verifier's calls; event engine)", "none")
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
            raise InputError(f"unknown simulation parameter(s): {', '.join(sorted(unknown))}")
        kw = dict(d)
        for name in DIST_FIELDS:
            if isinstance(kw.get(name), dict):
                kw[name] = dist_from_dict(kw[name])
        for name in LATENCY_FIELDS:
            if isinstance(kw.get(name), dict):
                kw[name] = cost_from_dict(kw[name])
        return cls(**kw)


def _plain(v: Any) -> Any:
    return v.to_dict() if hasattr(v, "to_dict") else v


def _int(name: str, v: Any, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise InputError(f"{name} must be an integer >= {lo}, got {v!r}")


def _unit(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise InputError(f"{name} must lie in [0, 1], got {v!r}")


def _choice(name: str, v: Any, options: tuple[str, ...]) -> None:
    if v not in options:
        raise InputError(f"{name} must be one of {', '.join(options)}, got {v!r}")


def validate(cfg: SimConfig) -> None:
    """Raise :class:`InputError` with a one-line message for an invalid or over-budget configuration."""
    _check_numbers(cfg)
    _check_choices(cfg)
    _check_combinations(cfg)
    _check_budget(cfg)
    _check_latencies(cfg)


def _check_numbers(cfg: SimConfig) -> None:
    if cfg.mode not in MODES:
        raise InputError(f"unknown mode {cfg.mode!r}: expected one of {', '.join(MODES)}")
    for name in ("alpha1", "alpha2", "correlation", "spec_fill", "prompt_cached", "draft_prompt_cached"):
        _unit(name, getattr(cfg, name))
    for name in ("c1", "c2"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise InputError(f"{name} must be a finite number > 0, got {v!r}")
    if not (isinstance(cfg.verifier_cost, (int, float)) and math.isfinite(cfg.verifier_cost)
            and cfg.verifier_cost >= 0):
        raise InputError(f"verifier_cost must be a finite number >= 0, got {cfg.verifier_cost!r}")
    for name, lo in (("k1", 1), ("k2", 1), ("width", 1), ("steps", 1), ("batches", 2), ("prompt_tokens", 0)):
        _int(name, getattr(cfg, name), lo)
    _int("seed", cfg.seed, 0)


def _check_choices(cfg: SimConfig) -> None:
    _choice("token_model", cfg.token_model, TOKEN_MODELS)
    if cfg.request_tokens is not None and (cfg.engine == "renewal" or cfg.width > 1):
        raise InputError("request_tokens is modelled with W = 1 on the event engine only")
    _choice("verify_calls", cfg.verify_calls, VERIFY_CALLS)
    _choice("join", cfg.join, JOINS)
    _choice("prefill", cfg.prefill, PREFILLS)
    _choice("colocated", cfg.colocated, COLOCATED)
    if cfg.colocated != "none" and cfg.engine == "renewal" and cfg.mode != "sync":
        raise InputError("a colocated drafter or verifier is modelled on the event engine only")
    if cfg.prefill != "none" and cfg.engine == "renewal":
        raise InputError("prefill is modelled on the event engine only (engine 'des' or 'auto')")


def _check_combinations(cfg: SimConfig) -> None:
    if cfg.token_model == "mean" and cfg.k2 > 1 and cfg.join != "immediate":
        raise InputError("token_model 'mean' gives fractional passes, which have no iteration boundaries: "
                         "use join 'immediate'")
    _choice("engine", cfg.engine, ENGINES)
    if cfg.engine == "renewal" and cfg.mode == "async":
        raise InputError("the renewal engine computes sync and ar only (async is not a renewal process)")
    if cfg.tree and cfg.mode != "sync":
        raise InputError("tree drafting (W^(j+1) candidates at depth j) is modelled for sync mode only")
    if cfg.step_tokens.mean <= 0 or (cfg.draft_tokens is not None and cfg.draft_tokens.mean <= 0):
        raise InputError("step lengths must have a mean > 0 tokens")


def _check_budget(cfg: SimConfig) -> None:
    if cfg.budget is not None:
        _int("budget", cfg.budget, 1)
        seqs = target_sequences(cfg)
        if seqs * cfg.k2 > cfg.budget:
            raise InputError(f"over budget: {seqs} target sequence(s) x k2 = {cfg.k2} positions = "
                             f"{seqs * cfg.k2} > M = {cfg.budget}")
    batch = max_draft_batch(cfg)
    if batch > MAX_DRAFT_BATCH:
        raise InputError(f"draft batch {batch} (W = {cfg.width}, tree depth {cfg.k1 - 1}) exceeds {MAX_DRAFT_BATCH}")


def _check_latencies(cfg: SimConfig) -> None:
    """Every batch and token count the run can ask the latency models for is priced (at every context a
    context-aware model can see: up to the longest request)."""
    tk, lo = 1 + cfg.spec_fill * (cfg.k2 - 1), cfg.prompt_tokens
    hi = lo + request_upper(cfg)
    for b in range(1, target_sequences(cfg) + 1):
        _priced(cfg.target_latency, "target", b, tk, lo, hi)
    _priced(cfg.target_latency, "target", 1, 1, lo, hi)  # the autoregressive baseline
    if cfg.mode != "ar" and cfg.k1 > 1:
        for b in range(1, max_draft_batch(cfg) + 1):
            _priced(cfg.draft_latency, "draft", b, tk if cfg.draft_sd else 1, lo, hi)


def _priced(cost: PassCost | None, who: str, batch: int, tokens: int, lo: float = 0.0, hi: float = 0.0) -> None:
    if cost is not None:
        try:
            cost.check(batch, tokens, lo, hi)  # every context from the prompt to prompt + committed
        except InputError as e:
            raise InputError(f"{who} latency at batch {batch}, {tokens} token(s)/sequence: {e}") from None


def request_upper(cfg: SimConfig) -> float:
    """Most tokens a request can commit before its last cycle: the largest request length (a 1e-6 tail quantile
    for unbounded distributions); 0 without finite requests (the context stays at the prompt)."""
    d = cfg.request_tokens
    if d is None:
        return 0.0
    if isinstance(d, Constant):
        return float(d.value)
    if isinstance(d, Empirical):
        return float(max(d.values))
    if isinstance(d, Uniform):
        return float(d.high)
    if isinstance(d, LogNormal):
        s = math.sqrt(math.log1p(d.cv**2))  # sigma of log
        return float(math.exp(math.log(d.mean_value) - s * s / 2 + 4.753 * s))  # z(1 - 1e-6) = 4.753
    return float(d.mean * 13.8155)  # exponential: -ln(1e-6) = 13.8155 means


def target_sequences(cfg: SimConfig) -> int:
    """Target sequences in flight at most: ``k1`` in LR modes, 1 in ar."""
    return 1 if cfg.mode == "ar" else cfg.k1


def max_draft_batch(cfg: SimConfig) -> int:
    """Largest drafter batch: ``W`` per position, or ``W^(k1-1)`` at the deepest tree level."""
    return cfg.width ** max(cfg.k1 - 1, 1) if cfg.tree else cfg.width
