"""Fit the simulator's parameters from traces (the lr-trace format of :mod:`lrsim.trace`).

From one or more traces this estimates what the theory and the simulator
need, each with its uncertainty, and tests the theory's assumptions on the
data:

- step acceptance ``alpha1``: share of verified drafts the verifier accepted
  (first branch), overall, per lookahead position and after an accepted /
  rejected previous position, with Wilson 95% intervals;
- token acceptance ``alpha2`` of n-gram SD inside steps: solved from the
  tokens per target forward pass, ``E[tokens/pass] = (1 - a^k2)/(1 - a)``
  (the numerator of ``g``), and the raw share of drafted tokens accepted;
- timing: target and draft seconds per token by batch size (the latency
  curve ``T(b)``), ``c1`` = draft/target time per token at batch 1, verifier
  latency distribution, step-length distributions;
- assumption tests: acceptance independent of position (chi-square test of
  homogeneity), of the previous decision (chi-square on the 2x2 table), and
  whether a step's cost is constant (coefficient of variation of step time,
  and how much of it token counts explain);
- step acceptance by verifier (the run's verifier and threshold from each
  trace's header, token-identical drafts counted as accepted), and, when the
  request records carry ``correct`` (``lrref bench`` writes it), the answers'
  quality per trace: accuracy (Wilson 95%), requests that hit the token cap,
  and the paired comparison against the ``ar`` trace among them (lost /
  gained, exact McNemar p) so a plan can be read beside what it costs.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..cost.fromtraces import spec_fill
from ..errors import InputError
from ..modes import NGRAM_SUFFIX, REGISTRY
from ..stats import paired_outcomes, ratio_of_means, wilson
from ..theory.forms import expected_kept
from ..trace import Setting, StepRecord, Trace, mode_name, read_trace, recorded_setting


@dataclass(frozen=True)
class Proportion:
    """``k`` successes out of ``n`` with a Wilson 95% interval."""

    k: int
    n: int
    p: float
    lo: float
    hi: float

    @classmethod
    def of(cls, k: int, n: int) -> "Proportion":
        if n == 0:
            return cls(0, 0, math.nan, 0.0, 1.0)
        return cls(k, n, k / n, *wilson(k, n))


@dataclass(frozen=True)
class Summary:
    """Mean, spread and quantiles of a sample (the sample itself kept for bootstrap/replay)."""

    n: int
    mean: float
    std: float
    p10: float
    p50: float
    p90: float
    samples: tuple[float, ...] = field(repr=False, default=())

    @classmethod
    def of(cls, xs: Iterable[float], keep: bool = True) -> "Summary":
        a = np.asarray([x for x in xs if x is not None], dtype=float)
        if a.size == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        q = np.quantile(a, [0.1, 0.5, 0.9])
        return cls(int(a.size), float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0,
                   float(q[0]), float(q[1]), float(q[2]), tuple(a.tolist()) if keep else ())


@dataclass(frozen=True)
class Quality:
    """The answers of one trace whose request records carry ``correct``.

    ``accuracy``: right answers among the checked requests (Wilson 95%); ``capped``: requests that stopped at
    the token cap (their answer may be cut off); ``vs_ar``: paired against the ``ar`` trace given beside it
    (same request indices, same prompt lengths): ``n`` shared requests, ``lost`` (ar right, this wrong),
    ``gained``, exact McNemar ``p_value``; None for ``ar`` itself or without a matching ``ar`` trace.
    """

    trace: str
    run: str  #: mode and verifier, e.g. "lr-async, embedding 0.85"
    accuracy: Proportion
    capped: int
    vs_ar: dict | None = None


@dataclass
class Calibration:
    """Everything fitted from the traces (``None`` where the traces hold no evidence)."""

    traces: list[str]
    modes: list[str]
    config: dict
    steps: int
    requests: int
    alpha1: Proportion | None
    alpha1_by_position: list[Proportion]
    alpha1_after_accept: Proportion | None
    alpha1_after_reject: Proportion | None
    alpha2: float | None
    alpha2_ci95: tuple[float, float] | None
    ngram_token_acceptance: Proportion | None
    tokens_per_forward: Summary | None
    k2: int | None  #: largest k2 among the traces with token speculation
    target_s_per_token: dict[int, Summary]
    draft_s_per_token: dict[int, Summary]
    target_s_per_forward: dict[int, Summary]  #: by positions = batch x k2
    settings: list[Setting]  #: per trace, in simulator terms (:func:`lrsim.trace.recorded_setting`)
    c1: float | None
    c1_ci95: tuple[float, float] | None
    verify_s: Summary | None
    draft_tokens: Summary | None
    target_tokens: Summary | None
    assumptions: dict
    warnings: list[str]
    request_tokens: Summary | None = None  #: output tokens per finished request (cap or EOS)
    spec_fill: float | None = None  #: share of the k2 - 1 speculative positions proposed per target pass
    overlap_accepted: Summary | None = None  #: share of a draft step its target step repeats from its start (kept)
    overlap_rejected: Summary | None = None  #: the same for rejected drafts (needs step texts: log_text)
    #: share of each prompt already in KV at a request's first pass (:func:`prompt_kv`): 'ar' (the baseline's
    #: target), 'target' (the other traces' target), 'draft'; only those the pass records show
    prompt_cached: dict[str, float] = field(default_factory=dict)
    alpha1_by_verifier: dict[str, Proportion] = field(default_factory=dict)  #: by :func:`verifier_label`
    quality: list[Quality] = field(default_factory=list)  #: per trace whose requests carry ``correct``

    def to_dict(self, samples: bool = False) -> dict:
        d = asdict(self)
        if not samples:
            _drop_samples(d)
        return d


def _drop_samples(obj) -> None:
    if isinstance(obj, dict):
        obj.pop("samples", None)
        for v in obj.values():
            _drop_samples(v)
    elif isinstance(obj, list):
        for v in obj:
            _drop_samples(v)


def _verified(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """First-branch drafts with a verifier decision that were not cancelled."""
    return [s for s in steps if s.decision is not None and not s.cancelled and (s.branch or 0) == 0]


def _dur(s: StepRecord, lane: str) -> float | None:
    a, b = getattr(s, f"{lane}_start"), getattr(s, f"{lane}_end")
    return None if a is None or b is None else b - a


def acceptance(steps: Sequence[StepRecord]) -> tuple[Proportion | None, list[Proportion], dict]:
    """alpha1 overall, per position, and conditional on the previous position's decision."""
    v = _verified(steps)
    if not v:
        return None, [], {}
    overall = Proportion.of(sum(bool(s.decision) for s in v), len(v))
    by_pos: dict[int, list[bool]] = {}
    for s in v:
        by_pos.setdefault(s.position, []).append(bool(s.decision))
    per = [Proportion.of(sum(d), len(d)) for _, d in sorted(by_pos.items())]
    prev: dict[tuple[int, int, int], bool] = {(s.request, s.cycle, s.position): bool(s.decision) for s in v}
    after = {True: [0, 0], False: [0, 0]}
    for (r, c, p), d in prev.items():
        if (r, c, p - 1) in prev:
            after[prev[(r, c, p - 1)]][0] += d
            after[prev[(r, c, p - 1)]][1] += 1
    cond = {"after_accept": Proportion.of(*after[True]), "after_reject": Proportion.of(*after[False])}
    return overall, per, cond


