"""Composition: behaviour from traces or numbers, timing from a latency profile.

Acceptance is a property of the models and the verifier, latency a property of
the hardware and the engine.  A prediction here takes the two halves from
different places:

- **behaviour** (:class:`Behaviour`): step acceptance ``alpha1``, token
  acceptance ``alpha2``, target and draft step lengths, request lengths, the
  prompt's length, from lr-traces (:func:`behaviour_from_traces`, the
  calibration :mod:`lrsim.replay` uses) or from numbers;
- **timing** (:class:`Hardware`): the target's and the draft's forward passes
  from a latency profile (:mod:`lrsim.profile`) as the context grows through
  each request (:class:`lrsim.hardware.ContextProfileLatency`), and the
  verifier: a latency in seconds, or a judge's prefill from the profile.

The simulator (:mod:`lrsim.sim`) runs the configuration; the speedup is over
target-only decoding of the same output positions on the same profile and
context growth (the simulator's own baseline).  Policies, stated in every
prediction's notes:

- **context**: a profile with one measured context prices every pass there
  (context-independent); with several, each cycle (async: stage) is priced at
  ``prompt + tokens its request has committed`` (held over the cycle), below
  the first measured context clamped to it (``below``), beyond the last
  refused unless ``extrapolate`` says otherwise; without request lengths the
  context stays at the prompt;
- **tensor parallelism**: a profile's times are one device's.  ``target_tp`` N
  with ``tp_efficiency`` E divides the target's pass times by ``N E``: an
  assumption the user states, never a default;
- **verifier**: ``verifier_latency`` (seconds per call), else ``judge_arch``'s
  prefill of ``judge_prompt_tokens`` (default: the judge template's
  :data:`JUDGE_TEMPLATE_TOKENS` plus two mean steps) from the profile's
  prefill table, else free (optimistic).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import partial
from typing import Sequence

import numpy as np

from . import theory
from .calibrate import calibrate
from .errors import InputError
from .fields import option
from .hardware import ContextProfileLatency, load_profile
from .interp import EXTRAPOLATION
from .latency import Constant, Dist, Empirical
from .replay import TINY_C2, Prediction, TracePlan, candidates, verify_calls
from .sim import SimConfig, simulate
from .trace import Setting, Trace

#: tokens of the LLM-as-a-judge prompt without its two steps: lrref's judge prompt (the paper's, seed 000) in
#: Qwen2.5's chat template, counted with the Qwen2.5 tokenizer (system + user template + "[").
JUDGE_TEMPLATE_TOKENS = 183


@dataclass(frozen=True)
class Behaviour:
    """What the models and the verifier do: acceptance and lengths (no timing)."""

    alpha1: float = option("step acceptance of one draft, in [0, 1]", 0.6)
    alpha2: float | None = option("token acceptance of n-gram speculation inside steps (None: k2 = 1 only)")
    step_tokens: Dist = option("tokens per target step", Constant(52))
    draft_tokens: Dist | None = option("tokens per draft step (None: as step_tokens)")
    request_tokens: Dist | None = option("output tokens per request (None: one endless request at the prompt's "
                                         "context)")
    prompt_tokens: int = option("prompt tokens of a request: the context when it starts", 0)
    verify_calls: str = option("sync verifier calls: 'one' per cycle or 'per_pair'", "one")
    source: str = option("where the numbers come from: 'numbers' or 'traces'", "numbers")


@dataclass(frozen=True)
class Hardware:
    """Where the time goes: a latency profile, the architectures on it, the verifier, the stated assumptions."""

    profile: str = option("latency profile: an embedded name (`lrsim profiles`) or a file", "")
    target_arch: str = option("target architecture in the profile", "")
    draft_arch: str = option("draft architecture in the profile", "")
    verifier_latency: Dist | None = option("verifier latency per call, seconds (a distribution)")
    judge_arch: str | None = option("or: LLM judge architecture, priced by the profile's prefill table")
    judge_prompt_tokens: int | None = option("judge prompt tokens (default: template + two mean steps)")
    extrapolate: str = option("beyond the last measured context/batch/positions: 'error', 'clamp', 'linear'",
                              "error")
    below: str = option("below the first measured context: 'clamp', 'error' or 'linear'", "clamp")
    target_tp: int = option("tensor-parallel GPUs of the target (1: as profiled)", 1)
    tp_efficiency: float | None = option("E: target pass = profiled pass / (target_tp x E); required with "
                                         "target_tp > 1 (an assumption, not a measurement)")

    def __post_init__(self) -> None:
        if not (self.profile and self.target_arch and self.draft_arch):
            raise InputError("a hardware composition needs a profile, a target architecture and a draft architecture")
        for name in ("extrapolate", "below"):
            if getattr(self, name) not in EXTRAPOLATION:
                raise InputError(f"{name} must be one of {', '.join(EXTRAPOLATION)}, got {getattr(self, name)!r}")
        if self.verifier_latency is not None and self.judge_arch is not None:
            raise InputError("give a verifier latency or a judge architecture, not both")
        if self.target_tp < 1 or (self.target_tp > 1) != (self.tp_efficiency is not None):
            raise InputError("tensor parallelism is an assumption: give target_tp > 1 together with tp_efficiency")
        if self.tp_efficiency is not None and not 0 < self.tp_efficiency < math.inf:
            raise InputError(f"tp_efficiency must be a finite number > 0, got {self.tp_efficiency!r}")

    @property
    def target_scale(self) -> float:
        """Factor on the target's profiled pass times: ``1 / (N E)``."""
        return 1.0 / (self.target_tp * self.tp_efficiency) if self.target_tp > 1 else 1.0


