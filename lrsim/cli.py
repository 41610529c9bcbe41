"""``lrsim`` command line: thin wrappers that parse, validate, call one function, print.

Bad input gives one line on stderr and exit code 2; nothing else is printed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable, NoReturn, Sequence

from . import __version__

# Illustrative defaults in the paper's working range (step acceptance "usually > 50%", n-gram drafting
# nearly free, a 16-position budget); they are not measurements.
DEFAULTS = {"alpha1": 0.6, "c1": 0.1, "alpha2": 0.6, "c2": 0.05, "budget": 16, "mode": "async"}


class UsageError(Exception):
    """Bad input: reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _number(kind: Callable[[str], float], check: Callable[[float], bool], what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(v) and check(v)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    return parse


probability = _number(float, lambda v: 0 < v < 1, "a number in (0, 1)")
cost = _number(float, lambda v: v > 0, "a number > 0")
positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")


def _add_theory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha1", type=probability, default=DEFAULTS["alpha1"], help="step acceptance rate, in (0, 1)")
    p.add_argument("--c1", type=cost, default=DEFAULTS["c1"], help="draft/target time per step, > 0")
    p.add_argument("--alpha2", type=probability, default=DEFAULTS["alpha2"], help="token acceptance rate, in (0, 1)")
    p.add_argument("--c2", type=cost, default=DEFAULTS["c2"],
                   help="token drafter/target time per token, > 0 (n-gram lookup: use a small value, e.g. 0.01)")
    p.add_argument("--budget", "-M", type=positive_int, default=DEFAULTS["budget"],
                   help="parallel budget M: target positions at once (sequences x tokens)")
    p.add_argument("--mode", choices=("sync", "async"), default=DEFAULTS["mode"], help="LR scheduling")


def build_parser() -> Parser:
    parser = Parser(prog="lrsim", description="Lookahead Reasoning speedup theory, checks and planning.")
    parser.add_argument("--version", action="version", version=f"lrsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("plan", help="best split of the budget M between step level (k1) and token level (k2)")
    _add_theory_args(p)
    p.add_argument("--top", type=positive_int, default=10, help="rows in the ranked table")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("theorems", help="check Theorems 1-4 and the SD ceiling")
    p.add_argument("--resolution", type=positive_int, default=14, help="grid values per axis (Thm 4: N^4 x 25 M values)")
    p.add_argument("--stages", type=positive_int, default=100_000, help="Monte Carlo stages per point (Thm 1/2)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("symbolic", help="derive the closed forms with sympy and compare with the seeds")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("report", help="the main job: a plan on the given/default numbers plus the theorem report")
    _add_theory_args(p)
    p.add_argument("--resolution", type=positive_int, default=10, help="theorem grid values per axis")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser


def format_plan(plan) -> str:
    b, t, s = plan.best, plan.pure_token, plan.pure_step
    lines = [
        f"Lookahead Reasoning budget plan ({plan.mode}, M = {plan.budget})",
        f"  step level:  alpha1 = {plan.alpha1:g}, c1 = {plan.c1:g}    "
        f"token level: alpha2 = {plan.alpha2:g}, c2 = {plan.c2:g}",
        f"  best split:        k1 = {b.k1:3d}, k2 = {b.k2:3d}  ->  {b.speedup:.3f}x  "
        f"(f = {b.f:.3f}, g = {b.g:.3f}, {b.positions} of {plan.budget} positions)",
        f"  pure token SD:     k1 =   1, k2 = {t.k2:3d}  ->  {t.speedup:.3f}x",
        f"  pure LR:           k1 = {s.k1:3d}, k2 =   1  ->  {s.speedup:.3f}x",
        f"  hybrid gain over the best pure method: {b.speedup / max(t.speedup, s.speedup):.3f}x",
        "",
        "  rank   k1   k2  positions   f(k1)   g(k2)   speedup",
    ]
    lines += [
        f"  {i:4d} {c.k1:4d} {c.k2:4d} {c.positions:10d} {c.f:7.3f} {c.g:7.3f} {c.speedup:8.3f}x"
        for i, c in enumerate(plan.top, 1)
    ]
    if plan.mode == "async":
        lines.append(f"  (async: every k1 >= ceil(1/c1) = {math.ceil(1 / plan.c1 * (1 - 1e-9))} is equivalent; "
                     "the smallest is shown)")
    return "\n".join(lines)


def _plan(a: argparse.Namespace):
    from .planner import plan

    return plan(a.alpha1, a.c1, a.alpha2, a.c2, a.budget, a.mode, top=a.top)


def cmd_plan(a: argparse.Namespace) -> str:
    p = _plan(a)
    return json.dumps(p.to_dict(), indent=2) if a.json else format_plan(p)


def cmd_theorems(a: argparse.Namespace) -> str:
    from .theorems import check_all, format_report, to_json

    results = check_all(a.resolution, a.stages, progress=sys.stderr.isatty())
    return to_json(results) if a.json else format_report(results)


def cmd_symbolic(a: argparse.Namespace) -> str:
    from .symbolic import report

    return report(as_json=a.json)


def cmd_report(a: argparse.Namespace) -> str:
    from .symbolic import compare_with_seeds
    from .theorems import check_all

    a.top = 5
    p = _plan(a)
    results = check_all(a.resolution, 50_000, progress=sys.stderr.isatty())
    seeds = compare_with_seeds()
    if a.json:
        from dataclasses import asdict

        return json.dumps({"plan": p.to_dict(), "theorems": [asdict(r) for r in results],
                           "seed_formulas": [asdict(f) for f in seeds]}, indent=2, default=float)
    summary = ["", "Theorem checks (run `lrsim theorems` for details):"]
    summary += [f"  {r.name}: {r.verdict.upper()} ({r.points_checked} points)" for r in results]
    summary += ["", "Seed formulas vs sympy derivations (run `lrsim symbolic` for details):"]
    summary += [f"  {f.name}: {f.verdict}" for f in seeds]
    return format_plan(p) + "\n" + "\n".join(summary)


COMMANDS = {"plan": cmd_plan, "theorems": cmd_theorems, "symbolic": cmd_symbolic, "report": cmd_report}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        out = COMMANDS[args.command](args)
    except (UsageError, ValueError) as e:
        print(f"lrsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lrsim: interrupted", file=sys.stderr)
        return 130
    try:
        print(out)
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
