"""Prediction = behaviour + hardware: the one code path of replay, ``--hardware`` and planning.

Acceptance is a property of the models and the verifier, latency a property of
the hardware and the engine.  A prediction takes the two halves from wherever
they come:

- **behaviour** (:class:`Behaviour`): step acceptance ``alpha1``, token
  acceptance ``alpha2``, target and draft step lengths, request lengths, the
  prompt's length, the sync verifier's calls and the verifier's recorded
  latency, from lr-traces (:func:`behaviour_from_traces`) or from numbers;
- **timing** (:class:`lrsim.cost.hardware.HardwareSpec`): every forward pass
  priced by a :class:`lrsim.cost.passcost.PassCost` from a latency profile: a
  measured one, a modelled GPU, or the one calibrated from the traces
  themselves (:mod:`lrsim.prediction.replay`).  Each mode runs on the profile entry of its
  own setup (``setups``), the ``ar`` baseline on ``ar``'s.

The simulator (:mod:`lrsim.sim`) runs the configuration, and the speedup is
over target-only decoding on the ``ar`` setup.  When that is the mode's own
setup and nothing is prefilled, the simulator's built-in baseline (the same
output positions, common random numbers) gives it; otherwise an ``ar`` run of
the same behaviour on ``ar``'s setup, prefilling what ``ar`` prefills, does.  Policies, stated in every prediction's notes:

- **context**: a profile entry with one measured context prices every pass
  there; with several, each cycle (async: stage) is priced at ``prompt +
  tokens its request has committed`` (held over the cycle); outside the
  measured range the spec's :class:`~lrsim.latency.interp.Extrapolation`;
- **tensor parallelism**: ``target_tp`` N with ``tp_efficiency`` E divides the
  target's pass times by ``N E``: an assumption the user states;
- **verifier**: the spec's latency, else a judge's prefill from the profile,
  else the traces' recorded latency sample, else free (optimistic, noted).
"""

from __future__ import annotations

import math
import statistics
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import partial
from typing import Sequence

import numpy as np

from ..cost.fromtraces import model_names, profile_from_traces
from ..cost.hardware import HardwareSpec
from ..cost.passcost import ProfileCost
from ..dists import Constant, Dist, Empirical
from ..errors import InputError
from ..fields import option
from ..modes import LR_MODES
from ..progress import bar
from ..sim import Continuable, SimConfig, sharing, simulate
from ..theory import forms as theory
from ..trace import Setting, Trace, recorded_setting
from .calibrate import calibrate
from .outcome import TINY_C2, Prediction, TracePlan, candidates
from .workers import Job, executor

#: tokens of the LLM-as-a-judge prompt without its two steps: lrref's judge prompt (the paper's, seed 000) in
#: Qwen2.5's chat template, counted with the Qwen2.5 tokenizer (system + user template + "[").
JUDGE_TEMPLATE_TOKENS = 183


@dataclass(frozen=True)
class Behaviour:
    """What the models and the verifier do: acceptance, lengths, the verifier's calls and recorded latency."""

    alpha1: float = option("step acceptance of one draft, in [0, 1]", 0.6)
    alpha2: float | None = option("token acceptance of n-gram speculation inside steps (None: k2 = 1 only)")
    step_tokens: Dist = option("tokens per target step", Constant(52))
    draft_tokens: Dist | None = option("tokens per draft step (None: as step_tokens)")
    request_tokens: Dist | None = option("output tokens per request (None: one endless request at the prompt's "
                                         "context)")
    prompt_tokens: int = option("prompt tokens of a request: the context when it starts", 0)
    verify_calls: str = option("sync verifier calls: 'one' per cycle or 'per_pair'", "one")
    verifier_latency: Dist | None = option("the verifier's recorded latency per call, seconds (from traces)")
    spec_fill: float = option("share of the k2 - 1 speculative positions a pass computes (n-gram lookup: fewer)",
                              1.0)
    prompt_cached: float = option("share of each prompt the target already holds in KV when a request starts (the "
                                  "traces' first passes; with prefill), for every configuration but the baseline", 0.0)
    draft_prompt_cached: float = option("the same for the drafter", 0.0)
    baseline_prompt_cached: float = option("the same for the target of target-only decoding (ar, k2 = 1: the "
                                           "baseline)", 0.0)
    overlap_accepted: Dist | None = option("share of an accepted draft step its target step repeats from its start")
    overlap_rejected: Dist | None = option("the same for a rejected draft (both from step texts; None: 0)")
    source: str = option("where the numbers come from: 'numbers' or 'traces'", "numbers")


def verify_calls(traces: Sequence[Trace]) -> str:
    """How the recorded sync decoder called its verifier: 'one' call per cycle or one 'per_pair'.

    Read off the sync traces (pairs of a cycle share one verify span, or follow
    one another); without any verify span, what the sync traces' settings say
    ('per_pair' if one of them does), else 'one'.
    """
    shared = sequential = 0
    sync = [t for t in traces if recorded_setting(t.header).mode == "sync"]
    for t in sync:
        spans: dict[tuple[int, int], set] = {}
        for s in t.steps:
            if s.verify_start is not None:
                spans.setdefault((s.request, s.cycle), set()).add(round(s.verify_start, 9))
        for starts in spans.values():
            shared += len(starts) == 1
            sequential += len(starts) > 1
    if shared or sequential:
        return "per_pair" if sequential > shared else "one"
    return "per_pair" if any(recorded_setting(t.header).verify_calls == "per_pair" for t in sync) else "one"