def behaviour_from_traces(traces: Sequence[Trace]) -> Behaviour:
    """Acceptance and lengths calibrated from lr-traces (:func:`lrsim.calibrate.calibrate`); their timing is unused.

    ``alpha1`` is pooled over positions, as replay uses it; the prompt is the median recorded prompt length.
    """
    c = calibrate(traces)
    if c.target_tokens is None or not c.target_tokens.n:
        raise InputError("these traces hold no target steps with token counts")
    prompts = [r.prompt_tokens for t in traces for r in t.requests if r.prompt_tokens]
    rq = c.request_tokens
    return Behaviour(
        alpha1=c.alpha1.p if c.alpha1 is not None else math.nan, alpha2=c.alpha2,
        step_tokens=Empirical(tuple(c.target_tokens.samples)),
        draft_tokens=Empirical(tuple(c.draft_tokens.samples)) if c.draft_tokens and c.draft_tokens.n else None,
        request_tokens=Empirical(tuple(rq.samples)) if rq and rq.n else None,
        prompt_tokens=int(statistics.median(prompts)) if prompts else 0,
        verify_calls=verify_calls(traces), source="traces")


def latencies(hw: Hardware, prompt: int) -> tuple[ContextProfileLatency, ContextProfileLatency]:
    """The target's and the draft's pass latencies on the profile, from a request's prompt onwards."""
    common = dict(profile=hw.profile, prompt=prompt, extrapolate=hw.extrapolate, below=hw.below)
    return (ContextProfileLatency(arch=hw.target_arch, scale=hw.target_scale, **common),
            ContextProfileLatency(arch=hw.draft_arch, **common))


def judge_prompt(hw: Hardware, b: Behaviour) -> int:
    """Judge prompt tokens: given, or the template plus two steps of mean length."""
    if hw.judge_prompt_tokens is not None:
        return hw.judge_prompt_tokens
    return JUDGE_TEMPLATE_TOKENS + round(2 * b.step_tokens.mean)  # the template + s1 + s2


def verifier(hw: Hardware, b: Behaviour) -> tuple[Dist | None, str]:
    """The verifier's latency per call (seconds) and a note on where it comes from."""
    if hw.verifier_latency is not None:
        return hw.verifier_latency, f"verifier: {hw.verifier_latency.mean * 1e3:.4g} ms per call (given)"
    if hw.judge_arch is not None:
        prof, n = load_profile(hw.profile), judge_prompt(hw, b)
        arch = prof.arch(hw.judge_arch)
        ms = prof.prefill_ms(hw.judge_arch, n, 1, hw.extrapolate)
        timed = arch.prefill.timed if arch.prefill is not None else prof.timed
        return Constant(ms / 1000.0), (f"verifier: {hw.judge_arch} judge, prefill of {n} tokens from the profile's "
                                       f"prefill table ({timed}): {ms:.4g} ms per call")
    return None, "verifier: none given, so free (optimistic): give --verifier-latency or --judge-arch"


