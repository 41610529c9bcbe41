"""Calibration writes a profile: the recorded engine's pass costs from lr-traces, in the latency-profile format.

Acceptance is behaviour (:mod:`lrsim.prediction.calibrate`); what a pass costs is
timing, and here it becomes a :class:`~lrsim.latency.profile.Profile` like any
measured one, so replaying traces is the same code path as ``--hardware``.

**Setups.**  Passes recorded on different hardware shares are never pooled:
every trace belongs to the setup its header's ``setting.hardware`` names
(lrref: ``threads=2`` for ar, sd and lr-sync; ``threads=1`` for lr-async,
whose draft process has the other core).  Each setup becomes two entries,
``TARGET@SETUP`` and ``DRAFT@SETUP``, and the profile's ``setups`` map says
which one each mode runs on.

**Target: effective cost per pass.**  A recorded target step of ``F`` passes
took ``D`` seconds (start to end: its passes, their prefill of unseen draft
tokens and the engine's per-pass work) in passes of ``b`` rows on average and
``q = k2`` positions per row (the trace's token speculation).  Per setup the
per-pass cost ``y = D / F`` is fitted, weighted by ``F``, as

    T(b, q) = a + c b + d b (q - 1)

(a fixed part, a part per row, a part per speculated position; the form is
bilinear, so the profile's trilinear lookup reproduces it exactly on and
between its grid points).  A setup whose steps do not identify a part (all at
``q = 1``: no ``d``; all at ``b = 1``: no split of ``a`` and ``c``) borrows
that part's ratio to ``c`` (``d / c``, ``a / c``) from the setups that
identify it, pooled by their passes; the notes say which.  Non-negative least
squares, so no part is below zero.

**Draft: cost per pass.**  Draft seconds per drafted token by batch (ratio of
sums: total time over total tokens, a step's fixed part included); with token
speculation inside draft steps (``k2 > 1`` and ``draft_ngram``) a draft pass
writes ``E[tokens/pass]`` tokens, ``(1 - alpha2^k2) / (1 - alpha2)``, so its
pass costs that many per-token costs (the draft's passes are not recorded: the
target's alpha2 is assumed).

The profile is context-free (one context point, the median prompt): per-step
data cannot separate the context's share on these short requests.  Every
value of the grid comes from the fit; the provenance notes give each fit, its
data (steps, passes, batch range) and its weighted residual.

**Pass records** (lr-trace ``pass`` lines, lrref's llama.cpp and hf backends)
give what a step cannot: every forward pass with its rows ``b``, the positions
it fed ``n`` (prefill of unseen drafts or prompt, n-gram proposals), the
context ``L`` and its seconds.  When every trace of a setup has them, that
setup's entries are pure pass costs (:func:`fit_passes`)

    T(L, b, n) = a + c b + g(n) + e n L,   g piecewise linear in n (segments 0-1, 1-2, 2-4, ..., 256-512, 512+)

a fixed cost, a cost per row, a cost per position fed whose slope may change
from segment to segment (a decode reads the weights once; many positions reach
the compute-bound slope, which the prefill passes measure) and one per position
and cached token.  Every part is >= 0, so the cost is positive and never falls
as positions, rows or context grow; where no pass was recorded (between the
decode and prefill ends of a small recording) a small penalty on changes of
slope carries the recorded slopes smoothly across.  Least squares on relative
errors; the profile says ``prefill: "unseen"`` (lrref's per-sequence KV): the
simulator then adds the prefill passes itself, as the engine did, instead of
averaging them in.  The notes give each fit's curve at a few sizes, its
residual and the ranges of positions no pass recorded.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import InputError
from ..latency.profile import SETUP_MODES, ArchProfile, Profile, Provenance
from ..trace import Trace, recorded_setting

GRID_BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
GRID_POSITIONS = (1, 2, 4, 8, 16, 32, 64)
PASS_POSITIONS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
PASS_BATCH = (1, 2, 3, 4, 6, 8, 12, 16)
OUTLIER = 3.0  #: a pass this many times slower than its setup's fit is flagged (another process on the cores?)


@dataclass(frozen=True)
class TargetFit:
    """``T(b, q) = a + c b + d b (q - 1)`` seconds per pass of one setup, and what identified it."""

    setup: str
    a: float
    c: float
    d: float
    steps: int
    passes: int
    batch: tuple[float, float]  #: smallest and largest mean batch of a step
    positions: tuple[float, float]  #: smallest and largest mean positions per row of a step
    residual: float  #: weighted rms of (fit - y) / y over the steps
    borrowed: tuple[str, ...]  #: parts taken from other setups' ratios ('a', 'd')
    outliers: int = 0  #: steps whose cost per pass is more than :data:`OUTLIER` times the fit

    def seconds(self, b: float, q: float) -> float:
        return self.a + self.c * b + self.d * b * (q - 1)  # fixed + per row + per speculated position

    def describe(self) -> str:
        bor = f"; borrowed {' and '.join(self.borrowed)} from other setups' ratios" if self.borrowed else ""
        out = f"; {self.outliers} step(s) over {OUTLIER:g}x the fit (was the machine busy?)" if self.outliers else ""
        return (f"target @{self.setup}: T(b, q) = {1e3 * self.a:.2f} + {1e3 * self.c:.2f} b + {1e3 * self.d:.2f} "
                f"b (q - 1) ms, fitted on {self.steps} steps ({self.passes} passes), mean batch "
                f"{self.batch[0]:.2f}-{self.batch[1]:.2f}, positions {self.positions[0]:.2f}-{self.positions[1]:.2f}, "
                f"weighted rms "
                f"residual {100 * self.residual:.1f}%{bor}{out}")


MACHINE_KEYS = ("cpu_model", "cpu_kind", "cpu_family", "cpu_model_number", "cpus", "gpu", "machine")


def machine_of(trace: Trace) -> dict:
    """What a trace's header says of the machine it ran on (the keys of :data:`MACHINE_KEYS` it has, its CPU flags)."""
    hw = trace.header.hardware or {}
    out = {k: hw[k] for k in MACHINE_KEYS if hw.get(k) is not None}
    if hw.get("cpu_flags") is not None:
        out["cpu_flags"] = tuple(sorted(hw["cpu_flags"]))
    return out


