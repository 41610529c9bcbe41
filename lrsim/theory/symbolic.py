"""Symbolic derivations (sympy) of every closed form in :mod:`lrsim.theory`.

Each ``derive_*`` function starts from the definition the paper states (an
expectation over the geometric number ``X`` of accepted drafts,
``P(X = x) = alpha^x (1 - alpha)``), lets sympy do the sums, and returns the
simplified expression.  :func:`compare_with_seeds` then proves or refutes
equality with the forms printed in the source documents (``shared/seeds``)
and gives a numeric witness for every disagreement.

Sums with symbolic bounds come back from sympy as ``Piecewise`` (a branch for
``alpha = 1``, a branch for a divergent series).  :func:`_interior` keeps the
branch valid for ``0 < alpha < 1`` and ``k >= 1``: every condition sympy
produces here is an equality (a measure-zero case) or a strict inequality
that holds on the whole interior, so it is decided at one interior point.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
import sympy as sp

alpha = sp.Symbol("alpha", positive=True)
c = sp.Symbol("c", positive=True)
k = sp.Symbol("k", integer=True, positive=True)
_x, _q, _r = sp.symbols("x q r", integer=True, nonnegative=True)
_b = sp.Symbol("b", positive=True)
_INTERIOR = {alpha: sp.Rational(1, 2), _b: sp.Rational(1, 3), k: 3, c: sp.Rational(1, 5)}


def _interior(expr: sp.Expr) -> sp.Expr:
    """Replace each Piecewise by the branch that holds for 0 < alpha < 1."""

    def pick(*args):
        for value, cond in args:
            if cond is sp.true or bool(cond.subs(_INTERIOR)):
                return value
        raise ValueError(f"no interior branch in {args}")

    return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: pick(*e.args))


def _pmf(x: sp.Expr) -> sp.Expr:
    """P(X = x) for X ~ accepted drafts before the first rejection."""
    return alpha**x * (1 - alpha)


@lru_cache(maxsize=None)
def expected_steps_per_cycle() -> sp.Expr:
    """``E[min(X, k-1) + 1]``: units kept per cycle when ``k-1`` drafts are checked.

    Split at ``x = k-1``: for ``x <= k-2`` the cycle keeps ``x + 1`` units;
    for ``x >= k-1`` (probability ``alpha^(k-1)``) all ``k-1`` drafts plus
    the target's bonus unit, ``k``.
    """
    below = sp.Sum((_x + 1) * _pmf(_x), (_x, 0, k - 2)).doit()
    return sp.simplify(_interior(below) + k * alpha ** (k - 1))


@lru_cache(maxsize=None)
def derive_g() -> sp.Expr:
    """Token SD: units per cycle over cycle time ``(k-1) c + 1`` (units of T)."""
    return sp.simplify(expected_steps_per_cycle() / (1 + c * (k - 1)))


def derive_f_sync() -> sp.Expr:
    """Sync LR (Alg. 1): the same renewal-reward ratio with steps for tokens."""
    return derive_g()


@lru_cache(maxsize=None)
def derive_s1() -> sp.Expr:
    """Async S1 = E[X + 1] / E[1 + c X] (stage time ``T + c T X``)."""
    ex = sp.simplify(_interior(sp.Sum(_x * _pmf(_x), (_x, 0, sp.oo)).doit()))
    return sp.simplify((1 + ex) / (1 + c * ex))


@lru_cache(maxsize=None)
def expected_blocks() -> sp.Expr:
    """``E[ceil((X+1)/k)]``: write ``X = q k + r`` (0 <= r < k); then the
    ceiling is ``q + 1`` and ``P = (1-alpha) alpha^r (alpha^k)^q``, so the
    double sum factorises into a sum over ``r`` times a sum over ``q``."""
    over_r = _interior(sp.Sum(alpha**_r, (_r, 0, k - 1)).doit())
    over_q = _interior(sp.Sum((_q + 1) * _b**_q, (_q, 0, sp.oo)).doit()).subs(_b, alpha**k)
    return sp.simplify((1 - alpha) * over_r * over_q)


@lru_cache(maxsize=None)
def expected_remainder() -> sp.Expr:
    """``E[X mod k] = (1-alpha) sum_q alpha^(q k) sum_r r alpha^r``."""
    over_r = _interior(sp.Sum(_r * alpha**_r, (_r, 0, k - 1)).doit())
    over_q = _interior(sp.Sum(_b**_q, (_q, 0, sp.oo)).doit()).subs(_b, alpha**k)
    return sp.simplify((1 - alpha) * over_r * over_q)


@lru_cache(maxsize=None)
def derive_s2() -> sp.Expr:
    """Async S2 = E[X + 1] / E[ceil((X+1)/k) + c (X mod k)]."""
    return sp.simplify((1 / (1 - alpha)) / (expected_blocks() + c * expected_remainder()))


@lru_cache(maxsize=None)
def derive_sd_gap() -> sp.Expr:
    """``1/(1-alpha) - g``, put over one denominator.

    Its numerator ``c (k-1) + alpha^k`` is positive for ``c >= 0, k >= 1``,
    which proves the ceiling ``g <= 1/(1-alpha)``.
    """
    return sp.factor(sp.together(1 / (1 - alpha) - derive_g()))


def _limit_k_inf(expr: sp.Expr) -> sp.Expr:
    """``lim_{k->oo}`` for ``0 < alpha < 1``, via ``alpha = exp(-t)``, ``t > 0``."""
    t = sp.Symbol("t", positive=True)
    lim = sp.limit(expr.subs(alpha, sp.exp(-t)), k, sp.oo)
    return sp.simplify(lim.subs(t, -sp.log(alpha)))


@lru_cache(maxsize=None)
def derive_sd_limit() -> sp.Expr:
    """``lim_{k->inf} g`` at ``c = 0``: the ceiling is approached only if drafting is free."""
    return _limit_k_inf(derive_g().subs(c, 0))


@lru_cache(maxsize=None)
def derive_s2_limit() -> sp.Expr:
    """``lim_{k->inf} S2``: equals S1, so S2 approaches the draft-limited regime."""
    return _limit_k_inf(derive_s2())


@dataclass
class Finding:
    """One comparison of a derived form with a printed (or expected) one."""

    name: str
    source: str
    derived: str
    printed: str
    verdict: str  # "proved equal" | "differs" | "equal numerically, not proved"
    latex: str
    witness: dict = field(default_factory=dict)


def _witness(lhs: sp.Expr, rhs: sp.Expr) -> dict:
    """Compare ``lhs`` and ``rhs`` on a grid of (alpha, c, k).

    Returns the first grid point (in a fixed, typical-first order) where they
    differ by more than 1e-9 relative, with the share of grid points that
    differ and the largest relative difference.
    """
    f = sp.lambdify((alpha, c, k), lhs, "numpy")
    g_ = sp.lambdify((alpha, c, k), rhs, "numpy")
    cc, aa, kk = (m.ravel() for m in np.meshgrid([0.2, 0.1, 0.35, 0.05, 0.5], np.linspace(0.6, 0.05, 12).tolist()
                                                  + np.linspace(0.65, 0.95, 7).tolist(), np.arange(3, 9).tolist() + [1, 2],
                                                  indexing="ij"))
    with np.errstate(all="ignore"):
        x = np.broadcast_to(np.asarray(f(aa, cc, kk), dtype=float), aa.shape)
        y = np.broadcast_to(np.asarray(g_(aa, cc, kk), dtype=float), aa.shape)
        rel = np.abs(x - y) / np.maximum(np.abs(x), 1e-300)
    rel = np.where(np.isfinite(rel), rel, np.inf)
    bad = np.flatnonzero(rel > 1e-9)
    i = bad[0] if bad.size else int(np.argmax(rel))
    return {
        "alpha": float(aa[i]),
        "c": float(cc[i]),
        "k": int(kk[i]),
        "derived": float(x[i]),
        "printed": float(y[i]),
        "share_of_grid_differing": float(bad.size / rel.size),
        "grid_points": int(rel.size),
        "max_rel_diff": float(rel.max()),
    }


def compare(name: str, source: str, derived: sp.Expr, printed: sp.Expr) -> Finding:
    """Prove ``derived == printed`` symbolically, else report a witness."""
    diff = sp.simplify(sp.expand(sp.powsimp(sp.together(derived - printed), force=True)))
    wit = _witness(derived, printed)
    if diff == 0:
        verdict = "proved equal"
    elif wit["max_rel_diff"] < 1e-12:
        verdict = "equal numerically, not proved"
    else:
        verdict = "differs"
    return Finding(name, source, str(derived), str(printed), verdict, sp.latex(derived), wit)


def _seed_forms() -> list[tuple[str, str, sp.Expr, sp.Expr]]:
    a, gam = alpha, k - 1  # seeds 000 (Sec. A3) and 002 write token SD with gamma = k - 1 drafts
    g, s2 = derive_g(), derive_s2()
    ex = a / (1 - a)
    return [
        ("g (gamma form)", "seed 000 Sec. A3 and seed 002: (1-a^(gamma+1))/((1-a)(1+c gamma))",
         g, (1 - a ** (gam + 1)) / ((1 - a) * (1 + c * gam))),
        ("g(k2)", "seeds 000 Sec. 3.3, 001: (1-a^k)/((1-a)(1-c+ck))",
         g, (1 - a**k) / ((1 - a) * (1 - c + c * k))),
        ("f_sync (Theorem 1)", "seeds 000, 001: (1-a^k)/((1-a)(1-c+ck))",
         derive_f_sync(), (1 - a**k) / ((1 - a) * (1 - c + c * k))),
        ("S1 (ratio form)", "seed 001: (1+E[X])/(1+c E[X])",
         derive_s1(), (1 + ex) / (1 + c * ex)),
        ("S1 (closed form)", "seed 001: 1/(c+(1-c)(1-a))",
         derive_s1(), 1 / (c + (1 - c) * (1 - a))),
        ("S2 (closed form)", "seed 001 (SPEC.md): (1-a^k)/((1-a)+c a-a^(k+1)-k(1-a)a^k)",
         s2, (1 - a**k) / ((1 - a) + c * a - a ** (k + 1) - k * (1 - a) * a**k)),
        ("S2 (corrected, used by lrsim.theory.s2)", "this project: c multiplies the whole bracket",
         s2, (1 - a**k) / ((1 - a) + c * (a - a ** (k + 1) - k * (1 - a) * a**k))),
        ("SD ceiling gap 1/(1-a) - g", "seeds 000, 002: g <= 1/(1-a); numerator must be c(k-1)+a^k >= 0",
         sp.factor(sp.numer(derive_sd_gap())) / sp.factor(sp.denom(derive_sd_gap())),
         (c * (k - 1) + a**k) / ((1 - a) * (1 + c * (k - 1)))),
        ("lim S2 as k -> oo", "S2 should tend to S1 (no depth limit)",
         derive_s2_limit() + 0 * k, derive_s1() + 0 * k),
    ]


# Disagreements between the seeds' texts that are not formulas to simplify.
TEXT_FINDINGS: list[dict] = [
    {"topic": "ParallelDim_f (async)", "finding":
     "seed 000 Sec. 3.3 gives min(ceil(1/c), k1); seed 001 prints min(ceil(1/c1), k2), a typo (k2 is the token dimension)."},
    {"topic": "meaning of k1 in sync LR", "finding":
     "seed 000 Sec. 3.2 sets k1 = gamma1 (drafted steps), but Algorithm 1 has the target write gamma+1 steps and "
     "App. B says Theorem 1's gamma is Leviathan's gamma+1; f_sync(k) is right only with k = drafted steps + 1."},
    {"topic": "Theorem 4 region", "finding":
     "seed 000 states 0.52 < alpha < 0.8 and even M >= 16 (App. B; Sec. 3.3 omits 'even'); seed 001 prints "
     "0.52 <= alpha <= 0.8."},
    {"topic": "async with k1 = 1 and c1 >= 1", "finding":
     "Theorem 2's case split puts k1 = 1 in the S1 regime when c1 >= 1 (ceil(1/c1) = 1), giving "
     "1/(1-a+ca) < 1 for c1 > 1, while Sec. 3.3 says k1 = 1 is pure token SD (f = 1); lrsim uses f_async(1) = 1."},
    {"topic": "model pairs", "finding":
     "seed 002 names 'DeepSeek-R1-Distill (1.7B/32B) and Qwen3 (1.5B/32B)'; seed 000 has the sizes the other way "
     "round (R1-Distill 1.5B draft, Qwen3 1.7B draft)."},
]


def compare_with_seeds() -> list[Finding]:
    """Every seed formula against its derivation (see :data:`TEXT_FINDINGS` for the rest)."""
    return [compare(*row) for row in _seed_forms()]


@lru_cache(maxsize=None)
def derivations() -> dict[str, sp.Expr]:
    """The derived closed forms, by name (what the tests hold ``theory`` against)."""
    return {
        "E[min(X,k-1)+1]": expected_steps_per_cycle(),
        "g": derive_g(),
        "f_sync": derive_f_sync(),
        "S1": derive_s1(),
        "E[ceil((X+1)/k)]": expected_blocks(),
        "E[X mod k]": expected_remainder(),
        "S2": derive_s2(),
        "1/(1-alpha) - g": derive_sd_gap(),
        "lim_{k->oo} g | c=0": derive_sd_limit(),
        "lim_{k->oo} S2": derive_s2_limit(),
    }


def report(as_json: bool = False) -> str:
    """Human (or JSON) report: derivations in LaTeX, then every seed comparison."""
    found = compare_with_seeds()
    derived = derivations()
    if as_json:
        return json.dumps(
            {
                "derivations": {n: {"expr": str(e), "latex": sp.latex(e)} for n, e in derived.items()},
                "seed_comparisons": [asdict(f) for f in found],
                "text_findings": TEXT_FINDINGS,
            },
            indent=2,
        )
    lines = ["Derived closed forms (LaTeX):"]
    lines += [f"  {n:22s} = {sp.latex(e)}" for n, e in derived.items()]
    lines.append("")
    lines.append("Seed formulas vs derivations:")
    for f in found:
        mark = {"proved equal": "OK  ", "differs": "DIFF"}.get(f.verdict, "NUM ")
        lines.append(f"  [{mark}] {f.name}: {f.verdict}  ({f.source})")
        if f.verdict == "differs":
            w = f.witness
            lines.append(
                f"         witness alpha={w['alpha']:.2f} c={w['c']:.2f} k={w['k']}: "
                f"derived {w['derived']:.6g} vs printed {w['printed']:.6g}; "
                f"differs at {100 * w['share_of_grid_differing']:.0f}% of {w['grid_points']} grid points"
            )
    lines.append("")
    lines.append("Textual disagreements between seeds:")
    lines += [f"  - {t['topic']}: {t['finding']}" for t in TEXT_FINDINGS]
    return "\n".join(lines)
