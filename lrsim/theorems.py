"""Automatic checks of the paper's Theorems 1-4 and of the token-SD ceiling.

- Theorems 1 and 2: each closed form against a vectorised Monte Carlo of the
  stochastic model it states (:mod:`lrsim.montecarlo`), with a
  Bonferroni-corrected z test over the whole grid.
- SD ceiling: ``g <= 1/(1-alpha)`` on a dense grid up to ``k = 4096``.
- Theorem 3 (sync): conditions (7) and (8) against the brute-force optimum of
  ``h`` under ``k1 k2 <= M``; reports where the "iff" holds and fails.
- Theorem 4 (async): dense scan of its region, then its edges, then each
  constraint relaxed on its own; reports the worst margin
  ``best hybrid / best pure - 1`` and every counterexample kind.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
from scipy.stats import norm
from tqdm.auto import tqdm

from .montecarlo import simulate_async, simulate_sync
from .planner import best_split
from .theory import forms as theory

STRICT = 1e-12  # relative margin below which two speedups count as a tie


@dataclass
class TheoremResult:
    """Verdict on one theorem, with what was checked and what broke it."""

    name: str
    statement: str
    verdict: str  #: "holds" or "fails"
    points_checked: int
    counterexamples: list[dict] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    seconds: float = 0.0


def _point(**kw) -> dict:
    return {k: (round(float(v), 6) if isinstance(v, (float, np.floating)) else int(v)) for k, v in kw.items()}


# --- Theorems 1 and 2: closed form vs Monte Carlo --------------------------------------------


def _mc_check(
    name: str, statement: str, exact: Callable, simulate: Callable, ks: list[int], resolution: int,
    stages: int, seed: int,
) -> tuple[TheoremResult, list[tuple]]:
    alphas = np.linspace(0.05, 0.95, resolution)
    cs = [0.05, 0.1, 0.2, 0.35, 0.6]
    grid = [(a, c, k) for a in alphas for c in cs for k in ks]
    zcrit = float(norm.isf(0.001 / (2 * len(grid))))  # family-wise false-alarm rate 0.1 %
    bad, worst, rows = [], 0.0, []
    for i, (a, c, k) in enumerate(grid):
        est = simulate(a, c, k, stages, seed + i)
        ex = float(exact(a, c, k))
        z = est.z(ex)
        worst = max(worst, abs(z))
        rows.append((a, c, k, est))
        if abs(z) > zcrit:
            bad.append(_point(alpha=a, c=c, k=k, closed_form=ex, monte_carlo=est.mean, z=z))
    res = TheoremResult(
        name, statement, "holds" if not bad else "fails", len(grid), bad,
        {"stages_per_point": stages, "z_critical": round(zcrit, 3), "max_abs_z": round(worst, 3)},
    )
    return res, rows


def check_theorem1(resolution: int = 10, stages: int = 100_000, seed: int = 1) -> TheoremResult:
    """f_sync against Monte Carlo of Algorithm 1's cycle."""
    res, _ = _mc_check(
        "Theorem 1 (sync LR speedup)",
        "f_sync(k) = (1-a^k)/((1-a)(1-c+ck)) for i.i.d. step acceptance, k-1 drafts per cycle",
        theory.f_sync, simulate_sync, [1, 2, 3, 4, 6, 8, 12], resolution, stages, seed,
    )
    return res