def behaviour_from_traces(traces: Sequence[Trace]) -> Behaviour:
    """Acceptance, lengths and the verifier's latency calibrated from lr-traces (:func:`lrsim.prediction.calibrate.calibrate`).

    ``alpha1`` is pooled over positions; the prompt is the median recorded prompt length.
    """
    c = calibrate(traces)
    if c.target_tokens is None or not c.target_tokens.n:
        raise InputError("these traces hold no target steps with token counts")
    prompts = [r.prompt_tokens for t in traces for r in t.requests if r.prompt_tokens]
    kv = c.prompt_cached  # what no pass record shows: 0 (every prompt prefilled, the simulator's default)
    return Behaviour(
        alpha1=c.alpha1.p if c.alpha1 is not None else math.nan, alpha2=c.alpha2,
        step_tokens=Empirical(tuple(c.target_tokens.samples)),
        draft_tokens=_empirical(c.draft_tokens), request_tokens=_empirical(c.request_tokens),
        prompt_tokens=int(statistics.median(prompts)) if prompts else 0,
        verify_calls=verify_calls(traces),
        verifier_latency=_empirical(c.verify_s),
        spec_fill=c.spec_fill if c.spec_fill is not None else 1.0,
        prompt_cached=kv.get("target", 0.0), draft_prompt_cached=kv.get("draft", 0.0),
        baseline_prompt_cached=kv.get("ar", 0.0),
        overlap_accepted=_empirical(c.overlap_accepted), overlap_rejected=_empirical(c.overlap_rejected),
        source="traces")


def recorded_archs(traces: Sequence[Trace]) -> dict[str, tuple[str | None, str | None]]:
    """``{role: (model, architecture)}`` for the target and the draft: the model the first trace naming one records
    (its header's ``models``) and the architecture it stands for (:func:`lrsim.gpu.archs.arch_for_model`: a
    shipped one, or a ``config.json`` here), each None when unknown."""
    from ..gpu.archs import arch_for_model

    out = {}
    for role in ("target", "draft"):
        model = next((str(m[role]) for t in traces if (m := t.header.models or {}).get(role)), None)
        out[role] = (model, arch_for_model(model))
    return out


def arch_notes(traces: Sequence[Trace], hw: HardwareSpec) -> list[str]:
    """Where the architectures ``hw`` prices and the models the traces recorded differ, one note each: pricing
    another model's shapes is allowed (a note, not an error), e.g. a GPU's model beside the acceptance of a CPU pair
    (docs/latency-profile.md, composition)."""
    from ..gpu.archs import arch_for_model

    out = []
    for role, (model, recorded) in recorded_archs(traces).items():
        priced = hw.target_arch if role == "target" else hw.draft_arch
        if priced is None or model is None:
            continue
        if recorded is None:
            out.append(f"{role}: the traces' model {model} is no known architecture, so {priced} (priced) is not "
                       "checked against it")
        elif (arch_for_model(priced) or priced) != recorded:
            out.append(f"{role}: {priced} priced, but the traces recorded {model} ({recorded}): the acceptance and "
                       "lengths of one model, the timing of another")
    return out


def _empirical(s) -> Empirical | None:
    """A calibrated sample as a distribution to draw from (None: no sample)."""
    return Empirical(tuple(s.samples)) if s is not None and s.n else None


def judge_prompt(hw: HardwareSpec, b: Behaviour) -> int:
    """Judge prompt tokens: given, or the template plus two steps of mean length."""
    if hw.judge_prompt_tokens is not None:
        return hw.judge_prompt_tokens
    return JUDGE_TEMPLATE_TOKENS + round(2 * b.step_tokens.mean)  # the template + s1 + s2


def verifier(hw: HardwareSpec, b: Behaviour) -> tuple[Dist | None, str]:
    """The verifier's latency per call (seconds) and a note on where it comes from."""
    if hw.verifier_latency is not None:
        return hw.verifier_latency, f"verifier: {hw.verifier_latency.mean * 1e3:.4g} ms per call (given)"
    if hw.judge_arch is not None:
        prof, n = hw.judge_profile, judge_prompt(hw, b)
        arch = prof.arch(hw.judge_arch)
        ms = prof.prefill_ms(hw.judge_arch, n, 1, hw.extrapolation.above)
        timed = arch.prefill.timed if arch.prefill is not None else prof.timed
        return Constant(ms / 1000.0), (f"verifier: {hw.judge_arch} judge, prefill of {n} tokens from the profile's "
                                       f"prefill table ({timed}): {ms:.4g} ms per call")
    if b.verifier_latency is not None:
        return b.verifier_latency, (f"verifier: the traces' recorded latency, {b.verifier_latency.mean * 1e3:.4g} ms "
                                    "per call on average")
    return None, "verifier: none given, so free (optimistic): give --verifier-latency or --judge-arch"


