"""Calibration writes a profile: the recorded engine's pass costs from lr-traces, in the latency-profile format.

Acceptance is behaviour (:mod:`lrsim.calibrate`); what a pass costs is
timing, and here it becomes a :class:`~lrsim.cost.profile.Profile` like any
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
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize

from ..errors import InputError
from ..trace import Trace, recorded_setting
from .profile import ArchProfile, Profile, Provenance

GRID_BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
GRID_POSITIONS = (1, 2, 4, 8, 16, 32, 64)
SETUP_MODES = ("ar", "sync", "async")


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
    positions: tuple[int, ...]  #: the k2 values recorded
    residual: float  #: weighted rms of (fit - y) / y over the steps
    borrowed: tuple[str, ...]  #: parts taken from other setups' ratios ('a', 'd')

    def seconds(self, b: float, q: float) -> float:
        return self.a + self.c * b + self.d * b * (q - 1)  # fixed + per row + per speculated position

    def describe(self) -> str:
        bor = f"; borrowed {' and '.join(self.borrowed)} from other setups' ratios" if self.borrowed else ""
        return (f"target @{self.setup}: T(b, q) = {1e3 * self.a:.2f} + {1e3 * self.c:.2f} b + {1e3 * self.d:.2f} "
                f"b (q - 1) ms, fitted on {self.steps} steps ({self.passes} passes), mean batch "
                f"{self.batch[0]:.2f}-{self.batch[1]:.2f}, k2 {','.join(map(str, self.positions))}, weighted rms "
                f"residual {100 * self.residual:.1f}%{bor}")


def setup_of(trace: Trace) -> str:
    """The hardware setup a trace ran on (its setting's ``hardware`` label)."""
    return recorded_setting(trace.header).hardware


def _target_rows(traces: Sequence[Trace]) -> list[tuple[float, int, float, int]]:
    """(mean batch, k2, seconds per pass, passes) of every timed, finished target step."""
    out = []
    for t in traces:
        k2 = recorded_setting(t.header).k2
        for s in t.steps:
            if s.target_start is None or s.target_end is None or not s.target_forwards or s.cancelled:
                continue
            d = s.target_end - s.target_start
            if d > 0:
                out.append((float(s.target_batch or 1), k2, d / s.target_forwards, s.target_forwards))
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
    qs = {r[1] for r in rows}
    return {"a": max(bs) - min(bs) > 0.25, "d": len(qs) > 1 or (min(qs) > 1 and max(bs) - min(bs) > 0.25)}


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
        out[s] = TargetFit(s, float(a), float(c), float(d), len(rows), int(sum(r[3] for r in rows)),
                           (min(bs), max(bs)), tuple(sorted({r[1] for r in rows})), rms, tuple(sorted(fixed)))
    return out


def draft_costs(traces: Sequence[Trace], alpha2: float | None) -> dict[str, dict[tuple[int, int], float]]:
    """Per setup: draft seconds per pass by (batch, k2) (ratio of sums: total time over passes, where a pass
    writes one token, or ``E[tokens/pass]`` with token speculation inside draft steps)."""
    sums: dict[str, dict[tuple[int, int], list[float]]] = {}
    for t in traces:
        st = recorded_setting(t.header)
        cfg = t.header.config or {}
        sd = st.k2 > 1 and cfg.get("draft_ngram", True) and alpha2 is not None
        per_pass = sum(alpha2**i for i in range(st.k2)) if sd else 1.0  # E[tokens per pass] = (1-a^k)/(1-a)
        for s in t.steps:
            if s.draft_start is None or s.draft_end is None or not s.draft_tokens or s.cancelled:
                continue
            key = (int(s.draft_batch or 1), st.k2 if sd else 1)
            acc = sums.setdefault(st.hardware, {}).setdefault(key, [0.0, 0.0])
            acc[0] += s.draft_end - s.draft_start
            acc[1] += s.draft_tokens / per_pass  # passes
    return {h: {b: v[0] / v[1] for b, v in sorted(by.items()) if v[1] > 0} for h, by in sums.items()}


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


def _draft_entry(name: str, costs: dict[tuple[int, int], float], fit: TargetFit | None,
                 context: int) -> ArchProfile:
    """Measured (batch, k2) points; other positions from the measured ones scaled by the target's own
    ``T(1, q) / T(1, k2)`` on the same setup (the engine's cost of a speculated position)."""
    def r(q: float) -> float:
        return fit.seconds(1, q) / fit.seconds(1, 1) if fit is not None and fit.seconds(1, 1) > 0 else 1.0

    batches = tuple(sorted({b for b, _ in costs}))
    rows = []
    for b in batches:
        have = {k: v for (bb, k), v in costs.items() if bb == b}
        k0 = min(have)
        rows.append(tuple(1e3 * (have[q] if q in have else have[k0] * r(q) / r(k0)) for q in GRID_POSITIONS))
    return ArchProfile(name, 1, 1, 1, (context,), batches, GRID_POSITIONS, (tuple(rows),))


def _provenance(traces: Sequence[Trace], notes: list[str], command: str | None) -> Provenance:
    h = traces[0].header
    hw = h.hardware or {}
    info = (h.config or {}).get("backend_info") or {}
    engine = f"{h.source} {h.backend or ''}".strip() + (f" ({info.get('binding')} {info.get('version')})"
                                                        if info.get("binding") else "")
    loads = [list(t.header.hardware.get("loadavg_start") or []) for t in traces if t.header.hardware]
    return Provenance(
        device=str(hw.get("cpu_model") or hw.get("gpu") or hw.get("machine") or "unknown"),
        engine=engine + "; effective cost per pass calibrated from trace steps",
        dtype=str(hw.get("dtype") or "unknown"), date=str(h.created or time.strftime("%Y-%m-%d"))[:10],
        command=command, source=", ".join(t.path for t in traces), cpu=hw.get("cpu_model"),
        statistic="non-negative least squares per setup, weighted by passes (see notes)",
        notes=tuple(notes), extra={"loadavg_start": loads, "setups": sorted({setup_of(t) for t in traces})})


def profile_from_traces(traces: Sequence[Trace], name: str = "calibrated", alpha2: float | None = None,
                        command: str | None = None) -> Profile:
    """The recorded engine's pass costs as a profile: ``TARGET@SETUP`` and ``DRAFT@SETUP`` entries, the
    ``setups`` map of the recorded modes, the fits and any borrowing in the provenance notes.

    :raises InputError: no timed target step.
    """
    fits = fit_targets(traces)
    drafts = {s: c for s, c in draft_costs(traces, alpha2).items() if c}
    tname, dname = model_names(traces)
    prompts = [r.prompt_tokens for t in traces for r in t.requests if r.prompt_tokens]
    ctx = int(statistics.median(prompts)) if prompts else 0
    archs = {f"{tname}@{s}": _target_entry(f"{tname}@{s}", f, ctx) for s, f in fits.items()}
    archs |= {f"{dname}@{s}": _draft_entry(f"{dname}@{s}", c, fits.get(s), ctx) for s, c in drafts.items()}
    setups, borrowed = _mode_setups(traces, {"target": set(fits), "draft": set(drafts)})
    notes = [f.describe() for f in fits.values()]
    notes += [f"draft @{s}: " + ", ".join(f"b={b}, k2={k}: {1e3 * v:.2f} ms per pass" for (b, k), v in c.items())
              for s, c in drafts.items()]
    notes += borrowed + [f"context-free: every pass priced at the median prompt ({ctx} tokens)"]
    mapped = {m: {r: s for r, s in roles.items()} for m, roles in setups.items()}
    prof = Profile(name, "wall", _provenance(traces, notes, command), archs,
                   f"pass costs calibrated from {len(traces)} trace(s) of {tname} (draft {dname})", mapped)
    return prof
