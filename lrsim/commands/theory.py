"""``lrsim theorems``, ``lrsim symbolic``, ``lrsim report`` and the closed-form ``lrsim plan``'s table."""

from __future__ import annotations

import argparse
import json
import sys

from ..format import format_plan
from . import HELP
from .common import add_html_arg, add_theory_args, check_html, positive_int, read_traces, write_html


def add_parsers(sub) -> None:
    p = sub.add_parser("theorems", help=HELP["theorems"])
    p.add_argument("--resolution", type=positive_int, default=14, help="grid values per axis (Thm 4: N^4 x 25 M values)")
    p.add_argument("--stages", type=positive_int, default=100_000, help="Monte Carlo stages per point (Thm 1/2)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("symbolic", help=HELP["symbolic"])
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("report", help=HELP["report"])
    add_theory_args(p)
    p.add_argument("--resolution", type=positive_int, default=10, help="theorem grid values per axis")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_html_arg(p)


def closed_plan(a: argparse.Namespace):
    from ..planner import plan

    return plan(a.alpha1, a.c1, a.alpha2, a.c2, a.budget, a.mode, top=a.top)


def run_theorems(a: argparse.Namespace) -> str:
    from ..theorems import check_all, format_report, to_json

    results = check_all(a.resolution, a.stages, progress=sys.stderr.isatty())
    return to_json(results) if a.json else format_report(results)


def run_symbolic(a: argparse.Namespace) -> str:
    from ..theory.symbolic import report

    return report(as_json=a.json)


def run_report(a: argparse.Namespace) -> str:
    from ..theorems import check_all
    from ..theory.symbolic import compare_with_seeds

    a.top = 5
    check_html(a)
    p = closed_plan(a)
    results = check_all(a.resolution, 50_000, progress=sys.stderr.isatty())
    seeds = compare_with_seeds()
    measured = embedded_summary(a.budget)
    text = _report_text(a, p, results, seeds, measured)
    if a.html:
        from ..report_html import closed_plan_figures, trace_figures, verdict_figure

        figs = closed_plan_figures(p) + [verdict_figure(results, seeds)] + trace_figures(read_traces([]))
        write_html(a, "lrsim report: budget plan, theorem checks, embedded traces", text, figs)
    if a.json:
        from dataclasses import asdict

        return json.dumps({"plan": p.to_dict(), "theorems": [asdict(r) for r in results],
                           "seed_formulas": [asdict(f) for f in seeds], "embedded_trace": measured},
                          indent=2, default=float)
    return text


def _report_text(a: argparse.Namespace, p, results, seeds, measured: dict) -> str:
    summary = ["", "Theorem checks (run `lrsim theorems` for details):"]
    summary += [f"  {r.name}: {r.verdict.upper()} ({r.points_checked} points)" for r in results]
    summary += ["", "Seed formulas vs sympy derivations (run `lrsim symbolic` for details):"]
    summary += [f"  {f.name}: {f.verdict}" for f in seeds]
    m = measured
    summary += ["", f"Measured: the embedded default traces ({m['source']}; `lrsim calibrate` for details):",
                f"  alpha1 = {m['alpha1']:.3f} [{m['alpha1_ci95'][0]:.3f}, {m['alpha1_ci95'][1]:.3f}], "
                f"alpha2 = {m['alpha2']:.3f}, c1 = {m['c1']:.3f}, verifier {m['verify_ms']:.0f} ms per step pair",
                f"  closed-form plan on these numbers (M = {a.budget}): {m['closed_form']['mode']} "
                f"k1 = {m['closed_form']['k1']}, k2 = {m['closed_form']['k2']} promises "
                f"{m['closed_form']['speedup']:.2f}x; the simulator calibrated on the traces gives it "
                f"{m['closed_form']['simulated']:.2f}x",
                "  (`lrsim plan --trace --budget M` searches every configuration on the recorded workload)"]
    return format_plan(p) + "\n" + "\n".join(summary)


def embedded_summary(budget: int) -> dict:
    """Calibration of the embedded default traces and the closed-form plan they imply, priced by the simulator."""
    from ..prediction.calibrate import calibrate
    from ..prediction.replay import closed_form_plan
    from ..trace import mode_name

    traces = read_traces([])
    c = calibrate(traces)
    _, choice = closed_form_plan(traces, budget)
    h = traces[0].header
    return {"source": f"lrref {h.backend or ''} on {h.hardware.get('cpus', '?')} CPUs, "
                      f"modes {', '.join(sorted({mode_name(t.header) for t in traces}))}",
            "alpha1": c.alpha1.p, "alpha1_ci95": [c.alpha1.lo, c.alpha1.hi], "alpha2": c.alpha2, "c1": c.c1,
            "verify_ms": 1000 * c.verify_s.mean,
            "closed_form": {"mode": choice["mode"], "k1": choice["k1"], "k2": choice["k2"],
                            "speedup": choice["closed_form_speedup"], "simulated": choice["simulated_speedup"]}}