def check_one_machine(traces: Sequence[Trace]) -> None:
    """Pass costs come from one machine, and each setup from one thread layout.

    :raises InputError: two traces whose headers name different machines (CPU model or kind, cores, flags, GPU),
        or two traces of one setup whose pass records ran on different thread counts (one line naming both).
    """
    first = {}
    for t in traces:
        m = machine_of(t)
        for k, v in m.items():
            if k in first and first[k][1] != v:
                other, was = first[k]
                raise InputError(f"traces of different machines in one calibration: {other} has {k} {was!r}, "
                                 f"{t.path} has {v!r}; calibrate each machine's traces on their own")
            first.setdefault(k, (t.path, v))
    threads: dict[tuple[str, str], tuple[str, set]] = {}
    for t in traces:
        for eng in ("target", "draft"):
            mine = {p.threads for p in t.passes if p.engine == eng and p.threads is not None}
            if not mine:
                continue
            key = (setup_of(t), eng)
            if key in threads and threads[key][1] != mine:
                raise InputError(f"setup {key[0]!r}: {key[1]} passes on {sorted(threads[key][1])} thread(s) in "
                                 f"{threads[key][0]} but {sorted(mine)} in {t.path}: these layouts cannot be told "
                                 "apart (record them under different setting.hardware labels)")
            threads.setdefault(key, (t.path, mine))


def setup_of(trace: Trace) -> str:
    """The hardware setup a trace ran on (its setting's ``hardware`` label)."""
    return recorded_setting(trace.header).hardware


def _target_rows(traces: Sequence[Trace]) -> list[tuple[float, float, float, int]]:
    """(mean batch, positions per row and pass, seconds per pass, passes) of every timed, finished target step.

    Positions: ``1 + ngram_drafted / forwards`` (what the passes computed) when the step counts its n-gram
    proposals, else the trace's ``k2``.
    """
    out = []
    for t in traces:
        k2 = recorded_setting(t.header).k2
        for s in t.steps:
            if s.target_start is None or s.target_end is None or not s.target_forwards or s.cancelled:
                continue
            d = s.target_end - s.target_start
            q = 1 + s.ngram_drafted / s.target_forwards if k2 > 1 and s.ngram_drafted is not None else k2
            if d > 0:
                out.append((float(s.target_batch or 1), q, d / s.target_forwards, s.target_forwards))
    return out