def context_notes(hw: HardwareSpec, b: Behaviour, mode: str) -> list[str]:
    """How the context is priced (the policy of the module docstring), in words."""
    xs = hw.target(mode).contexts
    if len(xs) == 1:
        return [f"context: {hw.name} has {hw.entry(mode, 'target')} at context {xs[0]} only, so costs are "
                "context-independent (optimistic for long requests: attention grows with the context)"]
    if b.request_tokens is None:
        return [f"context: no request length given, so every pass is priced at the prompt ({b.prompt_tokens} "
                "tokens)"]
    notes = [f"context: grows from the prompt ({b.prompt_tokens} tokens) through each request; each cycle (async: "
             "stage) is priced at the tokens its request has committed when it starts"]
    if b.prompt_tokens < xs[0]:
        notes.append(f"context below the first measured point ({xs[0]} tokens): policy '{hw.extrapolation.below}'")
    return notes


def sim_config(b: Behaviour, hw: HardwareSpec, setting: Setting, steps: int, seed: int,
               correlation: float = 0.0) -> SimConfig:
    """The :class:`lrsim.sim.SimConfig` of ``setting`` with this behaviour on this hardware (the mode's setup)."""
    if setting.mode != "ar" and setting.k1 > 1 and not 0 <= b.alpha1 <= 1:
        raise InputError("no step acceptance (alpha1): cannot predict an LR configuration")
    if setting.k2 > 1 and b.alpha2 is None:
        raise InputError("k2 > 1 needs the token acceptance alpha2 (--alpha2, or traces with token speculation)")
    ver, _ = verifier(hw, b)
    requests = b.request_tokens if setting.width == 1 else None
    baseline = setting.mode == "ar" and setting.k2 == 1
    return SimConfig(
        mode=setting.mode, k1=setting.k1, k2=setting.k2, width=setting.width, correlation=correlation,
        alpha1=b.alpha1 if 0 <= b.alpha1 <= 1 else 0.5, alpha2=b.alpha2 if b.alpha2 is not None else 0.5,
        c2=TINY_C2, target_latency=hw.target(setting.mode), draft_latency=hw.draft(setting.mode),
        draft_sd=setting.k2 > 1, verifier_latency=ver, prompt_tokens=b.prompt_tokens, prefill=hw.kv_prefill,
        spec_fill=b.spec_fill, overlap_accepted=b.overlap_accepted, overlap_rejected=b.overlap_rejected,
        prompt_cached=b.baseline_prompt_cached if baseline else b.prompt_cached,
        draft_prompt_cached=b.draft_prompt_cached,
        verify_calls=b.verify_calls if setting.mode == "sync" else "one", step_tokens=b.step_tokens,
        draft_tokens=b.draft_tokens, request_tokens=requests, steps=steps, seed=seed,
        colocated=_colocated(hw, setting.mode))


def _colocated(hw: HardwareSpec, mode: str) -> str:
    """Roles sharing the target's device in ``mode`` (a verifier only as a judge; ar has neither)."""
    roles = [r for r in hw.colocated.split("+") if r != "none" and mode != "ar"]
    return "+".join(r for r in roles if r != "verifier" or hw.judge_arch is not None) or "none"


def closed_form(b: Behaviour, hw: HardwareSpec, setting: Setting) -> float | None:
    """The paper's ``h(k1, k2)`` (``g(k2)`` for ar) with this behaviour and the profile's ``c1``."""
    a2 = b.alpha2 if setting.k2 > 1 and b.alpha2 is not None else 0.5
    if setting.mode == "ar":
        return float(theory.g(a2, TINY_C2, setting.k2)) if 0 < a2 < 1 else None
    if not 0 < b.alpha1 < 1 or hw.draft_arch is None:
        return None
    return float(theory.h(b.alpha1, hw.c1(setting.mode, b.prompt_tokens), setting.k1, a2, TINY_C2, setting.k2,
                          setting.mode))


@dataclass(frozen=True)
class Outcome:
    """One simulated prediction: speedup over ``ar`` on its setup, seconds per token, the run."""

    speedup: float
    spt: float  #: simulated seconds per output token
    base_spt: float  #: target-only seconds per output token on the ``ar`` setup
    run: object  #: the mode's :class:`lrsim.sim.SimResult`
    own_baseline: bool  #: the speedup is the run's built-in baseline (the mode runs on ar's setup)
    config: SimConfig | None = None  #: what was simulated (its pass costs hold the passes they priced)


#: inside plan(): its runs by (behaviour, hardware, setting, seed, correlation), continued rather than started over
_LIVE: ContextVar[dict | None] = ContextVar("lrsim_compose_live", default=None)


def _simulated(cfg: SimConfig, key: tuple):
    """``simulate(cfg)``; inside :func:`plan`, a configuration already simulated with fewer steps goes on from
    there (:class:`lrsim.sim.Continuable`: the same result as a new run, without simulating its first steps again)."""
    live = _LIVE.get()
    if live is None:
        return simulate(cfg)
    try:
        h = live.get(key)
    except TypeError:  # a behaviour that cannot be a key (unhashable distribution)
        return simulate(cfg)
    if h is None:
        h = Continuable(cfg)
        if h.resumable:
            live[key] = h
    return h.result(cfg.steps)


