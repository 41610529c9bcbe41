"""Replay recorded workloads in the simulator: predict the speedup of other configurations.

A prediction combines two calibrations (:mod:`lrsim.calibrate`):

- **behaviour**, from every trace: step acceptance ``alpha1``, token
  acceptance ``alpha2``, empirical draft and target step lengths;
- **timing**, from the traces that ran on the same hardware share as the
  predicted mode (``hardware`` of :func:`lrsim.trace.recorded_setting`): the target's cost
  per forward pass by positions in the pass, the draft's cost per token by
  batch, the verifier's latency sample.

The simulator (:mod:`lrsim.sim`) then runs the predicted configuration and,
as the baseline, target-only decoding priced with the timing of the
recorded autoregressive traces (or, without any, of the predicted mode's
own setup).  ``speedup = baseline seconds per token / predicted seconds per
token``.  Its 95% interval is a bootstrap: resample (request, cycle) blocks
of every trace with replacement, recalibrate, simulate with a new seed; the
percentile interval covers both calibration and simulation noise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Sequence

import numpy as np

from . import theory
from .calibrate import Calibration, Summary, calibrate, per_forward_by_batch_k2, per_forward_by_positions
from .errors import InputError
from .latency import ConstantLatency, CurveLatency, Empirical, GridLatency, Latency
from .modes import LR_MODES
from .sim import SimConfig, simulate
from .trace import Setting, Trace, read_trace, recorded_setting

TINY_C2 = 1e-9  # n-gram drafting cost: already inside the measured cost of a pass


def latency_curve(table: dict[int, Summary], axis: str) -> Latency:
    """Piecewise-linear latency over the measured points; flat outside unless it rises at the top end."""
    xs = sorted(x for x, s in table.items() if s.n > 0 and s.mean > 0)
    if not xs:
        raise InputError("no timed steps in these traces: cannot calibrate a latency")
    ys = [table[x].mean for x in xs]
    if len(xs) == 1:
        return ConstantLatency(ys[0])
    rising = ys[-1] >= ys[-2]
    return CurveLatency(tuple(xs), tuple(ys), axis=axis, extrapolate="linear" if rising else "clamp")


def _token_ratios(traces: Sequence[Trace]) -> dict[int, float]:
    """k2 -> r(k2) = T(b, k2) / T(b, 1), pooled over setups and batches measured at both (weighted by the
    smaller sample)."""
    by_setup: dict[str, list[Trace]] = {}
    for t in traces:
        by_setup.setdefault(recorded_setting(t.header).hardware, []).append(t)
    ratios: dict[int, list[tuple[float, int]]] = {}
    for ts in by_setup.values():
        table = per_forward_by_batch_k2(ts)
        for (b, k), sk in table.items():
            s1 = table.get((b, 1))
            if k > 1 and s1 is not None and s1.mean > 0:
                ratios.setdefault(k, []).append((sk.mean / s1.mean, min(sk.n, s1.n)))
    return {k: sum(x * w for x, w in v) / sum(w for _, w in v) for k, v in ratios.items()}


def _measured_token_ratios(traces: Sequence[Trace]) -> dict[int, float]:
    # async steps live through passes of changing batch (continuous batching), so their per-pass times
    # blur the batch axis: take the ratios from ar/sync traces when they have them
    steady = [t for t in traces if recorded_setting(t.header).mode != "async"]
    return _token_ratios(steady) or _token_ratios(traces)


def _factor(r: dict[int, float], k2: int) -> float | None:
    """r(k2) from the measured ratios ``r``: linear through r(1) = 1 and the measured points, continued
    past the largest measured k2 along the line from r(1)."""
    if k2 == 1:
        return 1.0
    if not r:
        return None
    ks = [1] + sorted(r)
    return max(float(np.interp(k2, ks, [1.0] + [r[k] for k in ks[1:]])) if k2 <= ks[-1] else
               1.0 + (r[ks[-1]] - 1.0) * (k2 - 1) / (ks[-1] - 1), 1e-3)


def token_factor(traces: Sequence[Trace], k2: int) -> float | None:
    """r(k2) = T(pass, k2 positions per row) / T(pass, 1 position), from any setup that ran both.

    Pooled over setups and batch sizes measured at both k2 and 1 (weighted by
    the smaller sample), so a setup that never ran token speculation (the async
    target on its share of the cores) borrows the factor of one that did.
    Without an exact match, linear in k2 through r(1) = 1 and the measured points.
    """
    return 1.0 if k2 == 1 else _factor(_measured_token_ratios(traces), k2)


def target_latency(timing: Sequence[Trace], every: Sequence[Trace], k2: int) -> Latency:
    """The target's pass latency ``T(batch, tokens)`` for a run with ``k2`` positions per row.

    Rows measured at (batch, k2) on this setup are used as they are; a batch
    measured at only one of (1, k2) gets the other from :func:`token_factor`.
    Falls back to the positions curve (``batch * k2``) when no factor is known.
    """
    own = per_forward_by_batch_k2(timing)
    r = _measured_token_ratios(every)
    factors = {k: _factor(r, k) for k in {k for _, k in own} | {1, k2}}  # r(k), r(1) = 1
    if factors[k2] is None:
        return latency_curve(per_forward_by_positions(timing), "positions")
    rows = []
    for b in sorted({b for b, _ in own}):
        have = {k: sm.mean for (bb, k), sm in own.items() if bb == b and sm.n and sm.mean > 0}
        # T(b, 1): measured, else from a measured T(b, k) / r(k)
        t1m = have.get(1) or next((have[k] / factors[k] for k in sorted(have) if factors[k]), None)
        if t1m is None:
            continue
        tkm = have.get(k2) or t1m * factors[k2]  # T(b, k2) = T(b, 1) r(k2) unless measured
        rows.append((b, t1m, max(tkm, t1m)))
    if not rows:
        raise InputError("no timed target passes in these traces: cannot calibrate a latency")
    rising = len(rows) > 1 and rows[-1][1] >= rows[-2][1]
    tokens = (1.0, float(k2)) if k2 > 1 else (1.0,)
    return GridLatency(tuple(b for b, *_ in rows), tokens,
                       tuple((t1m, tkm)[:len(tokens)] for _, t1m, tkm in rows),
                       extrapolate="linear" if rising else "clamp")


def _group(traces: Sequence[Trace], mode: str) -> list[Trace]:
    """Traces on the hardware share of ``mode``: those of the same mode's setup, else all."""
    same = [t for t in traces if recorded_setting(t.header).mode == mode]
    if not same:
        return list(traces)
    setups = {recorded_setting(t.header).hardware for t in same}
    return [t for t in traces if recorded_setting(t.header).hardware in setups]