def context_notes(hw: Hardware, b: Behaviour, target: ContextProfileLatency) -> list[str]:
    """How the context is priced (the policy of the module docstring), in words."""
    prof, xs = load_profile(hw.profile), target.contexts
    if len(xs) == 1:
        return [f"context: {prof.name} measured {hw.target_arch} at context {xs[0]} only, so costs are "
                "context-independent (optimistic for long requests: attention grows with the context)"]
    notes = [f"context: grows from the prompt ({b.prompt_tokens} tokens) through each request; each cycle (async: "
             "stage) is priced at the tokens its request has committed when it starts"]
    if b.request_tokens is None:
        notes = [f"context: no request length given, so every pass is priced at the prompt ({b.prompt_tokens} "
                 "tokens)"]
    if b.prompt_tokens < xs[0]:
        notes.append(f"context below the first measured point ({xs[0]} tokens) is priced at it ({hw.below})"
                     if hw.below == "clamp" else f"context below {xs[0]} tokens: policy '{hw.below}'")
    return notes


def hardware_notes(hw: Hardware) -> list[str]:
    """What the timing assumes beyond the profile."""
    prof = load_profile(hw.profile)
    tp = (f"assumed: the target's passes are the profile's / ({hw.target_tp} x {hw.tp_efficiency:g}) "
          f"(tensor parallelism {hw.target_tp}, efficiency {hw.tp_efficiency:g}: not measured)"
          if hw.target_tp > 1 else "target on one device, as profiled (no tensor parallelism)")
    return [f"timing: {prof.name} ({prof.provenance.device}; {prof.timed})", tp]


def sim_config(b: Behaviour, hw: Hardware, setting: Setting, steps: int, seed: int,
               correlation: float = 0.0) -> SimConfig:
    """The :class:`lrsim.sim.SimConfig` of ``setting`` with this behaviour on this hardware."""
    if setting.mode != "ar" and setting.k1 > 1 and not 0 <= b.alpha1 <= 1:
        raise InputError("no step acceptance (alpha1): cannot predict an LR configuration")
    if setting.k2 > 1 and b.alpha2 is None:
        raise InputError("k2 > 1 needs the token acceptance alpha2 (--alpha2, or traces with token speculation)")
    target, draft = latencies(hw, b.prompt_tokens)
    ver, _ = verifier(hw, b)
    requests = b.request_tokens if setting.width == 1 else None
    return SimConfig(
        mode=setting.mode, k1=setting.k1, k2=setting.k2, width=setting.width, correlation=correlation,
        alpha1=b.alpha1 if 0 <= b.alpha1 <= 1 else 0.5, alpha2=b.alpha2 if b.alpha2 is not None else 0.5,
        c2=TINY_C2, target_latency=target, draft_latency=draft, draft_sd=setting.k2 > 1, verifier_latency=ver,
        verify_calls=b.verify_calls if setting.mode == "sync" else "one", step_tokens=b.step_tokens,
        draft_tokens=b.draft_tokens, request_tokens=requests, steps=steps, seed=seed)


def cost_ratio(hw: Hardware, b: Behaviour) -> float:
    """``c1`` at the prompt: draft over (scaled) target time of a decode pass at batch 1."""
    target, draft = latencies(hw, b.prompt_tokens)
    return draft(1, 1) / target(1, 1)


def closed_form(b: Behaviour, hw: Hardware, setting: Setting) -> float | None:
    """The paper's ``h(k1, k2)`` (``g(k2)`` for ar) with this behaviour and the profile's ``c1``."""
    a2 = b.alpha2 if setting.k2 > 1 and b.alpha2 is not None else 0.5
    if setting.mode == "ar":
        return float(theory.g(a2, TINY_C2, setting.k2)) if 0 < a2 < 1 else None
    if not 0 < b.alpha1 < 1:
        return None
    return float(theory.h(b.alpha1, cost_ratio(hw, b), setting.k1, a2, TINY_C2, setting.k2, setting.mode))


def _run(b: Behaviour, hw: Hardware, setting: Setting, steps: int, seed: int, correlation: float = 0.0):
    return simulate(sim_config(b, hw, setting, steps, seed, correlation))


def notes(b: Behaviour, hw: Hardware) -> list[str]:
    """Every policy and assumption a prediction rests on, one sentence each."""
    target, _ = latencies(hw, b.prompt_tokens)
    out = hardware_notes(hw) + context_notes(hw, b, target) + [verifier(hw, b)[1]]
    out.append(f"behaviour from {b.source}: alpha1 = {b.alpha1:.3f}"
               + (f", alpha2 = {b.alpha2:.3f}" if b.alpha2 is not None else "")
               + f", steps of {b.step_tokens.mean:.1f} tokens on average"
               + (f", requests of {b.request_tokens.mean:.0f}" if b.request_tokens is not None else ""))
    return out