def _chi2_homogeneity(props: Sequence[Proportion]) -> float | None:
    """p-value of a chi-square test that all proportions are equal (None if too little data)."""
    rows = [(p.k, p.n - p.k) for p in props if p.n > 0]
    if len(rows) < 2:
        return None
    table = np.array(rows, dtype=float)
    if (table.sum(axis=0) == 0).any():
        return 1.0
    from scipy import stats  # here, not at import: a plan from a hardware spec never needs SciPy

    return float(stats.chi2_contingency(table, correction=False)[1])


def solve_alpha(tokens_per_pass: float, k: int) -> float | None:
    """Solve ``(1 - a^k)/(1 - a) = t`` for ``a`` in (0, 1) (``t`` in (1, k)): the token acceptance."""
    return solve_alpha_pooled([(1.0, tokens_per_pass, k)])


def solve_alpha_pooled(groups: Sequence[tuple[float, float, int]]) -> float | None:
    """One ``a`` for passes at several ``k``: ``sum_g F_g (1 - a^k_g)/(1 - a) = sum_g T_g``.

    ``groups`` holds ``(passes F_g, tokens T_g, k_g)``; with one group this is
    ``(1 - a^k)/(1 - a) = T/F``.  None when the tokens are outside what
    ``a`` in (0, 1) can give.
    """
    F = sum(f for f, _, _ in groups)
    T = sum(t for _, t, _ in groups)
    lo, hi = F, sum(f * k for f, _, k in groups)  # a -> 0 gives one token per pass, a -> 1 gives k
    if not (lo < T < hi):
        return None
    expected = lambda a: sum(f * expected_kept(a, k) for f, _, k in groups) - T  # noqa: E731 - increasing in a
    from scipy import optimize

    return float(optimize.brentq(expected, 1e-12, 1 - 1e-12))