@dataclass
class Prediction:
    """Predicted speedup of one setting over target-only decoding."""

    setting: Setting  #: as simulated: verifier calls and hardware share are those the traces recorded
    speedup: float
    speedup_ci95: tuple[float, float] | None
    tokens_per_second: float  #: predicted, in the traces' time unit
    baseline_tokens_per_second: float
    closed_form: float | None  #: the paper's h(k1, k2) with the calibrated alpha1, c1, alpha2
    alpha1: float
    alpha2: float | None
    c1: float | None
    replicates: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


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


def sim_config(behaviour: Calibration, timing: Calibration, setting: Setting, steps: int, seed: int,
               correlation: float = 0.0, target: Latency | None = None, calls: str = "one"):
    """The :class:`lrsim.sim.SimConfig` of ``setting`` on the calibrated workload.

    ``target``: the pass latency (default: ``timing``'s positions curve).  With
    ``k2 > 1`` the drafter speculates tokens too (lrref's default ``draft_ngram``).
    ``calls``: the sync verifier's :func:`verify_calls`.
    """
    if behaviour.alpha1 is None and setting.mode != "ar" and setting.k1 > 1:
        raise InputError("these traces hold no verified drafts: cannot predict an LR configuration")
    if setting.k2 > 1 and behaviour.alpha2 is None:
        raise InputError("these traces hold no token-speculation data: cannot predict k2 > 1")
    if behaviour.target_tokens is None:
        raise InputError("these traces hold no target steps with token counts")
    lengths = Empirical(tuple(behaviour.target_tokens.samples))
    draft_len = Empirical(tuple(behaviour.draft_tokens.samples)) if behaviour.draft_tokens else None
    draft_lat = latency_curve(timing.draft_s_per_token, "batch") if timing.draft_s_per_token else None
    ver = Empirical(tuple(timing.verify_s.samples)) if timing.verify_s and timing.verify_s.n else None
    alpha1 = behaviour.alpha1.p if behaviour.alpha1 is not None else 0.5
    # finite requests: near a request's end a sync cycle or an async stage drafts and writes shortened steps
    # (lrref's max_tokens), and an async stage's look-ahead past the request's last token is thrown away
    rq = behaviour.request_tokens
    finite = setting.mode in ("sync", "async") and setting.width == 1 and rq and rq.n
    requests = Empirical(tuple(rq.samples)) if finite else None
    return SimConfig(
        mode=setting.mode, k1=setting.k1, k2=setting.k2, width=setting.width, correlation=correlation,
        alpha1=alpha1, c1=timing.c1 or 0.5, alpha2=behaviour.alpha2 if behaviour.alpha2 is not None else 0.5,
        c2=TINY_C2, target_latency=target or latency_curve(timing.target_s_per_forward, "positions"),
        draft_latency=draft_lat, draft_sd=setting.k2 > 1, verifier_latency=ver, verify_calls=calls,
        step_tokens=lengths, request_tokens=requests,
        draft_tokens=draft_len, steps=steps, seed=seed,
    )


