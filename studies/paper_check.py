"""Paper check: predict every speedup the seeds report from the embedded H100 profile and the inputs its source states.

``python studies/paper_check.py [--steps 20000] [--out figures]`` (~5 min on 2 cores)

Rows and inputs are in ``studies/data/paper_check/reported.json``: for every
input its value, where it is stated (SPEC.md, a seed file and line, the
official README or scripts) and how it was obtained (reported, borrowed from a
related setup, assumed by a stated rule, or inferred from *another* reported
number).  No input is fitted to the number its row predicts.

Every prediction is :func:`lrsim.compose.predict` (async LR on the event
simulator; ``k1 = gamma + 1``) on ``h100-ctx0-kernel``: one H100 per model,
kernel sums at context 0.  Three kinds of rows:

- **forward**: step acceptance, verifier latency and gamma as stated; for an
  LR + n-gram row, alpha2 inferred from an n-gram-alone speedup (exactly: a
  target-only run with ``k2`` positions writes ``(1 - a^k2)/(1 - a)`` tokens
  per pass at ``T(1, k2)/T(1, 1)`` the cost);
- **composition**: an LR + n-gram row predicted from the same setup's LR-alone
  speedup (alpha1 inferred by bisection on the simulator) and n-gram-alone
  speedup: does ``h = f g`` compose on this hardware?
- **range / unpredictable**: a range over unnamed datasets, or inputs no source
  states (reported with the reason, never forced).

Interval: the smallest and largest 95% bound over the input bands (acceptance
range where one is stated, step length 1-50 / 1-100 / always 100 tokens).
Closed form: the paper's ``f_async(alpha1, c1, k1) g(alpha2, ~0, k2)`` with the
profile's ``c1`` (composition: ``S_LR g``).  A second column for the H200 rows
prices the target at the official README's measured autoregressive speed
(76.38 tok/s, Qwen3-32B, TP = 2 on H200), not the one-H100 profile: an
explicit what-if for the TP/GPU cause, drawn from that source's baseline,
never from a speedup.
Writes ``figures/paper_check.{html,png,json}`` and prints the table as Markdown.
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import plotly.graph_objects as go

from lrsim import theory
from lrsim.atomic import atomic_write
from lrsim.calibrate import solve_alpha
from lrsim.compose import Behaviour, predict, sim_config
from lrsim.cost.hardware import HardwareSpec
from lrsim.cost.library import load_profile
from lrsim.dists import Constant, parse_dist
from lrsim.plots import save_figure
from lrsim.replay import TINY_C2
from lrsim.sim import simulate
from lrsim.trace import Setting

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "studies" / "data" / "paper_check" / "reported.json"
PROFILE = "h100-ctx0-kernel"
README_AR_TOK_S = 76.38  # official README, Autoregressive, Qwen3-32B TP = 2 on H200


@dataclass
class Result:
    """One row of the table."""

    id: str
    group: str
    label: str
    kind: str
    reported: float | list | None
    inputs: list[str]  #: "name = value (how: source)"
    predicted: float | None = None
    lo: float | None = None
    hi: float | None = None
    closed_form: float | None = None
    h200_what_if: float | None = None
    note: str = ""
    counted: bool = True  #: all inputs stated or inferred by a rule (not conditional on an assumed verifier)
    extra: dict = field(default_factory=dict)

    def error(self, value: float | None) -> float | None:
        if value is None or not isinstance(self.reported, (int, float)):
            return None
        return value / self.reported - 1


# ----------------------------------------------------------------------------- inputs -> lrsim objects


def hw_for(target: str, draft: str, verifier_s: float | None, what_if: bool = False) -> HardwareSpec:
    """The profile's hardware; ``what_if``: the target at the README's measured AR speed (TP = 2 on H200)."""
    ver = Constant(verifier_s) if verifier_s else None
    if not what_if:
        return HardwareSpec(PROFILE, target, draft, verifier_latency=ver)
    e = readme_efficiency()
    return HardwareSpec(PROFILE, target, draft, verifier_latency=ver, target_tp=2, tp_efficiency=e)


def readme_efficiency() -> float:
    """E with target pass = profile / (2 E) = 1 / 76.38 s at batch 1 for Qwen3-32B (the README's AR speed)."""
    t = load_profile(PROFILE).time_ms("qwen3-32b", 0, 1, 1) / 1000.0
    return t / (2 * (1.0 / README_AR_TOK_S))  # 2 E = t / t_readme


def behaviour(alpha1: float, steps: str, request: int, alpha2: float | None = None, prompt: int = 150) -> Behaviour:
    return Behaviour(alpha1=alpha1, alpha2=alpha2, step_tokens=parse_dist(steps), request_tokens=Constant(request),
                     prompt_tokens=prompt, source="numbers")


def infer_alpha2(hw: HardwareSpec, ngram_alone: float, tokens: int) -> float:
    """alpha2 such that target-only decoding with ``tokens`` n-gram tokens runs ``ngram_alone`` faster on the profile.

    ``speedup = E[tokens/pass] T(1,1) / T(1,k2)``, ``E = (1 - a^k2)/(1 - a)``, ``k2 = tokens + 1``.
    """
    prof, k2 = load_profile(hw.profile), tokens + 1
    r = prof.time_ms(hw.target_arch, 0, 1, k2) / prof.time_ms(hw.target_arch, 0, 1, 1)  # cost of a k2-position pass
    a = solve_alpha(ngram_alone * r, k2)
    if a is None:
        raise SystemExit(f"paper_check: n-gram alone {ngram_alone}x is out of reach at {tokens} tokens")
    return a


def cf_alpha2(ngram_alone: float, tokens: int) -> float:
    """The closed form's alpha2: ``g = (1 - a^k2)/(1 - a) = S`` (n-gram drafting and its extra positions free)."""
    return solve_alpha(ngram_alone, tokens + 1)


def run(b: Behaviour, hw: HardwareSpec, k1: int, k2: int, steps: int, seed: int = 0):
    return simulate(sim_config(b, hw, Setting("async", k1, k2), steps, seed))


def infer_alpha1(hw: HardwareSpec, b: Behaviour, k1: int, lr_alone: float, steps: int = 4000) -> float | None:
    """alpha1 at which async LR alone (``k1``, no n-gram) simulates ``lr_alone`` on ``hw`` (bisection)."""
    lo, hi = 0.0, 1.0

    def f(a: float) -> float:
        return run(replace(b, alpha1=a, alpha2=None), hw, k1, 1, steps).speedup
    if not f(lo) <= lr_alone <= f(hi):
        return None
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < lr_alone else (lo, mid)
    return (lo + hi) / 2


def closed_form(a1: float, c1: float, k1: int, a2: float | None, k2: int) -> float:
    g = float(theory.g(a2, TINY_C2, k2)) if a2 is not None and k2 > 1 else 1.0
    return float(theory.f_async(a1, c1, k1)) * g


def describe(inputs: dict, common: dict) -> list[str]:
    out = []
    for name, v in inputs.items():
        v = common[v] if isinstance(v, str) else v
        band = f" [{v['band'][0]}, {v['band'][1]}]" if "band" in v else ""
        out.append(f"{name} = {v['value']}{band} ({v['how']}: {v['source']})")
    return out


# ----------------------------------------------------------------------------- predictions


class Check:
    """The simulation settings of one study run and the step-length rule from the data file."""

    def __init__(self, data: dict, steps: int):
        self.data, self.steps = data, steps
        st = data["common"]["step_tokens"]
        self.step, self.step_band = st["value"], list(st["band"])

    def predict(self, b: Behaviour, hw: HardwareSpec, k1: int, k2: int, steps: int | None = None):
        return predict(b, hw, Setting("async", k1, k2), steps=steps or self.steps, bootstrap=0)

    def forward(self, target: str, draft: str, verifier_s: float | None, alpha1: float, band: list | None, k1: int,
                request: int, ngram: float | None = None, tokens: int = 8, k2: int = 1) -> dict:
        """Central prediction, its interval over the input bands, the closed form and the H200 what-if."""
        hw = hw_for(target, draft, verifier_s)
        a2 = infer_alpha2(hw, ngram, tokens) if ngram else None
        p = self.predict(behaviour(alpha1, self.step, request, a2), hw, k1, k2)
        lows, highs = [p.speedup_ci95[0]], [p.speedup_ci95[1]]
        for a, s in itertools.product(sorted(set(band or [alpha1])), [self.step] + self.step_band):
            if (a, s) != (alpha1, self.step):
                q = self.predict(behaviour(a, s, request, a2), hw, k1, k2, self.steps // 2)
                lows.append(q.speedup_ci95[0])
                highs.append(q.speedup_ci95[1])
        a2cf = cf_alpha2(ngram, tokens) if ngram else None
        out = {"predicted": p.speedup, "lo": min(lows), "hi": max(highs), "c1": p.c1, "alpha2": a2,
               "closed_form": closed_form(alpha1, p.c1, k1, a2cf, k2), "notes": p.notes}
        return out

    def what_if(self, target: str, draft: str, verifier_s: float | None, alpha1: float, k1: int, request: int,
                ngram: float | None = None, tokens: int = 8, k2: int = 1) -> float:
        """The same prediction with the target at the README's measured AR speed (TP = 2 on H200)."""
        hw = hw_for(target, draft, verifier_s, what_if=True)
        a2 = infer_alpha2(hw, ngram, tokens) if ngram else None
        return self.predict(behaviour(alpha1, self.step, request, a2), hw, k1, k2).speedup

    def composition(self, target: str, draft: str, verifier_s: float | None, lr_alone: float, k1: int,
                    request: int, ngram: float, tokens: int, k2: int) -> dict:
        """LR + n-gram from the same setup's LR-alone (alpha1 inferred) and n-gram-alone (alpha2 inferred)."""
        hw = hw_for(target, draft, verifier_s)
        a2 = infer_alpha2(hw, ngram, tokens)
        preds, alphas = [], []
        for i, s in enumerate([self.step] + self.step_band):
            a1 = infer_alpha1(hw, behaviour(0.5, s, request), k1, lr_alone)
            if a1 is None:
                return {"note": f"LR alone {lr_alone}x is out of the simulator's reach at k1 = {k1} on this profile"}
            alphas.append(a1)
            preds.append(self.predict(behaviour(a1, s, request, a2), hw, k1, k2, None if i == 0 else self.steps // 2))
        g = float(theory.g(cf_alpha2(ngram, tokens), TINY_C2, k2))
        return {"predicted": preds[0].speedup, "lo": min(p.speedup_ci95[0] for p in preds),
                "hi": max(p.speedup_ci95[1] for p in preds), "closed_form": lr_alone * g, "alpha1": alphas[0],
                "alpha1_band": [min(alphas), max(alphas)], "alpha2": a2}


def _value(inputs: dict, key: str):
    return inputs[key]["value"]


def _k1(inputs: dict) -> int:
    return int(inputs["gamma"]["value"]) + 1  # async: gamma drafts and gamma + 1 target steps ahead


def _result(row: dict, common: dict, out: dict, counted: bool = True) -> Result:
    r = Result(row["id"], row["group"], row["label"], row["kind"], row["reported"],
               describe(row.get("inputs", {}), common), counted=counted)
    for key in ("predicted", "lo", "hi", "closed_form"):
        setattr(r, key, out.get(key))
    r.note = out.get("note", "")
    r.extra = {k: v for k, v in out.items() if k in ("alpha1", "alpha1_band", "alpha2", "c1", "k1")}
    return r


def rows_from_file(chk: Check) -> list[Result]:
    """The explicit rows of the data file (paper and official README)."""
    common, out = chk.data["common"], []
    for row in chk.data["rows"]:
        inp = row["inputs"]
        if row["kind"] == "range":
            out.append(range_row(chk, row))
            continue
        v = partial(_value, inp)
        ver = common[inp["verifier_s"]]["value"] if isinstance(inp["verifier_s"], str) else v("verifier_s")
        args = (v("target_arch"), v("draft_arch"), ver)
        ng = {"ngram": v("ngram_alone"), "tokens": inp["ngram_alone"].get("tokens", v("ngram_tokens")),
              "k2": v("ngram_tokens") + 1} if "ngram_alone" in inp else {}
        if row["kind"] == "composition":
            res = chk.composition(*args, v("lr_alone"), _k1(inp), v("request_tokens"), **ng)
        elif row.get("plateau"):
            res = plateau(chk, args, v("alpha1"), v("request_tokens"))
        else:
            res = chk.forward(*args, v("alpha1"), inp["alpha1"].get("band"), _k1(inp), v("request_tokens"), **ng)
        r = _result(row, common, res)
        if row.get("h200") and row["kind"] == "forward":
            r.h200_what_if = chk.what_if(*args, v("alpha1"), _k1(inp), v("request_tokens"), **ng)
        out.append(r)
    return out


def plateau(chk: Check, args: tuple, alpha1: float, request: int) -> dict:
    """LR alone at the best look-ahead of k1 = 2..10 (a plateau over draft steps)."""
    hw = hw_for(*args)
    best = max(range(2, 11), key=lambda k: chk.predict(behaviour(alpha1, chk.step, request), hw, k, 1,
                                                       chk.steps // 2).speedup)
    out = chk.forward(*args, alpha1, None, best, request)
    out["closed_form"] = max(closed_form(alpha1, out["c1"], k, None, 1) for k in range(2, 11))
    out["k1"] = best
    return out


def range_row(chk: Check, row: dict) -> Result:
    """A range over unnamed datasets: predicted min and max over the stated acceptance range, both pairs, GSM8K/AIME."""
    common = chk.data["common"]
    ver = common["verifier_7b"]["value"]
    both = row["id"] == "paper-both-range"
    preds, cfs = [], []
    pairs = [["qwen2.5-32b", "qwen2.5-1.5b"], ["qwen3-32b", "qwen3-1.7b"]]
    for (t, d), a1, req in itertools.product(pairs, [0.5, 0.63], [1000] if both else [1000, 10000]):
        hw = hw_for(t, d, ver)
        a2 = infer_alpha2(hw, 1.4, 8) if both else None  # the GSM8K n-gram-alone 1.4x (seed002 line 25)
        p = chk.predict(behaviour(a1, chk.step, req, a2), hw, 7, 9 if both else 1, chk.steps // 2)
        preds.append(p.speedup)
        cfs.append(closed_form(a1, p.c1, 7, cf_alpha2(1.4, 8) if both else None, 9 if both else 1))
    r = Result(row["id"], row["group"], row["label"], "range", row["reported"],
               describe(row.get("inputs", {}), common), counted=False, note=row["why"])
    r.extra = {"predicted_range": [min(preds), max(preds)], "closed_form_range": [min(cfs), max(cfs)]}
    return r


def review_verifier_rows(chk: Check) -> list[Result]:
    """seed004's per-verifier table: LR and LR + n-gram per verifier and dataset (QwQ-32B + R1-Distill-1.5B, H200)."""
    rv, out = chk.data["review_verifiers"], []
    t, d, k1 = rv["target_arch"], rv["draft_arch"], 7  # gamma 6 (the paper's default, assumed): k1 = 7
    for (name, v), ds in itertools.product(rv["verifiers"].items(), ("GSM8K", "AIME")):
        lat, a1, req = v["latency"], v["acceptance"][ds], rv["request_tokens"][ds]
        ng = rv["ngram_alone"][ds]
        known = lat is not None
        lat_s = lat if known else 0.025  # Score: conditional on the 32B judge's latency (its verifier is the 32B)
        base = [f"alpha1 = {a1} (reported: seed004 lines 31-32)", f"verifier = {lat_s} s per step ("
                + (f"reported: {v['latency_source']})" if known else "ASSUMED: not stated; the 32B judge's 0.025 s)"),
                "gamma = 6, so k1 = 7 (assumed: the paper's default; not stated)",
                f"request = {req} tokens (borrowed: {rv['request_tokens']['source']})"]
        for kind, rep in (("lr", v["lr"][ds]), ("both", v["both"][ds])):
            ngi = {"ngram": ng["value"], "tokens": ng["tokens"], "k2": ng["tokens"] + 1} if kind == "both" else {}
            res = chk.forward(t, d, lat_s, a1, None, k1, req, **ngi)
            label = f"review {ds}, {name}: LR" + (" + n-gram" if kind == "both" else "")
            r = Result(f"rv-{name}-{ds}-{kind}".replace(" ", ""), "review thread (QwQ-32B)", label, "forward", rep,
                       base + ([f"n-gram alone = {ng['value']}x at 8 tokens, alpha2 inferred ({ng['source']})"]
                               if kind == "both" else []), counted=known)
            r.predicted, r.lo, r.hi, r.closed_form = res["predicted"], res["lo"], res["hi"], res["closed_form"]
            r.extra = {"alpha2": res["alpha2"], "c1": res["c1"]}
            r.h200_what_if = chk.what_if(t, d, lat_s, a1, k1, req, **ngi)
            if not known:
                r.note = "verifier latency not stated: conditional on 0.025 s, not counted"
            out.append(r)
            if kind == "both" and known:
                out.append(review_composition(chk, name, ds, t, d, lat_s, v["lr"][ds], req, ng, rep, base))
    return out


def review_composition(chk: Check, name: str, ds: str, t: str, d: str, lat: float, lr: float, req: int, ng: dict,
                       rep: float, base: list) -> Result:
    res = chk.composition(t, d, lat, lr, 7, req, ng["value"], ng["tokens"], ng["tokens"] + 1)
    r = Result(f"rv-{name}-{ds}-comp".replace(" ", ""), "review thread (QwQ-32B)",
               f"review {ds}, {name}: LR + n-gram from LR {lr}x, n-gram {ng['value']}x", "composition", rep,
               [f"LR alone = {lr}x (inferred alpha1 from the same column: seed004 lines 41-42)",
                f"n-gram alone = {ng['value']}x (borrowed: {ng['source']})"] + base[1:])
    for key in ("predicted", "lo", "hi", "closed_form"):
        setattr(r, key, res.get(key))
    r.note = res.get("note", "")
    r.extra = {k: res[k] for k in ("alpha1", "alpha1_band", "alpha2") if k in res}
    return r


def review_qwen3_rows(chk: Check) -> list[Result]:
    """seed004's Qwen3-32B table: draft-model SD (unpredictable), n-gram (inputs), n-gram + LR (forward)."""
    q, out = chk.data["review_qwen3"], []
    a = q["alpha1"]
    for ds, v in q["datasets"].items():
        out.append(Result(f"q3-{ds}-draftsd", "review thread (Qwen3-32B)", f"review {ds}: 1.7B draft-model SD",
                          "unpredictable", v["draft_sd"], [], counted=False,
                          note="token acceptance of the 1.7B draft is not stated"))
        out.append(Result(f"q3-{ds}-ngram", "review thread (Qwen3-32B)", f"review {ds}: n-gram alone", "input",
                          v["ngram"], [], counted=False, note="used as input: alpha2 of the n-gram + LR row"))
        res = chk.forward(q["target_arch"], q["draft_arch"], 0.013, a["value"], a["band"], 7, 10000,
                          ngram=v["ngram"], tokens=8, k2=9)
        r = Result(f"q3-{ds}-both", "review thread (Qwen3-32B)", f"review {ds}: n-gram + LR", "forward", v["both"],
                   [f"alpha1 = {a['value']} [{a['band'][0]}, {a['band'][1]}] (borrowed: {a['source']})",
                    f"n-gram alone = {v['ngram']}x (reported, same row: seed004 lines 57-59): alpha2 inferred at 8 "
                    "tokens (the paper's default, assumed)", "gamma = 6, so k1 = 7 (assumed: the paper's default)",
                    "verifier = 0.013 s (borrowed: seed004 line 43, the paper's default 7B judge)",
                    "request = 10000 tokens (borrowed: seed004 line 44, AIME 'often >10K')"])
        r.predicted, r.lo, r.hi, r.closed_form = res["predicted"], res["lo"], res["hi"], res["closed_form"]
        r.extra = {"alpha2": res["alpha2"], "c1": res["c1"]}
        r.h200_what_if = chk.what_if(q["target_arch"], q["draft_arch"], 0.013, a["value"], 7, 10000, v["ngram"], 8, 9)
        out.append(r)
    return out


# ----------------------------------------------------------------------------- output


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.1f}%" if pct else f"{x:.2f}"


def reported_text(r: Result) -> str:
    if isinstance(r.reported, list):
        return f"{fmt(r.reported[0]) if r.reported[0] else '?'}-{fmt(r.reported[1])}"
    return fmt(r.reported)


def markdown(results: list[Result]) -> str:
    lines = ["| row | kind | predicted [interval] | reported | error | closed form | error | target at README AR "
             "speed (what-if) | error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.kind == "range":
            pr, cf = r.extra["predicted_range"], r.extra["closed_form_range"]
            lines.append(f"| {r.label} | range | {pr[0]:.2f}-{pr[1]:.2f} | {reported_text(r)} | - | "
                         f"{cf[0]:.2f}-{cf[1]:.2f} | - | - | - |")
            continue
        pred = f"{fmt(r.predicted)} [{fmt(r.lo)}, {fmt(r.hi)}]" if r.predicted is not None else (r.note or "-")
        kind = r.kind + ("" if r.counted or r.kind in ("input", "unpredictable") else " (conditional)")
        lines.append(f"| {r.label} | {kind} | {pred} | {reported_text(r)} | {fmt(r.error(r.predicted), True)} | "
                     f"{fmt(r.closed_form)} | {fmt(r.error(r.closed_form), True)} | {fmt(r.h200_what_if)} | "
                     f"{fmt(r.error(r.h200_what_if), True)} |")
    return "\n".join(lines)


def summary(results: list[Result]) -> list[str]:
    out = []
    for kind in ("forward", "composition"):
        rows = [r for r in results if r.kind == kind and r.counted and r.predicted is not None]
        if not rows:
            continue
        e = [abs(r.error(r.predicted)) for r in rows]
        c = [abs(r.error(r.closed_form)) for r in rows]
        closer = sum(a < b for a, b in zip(e, c))
        line = (f"- {kind} rows with known inputs ({len(rows)}): simulator mean |error| {100 * sum(e) / len(e):.1f}%, "
                f"{sum(x <= 0.10 for x in e)} within 10%, closer than the closed form on {closer}; closed form mean "
                f"|error| {100 * sum(c) / len(c):.1f}%, {sum(x <= 0.10 for x in c)} within 10%")
        w = [abs(r.error(r.h200_what_if)) for r in rows if r.h200_what_if is not None]
        if w:
            line += (f"; H200 rows with the target at the README's AR speed ({len(w)}): mean |error| "
                     f"{100 * sum(w) / len(w):.1f}%, {sum(x <= 0.10 for x in w)} within 10%")
        out.append(line)
    return out


def row_by_row(results: list[Result]) -> str:
    """Every row with its inputs and where each came from (printed before the table)."""
    out = []
    for r in results:
        pred = (f"predicted {fmt(r.predicted)} [{fmt(r.lo)}, {fmt(r.hi)}], error {fmt(r.error(r.predicted), True)}; "
                f"closed form {fmt(r.closed_form)} ({fmt(r.error(r.closed_form), True)})"
                if r.predicted is not None else (r.note or "not predicted"))
        if r.kind == "range":
            pred = (f"predicted range {r.extra['predicted_range'][0]:.2f}-{r.extra['predicted_range'][1]:.2f}, closed "
                    f"form {r.extra['closed_form_range'][0]:.2f}-{r.extra['closed_form_range'][1]:.2f}")
        out.append(f"[{r.id}] {r.label}: reported {reported_text(r)}; {pred}")
        out += [f"    {s}" for s in r.inputs]
        if r.extra:
            out.append("    derived: " + ", ".join(f"{k} = {_num(v)}" for k, v in r.extra.items() if v is not None))
        if r.note and r.predicted is not None:
            out.append(f"    note: {r.note}")
    return "\n".join(out)


def _num(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def figure(results: list[Result]) -> go.Figure:
    rows = [r for r in results if r.predicted is not None and isinstance(r.reported, (int, float))]
    fig = go.Figure()
    for kind, symbol in (("forward", "circle"), ("composition", "diamond")):
        sel = [r for r in rows if r.kind == kind]
        fig.add_scatter(x=[r.reported for r in sel], y=[r.predicted for r in sel], mode="markers",
                        marker={"symbol": [symbol if r.counted else symbol + "-open" for r in sel], "size": 9},
                        error_y={"type": "data", "symmetric": False, "array": [r.hi - r.predicted for r in sel],
                                 "arrayminus": [r.predicted - r.lo for r in sel], "thickness": 1},
                        text=[r.label for r in sel], name=f"simulator on {PROFILE} ({kind})")
    fig.add_scatter(x=[r.reported for r in rows], y=[r.closed_form for r in rows], mode="markers",
                    marker={"symbol": "x", "size": 7, "color": "grey"}, text=[r.label for r in rows],
                    name="paper's closed form (profile c1)")
    wi = [r for r in rows if r.h200_what_if is not None]
    fig.add_scatter(x=[r.reported for r in wi], y=[r.h200_what_if for r in wi], mode="markers",
                    marker={"symbol": "triangle-up-open", "size": 8}, text=[r.label for r in wi],
                    name="target at the README's AR speed (TP 2, H200 what-if)")
    lim = [0.6, 3.3]
    fig.add_scatter(x=lim, y=lim, mode="lines", line={"color": "black", "width": 1}, name="predicted = reported")
    for f, dash in ((1.1, "dot"), (0.9, "dot")):
        fig.add_scatter(x=lim, y=[v * f for v in lim], mode="lines", line={"color": "grey", "dash": dash, "width": 1},
                        showlegend=f == 1.1, name="+-10%")
    fig.update_layout(xaxis_title="reported speedup", yaxis_title="predicted speedup", template="plotly_white",
                      title="Paper check: reported speedups vs predictions from the embedded H100 profile "
                            "(open markers: conditional rows)", legend={"orientation": "h", "y": -0.2})
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    ap.add_argument("--steps", type=int, default=20_000, help="simulated output steps per central prediction")
    ap.add_argument("--replot", action="store_true", help="print and draw the results of the last run (its JSON)")
    a = ap.parse_args()
    if a.replot:
        results = [Result(**r) for r in json.loads((a.out / "paper_check.json").read_text())]
    else:
        chk = Check(json.loads(a.data.read_text()), a.steps)
        results = rows_from_file(chk) + review_verifier_rows(chk) + review_qwen3_rows(chk)
    print(row_by_row(results), "", markdown(results), "", *summary(results), sep="\n")
    print(f"- H200 what-if: target pass = profile / (2 x {readme_efficiency():.3f}) = 1/{README_AR_TOK_S} s at batch 1")
    if not a.replot:
        atomic_write(a.out / "paper_check.json", json.dumps([asdict(r) for r in results], indent=1,
                                                            default=float).encode())
    for p in save_figure(figure(results), a.out / "paper_check"):
        print(p)


if __name__ == "__main__":
    main()