def common_prefix_share(draft: str, target: str) -> float:
    """Share of ``draft``'s characters that ``target`` repeats from its start (0 for an empty draft)."""
    return len(os.path.commonprefix([draft, target])) / len(draft) if draft else 0.0


def step_overlap(steps: Sequence[StepRecord]) -> tuple[Summary | None, Summary | None]:
    """(accepted, rejected): per verified draft whose trace logged both texts, the share of the draft the target's
    step at its position repeats from its start (characters; a proxy for tokens)."""
    by: dict[bool, list[float]] = {True: [], False: []}
    for s in _verified(steps):
        if s.draft_text is not None and s.target_text is not None:
            by[bool(s.decision)].append(common_prefix_share(s.draft_text, s.target_text))
    return tuple(Summary.of(v) if v else None for v in (by[True], by[False]))


def baseline_trace(trace: Trace) -> bool:
    """Target-only decoding without token speculation (``ar``, ``k2 = 1``): what replay's speedups are over."""
    st = recorded_setting(trace.header)
    return st.mode == "ar" and st.k2 == 1


def prompt_cached(traces: Sequence[Trace], engine: str = "target") -> float | None:
    """Share of a request's prompt ``engine`` ('target' or 'draft') already held in its KV at the request's first
    forward pass, pooled over the requests of ``traces``: ``sum min(c, P - 1) / sum (P - 1)``, ``c`` the context
    of that pass (its mean over rows) and ``P`` the prompt's tokens.  The prompt's last token does not count: the
    first decode pass feeds it anyway.  0: the engine prefilled every prompt; 1: it found every prompt in KV
    another run of the same request left (lrref's bench runs the modes of a problem one after another on one
    engine).  From pass records (lrref's llama.cpp and hf backends); None without any."""
    num = den = 0.0
    for t in traces:
        first: dict[int, object] = {}
        for p in getattr(t, "passes", None) or ():
            if p.engine != engine or not p.requests:
                continue
            for r in p.requests:
                if r not in first or p.start < first[r].start:
                    first[r] = p
        for req in t.requests:
            p = first.get(req.request)
            if p is not None and req.prompt_tokens and req.prompt_tokens > 1:
                num += min(float(p.context), req.prompt_tokens - 1)
                den += req.prompt_tokens - 1
    return num / den if den else None


def prompt_kv(traces: Sequence[Trace]) -> dict[str, float]:
    """:func:`prompt_cached` for the roles a prediction prices apart: ``ar`` (the target of the baseline traces,
    :func:`baseline_trace`), ``target`` (the target of every other trace) and ``draft``; a role no pass record
    shows is left out."""
    base = [t for t in traces if baseline_trace(t)]
    other = [t for t in traces if not baseline_trace(t)]
    out = {"ar": prompt_cached(base), "target": prompt_cached(other), "draft": prompt_cached(traces, "draft")}
    return {k: v for k, v in out.items() if v is not None}