def _solve(rows, fixed: dict) -> tuple[np.ndarray, float]:
    """Non-negative weighted least squares of ``y = a + c b + d b (q - 1)`` with parts fixed as ratios to ``c``.

    ``fixed``: ``{'a': a/c, 'd': d/c}`` for the parts not free.  Returns ``(a, c, d)`` and the weighted rms of
    the relative residuals.
    """
    b, q, y, w = (np.array([r[i] for r in rows], float) for i in range(4))
    cols = {"a": np.ones_like(b), "c": b, "d": b * (q - 1)}
    c_col = cols["c"] + sum(ratio * cols[p] for p, ratio in fixed.items())  # fixed parts ride on c
    free = [p for p in ("a", "d") if p not in fixed]
    X = np.column_stack([c_col] + [cols[p] for p in free])
    sw = np.sqrt(w) / y  # relative errors, weighted by passes: sum w ((fit - y) / y)^2
    from scipy import optimize  # here, not at import: only a fit needs SciPy

    sol, _ = optimize.nnls(X * sw[:, None], y * sw)
    coef = {"c": sol[0]} | dict(zip(free, sol[1:]))
    a = coef.get("a", fixed.get("a", 0.0) * coef["c"])
    d = coef.get("d", fixed.get("d", 0.0) * coef["c"])
    fit = a + coef["c"] * b + d * b * (q - 1)
    rms = float(np.sqrt(np.sum(w * ((fit - y) / y) ** 2) / np.sum(w)))
    return np.array([a, coef["c"], d]), rms


def _identifies(rows) -> dict[str, bool]:
    """Which parts the steps identify: ``a`` needs more than one batch size, ``d`` both q = 1 and q > 1."""
    bs = [r[0] for r in rows]
    qs = [r[1] for r in rows]
    return {"a": max(bs) - min(bs) > 0.25, "d": max(qs) - min(qs) > 0.25 or (min(qs) > 1 and max(bs) - min(bs) > 0.25)}


def fit_targets(traces: Sequence[Trace]) -> dict[str, TargetFit]:
    """One :class:`TargetFit` per setup; ratios of parts a setup cannot identify are pooled from the others."""
    groups: dict[str, list] = {}
    for t in traces:
        groups.setdefault(setup_of(t), []).extend(_target_rows([t]))
    groups = {s: r for s, r in groups.items() if r}
    if not groups:
        raise InputError("no timed target steps in these traces: cannot calibrate a pass cost")
    own = {s: _identifies(r) for s, r in groups.items()}
    full = {s: _solve(r, {p: 0.0 for p in ("a", "d") if not own[s][p]})[0] for s, r in groups.items()}
    ratios = {}
    for p, i in (("a", 0), ("d", 2)):
        src = [(full[s][i] / full[s][1], sum(r[3] for r in groups[s])) for s in groups
               if own[s][p] and full[s][1] > 0]
        ratios[p] = sum(x * w for x, w in src) / sum(w for _, w in src) if src else 0.0
    out = {}
    for s, rows in groups.items():
        fixed = {p: ratios[p] for p in ("a", "d") if not own[s][p]}
        (a, c, d), rms = _solve(rows, fixed)
        bs = [r[0] for r in rows]
        slow = sum(r[2] > OUTLIER * (a + c * r[0] + d * r[0] * (r[1] - 1)) for r in rows)
        out[s] = TargetFit(s, float(a), float(c), float(d), len(rows), int(sum(r[3] for r in rows)),
                           (min(bs), max(bs)), (min(r[1] for r in rows), max(r[1] for r in rows)), rms,
                           tuple(sorted(fixed)), int(slow))
    return out


BREAKS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  #: g's segments [B_j, B_j+1], the last one open-ended
SMOOTH = 0.01  #: weight of a slope change of one mean slope, against a pass off by 100% (10% on 100 passes: 1)
RIDGE = 1e-4  #: weight on the per-row part (relative to the decode pass): rows only take what positions cannot
CURVE_SIZES = (1, 2, 4, 8, 16, 64, 256)  #: positions of the one-row passes a fit is described at