def check_theorem2(resolution: int = 10, stages: int = 100_000, seed: int = 2) -> TheoremResult:
    """f_async (S1/S2) against Monte Carlo of the App. B stage model; also tests the seed's S2."""
    res, rows = _mc_check(
        "Theorem 2 (async LR speedup)",
        "f_async = S1 = 1/(1-a+ca) if k >= ceil(1/c), else S2 (derived form), under the App. B stage model",
        theory.f_async, simulate_async, [1, 2, 3, 4, 6, 8, 12, 20], resolution, stages, seed,
    )

    def seed_s2(a, c, k):  # the form printed in seed 001 / SPEC.md
        return (1 - a**k) / ((1 - a) + c * a - a ** (k + 1) - k * (1 - a) * a**k)

    s2_rows = [(a, c, k, e) for a, c, k, e in rows if k < theory.draft_limit(c) and k >= 2]
    zs = [abs(e.z(seed_s2(a, c, k))) for a, c, k, e in s2_rows]
    zcrit = res.details["z_critical"]
    rejected = [r for r, z in zip(s2_rows, zs) if z > zcrit]
    res.details["seed_S2_form_rejected"] = f"{len(rejected)} of {len(s2_rows)} S2-regime points"
    if rejected:
        a, c, k, e = rejected[len(rejected) // 2]
        res.details["seed_S2_witness"] = _point(alpha=a, c=c, k=k, monte_carlo=e.mean, seed_form=seed_s2(a, c, k),
                                                derived_form=float(theory.s2(a, c, k)))
    # f_async jumps where the regime changes: S2(ceil(1/c)-1) vs S1
    cs = np.array([0.05, 0.1, 0.2, 0.3]); a = 0.7
    kstar = theory.draft_limit(cs)
    res.details["regime_jump_at_k=ceil(1/c)"] = [
        _point(alpha=a, c=cc, k=ks, S2_before=theory.s2(a, cc, ks - 1), S1=theory.s1(a, cc))
        for cc, ks in zip(cs, kstar) if ks >= 2
    ]
    return res


# --- token-SD ceiling ------------------------------------------------------------------------


def check_sd_ceiling(resolution: int = 200) -> TheoremResult:
    """g(k) <= 1/(1-alpha) for all k, c > 0; the bound is approached only as c -> 0, k -> oo."""
    a = np.linspace(0.01, 0.99, resolution)[:, None, None]
    c = np.logspace(-6, 0, 25)[None, :, None]
    k = np.unique(np.round(np.logspace(0, np.log10(4096), 40)))[None, None, :]
    ratio = theory.g(a, c, k) / theory.sd_ceiling(a)
    bad = np.argwhere(ratio > 1 + STRICT)
    cex = [_point(alpha=a[i, 0, 0], c=c[0, j, 0], k=k[0, 0, m], ratio=ratio[i, j, m]) for i, j, m in bad[:10]]
    near = theory.g(a[:, 0, 0], 1e-9, 4096) / theory.sd_ceiling(a[:, 0, 0])
    return TheoremResult(
        "SD ceiling", "g(k) <= 1/(1-alpha) for every k >= 1 and c > 0",
        "holds" if bad.size == 0 else "fails", int(ratio.size), cex,
        {"max g/ceiling": float(ratio.max()), "min g/ceiling at c=1e-9, k=4096": float(near.min())},
    )


# --- Theorem 3: sync conditions (7)/(8) vs brute force -------------------------------------


def conditions_thm3(a1, c1, a2, c2, M):
    """Conditions (7) and (8) of Theorem 3, as printed (both seeds agree)."""
    h = M / 2
    c7 = (1 + a1) / (1 + c1) >= (1 + a2**h) * (1 - c2 + c2 * h) / (1 - c2 + c2 * M)
    c8 = (1 + a2) / (1 + c2) >= (1 + a1**h) * (1 - c1 + c1 * h) / (1 - c1 + c1 * M)
    return c7, c8


def _examples(mask, cols: dict, margin, n: int = 5, largest: bool = True) -> list[dict]:
    """Up to ``n`` masked points with the most extreme margin, one per parameter tuple (any M)."""
    idx = np.flatnonzero(mask)
    order = idx[np.argsort(margin[idx])]
    out, seen = [], set()
    for i in (order[::-1] if largest else order):
        key = tuple(round(float(cols[k][i]), 9) for k in ("alpha1", "c1", "alpha2", "c2"))
        if key not in seen:
            seen.add(key)
            out.append(_point(**{k: v[i] for k, v in cols.items()}, margin=margin[i]))
        if len(out) == n:
            break
    return out


THM3_GRIDS = {
    "broad": ((0.05, 0.95), (0.02, 0.6)),  # alpha range, c range
    "working range": ((0.5, 0.95), (0.01, 0.25)),  # where the paper's experiments live
}


def _thm3_grid(arange, crange, resolution: int, budgets) -> dict:
    ax, cx = np.linspace(*arange, resolution), np.linspace(*crange, resolution)
    A1, C1, A2, C2 = (m.ravel() for m in np.meshgrid(ax, cx, ax, cx, indexing="ij"))
    cols: dict[str, list] = {k: [] for k in ("alpha1", "c1", "alpha2", "c2", "M", "k1", "k2",
                                             "claim", "actual", "margin", "full")}
    for M in budgets:
        sp_ = best_split(A1, C1, A2, C2, M, "sync")
        c7, c8 = conditions_thm3(A1, C1, A2, C2, M)
        # one reading of "mild constraints": both pure optima use the whole budget
        full = (np.isclose(sp_.pure_token, theory.g(A2, C2, M), rtol=1e-13)
                & np.isclose(sp_.pure_step, theory.f_sync(A1, C1, M), rtol=1e-13))
        vals = (A1, C1, A2, C2, np.full(A1.size, M), sp_.k1, sp_.k2, c7 & c8, sp_.margin > STRICT, sp_.margin, full)
        for key, v in zip(cols, vals):
            cols[key].append(v)
    return {k: np.concatenate(v) for k, v in cols.items()}


def check_theorem3(resolution: int = 12, budgets=(4, 6, 8, 10, 12, 16, 24, 32, 64, 128, 256)) -> TheoremResult:
    """Do (7) and (8) hold exactly where a hybrid split is strictly best (sync)?"""
    details: dict = {"M": ", ".join(map(str, budgets)), "values per axis": resolution}
    cex: list[dict] = []
    n = 0
    all_agree = True
    for label, (arange, crange) in THM3_GRIDS.items():
        r = _thm3_grid(arange, crange, resolution, budgets)
        claim, actual, full = r["claim"], r["actual"], r["full"]
        agree = claim == actual
        not_sufficient, not_necessary = claim & ~actual, actual & ~claim
        params = {k: r[k] for k in ("alpha1", "c1", "alpha2", "c2", "M", "k1", "k2")}
        cex += [dict(e, kind=f"{label}: (7)&(8) hold, hybrid not strictly best")
                for e in _examples(not_sufficient, params, r["margin"], n=3, largest=False)]
        cex += [dict(e, kind=f"{label}: hybrid strictly best, (7)&(8) fail")
                for e in _examples(not_necessary, params, r["margin"], n=3, largest=True)]
        details[label] = {
            "grid": f"alpha in [{arange[0]}, {arange[1]}], c in [{crange[0]}, {crange[1]}]",
            "iff_agrees": f"{agree.sum()} of {claim.size} ({100 * agree.mean():.2f}%)",
            "conditions_hold_but_pure_is_best": int(not_sufficient.sum()),
            "hybrid_best_but_conditions_fail": int(not_necessary.sum()),
            "hybrid_strictly_best": int(actual.sum()),
            "iff_where_pure_optima_use_full_budget": f"{(agree & full).sum()} of {full.sum()}",
        }
        n += claim.size
        all_agree &= bool(agree.all())
    details["note"] = (
        "(7) is exactly h(2, M/2) >= g(M) and (8) is h(M/2, 2) >= f(M): each compares one hybrid split with a "
        "pure method at the full budget, so they decide the optimum only when the pure optima use the full "
        "budget; they are non-strict while the claim is strict."
    )
    return TheoremResult(
        "Theorem 3 (sync hybrid optimality)",
        "for even M >= 4, hybrid (k1>=2, k2>=2) strictly beats both pure methods iff (7) and (8) hold",
        "holds" if all_agree else "fails", int(n), cex, details,
    )


# --- Theorem 4: async region scan ------------------------------------------------------------

THM4_REGION = {"alpha": (0.52, 0.8), "c1": (0.0, 1 / 3), "c2": (0.0, 0.2), "M_min": 16}


def _region() -> tuple[tuple[float, float], tuple[float, float], tuple[float, float], int]:
    """Theorem 4's region: (alpha bounds, c1 bounds, c2 bounds, smallest even M)."""
    r = THM4_REGION
    return r["alpha"], r["c1"], r["c2"], r["M_min"]


def _open_grid(lo: float, hi: float, n: int) -> np.ndarray:
    """n points strictly inside (lo, hi), reaching to within (hi-lo)/(n+1) of each edge."""
    return np.linspace(lo, hi, n + 2)[1:-1]


def _scan(a1, c1, a2, c2, budgets, mode="async", progress=None):
    """Margins of every (point, M); returns concatenated columns."""
    cols = {k: [] for k in ("alpha1", "c1", "alpha2", "c2", "M", "k1", "k2", "margin")}
    for M in budgets:
        sp_ = best_split(a1, c1, a2, c2, M, mode)
        for key, v in zip(cols, (a1, c1, a2, c2, np.full(np.size(a1), M), sp_.k1, sp_.k2, sp_.margin)):
            cols[key].append(np.ravel(v))
        if progress is not None:
            progress.update(1)
    return {k: np.concatenate(v) for k, v in cols.items()}


def thm4_scan(resolution: int = 14, m_max: int = 64, progress: bool = False) -> dict:
    """Dense scan of Theorem 4's region: ``resolution`` values per axis, even M in [M_min, m_max]."""
    (alo, ahi), (c1lo, c1hi), (c2lo, c2hi), m_min = _region()
    ax = _open_grid(alo, ahi, resolution)
    A1, C1, A2, C2 = (m.ravel() for m in np.meshgrid(
        ax, _open_grid(c1lo, c1hi, resolution), ax, _open_grid(c2lo, c2hi, resolution), indexing="ij"))
    budgets = list(range(m_min, m_max + 1, 2))
    with tqdm(total=len(budgets), desc="Theorem 4 scan", disable=not progress, leave=False) as bar:
        return _scan(A1, C1, A2, C2, budgets, progress=bar)


def _edges(m_max: int) -> dict:
    """Corners and near-edge points of the region (1e-9 inside), M up to max(m_max, 256)."""
    eps = 1e-9
    (alo, ahi), (_, c1hi), (_, c2hi), m_min = _region()
    a = [alo + eps, 0.6, 0.7, ahi - eps]
    c1 = [1e-6, 0.01, 0.2, c1hi - eps]
    c2 = [1e-6, 0.01, 0.1, c2hi - eps]
    A1, C1, A2, C2 = (m.ravel() for m in np.meshgrid(a, c1, a, c2, indexing="ij"))
    return _scan(A1, C1, A2, C2, list(range(m_min, max(m_max, 256) + 1, 2)))


def _relaxed(resolution: int) -> dict[str, dict]:
    """Each constraint of Theorem 4 violated on its own (others kept inside)."""
    n = max(resolution // 2, 5)
    (alo, ahi), (c1lo, c1hi), (c2lo, c2hi), m_min = _region()
    inside_a = _open_grid(alo, ahi, n)
    inside_c1 = _open_grid(c1lo, c1hi, n)
    inside_c2 = _open_grid(c2lo, c2hi, n)
    two = [m_min, 2 * m_min]
    cases = {
        f"alpha1 in (0.3, {alo:g}]": (np.linspace(0.3, alo, n), inside_c1, inside_a, inside_c2, two),
        f"alpha1 in [{ahi:g}, 0.97)": (np.linspace(ahi, 0.97, n), inside_c1, inside_a, inside_c2, two),
        f"alpha2 in (0.3, {alo:g}]": (inside_a, inside_c1, np.linspace(0.3, alo, n), inside_c2, two),
        f"alpha2 in [{ahi:g}, 0.97)": (inside_a, inside_c1, np.linspace(ahi, 0.97, n), inside_c2, two),
        "c1 in [1/3, 0.9]": (inside_a, np.linspace(c1hi, 0.9, n), inside_a, inside_c2, two),
        f"c2 in [{c2hi:g}, 0.9]": (inside_a, inside_c1, inside_a, np.linspace(c2hi, 0.9, n), two),
        f"M in {{4,...,{m_min - 1}}}": (inside_a, inside_c1, inside_a, inside_c2, list(range(4, m_min))),
        f"odd M in {{{m_min + 1},...,63}}": (inside_a, inside_c1, inside_a, inside_c2, list(range(m_min + 1, 64, 2))),
    }
    out = {}
    for label, (a1, c1, a2, c2, budgets) in cases.items():
        A1, C1, A2, C2 = (m.ravel() for m in np.meshgrid(a1, c1, a2, c2, indexing="ij"))
        out[label] = _scan(A1, C1, A2, C2, budgets)
    return out


def check_theorem4(resolution: int = 14, m_max: int = 64, progress: bool = False) -> TheoremResult:
    """Scan the region, its edges and its relaxations; verdict from the region only."""
    scan = thm4_scan(resolution, m_max, progress)
    edges = _edges(m_max)
    inside = {k: np.concatenate([scan[k], edges[k]]) for k in scan}
    m = inside["margin"]
    bad = m <= STRICT
    cols = {k: v for k, v in inside.items() if k != "margin"}
    cex = _examples(bad, cols, m, n=10, largest=False)
    i = int(np.argmin(m))
    relaxed = {}
    for label, r in _relaxed(resolution).items():
        fails = r["margin"] <= STRICT
        j = int(np.argmin(r["margin"]))
        relaxed[label] = {
            "points": int(fails.size),
            "pure_optimal_points": int(fails.sum()),
            "worst": _point(**{k: v[j] for k, v in r.items()}),
        }
    details = {
        "scan": f"{resolution} values per axis strictly inside the region, even M in [{THM4_REGION['M_min']}, {m_max}]",
        "scan_points": int(scan["margin"].size),
        "edge_points": int(edges["margin"].size),
        "worst_margin": _point(**{k: v[i] for k, v in inside.items()}),
        "median_margin": float(np.median(m)),
        "outside_the_region": relaxed,
    }
    return TheoremResult(
        "Theorem 4 (async hybrid optimality)",
        "for 0.52 < a1, a2 < 0.8, c1 < 1/3, c2 < 1/5 and even M >= 16, the maximum of h under "
        "min(ceil(1/c1), k1) k2 <= M is reached iff k1 >= 2 and k2 >= 2",
        "holds" if not bad.any() else "fails", int(m.size), cex, details,
    )


# --- all together ---------------------------------------------------------------------------


def check_all(resolution: int = 14, stages: int = 100_000, progress: bool = False) -> list[TheoremResult]:
    """Every check; ``resolution`` sets the Theorem 3/4 grids (Thm 1/2 use ``resolution // 2 + 3``)."""
    mc_res = max(3, resolution // 2 + 3)
    jobs: list[tuple[str, Callable[[], TheoremResult]]] = [
        ("Theorem 1", lambda: check_theorem1(mc_res, stages)),
        ("Theorem 2", lambda: check_theorem2(mc_res, stages)),
        ("SD ceiling", lambda: check_sd_ceiling()),
        ("Theorem 3", lambda: check_theorem3(max(4, resolution - 2))),
        ("Theorem 4", lambda: check_theorem4(resolution, progress=progress)),
    ]
    out = []
    for label, job in tqdm(jobs, desc="checking", disable=not progress, leave=False):
        t = time.perf_counter()
        r = job()
        r.seconds = round(time.perf_counter() - t, 3)
        out.append(r)
    return out


def to_json(results: list[TheoremResult]) -> str:
    return json.dumps({"theorems": [asdict(r) for r in results]}, indent=2, default=float)


def format_report(results: list[TheoremResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.name}: {r.verdict.upper()}  ({r.points_checked} points, {r.seconds:.1f} s)")
        lines.append(f"  claim: {r.statement}")
        for k, v in r.details.items():
            if isinstance(v, dict):
                lines.append(f"  {k}:")
                lines += [f"    {kk}: {vv}" for kk, vv in v.items()]
            elif isinstance(v, list):
                lines.append(f"  {k}:")
                lines += [f"    {vv}" for vv in v]
            else:
                lines.append(f"  {k}: {v}")
        if r.counterexamples:
            lines.append(f"  counterexamples ({len(r.counterexamples)} shown):")
            lines += [f"    {c}" for c in r.counterexamples]
        lines.append("")
    return "\n".join(lines).rstrip()