def run(b: Behaviour, hw: HardwareSpec, setting: Setting, steps: int, seed: int, correlation: float = 0.0,
        memo: dict | None = None) -> Outcome:
    """Simulate ``setting`` and its ``ar`` baseline; ``memo`` keeps the baseline across candidates of a plan.

    Inside :func:`plan` a configuration simulated before with fewer steps is continued (exact).
    """
    cfg = sim_config(b, hw, setting, steps, seed, correlation)
    r = _simulated(cfg, (b, id(hw), setting.mode, setting.k1, setting.k2, setting.width, seed, correlation))
    spt = r.sim_time / r.output_tokens
    if hw.same_setup(setting.mode, "ar") and cfg.prefill == "none":  # the run's own baseline: same costs, no prefill
        return Outcome(float(r.speedup), spt, spt * r.speedup, r, True, cfg)
    key = ("baseline", steps, seed, id(b))
    if memo is None or key not in memo:
        base = simulate(sim_config(b, hw, Setting("ar", 1, 1), steps, seed))
        spt_ar = base.sim_time / base.output_tokens
        if memo is not None:
            memo[key] = spt_ar
    spt_ar = memo[key] if memo is not None else spt_ar
    return Outcome(spt_ar / spt, spt, spt_ar, r, False, cfg)


def notes(b: Behaviour, hw: HardwareSpec, mode: str) -> list[str]:
    """Every policy and assumption a prediction rests on, one sentence each."""
    out = hw.notes(mode) + context_notes(hw, b, mode) + [verifier(hw, b)[1]]
    if not hw.same_setup(mode, "ar") or hw.kv_prefill != "none":
        out.append(f"baseline: target-only decoding on the ar setup ({hw.entry('ar', 'target')}), simulated "
                   f"beside {mode} on {hw.entry(mode, 'target')}")
    if hw.kv_prefill != "none" and (b.prompt_cached or b.draft_prompt_cached or b.baseline_prompt_cached):
        draft = f"{b.draft_prompt_cached:.0%} in the draft's; " if mode != "ar" else ""
        out.append(f"prompt: a request's first pass found {b.prompt_cached:.0%} of its prompt in the target's KV "
                   f"({draft}target-only decoding, the baseline: {b.baseline_prompt_cached:.0%}), as the traces' "
                   "first passes record, so only the rest is "
                   "prefilled (a run of the same request before it left it: lrref's bench runs a problem's modes "
                   "one after another on one engine)")
    out.append(f"behaviour from {b.source}: alpha1 = {b.alpha1:.3f}"
               + (f", alpha2 = {b.alpha2:.3f}" if b.alpha2 is not None else "")
               + f", steps of {b.step_tokens.mean:.1f} tokens on average"
               + (f", requests of {b.request_tokens.mean:.0f}" if b.request_tokens is not None else ""))
    return out


def _halves(behaviour: Behaviour | Sequence[Trace], traces: Sequence[Trace] | None) -> tuple[Behaviour, list | None]:
    """(behaviour, the traces a bootstrap resamples): traces are calibrated here, once; a :class:`Behaviour`
    comes with the traces it was calibrated from, if any."""
    if isinstance(behaviour, Behaviour):
        return behaviour, (list(traces) if traces is not None else None)
    traces = list(behaviour)
    return behaviour_from_traces(traces), traces


def predict(behaviour: Behaviour | Sequence[Trace], hw: HardwareSpec, setting: Setting, steps: int = 20_000,
            seed: int = 0, bootstrap: int = 20, correlation: float = 0.0, progress: bool = False,
            traces: Sequence[Trace] | None = None, retime: bool = False) -> Prediction:
    """Predicted speedup of ``setting``: behaviour from numbers or traces, timing from ``hw``.

    ``behaviour``: a :class:`Behaviour`, or traces to calibrate it from (here, once); ``traces``: the traces a
    given :class:`Behaviour` was calibrated from (:func:`behaviour_from_traces`), for the interval.  The
    interval: with traces and at least 10 ``bootstrap`` replicates, a bootstrap over (request, cycle) blocks,
    each replicate recalibrating the behaviour from its resample, and with ``retime`` the timing too (``hw`` is
    then the profile the traces calibrate, :func:`trace_hardware`, as in replay); else the
    simulation's batch-means 95% CI when the speedup is the run's own baseline, else none.  With traces and a
    profile of other hardware (not ``retime``), the notes say where the architectures priced and the traces'
    models differ (:func:`arch_notes`).
    """
    b, traces = _halves(behaviour, traces)
    out = run(b, hw, setting, steps, seed, correlation)
    ci = tuple(out.run.speedup_ci95) if out.own_baseline and out.run.speedup_ci95[0] is not None else None
    reps = 0
    if traces is not None and bootstrap >= 10:
        *ci, reps = _bootstrap(traces, hw, setting, steps, seed, bootstrap, correlation, progress, retime)
        ci = tuple(ci)
    c1 = hw.c1(setting.mode, b.prompt_tokens) if hw.draft_arch is not None else None
    entry = hw.entry(setting.mode, "target")
    where = hw.name + (entry[entry.index("@"):] if "@" in entry else "")  # the profile, and the mode's setup
    return Prediction(replace(setting, hardware=where), float(out.speedup), ci,
                      1 / out.spt, 1 / out.base_spt, closed_form(b, hw, setting), b.alpha1, b.alpha2, c1, reps,
                      notes(b, hw, setting.mode) + (arch_notes(traces, hw) if traces and not retime else [])
                      + coverage_notes(hw, out.config))