@dataclass(frozen=True)
class PassFit:
    """``T(L, b, n) = a + c b + g(n) + e n L`` seconds per pass of one engine on one setup (pass records).

    ``g(n) = sum_j s_j clip(n - B_j, 0, B_j+1 - B_j)`` over the segments :data:`BREAKS`, every ``s_j >= 0``, and
    ``a, c, e >= 0``: the cost is positive and never falls as positions, rows or context grow.
    """

    setup: str
    engine: str
    a: float  #: fixed cost of a pass
    c: float  #: cost per row
    e: float  #: cost per position and cached token (attention)
    slopes: tuple[float, ...]  #: g's slope on each segment of :data:`BREAKS` (the last: the compute-bound slope)
    passes: int
    rows: tuple[int, int]
    tokens: tuple[int, int]
    context: tuple[float, float]
    residual: float  #: rms of (fit - y) / y
    outliers: int = 0  #: passes more than :data:`OUTLIER` times slower than the fit (a busy machine?)
    verified: int = 0  #: passes that computed more logits than rows (a row verifying speculated tokens)
    gaps: tuple[tuple[int, int], ...] = ()  #: positions fed between recorded sizes more than 2x apart (interpolated)

    def g(self, n: float) -> float:
        return sum(s * _segment(n, j) for j, s in enumerate(self.slopes))

    def seconds(self, L: float, b: float, n: float) -> float:
        return self.a + self.c * b + self.g(n) + self.e * n * L  # fixed, per row, positions, attention

    def curve(self, sizes: Sequence[int] = CURVE_SIZES, rows: int = 1) -> list[float]:
        """Seconds of passes of ``rows`` rows feeding each of ``sizes`` positions in all, at the smallest context."""
        return [self.seconds(self.context[0], rows, n) for n in sizes]

    def coverage(self) -> str:
        """What the records cover and what the fit fills in, in words."""
        inside = "; ".join(f"{lo}-{hi}" for lo, hi in self.gaps)
        return (f"records feed {self.tokens[0]}-{self.tokens[1]} positions"
                + (f"; none fed {inside} positions (interpolated there)" if self.gaps else "")
                + f"; above {self.tokens[1]} the last slope ({1e3 * self.top_slope:.2f} ms per position) continues")

    @property
    def top_slope(self) -> float:
        """g's slope above the largest recorded pass (the compute-bound cost of one more position)."""
        j = max(i for i, b in enumerate(BREAKS) if b <= self.tokens[1] or i == 0)
        return self.slopes[min(j, len(self.slopes) - 1)]

    def describe(self) -> str:
        ms = ", ".join(f"{n}: {1e3 * t:.1f}" for n, t in zip(CURVE_SIZES, self.curve()))
        return (f"{self.engine} @{self.setup}: pure pass cost fitted on {self.passes} pass records (rows "
                f"{self.rows[0]}-{self.rows[1]}, positions fed {self.tokens[0]}-{self.tokens[1]}, context "
                f"{self.context[0]:.0f}-{self.context[1]:.0f}): a {1e3 * self.a:.2f} ms + {1e3 * self.c:.2f} ms per "
                f"row + g(n) + {1e6 * self.e:.3f} us per position and cached token, every part >= 0 and g "
                f"non-decreasing; one row by positions fed, ms: {ms}; rms relative residual "
                f"{100 * self.residual:.1f}%; {self.coverage()}"
                + (f"; {self.outliers} pass(es) ({100 * self.outliers / self.passes:.1f}%) over {OUTLIER:g}x the "
                   "fit: outliers (was the machine busy?)" if self.outliers else "")
                + ("" if self.verified else "; no pass computed more than one position's logits per row, so a pass "
                   "verifying speculated tokens (n-gram) is priced between decode and prefill passes, without the "
                   "logits of its extra positions (too cheap)"))


def _segment(n, j: int):
    """How much of segment ``j`` of :data:`BREAKS` lies below ``n`` positions (arrays too)."""
    lo = BREAKS[j]
    width = BREAKS[j + 1] - lo if j + 1 < len(BREAKS) else np.inf
    return np.clip(np.asarray(n, float) - lo, 0.0, width)