def token_acceptance(traces: Sequence[Trace]):
    """alpha2 from tokens per forward pass of the traces that ran token speculation (k2 > 1).

    Tokens per pass are ``(ngram_accepted + forwards) / forwards`` (each pass
    yields its accepted drafts plus one target token), which is not biased by
    the pass cut short at a step boundary; without n-gram counts,
    ``target_tokens / forwards``.  Traces with different ``k2`` are pooled by
    :func:`solve_alpha_pooled`; the 95% CI bootstraps steps.
    Returns ``(alpha2, ci95, drafted-token acceptance share, tokens-per-pass summary, k2 values)``.
    """
    rows: list[tuple[int, StepRecord]] = []
    for t in traces:
        k2 = recorded_setting(t.header).k2
        if k2 > 1:
            rows += [(k2, s) for s in t.steps if s.target_forwards and s.target_tokens and not s.cancelled]
    if not rows:
        return None, None, None, None, []
    drafted = sum(s.ngram_drafted or 0 for _, s in rows)
    share = Proportion.of(sum(s.ngram_accepted or 0 for _, s in rows), drafted) if drafted else None
    k = np.array([k2 for k2, _ in rows])
    fwd = np.array([s.target_forwards for _, s in rows], dtype=float)
    tok = np.array([(s.ngram_accepted + s.target_forwards) if s.ngram_accepted is not None else s.target_tokens
                    for _, s in rows], dtype=float)
    ks = sorted(set(k.tolist()))

    def solve(i: np.ndarray) -> float | None:
        return solve_alpha_pooled([(fwd[i][k[i] == g].sum(), tok[i][k[i] == g].sum(), g) for g in ks])

    est = solve(np.arange(len(rows)))
    rng = np.random.default_rng(0)
    boots = [b for b in (solve(rng.integers(0, len(rows), len(rows))) for _ in range(400)) if b is not None]
    ci = (float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))) if len(boots) > 20 else None
    return est, ci, share, Summary.of(tok / fwd), ks


def _ratio_summary(pairs: list[tuple[float, float]]) -> Summary:
    """Summary of per-step ``time / count`` whose ``mean`` is the ratio estimator ``sum(time) / sum(count)``.

    A step pays a fixed part (prefill, call overhead) besides its per-token
    part, so short steps cost more per token; the mean of per-step ratios would
    overcharge a simulator that multiplies a per-token cost by sampled lengths.
    The ratio of sums makes the simulated totals match the recorded ones.
    """
    s = Summary.of(d / n for d, n in pairs)
    return replace(s, mean=sum(d for d, _ in pairs) / sum(n for _, n in pairs)) if s.n else s


def per_token_by_batch(steps: Sequence[StepRecord], lane: str) -> dict[int, Summary]:
    """Seconds per token of ``lane`` ('draft' or 'target') grouped by the call's batch size (ratio mean)."""
    groups: dict[int, list[tuple[float, float]]] = {}
    for s in steps:
        d, n, b = _dur(s, lane), getattr(s, f"{lane}_tokens"), getattr(s, f"{lane}_batch")
        if d is None or not n or s.cancelled:
            continue
        groups.setdefault(int(b or 1), []).append((d, n))
    return {b: _ratio_summary(v) for b, v in sorted(groups.items())}


def _target_passes(traces: Sequence[Trace]) -> Iterator[tuple[int, int, float, int]]:
    """(batch, k2, seconds, forward passes) of every timed, finished target step."""
    for t in traces:
        k2 = recorded_setting(t.header).k2
        for s in t.steps:
            d = _dur(s, "target")
            if d is not None and s.target_forwards and not s.cancelled:
                yield int(s.target_batch or 1), k2, d, s.target_forwards


def per_forward_by_batch_k2(traces: Sequence[Trace]) -> dict[tuple[int, int], Summary]:
    """Target seconds per forward pass keyed by (batch, k2): rows in the pass and positions per row.

    A CPU (or GPU) does not price a pass by ``batch * k2`` alone: an extra row
    costs its own attention over a whole prefix, an extra speculative token in a
    row much less.  Pass traces of one hardware share (``Setting.hardware``).
    """
    groups: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for b, k2, d, forwards in _target_passes(traces):
        groups.setdefault((b, k2), []).append((d, forwards))
    return {key: _ratio_summary(v) for key, v in sorted(groups.items())}


def per_forward_by_positions(traces: Sequence[Trace]) -> dict[int, Summary]:
    """Target seconds per forward pass, keyed by positions in the pass (batch x k2 of the trace).

    The one-axis curve ``tau(positions)``; :mod:`lrsim.prediction.replay` prefers the
    separable ``T(batch, k2)`` built from :func:`per_forward_by_batch_k2`.
    """
    groups: dict[int, list[tuple[float, float]]] = {}
    for b, k2, d, forwards in _target_passes(traces):
        groups.setdefault(b * k2, []).append((d, forwards))
    return {x: _ratio_summary(v) for x, v in sorted(groups.items())}