def coverage_notes(hw: HardwareSpec, cfg: SimConfig | None) -> list[str]:
    """Where the simulation priced passes the pass records behind a calibrated profile do not cover: sizes (rows x
    positions, all rows) below or above what any pass fed, or inside a range no pass fed (the fit's interpolation).
    Empty for a profile without coverage (measured, modelled, or from steps)."""
    extra = hw.loaded.provenance.extra if hw.loaded.provenance is not None else None
    cov = (extra or {}).get("coverage") or {}
    out = []
    for role, cost in (("target", getattr(cfg, "target_latency", None)), ("draft", getattr(cfg, "draft_latency", None))):
        c = cov.get(cost.arch) if isinstance(cost, ProfileCost) else None
        if not c:
            continue
        lo, hi = c["tokens"]
        sizes = sorted({max(1, round(r * q)) for _, r, q in cost.priced_shapes()})
        above = [n for n in sizes if n > hi]
        inside = [n for n in sizes if any(g0 <= n <= g1 for g0, g1 in c.get("gaps", ()))]
        if above:
            out.append(f"{role} passes of up to {above[-1]} positions priced above the largest recorded ({hi}): the "
                       "fit's last slope extrapolates them")
        if inside:
            ranges = ", ".join(f"{g0}-{g1}" for g0, g1 in c["gaps"])
            out.append(f"{role} passes of {inside[0]}-{inside[-1]} positions priced where no pass was recorded "
                       f"({ranges}): the fit interpolates them")
    return out


def _bootstrap(traces: list[Trace], hw: HardwareSpec, setting: Setting, steps: int, seed: int, n: int,
               correlation: float, progress: bool, retime: bool) -> tuple[float, float, int]:
    """Percentile 95% interval over trace resamples (recalibrated: the behaviour, with ``retime`` the timing too;
    new seed each), and the replicates it rests on.

    :raises InputError: fewer than half the resamples (or 10) hold a verified draft step where the setting needs one.
    """
    draws = _Resamples(traces, seed)
    reps = [replicate(draws[i], hw, setting, steps, seed, i, correlation, retime)
            for i in bar(range(n), desc="bootstrap", enabled=progress, leave=False)]
    return bootstrap_interval(reps, n)


class _Resamples:
    """The bootstrap's resamples of ``traces`` in order (one generator seeded ``seed``), drawn as first asked for:
    a worker that runs replicate ``i`` draws those before it too, so every process draws the same ``i``-th."""

    def __init__(self, traces: list[Trace], seed: int):
        self.traces, self.rng, self.drawn = traces, np.random.default_rng(seed), []

    def __getitem__(self, i: int) -> list[Trace]:
        while len(self.drawn) <= i:
            self.drawn.append(resample_blocks(self.traces, self.rng))
        return self.drawn[i]