def gaps(tokens: Sequence[int], ratio: float = 2.0) -> tuple[tuple[int, int], ...]:
    """Ranges of positions fed that no pass recorded, between recorded sizes more than ``ratio`` apart."""
    xs = sorted(set(int(t) for t in tokens))
    return tuple((lo + 1, hi - 1) for lo, hi in zip(xs, xs[1:]) if hi > ratio * lo and hi - lo > 1)


def fit_passes(passes: Sequence, setup: str, engine: str) -> PassFit:
    """Least squares on relative errors of ``a + c b + g(n) + e n L``, every part >= 0 (a monotone g).

    Where no pass was recorded (a range of positions between the decode and prefill ends, above the largest),
    a penalty on changes of g's slope between segments (:data:`SMOOTH`, in units of the data's mean slope)
    decides: the slope runs on smoothly from the recorded sizes instead of doing anything the data allow.
    """
    b = np.array([p.rows for p in passes], float)
    n = np.array([p.tokens for p in passes], float)
    L = np.array([p.context for p in passes], float)
    y = np.array([p.seconds for p in passes], float)
    segs = [_segment(n, j) for j in range(len(BREAKS))]
    X = np.column_stack([np.ones_like(b), b, n * L] + segs) / y[:, None]  # relative errors: (fit - y) / y
    k = len(BREAKS)
    s_ref = max(float(np.sum(y) / max(np.sum(n), 1.0)), 1e-9)  # mean seconds per position fed: the slopes' unit
    smooth = np.zeros((k - 1, 3 + k))
    for j in range(k - 1):
        smooth[j, 3 + j], smooth[j, 4 + j] = -1.0, 1.0  # s_j+1 - s_j
    smooth *= np.sqrt(SMOOTH) / s_ref
    ridge = np.zeros((1, 3 + k))
    ridge[0, 1] = np.sqrt(RIDGE) / max(float(np.min(y)), 1e-9)
    A = np.vstack([X, smooth, ridge])
    rhs = np.concatenate([np.ones_like(y), np.zeros(k)])  # k - 1 slope changes and the ridge
    from scipy import optimize

    sol = optimize.lsq_linear(A, rhs, bounds=(0.0, np.inf)).x
    fit = PassFit(setup, engine, float(sol[0]), float(sol[1]), float(sol[2]), tuple(map(float, sol[3:])),
                  len(passes), (int(b.min()), int(b.max())), (int(n.min()), int(n.max())),
                  (float(L.min()), float(L.max())), 0.0, gaps=gaps(n))
    ratio = y / np.maximum((X @ sol) * y, 1e-12)  # recorded / fitted
    rel = 1 / ratio - 1
    return PassFit(**{**fit.__dict__, "residual": float(np.sqrt(np.mean(rel**2))),
                      "outliers": int(np.sum(ratio > OUTLIER)),
                      "verified": sum(getattr(p, "outputs", 1) > p.rows for p in passes)})