def step_cost_test(steps: Sequence[StepRecord]) -> dict:
    """Is a target step's cost constant?  CV of step time, and R^2 of time ~ tokens (batch 1-2 calls)."""
    rows = [(_dur(s, "target"), s.target_tokens) for s in steps
            if _dur(s, "target") is not None and s.target_tokens and not s.cancelled]
    if len(rows) < 3:
        return {}
    t = np.array([r[0] for r in rows])
    n = np.array([r[1] for r in rows], dtype=float)
    cv = float(t.std(ddof=1) / t.mean())
    r2 = float(np.corrcoef(t, n)[0, 1] ** 2) if n.std() > 0 and t.std() > 0 else 0.0
    return {"target_step_time_cv": cv, "r2_time_vs_tokens": r2,
            "constant_step_cost": bool(cv < 0.2),
            "reading": "step time varies mostly with its token count" if r2 > 0.5 else
            "token count explains little of the step time"}


def _summary_or_none(xs: list) -> Summary | None:
    return Summary.of(xs) if xs else None


def verifier_label(trace: Trace) -> str | None:
    """The run's verifier as the header records it (``config.verifier``): e.g. ``embedding 0.85``,
    ``exact-strict``, ``math 0.85``; None for a mode without one, or a header without it."""
    mode = REGISTRY.get(mode_name(trace.header).removesuffix(NGRAM_SUFFIX))
    if mode is not None and not mode.verifier:
        return None
    v = (trace.header.config or {}).get("verifier")
    if not isinstance(v, dict) or not v.get("name"):
        return None
    name, t = v["name"], v.get("threshold_used", v.get("threshold"))
    if name == "exact":
        return "exact" if v.get("normalize", True) else "exact-strict"
    return name if t is None else f"{name} {t:g}"


def acceptance_by_verifier(traces: Sequence[Trace]) -> dict[str, Proportion]:
    """Step acceptance per run verifier (:func:`verifier_label`; traces without one are left out), pooled over
    the traces of each; token-identical drafts count as accepted, as in ``alpha1``."""
    groups: dict[str, list[int]] = {}
    for t in traces:
        label = verifier_label(t)
        v = _verified(t.steps)
        if label is not None and v:
            kn = groups.setdefault(label, [0, 0])
            kn[0] += sum(bool(s.decision) for s in v)
            kn[1] += len(v)
    return {k: Proportion.of(*kn) for k, kn in sorted(groups.items())}


def _outcomes(t: Trace) -> dict[int, bool] | None:
    """Request -> answer right, when every request record of the trace carries ``correct``."""
    if not t.requests or any(r.correct is None for r in t.requests):
        return None
    return {r.request: bool(r.correct) for r in t.requests}


def _same_prompts(a: Trace, b: Trace) -> bool:
    """The shared request indices hold prompts of the same lengths (the same problems, as far as a trace tells)."""
    pa, pb = ({r.request: r.prompt_tokens for r in t.requests} for t in (a, b))
    shared = set(pa) & set(pb)
    return bool(shared) and all(pa[i] == pb[i] for i in shared)


def answer_quality(traces: Sequence[Trace]) -> tuple[list[Quality], list[str]]:
    """:class:`Quality` of every trace whose requests carry ``correct``, paired against the ``ar`` trace among
    them whose prompts match; and warnings (an ``ar`` trace on other problems)."""
    checked = [(t, o) for t in traces if (o := _outcomes(t)) is not None]
    ars = [(t, o) for t, o in checked if mode_name(t.header) == "ar"]
    out, warnings = [], []
    for t, o in checked:
        run = ", ".join(x for x in (mode_name(t.header), verifier_label(t)) if x)
        vs = None
        match = next(((a, ao) for a, ao in ars if a is not t and _same_prompts(t, a)), None)
        if match is not None:
            p = paired_outcomes(o, match[1])
            vs = {"ar_trace": match[0].path, "n": p.n, "lost": p.lost, "gained": p.gained, "p_value": p.p_value}
        elif ars and mode_name(t.header) != "ar":
            warnings.append(f"{t.path}: no ar trace on the same problems (prompt lengths differ): not paired")
        out.append(Quality(t.path, run, Proportion.of(sum(o.values()), len(o)),
                           sum(r.finish == "max_tokens" for r in t.requests), vs))
    return out, warnings