def _once(memo: dict, key, make):
    """``memo[key]``, computed by ``make()`` the first time."""
    if key not in memo:
        memo[key] = make()
    return memo[key]


def _point(traces: Sequence[Trace], setting: Setting, steps: int, seed: int, correlation: float,
           memo: dict | None = None) -> tuple:
    """(speedup, seconds per token, baseline seconds per token, behaviour, timing, peak positions).

    ``memo``: a dict kept across calls on the *same* traces (the candidates of a
    plan) so that their calibrations and the baseline run are computed once.
    """
    memo = {} if memo is None else memo
    once = partial(_once, memo)
    behaviour = once("behaviour", lambda: calibrate(traces))
    group, base_group = _group(traces, setting.mode), _group(traces, "ar")
    timing = once(("timing", setting.mode), lambda: calibrate(group))
    target = once(("latency", setting.mode, setting.k2), lambda: target_latency(group, traces, setting.k2))
    run = simulate(sim_config(behaviour, timing, setting, steps, seed, correlation, target,
                              once("calls", lambda: verify_calls(traces))))
    base = once(("baseline", steps, seed), lambda: simulate(sim_config(
        behaviour, once(("timing", "ar"), lambda: calibrate(base_group)), Setting("ar", 1, 1), steps, seed,
        target=once(("latency", "ar", 1), lambda: target_latency(base_group, traces, 1)))))
    spt, base_spt = run.sim_time / run.output_tokens, base.sim_time / base.output_tokens
    return base_spt / spt, spt, base_spt, behaviour, timing, run.peak_positions


def resample_blocks(traces: Sequence[Trace], rng: np.random.Generator) -> list[Trace]:
    """Each trace with its (request, cycle) blocks drawn with replacement (renumbered cycles)."""
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
        out.append(Trace(t.path, t.header, steps, t.requests, []))
    return out