def _pass_entry(name: str, fit: PassFit) -> ArchProfile:
    top = max(fit.context[1], 1.0)
    ctx = tuple(sorted({0, int(top // 2), int(top), int(2 * top)}))
    ms = tuple(tuple(tuple(1e3 * fit.seconds(L, b, b * q) for q in PASS_POSITIONS) for b in PASS_BATCH)
               for L in ctx)
    return ArchProfile(name, 1, 1, 1, ctx, PASS_BATCH, PASS_POSITIONS, ms)


def pass_setups(traces: Sequence[Trace]) -> dict[str, dict[str, list]]:
    """``{setup: {engine: pass records}}`` for the setups whose every trace has pass records."""
    have: dict[str, list[bool]] = {}
    for t in traces:
        have.setdefault(setup_of(t), []).append(bool(getattr(t, "passes", None)))
    out: dict[str, dict[str, list]] = {}
    for t in traces:
        s = setup_of(t)
        if all(have[s]):
            for p in t.passes:
                if p.seconds > 0 and p.engine in ("target", "draft"):
                    out.setdefault(s, {}).setdefault(p.engine, []).append(p)
    return out


def draft_costs(traces: Sequence[Trace], alpha2: float | None,
                fill: float | None = None) -> dict[str, dict[tuple[int, float], float]]:
    """Per setup: draft seconds per pass by (batch, positions per row) (ratio of sums: total time over passes,
    where a pass writes one token, or ``E[tokens/pass]`` with token speculation inside draft steps, and computes
    ``1 + fill (k2 - 1)`` positions, ``fill`` the target's share of proposals: the draft's are not recorded)."""
    sums: dict[str, dict[tuple[int, float], list[float]]] = {}
    for t in traces:
        st = recorded_setting(t.header)
        cfg = t.header.config or {}
        sd = st.k2 > 1 and cfg.get("draft_ngram", True) and alpha2 is not None
        per_pass = sum(alpha2**i for i in range(st.k2)) if sd else 1.0  # E[tokens per pass] = (1-a^k)/(1-a)
        q = 1 + (fill if fill is not None else 1.0) * (st.k2 - 1) if sd else 1.0
        for s in t.steps:
            if s.draft_start is None or s.draft_end is None or not s.draft_tokens or s.cancelled:
                continue
            acc = sums.setdefault(st.hardware, {}).setdefault((int(s.draft_batch or 1), q), [0.0, 0.0])
            acc[0] += s.draft_end - s.draft_start
            acc[1] += s.draft_tokens / per_pass  # passes
    return {h: {k: v[0] / v[1] for k, v in sorted(by.items()) if v[1] > 0} for h, by in sums.items()}


def _name(text: str | None, default: str) -> str:
    """An architecture name from a model path or name (its last path part, profile-name characters only)."""
    if not text:
        return default
    base = str(text).rstrip("/").split("/")
    base = base[-2] if base[-1] == "model" and len(base) > 1 else base[-1]
    base = re.sub(r"\.gguf$", "", base)
    base = re.sub(r"[^A-Za-z0-9._-]", "-", base).strip("-.") or default
    return base if base[0].isalnum() else default


def model_names(traces: Sequence[Trace]) -> tuple[str, str]:
    """(target, draft) architecture names: the models the first traces name, else 'target' and 'draft' (with
    '-target' and '-draft' appended when both roles name one model)."""
    models = [t.header.models or {} for t in traces]
    target = next((m["target"] for m in models if m.get("target")), None)
    draft = next((m["draft"] for m in models if m.get("draft")), None)
    t, d = _name(target, "target"), _name(draft, "draft")
    return (t, d) if t != d else (f"{t}-target", f"{d}-draft")  # one model in both roles: two entries


def _mode_setups(traces: Sequence[Trace], have: dict[str, set]) -> tuple[dict, list[str]]:
    """``{mode: {role: setup}}`` from the traces of each mode (the most common label), and notes on borrowing.

    A mode without traces, or a role without data on its mode's setup, borrows: ar and sync from each other
    (lrref runs both on ``--threads``), else the setup with the most data for that role.
    """
    counts: dict[str, dict[str, int]] = {}
    for t in traces:
        st = recorded_setting(t.header)
        counts.setdefault(st.mode, {}).setdefault(st.hardware, 0)
        counts[st.mode][st.hardware] += len(t.steps)
    own = {m: max(c, key=c.get) for m, c in counts.items()}
    near = {"ar": ("sync", "async"), "sync": ("ar", "async"), "async": ("sync", "ar")}
    setups, notes = {}, []
    for mode in SETUP_MODES:
        setups[mode] = {}
        for role in ("target", "draft"):
            order = [own.get(mode)] + [own.get(m) for m in near[mode]] + sorted(have[role])
            pick = next((s for s in order if s in have[role]), None)
            if pick is None:
                continue
            setups[mode][role] = pick
            if pick != own.get(mode) and (role == "target" or mode != "ar"):
                why = f"no {mode} trace" if mode not in own else f"no {role} data on setup {own[mode]}"
                notes.append(f"{mode} {role}: {why}, priced on setup {pick} (borrowed)")
    return {m: r for m, r in setups.items() if r}, notes


def _target_entry(name: str, fit: TargetFit, context: int) -> ArchProfile:
    ms = (tuple(tuple(1e3 * fit.seconds(b, q) for q in GRID_POSITIONS) for b in GRID_BATCH),)
    return ArchProfile(name, 1, 1, 1, (context,), GRID_BATCH, GRID_POSITIONS, ms)


def _draft_entry(name: str, costs: dict[tuple[int, float], float], fit: TargetFit | None,
                 context: int) -> ArchProfile:
    """Per batch, the draft's pass cost at one position (measured at q = 1, else from a measured q scaled by the
    target's ``T(1, 1) / T(1, q)`` on the same setup: the engine's cost of a speculated position), and at other
    positions that base times ``T(1, q) / T(1, 1)``."""
    def r(q: float) -> float:
        return fit.seconds(1, q) / fit.seconds(1, 1) if fit is not None and fit.seconds(1, 1) > 0 else 1.0

    batches = tuple(sorted({b for b, _ in costs}))
    rows = []
    for b in batches:
        have = {q: v for (bb, q), v in costs.items() if bb == b}
        base = have[1.0] if 1.0 in have else statistics.fmean(v / r(q) for q, v in have.items())
        rows.append(tuple(1e3 * base * r(q) for q in GRID_POSITIONS))
    return ArchProfile(name, 1, 1, 1, (context,), batches, GRID_POSITIONS, (tuple(rows),))


def _provenance(traces: Sequence[Trace], notes: list[str], command: str | None,
                what: str = "effective cost per pass calibrated from trace steps", extra: dict | None = None
                ) -> Provenance:
    h = traces[0].header
    hw = h.hardware or {}
    info = (h.config or {}).get("backend_info") or {}
    engine = f"{h.source} {h.backend or ''}".strip() + (f" ({info.get('binding')} {info.get('version')})"
                                                        if info.get("binding") else "")
    loads = [list(t.header.hardware.get("loadavg_start") or []) for t in traces if t.header.hardware]
    return Provenance(
        device=str(hw.get("cpu_model") or hw.get("gpu") or hw.get("machine") or "unknown"),
        engine=f"{engine}; {what}",
        dtype=str(hw.get("dtype") or "unknown"), date=str(h.created or time.strftime("%Y-%m-%d"))[:10],
        command=command, source=", ".join(t.path for t in traces), cpu=hw.get("cpu_model"),
        statistic="non-negative least squares per setup, weighted by passes (see notes)",
        notes=tuple(notes), extra={"loadavg_start": loads, "setups": sorted({setup_of(t) for t in traces})}
        | (extra or {}))


def profile_from_traces(traces: Sequence[Trace], name: str = "calibrated", alpha2: float | None = None,
                        command: str | None = None) -> Profile:
    """The recorded engine's pass costs as a profile: ``TARGET@SETUP`` and ``DRAFT@SETUP`` entries, the
    ``setups`` map of the recorded modes, the fits and any borrowing in the provenance notes.

    :raises InputError: no timed target step.
    """
    check_one_machine(traces)
    tname, dname = model_names(traces)
    pure = pass_setups(traces)
    if pure and set(pure) == {setup_of(t) for t in traces}:
        return _pure_profile(traces, pure, tname, dname, name, command)
    fits = fit_targets(traces)
    drafts = {s: c for s, c in draft_costs(traces, alpha2, spec_fill(traces)).items() if c}
    prompts = [r.prompt_tokens for t in traces for r in t.requests if r.prompt_tokens]
    ctx = int(statistics.median(prompts)) if prompts else 0
    archs = {f"{tname}@{s}": _target_entry(f"{tname}@{s}", f, ctx) for s, f in fits.items()}
    archs |= {f"{dname}@{s}": _draft_entry(f"{dname}@{s}", c, fits.get(s), ctx) for s, c in drafts.items()}
    setups, borrowed = _mode_setups(traces, {"target": set(fits), "draft": set(drafts)})
    notes = [f.describe() for f in fits.values()]
    notes += [f"draft @{s}: " + ", ".join(f"b={b}, q={q:.2f}: {1e3 * v:.2f} ms per pass" for (b, q), v in c.items())
              for s, c in drafts.items()]
    notes += borrowed + [f"context-free: every pass priced at the median prompt ({ctx} tokens)",
                         "effective costs: each pass averages its step's prefill and per-pass work (prefill 'none')"]
    return Profile(name, "wall", _provenance(traces, notes, command), archs,
                   f"effective pass costs calibrated from {len(traces)} trace(s) of {tname} (draft {dname})", setups,
                   "none")


def _pure_profile(traces: Sequence[Trace], pure: dict, tname: str, dname: str, name: str,
                  command: str | None) -> Profile:
    """Every setup from its pass records: pure pass costs, prefill 'unseen' (lrref's per-sequence KV)."""
    fits = [fit_passes(ps, s, e) for s, by in pure.items() for e, ps in by.items() if len(ps) >= 8]
    if not any(f.engine == "target" for f in fits):
        raise InputError("too few target pass records to fit a pass cost (at least 8 per setup)")
    archs = {f"{tname if f.engine == 'target' else dname}@{f.setup}":
             _pass_entry(f"{tname if f.engine == 'target' else dname}@{f.setup}", f) for f in fits}
    have = {r: {f.setup for f in fits if f.engine == r} for r in ("target", "draft")}
    setups, borrowed = _mode_setups(traces, have)
    notes = [f.describe() for f in fits] + borrowed
    coverage = {f"{tname if f.engine == 'target' else dname}@{f.setup}":
                {"tokens": list(f.tokens), "rows": list(f.rows), "gaps": [list(g) for g in f.gaps],
                 "residual": round(f.residual, 4)} for f in fits}
    return Profile(name, "wall", _provenance(traces, notes, command, "pure cost per pass fitted on pass records",
                                             {"coverage": coverage}),
                   archs, f"pass costs of {tname} (draft {dname}) fitted on {len(traces)} trace(s)' pass records",
                   setups, "unseen")


def pass_kind(p) -> str:
    """``decode`` (one position per row), ``verify`` (more logits than rows: speculated tokens checked) or
    ``prefill`` (positions fed beyond the logits computed: a prompt, or draft tokens a row had not seen)."""
    outputs = getattr(p, "outputs", p.rows)
    if outputs > p.rows:
        return "verify"
    return "decode" if p.tokens <= p.rows else "prefill"


def pass_residuals(traces: Sequence[Trace]) -> list[dict]:
    """Where the fitted pass cost misses, by trace and pass kind: recorded and fitted seconds summed over each
    (trace, engine, kind), their ratio, and the passes' sizes.  What a replay miss is made of (the same fit the
    traces calibrate, fitted on all of them)."""
    fits = {(f.setup, f.engine): f for s, by in pass_setups(traces).items() for e, ps in by.items()
            if len(ps) >= 8 for f in [fit_passes(ps, s, e)]}
    out = []
    for t in traces:
        groups: dict[tuple[str, str], list] = {}
        for p in t.passes:
            f = fits.get((setup_of(t), p.engine))
            if f is not None and p.seconds > 0:
                groups.setdefault((p.engine, pass_kind(p)), []).append((p, f.seconds(p.context, p.rows, p.tokens)))
        for (eng, kind), xs in sorted(groups.items()):
            rec, fit = sum(p.seconds for p, _ in xs), sum(v for _, v in xs)
            out.append({"trace": t.path, "mode": str((t.header.config or {}).get("mode") or t.header.mode),
                        "setup": setup_of(t), "engine": eng, "kind": kind, "passes": len(xs),
                        "tokens": [min(p.tokens for p, _ in xs), max(p.tokens for p, _ in xs)],
                        "recorded_s": rec, "fitted_s": fit, "fitted_over_recorded": fit / rec})
    return out


def spec_fill(traces: Sequence[Trace]) -> float | None:
    """Share of the ``k2 - 1`` speculative positions a target pass proposed, pooled over the traces with token
    speculation: ``sum ngram_drafted / sum (forwards (k2 - 1))`` (n-gram lookup proposes fewer when it finds a
    short match or none).  None without n-gram counts."""
    num = den = 0.0
    for t in traces:
        k2 = recorded_setting(t.header).k2
        if k2 < 2:
            continue
        for s in t.steps:
            if s.target_forwards and s.ngram_drafted is not None and not s.cancelled:
                num += s.ngram_drafted
                den += s.target_forwards * (k2 - 1)
    return min(num / den, 1.0) if den else None