def calibrate(traces: Sequence[Trace]) -> Calibration:
    """Fit every parameter from already-read traces."""
    if not traces:
        raise InputError("no traces given")
    steps = [s for t in traces for s in t.steps]
    overall, per, cond = acceptance(steps)
    overlap = step_overlap(steps)
    a2, a2ci, share, tpf, k2s = token_acceptance(traces)
    k2 = max(k2s) if k2s else None
    tgt, drf = per_token_by_batch(steps, "target"), per_token_by_batch(steps, "draft")
    common = sorted(set(tgt) & set(drf))  # c1: draft / target seconds per token at the smallest common batch
    c1, c1ci = ratio_of_means(drf[common[0]], tgt[common[0]]) if common else (None, None)
    ver = [_dur(s, "verify") for s in steps if _dur(s, "verify") is not None and not s.cancelled]
    assumptions: dict = {}
    if per:
        p = _chi2_homogeneity(per)
        assumptions["acceptance_independent_of_position"] = {
            "p_value": p, "verdict": None if p is None else ("not rejected" if p >= 0.05 else "rejected at 5%")}
    if cond:
        p = _chi2_homogeneity([cond["after_accept"], cond["after_reject"]])
        assumptions["acceptance_independent_of_previous_decision"] = {
            "p_value": p, "verdict": None if p is None else ("not rejected" if p >= 0.05 else "rejected at 5%")}
    assumptions["step_cost"] = step_cost_test(steps)
    if len(tgt) >= 2:
        b = sorted(tgt)
        assumptions["batch_cost_growth"] = {
            "target_s_per_token_ratio_largest_vs_smallest_batch": tgt[b[-1]].mean / tgt[b[0]].mean,
            "batches": b}
    quality, qwarn = answer_quality(traces)
    return Calibration(
        traces=[t.path for t in traces], modes=sorted({t.header.mode for t in traces}),
        config=traces[0].header.config, steps=len(steps), requests=sum(len(t.requests) for t in traces),
        alpha1=overall, alpha1_by_position=per,
        alpha1_after_accept=cond.get("after_accept"), alpha1_after_reject=cond.get("after_reject"),
        alpha2=a2, alpha2_ci95=a2ci, ngram_token_acceptance=share, tokens_per_forward=tpf, k2=k2,
        target_s_per_token=tgt, draft_s_per_token=drf, c1=c1, c1_ci95=c1ci,
        target_s_per_forward=per_forward_by_positions(traces), settings=[recorded_setting(t.header) for t in traces],
        verify_s=_summary_or_none(ver),
        draft_tokens=_summary_or_none([s.draft_tokens for s in steps if s.draft_tokens]),
        target_tokens=_summary_or_none([s.target_tokens for s in steps if s.target_tokens]),
        assumptions=assumptions, warnings=[w for t in traces for w in t.warnings] + qwarn,
        request_tokens=_summary_or_none([r.output_tokens for t in traces for r in t.requests if r.output_tokens]),
        spec_fill=spec_fill(traces), alpha1_by_verifier=acceptance_by_verifier(traces), quality=quality,
        prompt_cached=prompt_kv(traces),
        overlap_accepted=overlap[0], overlap_rejected=overlap[1],
    )


def calibrate_files(paths: Sequence[str]) -> Calibration:
    """Read the traces (raises :class:`lrsim.trace.TraceError` for unreadable ones) and fit."""
    return calibrate([read_trace(p) for p in paths])


def _fmt_prop(p: Proportion | None) -> str:
    return "n/a" if p is None or p.n == 0 else f"{p.p:.3f} [{p.lo:.3f}, {p.hi:.3f}] ({p.k}/{p.n})"


