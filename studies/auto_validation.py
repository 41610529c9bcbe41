"""lrref --mode auto against every fixed mode on the CPU pair, side by side (issue 34 item 4a).

Record (alone on the machine; about 1.5 h on a 2-core AMD EPYC Zen 4), then pack and report:

    lrref bench --modes ar,sd,lr-sync,lr-async,auto --dataset gsm8k-test --n 30 --max-tokens 512 \\
        --no-prefix-caching --warmup 1 --require-idle --out runs/auto-val
    python studies/auto_validation.py --pack runs/auto-val --dest studies/data/auto-validation-cpu
    python studies/auto_validation.py --report studies/data/auto-validation-cpu

``bench`` runs each problem in every mode before the next problem (slow drifts of load hit all modes alike);
``--no-prefix-caching`` makes every request prefill its whole prompt in every mode (auto would otherwise reuse the
prompt the modes before it fed); the report counts each mode's prompt prefills (target passes over a fresh
prompt) and gives its tokens/s without them, since a recording before that flag was fixed (2026-11-28: the modes
after the first on each problem reused its KV) has them in ar's time only.  The report: each mode's tokens/s, its speedup over ar and auto's ratio to it,
each with a paired bootstrap 95% interval over the problems (:func:`common.paired_speedup`); answers paired
against ar (lost, gained, exact McNemar p, from bench's ``results.json``); what auto ran
(:func:`lrsim.adaptive.trace.check_auto_traces`).  The bar (the issue's): auto's tokens/s at least 0.95 of the
best fixed mode's.  Writes ``figures/auto_validation.json`` and prints the table.

*Held out*: nothing was tuned on this recording (the policy and lrref's auto decoder were committed before it and
have since only moved); the without-prefill figures were added after seeing it, to take out a defect found in it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
from common import FIGURES, gzip_copy, paired_speedup, per_request, staged, trace_of, traces_of, with_ci

from lrsim.adaptive.trace import check_auto_traces
from lrsim.atomic import atomic_write
from lrsim.errors import InputError, OneLineParser, run_command
from lrsim.modes import DECODE_MODES as FIXED
from lrsim.trace import read_trace

BAR = 0.95  #: auto's tokens/s over the best fixed mode's (issue 34 item 4a)
KEEP = ("results.json", "results.csv", "provenance.txt", "log.txt")  #: copied by --pack besides the traces


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--report", type=Path, metavar="DIR", help="a bench output folder, recorded or packed")
    what.add_argument("--pack", type=Path, metavar="DIR", help="copy DIR's results and gzipped traces to --dest")
    ap.add_argument("--dest", type=Path, help="--pack: destination folder (must not exist)")
    ap.add_argument("--figures", type=Path, default=FIGURES, help="--report: folder of auto_validation.json")
    ap.add_argument("--reps", type=int, default=2000, help="bootstrap resamples")
    a = ap.parse_args(argv)
    if a.pack is not None and a.dest is None:
        ap.error("--pack needs --dest")
    return a


def load(folder: Path) -> tuple[dict, dict]:
    """(bench's results.json, mode -> trace), the modes in results' order.

    :raises InputError: no results.json, or a mode without its trace or without auto beside fixed modes.
    """
    res = folder / "results.json"
    if not res.is_file():
        raise InputError(f"{folder}: no results.json (not an lrref bench output folder)")
    results = json.loads(res.read_text())
    modes = [r["mode"] for r in results["modes"]]
    if "auto" not in modes or not set(FIXED) & set(modes):
        raise InputError(f"{folder}: modes {', '.join(modes)}: need auto and at least one fixed mode")
    return results, {m: read_trace(trace_of(folder, m)) for m in modes}


def report_rows(results: dict, traces: dict, reps: int) -> tuple[list[dict], dict]:
    """One row per mode (speedup over ar and auto's ratio to it, paired bootstrap 95%) and the verdict."""
    by = {r["mode"]: r for r in results["modes"]}
    rows = []
    for mode, t in traces.items():
        rng = np.random.default_rng(zlib.crc32(mode.encode()))  # a row's interval does not move with the others
        s, lo, hi, n = paired_speedup(t, traces["ar"], rng, reps)
        q, qlo, qhi, _ = paired_speedup(traces["auto"], t, rng, reps)
        r = by[mode]
        fresh = [x.seconds for x in t.passes if x.engine == "target" and x.context == 0 and x.tokens > 1]
        tokens, wall = np.array(list(per_request(t).values()), dtype=float).sum(0)
        rows.append({"mode": mode, "n": n, "tokens_per_s": r["tokens_per_s"], "speedup": s, "speedup_ci95": [lo, hi],
                     "prompt_prefills": len(fresh), "prompt_prefill_s": sum(fresh),
                     "tokens_per_s_without_prefill": float(tokens / (wall - sum(fresh))),
                     "auto_over": q, "auto_over_ci95": [qlo, qhi], "accuracy": r["accuracy"],
                     "accuracy_ci95": r["accuracy_ci95"], "lost_vs_ar": r.get("lost_vs_ar"),
                     "gained_vs_ar": r.get("gained_vs_ar"), "p_vs_ar": r.get("p_vs_ar"),
                     "step_acceptance": r.get("step_acceptance"), "capped": r.get("capped")})
    fixed = [r for r in rows if r["mode"] in FIXED]
    best = max(fixed, key=lambda r: r["tokens_per_s"])
    verdict = {"best_fixed": best["mode"], "auto_over_best": best["auto_over"],
               "auto_over_best_ci95": best["auto_over_ci95"], "bar": BAR, "met": best["auto_over"] >= BAR}
    key = "tokens_per_s_without_prefill"
    auto, best = next(r for r in rows if r["mode"] == "auto"), max(fixed, key=lambda r: r[key])
    verdict |= {"best_fixed_without_prefill": best["mode"], "auto_over_best_without_prefill": auto[key] / best[key],
                "met_without_prefill": auto[key] / best[key] >= BAR}
    return rows, verdict


def markdown(rows: list[dict]) -> list[str]:
    head = ("| mode | tok/s | speedup vs ar [95% CI] | auto / mode [95% CI] | accuracy [95% CI] | lost / gained vs ar "
            "| McNemar p | step acceptance |")
    out = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acc = f"{100 * r['accuracy']:.1f}% [{100 * r['accuracy_ci95'][0]:.0f}, {100 * r['accuracy_ci95'][1]:.0f}]"
        vs = "-" if r["mode"] == "ar" else f"{r['lost_vs_ar']} / {r['gained_vs_ar']}"
        p = "-" if r["mode"] == "ar" or r["p_vs_ar"] is None else f"{r['p_vs_ar']:.3g}"
        a = "-" if r["step_acceptance"] is None else f"{100 * r['step_acceptance']:.1f}%"
        auto = "-" if r["mode"] == "auto" else with_ci(r["auto_over"], r["auto_over_ci95"])
        out.append(f"| {r['mode']} | {r['tokens_per_s']:.2f} | {with_ci(r['speedup'], r['speedup_ci95'])} | {auto} | "
                   f"{acc} | {vs} | {p} | {a} |")
    return out


def report(a: argparse.Namespace) -> None:
    results, traces = load(a.report)
    rows, verdict = report_rows(results, traces, a.reps)
    use = check_auto_traces([traces["auto"]])
    prov = a.report / "provenance.txt"
    out = {"source": str(a.report), "meta": {k: results["meta"].get(k) for k in ("n", "dataset", "hardware")},
           "provenance": prov.read_text().splitlines() if prov.exists() else None, "rows": rows,
           "verdict": verdict, "auto_run": use.to_dict()}
    a.figures.mkdir(parents=True, exist_ok=True)
    atomic_write(a.figures / "auto_validation.json", json.dumps(out, indent=1) + "\n")
    print("\n".join(markdown(rows)))
    print(f"\nbest fixed mode: {verdict['best_fixed']}; auto / best = "
          f"{with_ci(verdict['auto_over_best'], verdict['auto_over_best_ci95'])} (bar {BAR}: "
          f"{'met' if verdict['met'] else 'NOT met'}); without prompt prefills: best "
          f"{verdict['best_fixed_without_prefill']}, auto / best = {verdict['auto_over_best_without_prefill']:.3f} "
          f"({'met' if verdict['met_without_prefill'] else 'NOT met'})\n")
    print("\nprompt prefills (target passes over a fresh prompt) and tokens/s without them:")
    for r in rows:
        print(f"  {r['mode']:>9s}: {r['prompt_prefills']:3d} prefills, {r['prompt_prefill_s']:6.1f} s; "
              f"{r['tokens_per_s_without_prefill']:.2f} tok/s without")
    print(use.format())
    print(f"wrote {a.figures / 'auto_validation.json'}")


def pack(a: argparse.Namespace) -> None:
    """``results.json``, ``results.csv``, ``provenance.txt``, ``log.txt`` and the gzipped traces into ``--dest``
    (all there or nothing: :func:`common.staged`)."""
    load(a.pack)  # a complete bench folder, or one line
    with staged(a.dest) as tmp:
        for f in KEEP:
            if (a.pack / f).exists():
                shutil.copy2(a.pack / f, tmp / f)
        for t in traces_of(a.pack):
            gzip_copy(t, tmp)
    print(f"packed {a.pack} into {a.dest}")


def command(argv: list[str] | None) -> None:
    a = parse_args(argv)
    report(a) if a.report is not None else pack(a)


def main(argv: list[str] | None = None) -> int:
    return run_command("auto_validation", lambda: command(argv))


if __name__ == "__main__":
    sys.exit(main())