def predict(behaviour: Behaviour | Sequence[Trace], hw: Hardware, setting: Setting, steps: int = 20_000,
            seed: int = 0, bootstrap: int = 20, correlation: float = 0.0, progress: bool = False) -> Prediction:
    """Predicted speedup of ``setting``: behaviour from numbers or traces, timing from the profile.

    The interval: with numbers, the simulation's batch-means 95% CI; with
    traces, a bootstrap over (request, cycle) blocks as :func:`lrsim.replay.predict`
    (at least 10 replicates; else the batch-means CI).
    """
    traces = None if isinstance(behaviour, Behaviour) else list(behaviour)
    b = behaviour_from_traces(traces) if traces is not None else behaviour
    run = _run(b, hw, setting, steps, seed, correlation)
    ci, reps = tuple(run.speedup_ci95), 0
    if traces is not None and bootstrap >= 10:
        ci, reps = _bootstrap(traces, hw, setting, steps, seed, bootstrap, correlation, progress), bootstrap
    tps = run.output_tokens / run.sim_time
    return Prediction(replace(setting, hardware=load_profile(hw.profile).name), float(run.speedup), ci, tps,
                      tps / run.speedup, closed_form(b, hw, setting), b.alpha1, b.alpha2, cost_ratio(hw, b), reps,
                      notes(b, hw))