def predict(traces: Sequence[Trace], setting: Setting, steps: int = 20_000, seed: int = 0,
            bootstrap: int = 20, correlation: float = 0.0, progress: bool = False) -> Prediction:
    """Predicted speedup of ``setting`` on the workload the traces recorded.

    Only the mode, ``k1``, ``k2`` and width of ``setting`` are asked for: the
    verifier calls and the timing's hardware share come from the traces.
    """
    from tqdm.auto import tqdm

    sp, spt, base_spt, behaviour, timing, _ = _point(traces, setting, steps, seed, correlation)
    rng = np.random.default_rng(seed)
    reps = []
    for i in tqdm(range(bootstrap), desc="bootstrap", disable=not progress, leave=False):
        reps.append(_point(resample_blocks(traces, rng), setting, max(steps // 4, 2000), seed + 1 + i, correlation)[0])
    ci = (float(np.quantile(reps, 0.025)), float(np.quantile(reps, 0.975))) if len(reps) >= 10 else None
    notes = []
    if not any(recorded_setting(t.header).mode == setting.mode for t in traces):
        notes.append(f"no {setting.mode} trace: timing borrowed from the other modes' hardware share")
    closed = None
    if behaviour.alpha1 is not None and timing.c1 and 0 < behaviour.alpha1.p < 1:
        a2 = behaviour.alpha2 if setting.k2 > 1 else 0.5
        f_mode = "async" if setting.mode == "async" else "sync"
        closed = float(theory.h(behaviour.alpha1.p, timing.c1, setting.k1, a2, TINY_C2, setting.k2, f_mode))
    return Prediction(_as_simulated(traces, setting), float(sp), ci, 1 / spt, 1 / base_spt, closed,
                      behaviour.alpha1.p if behaviour.alpha1 else math.nan, behaviour.alpha2, timing.c1,
                      len(reps), notes)


def _as_simulated(traces: Sequence[Trace], setting: Setting) -> Setting:
    """``setting`` with what replay simulates it with: the recorded verifier calls (sync) and hardware share(s)."""
    hardware = sorted({recorded_setting(t.header).hardware for t in _group(traces, setting.mode)})
    calls = verify_calls(traces) if setting.mode == "sync" else "one"
    return replace(setting, verify_calls=calls, hardware=",".join(hardware))


def predict_files(paths: Sequence[str], setting: Setting | None = None, **kw) -> tuple[Prediction, list[str]]:
    """Read traces and predict ``setting`` (default: the first trace's own configuration)."""
    traces = [read_trace(p) for p in paths]
    warnings = [w for t in traces for w in t.warnings]
    return predict(traces, setting or recorded_setting(traces[0].header), **kw), warnings


def format_prediction(p: Prediction) -> str:
    s = p.setting
    ci = f" (95% CI {p.speedup_ci95[0]:.3f}-{p.speedup_ci95[1]:.3f}, {p.replicates} bootstrap replicates)" \
        if p.speedup_ci95 else ""
    lines = [
        f"Replay: mode {s.mode}, k1 = {s.k1}, k2 = {s.k2}, W = {s.width}",
        f"  predicted speedup over target-only decoding: {p.speedup:.3f}x{ci}",
        f"  predicted {p.tokens_per_second:.3g} tokens per time unit vs baseline {p.baseline_tokens_per_second:.3g}",
        f"  calibrated alpha1 = {p.alpha1:.3f}" + (f", alpha2 = {p.alpha2:.3f}" if p.alpha2 is not None else "")
        + (f", c1 = {p.c1:.3f}" if p.c1 else ""),
    ]
    if p.closed_form is not None:
        lines.append(f"  paper closed form h(k1, k2) with these numbers: {p.closed_form:.3f}x "
                     "(free verifier, constant step cost and latency)")
    lines += [f"  note: {n}" for n in p.notes]
    return "\n".join(lines)


@dataclass
class TracePlan:
    """Best recorded-workload configuration under a budget, and how the closed-form plan compares."""

    budget: int
    best: Prediction
    ranked: list[dict]  #: every candidate: mode, k1, k2, width, positions, speedup
    closed_form_plan: dict  #: lrsim.planner.plan with the calibrated alpha1, c1, alpha2 (per mode)
    closed_form_choice_simulated: dict  #: the closed-form optimum's (mode, k1, k2) priced by the simulator
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        b = self.best
        d.update(mode=b.setting.mode, k1=b.setting.k1, k2=b.setting.k2, width=b.setting.width,
                 speedup=b.speedup, speedup_ci95=b.speedup_ci95)
        return d


def candidates(budget: int, k2_options: Sequence[int], widths: Sequence[int] = (1,)) -> list[Setting]:
    """Every (mode, k1, k2, W) worth simulating: sync needs ``k1 k2 <= M``; async ``k2 <= M`` and
    ``k1 <= M`` (its positions in use depend on the drafter's pace, so the simulator's peak decides)."""
    out = [Setting("ar", 1, k2) for k2 in k2_options if k2 <= budget]
    for k1 in range(2, budget + 1):
        out += [Setting("sync", k1, k2, w) for k2 in k2_options for w in widths if k1 * k2 <= budget]
        out += [Setting("async", k1, k2, w) for k2 in k2_options for w in widths if k2 <= budget]
    return out


def plan_from_traces(traces: Sequence[Trace], budget: int, k2_max: int = 8, steps: int = 4000, seed: int = 0,
                     bootstrap: int = 20, progress: bool = False) -> TracePlan:
    """Rank every configuration under ``budget`` by simulated speedup on the recorded workload.

    Candidates are simulated with ``steps`` output steps each (common random
    numbers) and kept if the simulated peak of target positions in use fits
    the budget; the winner is re-run with more steps and a bootstrap interval.
    """
    from tqdm.auto import tqdm

    behaviour = calibrate(traces)
    notes = []
    k2_options = list(range(1, k2_max + 1)) if behaviour.alpha2 is not None else [1]
    if behaviour.alpha2 is None:
        notes.append("no trace ran token speculation: k2 = 1 only")
    if behaviour.alpha1 is None:
        raise InputError("these traces hold no verified drafts: cannot plan LR")
    ranked, memo = [], {"behaviour": behaviour}
    for s in tqdm(candidates(budget, k2_options), desc="candidates", disable=not progress, leave=False):
        sp, *_, peak = _point(traces, s, steps, seed, 0.0, memo)
        if peak <= budget:  # positions the run really held at once
            ranked.append({"mode": s.mode, "k1": s.k1, "k2": s.k2, "width": s.width, "positions": peak,
                           "speedup": sp})
    ranked.sort(key=lambda r: -r["speedup"])
    top = ranked[0]
    best = predict(traces, Setting(top["mode"], top["k1"], top["k2"], top["width"]), steps=steps * 4, seed=seed,
                   bootstrap=bootstrap, progress=progress)
    cf, csim = closed_form_plan(traces, budget, steps, seed, memo)
    return TracePlan(budget, best, ranked, cf, csim, notes)


def closed_form_plan(traces: Sequence[Trace], budget: int, steps: int = 4000, seed: int = 0,
                     memo: dict | None = None) -> tuple[dict, dict]:
    """The paper's plan (:func:`lrsim.planner.plan`) on the calibrated alpha1, c1, alpha2, and its choice priced.

    Returns ``({mode: {k1, k2, speedup}} for sync and async, {mode, k1, k2,
    simulated_speedup, closed_form_speedup})``: the closed forms' best
    configuration and the speedup the simulator gives it on the recorded workload.  ``memo``: as for
    :func:`_point` (calibrations of these traces already made).
    """
    from .planner import plan

    memo = {} if memo is None else memo
    behaviour = _once(memo, "behaviour", lambda: calibrate(traces))
    if behaviour.alpha1 is None:
        raise InputError("these traces hold no verified drafts: cannot plan LR")
    a2 = behaviour.alpha2 if behaviour.alpha2 is not None else 0.5
    cf = {}
    for mode in LR_MODES:
        timing = _once(memo, ("timing", mode), lambda m=mode: calibrate(_group(traces, m)))
        p = plan(min(max(behaviour.alpha1.p, 1e-6), 1 - 1e-6), timing.c1 or 0.5, min(max(a2, 1e-6), 1 - 1e-6),
                 TINY_C2, budget, mode)
        cf[mode] = {"k1": p.k1, "k2": p.k2 if behaviour.alpha2 is not None else 1, "speedup": p.speedup}
    cmode = max(cf, key=lambda m: cf[m]["speedup"])
    cset = Setting(cmode, cf[cmode]["k1"], cf[cmode]["k2"])
    csim = {"mode": cmode, "k1": cset.k1, "k2": cset.k2, "simulated_speedup": _point(traces, cset, steps, seed, 0.0, memo)[0],
            "closed_form_speedup": cf[cmode]["speedup"]}
    return cf, csim


def format_trace_plan(tp: TracePlan, top: int = 10, source: str = "traces") -> str:
    lines = [f"Plan from {source}, budget M = {tp.budget} target positions", format_prediction(tp.best), "",
             "  rank  mode   k1  k2  W  positions  simulated speedup"]
    lines += [f"  {i:4d}  {r['mode']:5s} {r['k1']:3d} {r['k2']:3d} {r['width']:2d} {r['positions']:10d}  {r['speedup']:.3f}x"
              for i, r in enumerate(tp.ranked[:top], 1)]
    c = tp.closed_form_choice_simulated
    lines += ["", f"  closed-form plan (paper assumptions): {c['mode']} k1 = {c['k1']}, k2 = {c['k2']} promises "
              f"{c['closed_form_speedup']:.3f}x; the simulator gives it {c['simulated_speedup']:.3f}x "
              f"(best found: {tp.best.speedup:.3f}x)"]
    lines += [f"  note: {n}" for n in tp.notes]
    return "\n".join(lines)