def replicate(sample: list[Trace], hw: HardwareSpec, setting: Setting, steps: int, seed: int, i: int,
              correlation: float, retime: bool) -> float | None:
    """Bootstrap replicate ``i``: the speedup of ``setting`` on the behaviour (and with ``retime`` the timing)
    recalibrated from ``sample``, with seed ``seed + 1 + i`` and ``max(steps / 4, 2000)`` steps; None where the
    setting needs a step acceptance and the resample drew no verified draft (the traces' few drafts widen the
    interval this way)."""
    b = behaviour_from_traces(sample)
    if setting.mode != "ar" and setting.k1 > 1 and not 0 <= b.alpha1 <= 1:
        return None
    h = trace_hardware(sample, b.alpha2) if retime else hw
    return run(b, h, setting, max(steps // 4, 2000), seed + 1 + i, correlation).speedup


def bootstrap_interval(reps: Sequence[float | None], n: int) -> tuple[float, float, int]:
    """The percentile 95% interval of the replicates that hold a speedup, and how many do.

    :raises InputError: fewer than half of ``n`` (or 10).
    """
    reps = [r for r in reps if r is not None]
    if len(reps) < max(10, n // 2):
        raise InputError(f"bootstrap: only {len(reps)} of {n} resamples of these traces hold a verified draft step, "
                         "too few for an interval; record more, or pass --bootstrap 0")
    return float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975)), len(reps)


def resample_blocks(traces: Sequence[Trace], rng: np.random.Generator) -> list[Trace]:
    """Each trace with its (request, cycle) blocks drawn with replacement (renumbered cycles), and its pass
    records by request, drawn with replacement apart from the steps (a pass fit's uncertainty: which passes a
    small recording happened to hold); passes of no request (a verifier's) are kept."""
    out = []
    for t in traces:
        blocks: dict[tuple[int, int], list] = {}
        for s in t.steps:
            blocks.setdefault((s.request, s.cycle), []).append(s)
        keys = list(blocks)
        if not keys:
            out.append(t)
            continue
        steps = [replace(s, cycle=i) for i, k in enumerate(rng.integers(0, len(keys), len(keys)))
                 for s in blocks[keys[k]]]
        out.append(replace(t, steps=steps, passes=_resample_passes(t.passes, rng), warnings=[]))
    return out


def only_requests(trace: Trace, requests) -> Trace:
    """The trace cut down to ``requests`` (request indices): their steps, request records, passes and choices;
    passes of no request (a verifier's) are kept only when some step is."""
    keep = set(requests)
    steps = [s for s in trace.steps if s.request in keep]
    passes = [p for p in trace.passes if (p.requests[0] in keep if p.requests else bool(steps))]
    return replace(trace, steps=steps, requests=[r for r in trace.requests if r.request in keep], passes=passes,
                   choices=[c for c in trace.choices if c.request in keep], warnings=[])


def _resample_passes(passes: Sequence, rng: np.random.Generator) -> list:
    """Pass records drawn by request (the first request a pass served) with replacement."""
    by: dict[int, list] = {}
    kept = []
    for p in passes:
        if p.requests:
            by.setdefault(p.requests[0], []).append(p)
        else:
            kept.append(p)
    keys = list(by)
    return kept + [p for k in rng.integers(0, len(keys), len(keys)) for p in by[keys[k]]] if keys else list(passes)


def async_depth_limit(b: Behaviour, hw: HardwareSpec, budget: int) -> int:
    """Deepest async look-ahead worth simulating: ``ceil((1 + v / T) / c1) + 2`` (at most ``budget``).

    Past ``ceil(1/c1)`` the drafter, not the look-ahead, limits the pipeline
    (Theorem 2); a verifier of ``v`` seconds per call holds each slot ``v``
    longer (``T``: a mean target step at batch 1); the 2 extra absorb step-length spread.
    """
    T = hw.target("async").seconds(b.prompt_tokens, 1, 1) * b.step_tokens.mean
    ver, _ = verifier(hw, b)
    v = ver.mean if ver is not None else 0.0
    return max(2, min(budget, math.ceil((1 + v / T) / hw.c1("async", b.prompt_tokens)) + 2))


REFINE = 10  #: candidates re-simulated with the full number of steps after screening
ASYNC_COST = 8.5  #: an async step's simulation time over a sync step's (the screening's balance; ~17 us vs ~2 us)


def plan(behaviour: Behaviour | Sequence[Trace], hw: HardwareSpec, budget: int, k2_max: int = 8, steps: int = 4000,
         seed: int = 0, bootstrap: int = 20, k1_max: int | None = None, progress: bool = False,
         traces: Sequence[Trace] | None = None, retime: bool = False, workers: int | None = 1) -> TracePlan:
    """Rank every (mode, k1, k2) under ``budget`` on the composed workload (``behaviour``, ``traces`` and
    ``retime`` as in :func:`predict`: traces are calibrated once).

    Every candidate is screened with ``steps / 4`` output steps (at least
    1000, common random numbers), the best :data:`REFINE` are simulated again
    with ``steps``, and the winner with ``4 steps`` and its interval.  Async
    depths past :func:`async_depth_limit` (or ``k1_max``) are not simulated;
    candidates the profile cannot price (per the extrapolation policy) are left out and noted.

    The numbers are those of separate runs; the work is not repeated: a
    refined or winning configuration continues its screening run
    (:class:`lrsim.sim.Continuable`), and sync depths of one ``k2`` share the
    passes of their steps (:func:`lrsim.sim.sharing`).  ``workers``: processes
    (None or 0: one per core; :mod:`lrsim.prediction.workers`); the result is the same with any number.
    """
    b, traces = _halves(behaviour, traces)
    token = _LIVE.set({})
    try:
        with sharing(), executor(_Runs(b, hw, seed, traces, retime), workers) as ex:
            return _plan(b, hw, budget, k2_max, steps, bootstrap, k1_max, progress, traces, ex)
    finally:
        _LIVE.reset(token)


class _Runs:
    """A plan's simulations (the jobs of :mod:`lrsim.prediction.workers`: in this process or a forked worker, which
    keeps its runs to continue them): one behaviour, hardware and seed; ``memo`` keeps the baselines."""

    def __init__(self, b: Behaviour, hw: HardwareSpec, seed: int, traces: list | None, retime: bool):
        self.b, self.hw, self.seed, self.traces, self.retime, self.memo = b, hw, seed, traces, retime, {}
        self.draws: _Resamples | None = None

    def rows(self, jobs: Sequence[tuple[Setting, int]]) -> list[tuple[float, int] | str]:
        """Per ``(setting, steps)``: ``(speedup, peak positions)``, or why the profile cannot price it."""
        return [self.row(s, n) for s, n in jobs]

    def row(self, s: Setting, n: int) -> tuple[float, int] | str:
        try:
            o = run(self.b, self.hw, s, n, self.seed, memo=self.memo)
        except InputError as e:
            return str(e)
        return float(o.speedup), int(o.run.peak_positions)

    def speedup(self, s: Setting, n: int) -> tuple[float | None, str | None]:
        """The simulated speedup of ``s``, or None and why the profile cannot price it."""
        r = self.row(s, n)
        return (None, r) if isinstance(r, str) else (r[0], None)

    def predict(self, s: Setting, steps: int) -> Prediction:
        """:func:`predict` of ``s`` without its bootstrap (:meth:`replicate` gives that)."""
        return predict(self.b, self.hw, s, steps=steps, seed=self.seed, bootstrap=0, traces=self.traces,
                       retime=self.retime)

    def replicate(self, s: Setting, steps: int, i: int) -> float | None:
        """Bootstrap replicate ``i`` of :func:`predict`'s interval for ``s``."""
        if self.draws is None:
            self.draws = _Resamples(self.traces, self.seed)
        return replicate(self.draws[i], self.hw, s, steps, self.seed, i, 0.0, self.retime)


def _cost(s: Setting, steps: int) -> float:
    """The work of simulating ``steps`` steps of ``s``, in sync steps (for balance only)."""
    return steps * (ASYNC_COST if s.mode == "async" else 1.0)


def _job(s: Setting, steps: int, have: int = 0, method: str = "row") -> Job:
    """The job that takes ``s`` to ``steps`` (``have``: steps it was run before; for balance)."""
    return Job(method, (s, steps), (s,), steps, _cost(s, steps - have))


def _plan(b: Behaviour, hw: HardwareSpec, budget: int, k2_max: int, steps: int, bootstrap: int,
          k1_max: int | None, progress: bool, traces: list | None, ex) -> TracePlan:
    if not 0 <= b.alpha1 <= 1:
        raise InputError("no step acceptance (alpha1): cannot plan LR")
    if hw.draft_arch is None:
        raise InputError("planning LR needs a draft architecture (--draft-arch)")
    k2s = list(range(1, k2_max + 1)) if b.alpha2 is not None else [1]
    deepest = k1_max or async_depth_limit(b, hw, budget)
    ranked, skipped = _screen(b, hw, budget, k2s, deepest, max(steps // 4, 1000), progress, ex)
    if not ranked:
        raise InputError(f"no configuration under M = {budget} can be priced on this profile"
                         + (f" ({skipped[0]})" if skipped else ""))
    ranked = _refine(budget, ranked, steps, ex)
    top = ranked[0]
    cf, s = closed_form_choice(b, hw, budget)
    win = Setting(top["mode"], top["k1"], top["k2"], top["width"])
    reps = bootstrap if traces is not None and bootstrap >= 10 else 0
    jobs = [_job(win, steps * 4, method="predict"), _job(s, steps, method="speedup")]
    jobs += [Job("replicate", (win, steps * 4, i), (), 0, _cost(win, max(steps, 2000))) for i in range(reps)]
    with bar(total=reps, desc="bootstrap", enabled=progress and reps > 0, leave=False) as shown:
        best, (simulated, why), *drawn = ex.map(jobs, lambda j: shown.update(int(j >= 2)))
    if reps:  # the winner's interval: the bootstrap's (as predict gives it), its replicates run beside the rest
        *ci, n = bootstrap_interval(drawn, reps)
        best = replace(best, speedup_ci95=tuple(ci), replicates=n)
    csim = _closed_form_priced(cf, s, simulated, why)
    screen = max(steps // 4, 1000)
    out = [f"async look-ahead searched up to k1 = {deepest}; the best {REFINE} of the screening ({screen} steps "
           f"each; async by successive halving: {max(screen // 4, 1)} each, the better half (at least "
           f"{2 * REFINE}) on to {max(screen // 2, 1)}, the better half of those to {screen}) re-simulated with "
           f"{steps}"]
    if skipped:
        out.append(f"{len(skipped)} configuration(s) the profile cannot price were left out, e.g. {skipped[0]}")
    if b.alpha2 is None:
        out.append("no token acceptance (alpha2): k2 = 1 only")
    return TracePlan(budget, best, ranked, cf, csim, out)


def _row(s: Setting, r: tuple[float, int], steps: int) -> dict:
    return {"mode": s.mode, "k1": s.k1, "k2": s.k2, "width": s.width, "positions": r[1], "speedup": r[0],
            "steps": steps}


def _screen(b: Behaviour, hw: HardwareSpec, budget: int, k2s: list[int], deepest: int, steps: int, progress: bool,
            ex) -> tuple[list[dict], list[str]]:
    """Every candidate's simulated speedup, best first, and why some could not be priced.

    Async stops deepening for a ``k2`` once its peak exceeds the budget (a deeper look-ahead holds at least as many).
    Async candidates are screened by successive halving: every one with ``steps / 4``, the better half (at least
    ``2 REFINE``) of those within the budget continued to ``steps / 2``, the better half of those (at least ``2
    REFINE``) to ``steps`` (continued runs: the numbers of runs that long); each row holds the steps it got.  A
    depth that exceeds the budget when continued is dropped with the deeper ones of its ``k2``.
    Sync (and ``ar``) depths of one ``k2`` are one job, so that one process shares their passes.
    """
    cands = [s for s in candidates(budget, k2s) if s.mode != "async" or s.k1 <= deepest]
    short = max(steps // 4, 1)
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(cands):
        groups.setdefault((s.mode, s.k2) if s.mode != "async" else i, []).append(i)
    members = list(groups.values())
    jobs = []
    for idx in members:
        s0 = cands[idx[0]]
        if s0.mode == "async":
            jobs.append(_job(s0, short))
        else:
            jobs.append(Job("rows", ([(cands[i], steps) for i in idx],), tuple(cands[i] for i in idx), steps,
                            steps * len(idx)))
    with bar(total=len(cands), desc="candidates", enabled=progress, leave=False) as shown:
        results = ex.map(jobs, lambda j: shown.update(len(members[j])))
    got: list = [None] * len(cands)
    for idx, r in zip(members, results):
        for i, x in zip(idx, r if isinstance(r, list) else [r]):
            got[i] = x
    ranked, over, skipped = [], {}, []  # over: k2 -> the shallowest async depth over the budget
    race = []  # the async rows still continued
    for s, r in zip(cands, got):
        if s.mode == "async" and s.k1 > over.get(s.k2, math.inf):
            continue  # deeper than a depth over the budget: not screened (it ran only to keep the workers busy)
        if isinstance(r, str):
            skipped.append(f"{s.mode} k1 = {s.k1}, k2 = {s.k2}: {r}")
            continue
        n = short if s.mode == "async" else steps
        if r[1] <= budget:
            ranked.append(_row(s, r, n))
            if s.mode == "async":
                race.append(ranked[-1])
        elif s.mode == "async":
            over[s.k2] = s.k1
    too_deep = _halve(race, budget, short, steps, ex)
    ranked = [r for r in ranked if r["mode"] != "async" or r["k1"] < too_deep.get(r["k2"], math.inf)]
    ranked.sort(key=lambda r: -r["speedup"])
    return ranked, skipped


def _halve(race: list[dict], budget: int, n: int, steps: int, ex) -> dict[int, int]:
    """Successive halving of the async rows in ``race`` (screened with ``n`` steps; updated in place) up to
    ``steps``; per ``k2``, the shallowest depth over the budget when continued."""
    too_deep: dict[int, int] = {}
    while n < steps and race:
        before, n = n, min(2 * n, steps)
        race.sort(key=lambda r: -r["speedup"])
        go, race = race[:max(2 * REFINE, (len(race) + 1) // 2)], []
        sets = [Setting(row["mode"], row["k1"], row["k2"], row["width"]) for row in go]
        for row, s, r in zip(go, sets, ex.map([_job(s, n, before) for s in sets])):
            if r[1] <= budget:
                row.update(_row(s, r, n))
                race.append(row)
            else:
                too_deep[s.k2] = min(too_deep.get(s.k2, s.k1), s.k1)
        race = [r for r in race if r["k1"] < too_deep.get(r["k2"], math.inf)]
    return too_deep


def _refine(budget: int, ranked: list[dict], steps: int, ex) -> list[dict]:
    """The best :data:`REFINE` screened candidates simulated again with ``steps``; best first."""
    out = list(ranked)
    sets = [Setting(row["mode"], row["k1"], row["k2"], row["width"]) for row in ranked[:REFINE]]
    for i, (s, r) in enumerate(zip(sets, ex.map([_job(s, steps, row["steps"]) for s, row in zip(sets, ranked)]))):
        out[i] = _row(s, r, steps) if r[1] <= budget else None
    out = [r for r in out if r is not None]
    out.sort(key=lambda r: (-r["steps"], -r["speedup"]))  # re-simulated first, then the screening's order
    return out


def closed_form_choice(b: Behaviour, hw: HardwareSpec, budget: int) -> tuple[dict, Setting]:
    """The paper's plan on (alpha1, the profile's c1, alpha2) per mode, and the best mode's choice."""
    from ..planner import plan as closed_plan

    clip = partial(min, 1 - 1e-6)
    a1, a2 = clip(max(b.alpha1, 1e-6)), clip(max(b.alpha2 if b.alpha2 is not None else 0.5, 1e-6))
    cf = {}
    for mode in LR_MODES:
        p = closed_plan(a1, hw.c1(mode, b.prompt_tokens), a2, TINY_C2, budget, mode)
        cf[mode] = {"k1": p.k1, "k2": p.k2 if b.alpha2 is not None else 1, "speedup": p.speedup}
    mode = max(cf, key=lambda m: cf[m]["speedup"])
    return cf, Setting(mode, cf[mode]["k1"], cf[mode]["k2"])


def _closed_form_priced(cf: dict, s: Setting, simulated: float | None, why: str | None) -> dict:
    return {"mode": s.mode, "k1": s.k1, "k2": s.k2, "simulated_speedup": simulated,
            "closed_form_speedup": cf[s.mode]["speedup"]} | ({"not_priced": why} if why else {})


def closed_form_plan_of(b: Behaviour, hw: HardwareSpec, budget: int, steps: int, seed: int) -> tuple[dict, dict]:
    """The paper's plan on (alpha1, the profile's c1, alpha2) per mode, and its choice priced by the simulator
    (None, and why, where the choice needs a pass the profile did not measure: :meth:`_Runs.speedup`)."""
    cf, s = closed_form_choice(b, hw, budget)
    return cf, _closed_form_priced(cf, s, *_Runs(b, hw, seed, None, False).speedup(s, steps))


def trace_hardware(traces: Sequence[Trace], alpha2: float | None = None) -> HardwareSpec:
    """The :class:`~lrsim.cost.hardware.HardwareSpec` of the profile these traces calibrate (``alpha2``: the token
    acceptance, for the draft's passes with token speculation; default: calibrated from the traces)."""
    if alpha2 is None:
        alpha2 = calibrate(traces).alpha2
    prof = profile_from_traces(traces, "traces", alpha2)
    tname, dname = model_names(traces)
    has_draft = any(n.startswith(dname + "@") for n in prof.archs)
    return HardwareSpec(prof, tname, dname if has_draft else None).load()
