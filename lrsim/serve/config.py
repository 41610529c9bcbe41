"""The configuration of a serving simulation: workload, engine limits, hardware, measurement, and its validation.

Engine limits use vLLM's names (``vllm/config/scheduler.py``): ``max_num_seqs``
(sequences per iteration; its class default 128), ``max_num_batched_tokens``
(tokens per iteration, decode rows first, prefill chunks in what is left;
class default 2048), and the KV cache as a capacity in tokens (vLLM counts
blocks, ``num_gpu_blocks x block_size``).  Per-request decoding is
:class:`lrsim.sim.SimConfig` (acceptance, step lengths, latencies, ``k1``,
``k2``), validated there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..cost.hardware import HardwareSpec
from ..dists import Constant, Dist
from ..errors import InputError
from ..fields import option
from ..modes import AUTO, REGISTRY, SERVE_MODES
from ..sim import SimConfig

AUTO_BASE = "lr-async"  #: the mode whose engines, pricing and deepest k1 an auto run uses (lrsim.serve.auto)
ARRIVALS = ("poisson", "gamma")
MAX_NUM_SEQS = 128  # vllm SchedulerConfig.DEFAULT_MAX_NUM_SEQS
MAX_NUM_BATCHED_TOKENS = 2048  # vllm SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS


@dataclass(frozen=True)
class RequestSpec:
    """One request of the workload."""

    arrival: float  #: seconds from the start of the run
    prompt: int  #: prompt tokens (>= 1)
    output: int  #: output tokens (>= 1); the prefill writes the first
    seed: int  #: seed of its decoding streams (the same in every mode and at every rate)


@dataclass(frozen=True)
class ServeConfig:
    """A serving deployment and its workload; one run adds a mode, a rate and a replication."""

    decode: SimConfig = option("per-request decoding (acceptance, steps, latencies, k1, k2, verifier)", SimConfig())
    requests: int = option("requests per replication", 200)
    arrival: str = option("'poisson' or 'gamma' (inter-arrival CV = arrival_cv; vLLM's burstiness = 1 / CV^2)",
                          "poisson")
    arrival_cv: float = option("gamma arrivals: coefficient of variation of the inter-arrival times", 1.0)
    prompt_tokens: Dist = option("prompt tokens per request (rounded, >= 1)", Constant(256))
    output_tokens: Dist = option("output tokens per request (rounded, >= 1)", Constant(1024))
    pairs: tuple | None = option("(prompt, output) pairs to resample jointly (from traces), overriding the two above")
    trace_arrivals: tuple | None = option("(arrival s, prompt, output) per request from a file; a rate rescales the "
                                          "times to that mean rate")
    concurrency: int | None = option("closed loop: this many clients, each sending its next request as soon as the "
                                     "previous one finished (lrref bench --concurrency); None: open-loop arrivals")
    max_num_seqs: int = option("most sequences (batch rows) the target runs at once; an LR request holds k1",
                               MAX_NUM_SEQS)
    max_num_batched_tokens: int = option("most tokens (positions) per iteration: decode rows first, prefill chunks "
                                         "in the rest", MAX_NUM_BATCHED_TOKENS)
    kv_capacity_tokens: int | None = option("KV cache capacity in tokens; a request waits until its footprint fits "
                                            "(None: unlimited)")
    verifier_slots: int = option("verifier calls at once (0: unlimited)", 0)
    reprice: int = option("a context-aware price is refreshed at least every this many iterations", 16)
    hardware: HardwareSpec | None = option("latency profile, architectures and policies pricing each mode's "
                                           "target and draft passes on that mode's setup (None: the decoding "
                                           "settings' own costs)")
    placement: dict | None = option("roles on the target's device per simulator mode ('sync' -> 'draft+verifier', "
                                    "...): what the traces the run is calibrated from recorded (their setting's "
                                    "colocated); None: the decoding settings' and the hardware's")
    replications: int = option("independent replications (intervals are over them)", 4)
    warmup: float = option("share of requests dropped at each end of a run (warm-up and drain)", 0.1)
    seed: int = option("random seed", 0)
    slo_ttft_s: float | None = option("SLO on time to first token (s)")
    slo_tpot_ms: float | None = option("SLO on time per output token (ms)")
    slo_e2e_s: float | None = option("SLO on end-to-end latency (s)")

    def __post_init__(self) -> None:
        validate(self)


def _positive(name: str, v, integer: bool = False, allow_none: bool = False) -> None:
    if v is None and allow_none:
        return
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    if not ok or (integer and int(v) != v):
        raise InputError(f"{name} must be {'an integer' if integer else 'a number'} > 0, got {v!r}")


def validate(cfg: ServeConfig) -> None:
    """One-line :class:`InputError` for anything a run cannot use."""
    for name in ("requests", "max_num_seqs", "max_num_batched_tokens", "reprice", "replications"):
        _positive(name, getattr(cfg, name), integer=True)
    _positive("kv_capacity_tokens", cfg.kv_capacity_tokens, integer=True, allow_none=True)
    _positive("concurrency", cfg.concurrency, integer=True, allow_none=True)
    for name in ("slo_ttft_s", "slo_tpot_ms", "slo_e2e_s"):
        _positive(name, getattr(cfg, name), allow_none=True)
    _positive("arrival_cv", cfg.arrival_cv)
    if cfg.arrival not in ARRIVALS:
        raise InputError(f"arrival must be one of {', '.join(ARRIVALS)}, got {cfg.arrival!r}")
    if not (isinstance(cfg.verifier_slots, int) and cfg.verifier_slots >= 0):
        raise InputError(f"verifier_slots must be an integer >= 0, got {cfg.verifier_slots!r}")
    if not (0 <= cfg.warmup < 0.5):
        raise InputError(f"warmup must lie in [0, 0.5), got {cfg.warmup!r}")
    _check_decode(cfg.decode)


def _check_decode(sim: SimConfig) -> None:
    if sim.width != 1 or sim.tree:
        raise InputError("serve models one draft candidate per position (width 1, no tree)")
    if sim.token_model != "sampled":
        raise InputError("serve runs iteration-level batching: token_model must be 'sampled'")
    if sim.join != "iteration":
        raise InputError("serve runs iteration-level batching: join must be 'iteration'")
    if sim.request_tokens is not None:
        raise InputError("serve takes request lengths from output_tokens, not request_tokens")


def check_rate(rate: float) -> float:
    """A request rate must be a finite number > 0 (requests per second)."""
    _positive("rate", rate)
    return float(rate)


def check_mode(mode: str) -> str:
    if mode not in SERVE_MODES:
        raise InputError(f"unknown mode {mode!r}: expected one of {', '.join(SERVE_MODES)}")
    return mode


def mode_config(cfg: ServeConfig, mode: str, seed: int = 0) -> SimConfig:
    """The per-request :class:`SimConfig` of ``mode`` (``ar``: k1 = k2 = 1; ``sd``: k1 = 1, the given k2 >= 2;
    ``auto``: lr-async's, the deepest configuration it may choose, :mod:`lrsim.serve.auto`)."""
    sim = cfg.decode
    check_mode(mode)
    if mode == AUTO:
        return mode_config(cfg, AUTO_BASE, seed)
    m = REGISTRY[mode]
    if m.ngram == "on" and sim.k2 < 2:
        raise InputError(f"mode {mode} (token-level SD) needs k2 >= 2")
    k1 = sim.k1 if m.draft else 1  # target-only modes: one step a pass
    k2 = 1 if m.ngram == "off" else sim.k2  # ar: no token speculation
    sim = replace(sim, mode=m.sim, k1=k1, k2=k2, seed=seed, steps=1)
    if cfg.placement and sim.mode in cfg.placement and sim.colocated == "none":
        sim = replace(sim, colocated=cfg.placement[sim.mode])  # as the traces' own runs placed their roles
    hw = cfg.hardware
    if hw is None:
        return sim
    kw = {"target_latency": hw.target(sim.mode), "draft_latency": hw.draft(sim.mode) or sim.draft_latency,
          "prefill": hw.kv_prefill if hw.prefill or hw.loaded.prefill else sim.prefill}
    if hw.colocated != "none":  # the hardware's placement (a judge's calls are the verifier's)
        kw["colocated"] = hw.colocated
    if hw.verifier_latency is not None:
        kw["verifier_latency"] = hw.verifier_latency
    return replace(sim, **kw)


def target_rows(sim: SimConfig) -> int:
    """Target rows one request holds at most: ``k1`` in LR modes, 1 otherwise."""
    return 1 if sim.mode == "ar" else sim.k1


def kv_footprint(sim: SimConfig, prompt: int, output: int) -> int:
    """KV tokens reserved for a request: prompt + output, plus for LR the look-ahead beyond the committed prefix.

    LR keeps up to ``k1 - 1`` drafts and ``k1`` target steps past what it
    committed (their prefix is shared, as with vLLM's automatic prefix caching);
    they are reserved at mean step lengths.
    """
    extra = 0.0
    if sim.mode != "ar" and sim.k1 > 1:
        dmean = (sim.draft_tokens or sim.step_tokens).mean
        extra = (sim.k1 - 1) * dmean + sim.k1 * sim.step_tokens.mean  # drafts + target rows past the prefix
    return int(prompt + output + math.ceil(extra))