def format_calibration(c: Calibration) -> str:
    lines = [f"Calibration from {len(c.traces)} trace(s), modes {', '.join(c.modes)}: "
             f"{c.steps} step records, {c.requests} requests"]
    lines.append(f"  alpha1 (step acceptance): {_fmt_prop(c.alpha1)}")
    for i, p in enumerate(c.alpha1_by_position):
        lines.append(f"    position {i}: {_fmt_prop(p)}")
    lines.append(f"    after an accepted position: {_fmt_prop(c.alpha1_after_accept)}")
    lines.append(f"    after a rejected position:  {_fmt_prop(c.alpha1_after_reject)}")
    if c.alpha2 is not None:
        ci = f" [{c.alpha2_ci95[0]:.3f}, {c.alpha2_ci95[1]:.3f}]" if c.alpha2_ci95 else ""
        lines.append(f"  alpha2 (token acceptance, from tokens per pass of the k2 > 1 traces): {c.alpha2:.3f}{ci}")
    if c.ngram_token_acceptance is not None:
        lines.append(f"  n-gram drafted tokens accepted: {_fmt_prop(c.ngram_token_acceptance)}")
    if c.tokens_per_forward is not None:
        lines.append(f"  target tokens per forward pass: {c.tokens_per_forward.mean:.3f}")
    if c.spec_fill is not None:
        lines.append(f"  speculative positions proposed per pass: {c.spec_fill:.3f} of k2 - 1 (spec_fill)")
    if c.prompt_cached:
        names = {"ar": "ar's target", "target": "the other modes' target", "draft": "the draft"}
        lines.append("  share of each prompt already in KV at a request's first pass (pass records): "
                     + ", ".join(f"{names[k]} {v:.3f}" for k, v in c.prompt_cached.items()))
    for name, sm in (("accepted", c.overlap_accepted), ("rejected", c.overlap_rejected)):
        if sm is not None and sm.n:
            lines.append(f"  share of a {name} draft its target step repeats from its start: mean {sm.mean:.3f}, "
                         f"p50 {sm.p50:.3f} (n={sm.n}, from step texts)")
    for name, tab in (("target", c.target_s_per_token), ("draft", c.draft_s_per_token)):
        if tab:
            row = ", ".join(f"b={b}: {s.mean * 1e3:.1f} ms (n={s.n})" for b, s in tab.items())
            lines.append(f"  {name} time per token by batch: {row}")
    if c.target_s_per_forward:
        row = ", ".join(f"{x}: {s.mean * 1e3:.1f} ms" for x, s in c.target_s_per_forward.items())
        lines.append(f"  target time per forward pass by positions (batch x k2): {row}")
    if c.c1 is not None:
        ci = f" [{c.c1_ci95[0]:.3f}, {c.c1_ci95[1]:.3f}]" if c.c1_ci95 else ""
        lines.append(f"  c1 (draft/target time per token): {c.c1:.3f}{ci}")
    if c.verify_s is not None:
        v = c.verify_s
        lines.append(f"  verifier latency: mean {v.mean * 1e3:.1f} ms, p50 {v.p50 * 1e3:.1f}, p90 {v.p90 * 1e3:.1f} "
                     f"(n={v.n})")
    for name, s in (("draft step", c.draft_tokens), ("target step", c.target_tokens),
                    ("request", c.request_tokens)):
        if s is not None and s.n:
            lines.append(f"  {name} length: mean {s.mean:.1f} tokens, p10 {s.p10:.0f}, p50 {s.p50:.0f}, "
                         f"p90 {s.p90:.0f} (n={s.n})")
    lines += _format_quality(c)
    lines.append("  assumptions:")
    for k, v in c.assumptions.items():
        lines.append(f"    {k}: {json.dumps(v, default=float)}")
    if c.warnings:
        lines.append(f"  {len(c.warnings)} trace line(s) skipped; first: {c.warnings[0]}")
    return "\n".join(lines)


def _format_quality(c: Calibration) -> list[str]:
    """Step acceptance by verifier and the answers' quality, when the traces have them."""
    lines = []
    if c.alpha1_by_verifier:
        lines.append("  alpha1 by verifier: " + "; ".join(f"{k}: {_fmt_prop(p)}"
                                                          for k, p in c.alpha1_by_verifier.items()))
    if c.quality:
        lines.append("  answers (request records with `correct`; accuracy [Wilson 95%]):")
    for q in c.quality:
        vs = q.vs_ar
        paired = "" if not vs else (f"; against ar: lost {vs['lost']}, gained {vs['gained']}, exact McNemar "
                                    f"p = {vs['p_value']:.3g} ({vs['n']} paired)")
        lines.append(f"    {q.run}: {_fmt_prop(q.accuracy)}, {q.capped} at the token cap{paired}")
    return lines