def _bootstrap(traces: list[Trace], hw: Hardware, setting: Setting, steps: int, seed: int, n: int,
               correlation: float, progress: bool) -> tuple[float, float]:
    """Percentile 95% interval over trace resamples (behaviour recalibrated, new seed each)."""
    from tqdm.auto import tqdm

    from .replay import resample_blocks

    rng, reps = np.random.default_rng(seed), []
    for i in tqdm(range(n), desc="bootstrap", disable=not progress, leave=False):
        b = behaviour_from_traces(resample_blocks(traces, rng))
        reps.append(_run(b, hw, setting, max(steps // 4, 2000), seed + 1 + i, correlation).speedup)
    return float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))


def async_depth_limit(b: Behaviour, hw: Hardware, budget: int) -> int:
    """Deepest async look-ahead worth simulating: ``ceil((1 + v / T) / c1) + 2`` (at most ``budget``).

    Past ``ceil(1/c1)`` the drafter, not the look-ahead, limits the pipeline
    (Theorem 2); a verifier of ``v`` seconds per call holds each slot ``v``
    longer (``T``: a mean target step at batch 1); the 2 extra absorb step-length spread.
    """
    target, _ = latencies(hw, b.prompt_tokens)
    T = target(1, 1) * b.step_tokens.mean
    ver, _ = verifier(hw, b)
    v = ver.mean if ver is not None else 0.0
    return max(2, min(budget, math.ceil((1 + v / T) / cost_ratio(hw, b)) + 2))


REFINE = 10  #: candidates re-simulated with the full number of steps after screening


def plan(behaviour: Behaviour | Sequence[Trace], hw: Hardware, budget: int, k2_max: int = 8, steps: int = 4000,
         seed: int = 0, bootstrap: int = 20, k1_max: int | None = None, progress: bool = False) -> TracePlan:
    """Rank every (mode, k1, k2) under ``budget`` on the composed workload (as :func:`lrsim.replay.plan_from_traces`).

    Every candidate is screened with ``steps / 4`` output steps (at least
    1000, common random numbers), the best :data:`REFINE` are simulated again
    with ``steps``, and the winner with ``4 steps`` and its interval.  Async
    depths past :func:`async_depth_limit` (or ``k1_max``) are not simulated;
    candidates the profile cannot price (a batch beyond its grid) are left out and noted.
    """
    traces = None if isinstance(behaviour, Behaviour) else list(behaviour)
    b = behaviour_from_traces(traces) if traces is not None else behaviour
    if not 0 <= b.alpha1 <= 1:
        raise InputError("no step acceptance (alpha1): cannot plan LR")
    k2s = list(range(1, k2_max + 1)) if b.alpha2 is not None else [1]
    deepest = k1_max or async_depth_limit(b, hw, budget)
    ranked, skipped = _screen(b, hw, budget, k2s, deepest, max(steps // 4, 1000), seed, progress)
    if not ranked:
        raise InputError(f"no configuration under M = {budget} can be priced on this profile"
                         + (f" ({skipped[0]})" if skipped else ""))
    ranked = _refine(b, hw, budget, ranked, steps, seed)
    top = ranked[0]
    best = predict(traces if traces is not None else b, hw, Setting(top["mode"], top["k1"], top["k2"], top["width"]),
                   steps=steps * 4, seed=seed, bootstrap=bootstrap, progress=progress)
    cf, csim = _closed_form_plan(b, hw, budget, steps, seed)
    screen = max(steps // 4, 1000)
    out = [f"async look-ahead searched up to k1 = {deepest}; the best {REFINE} of the screening ({screen} steps "
           f"each) re-simulated with {steps}"]
    if skipped:
        out.append(f"{len(skipped)} configuration(s) the profile cannot price were left out, e.g. {skipped[0]}")
    if b.alpha2 is None:
        out.append("no token acceptance (alpha2): k2 = 1 only")
    return TracePlan(budget, best, ranked, cf, csim, out)


def _row(s: Setting, r, steps: int) -> dict:
    return {"mode": s.mode, "k1": s.k1, "k2": s.k2, "width": s.width, "positions": r.peak_positions,
            "speedup": float(r.speedup), "steps": steps}


def _screen(b: Behaviour, hw: Hardware, budget: int, k2s: list[int], deepest: int, steps: int, seed: int,
            progress: bool) -> tuple[list[dict], list[str]]:
    """Every candidate's simulated speedup, best first, and why some could not be priced.

    Async stops deepening for a ``k2`` once its peak exceeds the budget (a deeper look-ahead holds at least as many).
    """
    from tqdm.auto import tqdm

    ranked, over, skipped = [], set(), []
    cands = [s for s in candidates(budget, k2s) if s.mode != "async" or s.k1 <= deepest]
    for s in tqdm(cands, desc="candidates", disable=not progress, leave=False):
        if s.mode == "async" and s.k2 in over:
            continue
        try:
            r = _run(b, hw, s, steps, seed)
        except InputError as e:
            skipped.append(f"{s.mode} k1 = {s.k1}, k2 = {s.k2}: {e}")
            continue
        if r.peak_positions <= budget:
            ranked.append(_row(s, r, steps))
        elif s.mode == "async":
            over.add(s.k2)
    ranked.sort(key=lambda r: -r["speedup"])
    return ranked, skipped


def _refine(b: Behaviour, hw: Hardware, budget: int, ranked: list[dict], steps: int, seed: int) -> list[dict]:
    """The best :data:`REFINE` screened candidates simulated again with ``steps``; best first."""
    out = list(ranked)
    for i, row in enumerate(ranked[:REFINE]):
        s = Setting(row["mode"], row["k1"], row["k2"], row["width"])
        r = _run(b, hw, s, steps, seed)
        out[i] = _row(s, r, steps) if r.peak_positions <= budget else None
    out = [r for r in out if r is not None]
    out.sort(key=lambda r: (-r["steps"], -r["speedup"]))  # re-simulated first, then the screening's order
    return out


def _closed_form_plan(b: Behaviour, hw: Hardware, budget: int, steps: int, seed: int) -> tuple[dict, dict]:
    """The paper's plan on (alpha1, the profile's c1, alpha2) per mode, and its choice priced by the simulator."""
    from .planner import plan as closed_plan

    clip = partial(min, 1 - 1e-6)
    a1, a2 = clip(max(b.alpha1, 1e-6)), clip(max(b.alpha2 if b.alpha2 is not None else 0.5, 1e-6))
    c1 = cost_ratio(hw, b)
    cf = {}
    for mode in ("sync", "async"):
        p = closed_plan(a1, c1, a2, TINY_C2, budget, mode)
        cf[mode] = {"k1": p.k1, "k2": p.k2 if b.alpha2 is not None else 1, "speedup": p.speedup}
    mode = max(cf, key=lambda m: cf[m]["speedup"])
    s = Setting(mode, cf[mode]["k1"], cf[mode]["k2"])
    return cf, {"mode": mode, "k1": s.k1, "k2": s.k2, "simulated_speedup": float(_run(b, hw, s, steps, seed).speedup),
                "closed_form_speedup": cf[mode]["speedup"]}

