"""The verifiers' trade-off (issue 12 item 5): speed and accuracy of lr-async per verifier, with intervals.

``python studies/verifier_tradeoff.py --record OUT [--n 30] [--max-tokens 256] [--backend llamacpp]
[--configs NAME,...] [--dry-run]``, then ``python studies/verifier_tradeoff.py --report OUT``

*Record* (resumable: a run whose ``results.json`` says every problem is done is kept, an interrupted one is
recorded again): one ``lrref bench`` of ``ar`` (``OUT/ar/``) and, on the same problems, one ``lrref bench`` of
``lr-async`` at gamma 2 per verifier configuration (``OUT/lr-async-NAME/``): embedding (all-mpnet-base-v2) at
cosine 0.85 and 0.95, judge (the target model as its own judge, logit margin > 2: a stated setting, not tuned;
the paper's judge is a 7B model, the default target here a 1.5B one), score (the target rates the draft 0-9,
accept >= 7), random (accept with p = 0.5).  Default pair, bundled problems, ``--max-tokens 256`` (so most answers
finish and accuracy means something), the validation study's system prompt and threads (sync 2, lr-async 1 + 1),
``--log-text`` (the report scores each problem from its text).  The runs are separate processes one after the
other, not interleaved problem by problem: record on idle cores (each run's load averages are in its meta).

*Report* (from the recorded files only): a Markdown table per verifier: step acceptance (share of verified
drafts accepted, token-identical drafts included, Wilson 95%), tokens/s, speedup over ``ar`` (tokens/s ratio on
the shared problems, paired bootstrap 95% CI over problems; per-problem tokens and seconds from the traces'
request records), accuracy (Wilson 95%), accuracy minus ``ar``'s (paired bootstrap 95% CI over problems), mean
verifier latency per call (distinct verify spans of the trace, identical drafts excluded).  Writes
``figures/verifier_tradeoff.{html,png,json}``: speedup vs accuracy, both intervals as error bars, one marker per
verifier, ``ar`` as the reference point.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from common import CONCISE_SYSTEM, FIGURES, finish, paired_speedup, per_request, trace_of, with_ci

from lrsim.atomic import atomic_write
from lrsim.errors import InputError, OneLineParser, UsageError, run_command
from lrsim.prediction.calibrate import acceptance
from lrsim.stats import wilson
from lrsim.trace import Trace, read_trace


@dataclass(frozen=True)
class Config:
    """One verifier configuration: its folder name, ``lrref`` verifier and threshold, and a label."""

    name: str
    verifier: str
    threshold: float
    label: str


CONFIGS = (
    Config("embedding-0.85", "embedding", 0.85, "embedding, cosine >= 0.85"),
    Config("embedding-0.95", "embedding", 0.95, "embedding, cosine >= 0.95"),
    Config("judge-2", "judge", 2.0, "judge (target as judge), margin > 2"),
    Config("score-7", "score", 7.0, "score (target rates 0-9), >= 7"),
    Config("random-0.5", "random", 0.5, "random, p = 0.5"),
)
JUDGE_NOTE = ("judge: the target model ({target}) judges its own steps at logit margin > 2, a stated setting, not "
              "tuned; it is not the paper's 7B judge")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--record", type=Path, metavar="OUT", help="record the missing runs into OUT")
    what.add_argument("--report", type=Path, metavar="OUT", help="report the runs recorded in OUT")
    ap.add_argument("--n", type=int, default=30, help="bundled problems per run")
    ap.add_argument("--max-tokens", type=int, default=256, help="generated-token cap per problem")
    ap.add_argument("--max-step-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=2, help="lr-async look-ahead depth")
    ap.add_argument("--backend", default="llamacpp", choices=("llamacpp", "hf"))
    ap.add_argument("--threads", type=int, default=2, help="threads of ar (and of sync modes)")
    ap.add_argument("--async-threads", default="1,1", help="lr-async 'TARGET,DRAFT' threads")
    ap.add_argument("--configs", default=",".join(c.name for c in CONFIGS), help="verifier configurations")
    ap.add_argument("--lrref-args", default="", help="more lrref bench arguments, appended (e.g. smaller models)")
    ap.add_argument("--dry-run", action="store_true", help="--record: print the commands, run nothing")
    ap.add_argument("--figures", type=Path, default=FIGURES, help="--report: folder of the figure and JSON")
    ap.add_argument("--reps", type=int, default=2000, help="--report: bootstrap resamples")
    a = ap.parse_args(argv)
    names = [x.strip() for x in a.configs.split(",") if x.strip()]
    known = {c.name: c for c in CONFIGS}
    if not names or any(x not in known for x in names):
        raise UsageError(f"--configs: names from {', '.join(known)}, got {a.configs!r}")
    if min(a.n, a.max_tokens, a.max_step_tokens, a.gamma, a.threads, a.reps) < 1:
        raise UsageError("--n, --max-tokens, --max-step-tokens, --gamma, --threads and --reps must be >= 1")
    a.selected = [known[x] for x in names]
    return a


# --- recording ----------------------------------------------------------------------------------------


def runs(a: argparse.Namespace) -> list[tuple[str, str, Config | None]]:
    """(folder name, lrref mode, verifier configuration) of every run: ar first, then one per configuration."""
    return [("ar", "ar", None)] + [(f"lr-async-{c.name}", "lr-async", c) for c in a.selected]


def bench_command(a: argparse.Namespace, folder: Path, mode: str, cfg: Config | None) -> list[str]:
    """The ``lrref bench`` run of one mode (and verifier)."""
    cmd = [sys.executable, "-m", "lrref.cli", "bench", "--modes", mode, "--n", str(a.n), "--out", str(folder),
           "--backend", a.backend, "--max-tokens", str(a.max_tokens), "--max-step-tokens", str(a.max_step_tokens),
           "--gamma", str(a.gamma), "--threads", str(a.threads), "--async-threads", a.async_threads,
           "--system", CONCISE_SYSTEM, "--log-text"]
    if cfg is not None:
        cmd += ["--verifier", cfg.verifier, "--threshold", f"{cfg.threshold:g}"]
    return cmd + shlex.split(a.lrref_args)


def run_settings(meta: dict, mode: str) -> tuple:
    """(problems, max tokens, backend) of a bench run, from its results.json meta."""
    return meta.get("n"), (meta.get("config") or {}).get(mode, {}).get("max_tokens"), meta.get("backend")


def complete(folder: Path, mode: str, a: argparse.Namespace) -> bool:
    """Whether ``folder`` holds a finished run of these settings.

    :raises InputError: a run there with another number of problems, token cap or backend (mixing them would
        pair unlike runs).
    """
    try:
        meta = json.loads((folder / "results.json").read_text())["meta"]
    except (OSError, ValueError, KeyError):
        return False
    got, want = run_settings(meta, mode), (a.n, a.max_tokens, a.backend)
    if got != want:
        raise InputError(f"{folder} holds a run of (problems, max tokens, backend) = {got}, not {want}: "
                         "use another OUT or move it away")
    return meta.get("done") == a.n


def record(a: argparse.Namespace) -> None:
    """Run every missing bench, one after the other; print the commands only with ``--dry-run``."""
    todo = runs(a)
    print(f"{len(todo)} runs of {a.n} problems, at most {a.n * a.max_tokens} output tokens each "
          f"({a.n} x {a.max_tokens})", flush=True)
    if any(c.verifier == "judge" for c in a.selected):
        print(JUDGE_NOTE.format(target="the target of these runs"), flush=True)
    for name, mode, cfg in todo:
        folder = a.record / name
        if complete(folder, mode, a):
            print(f"{name}: recorded already ({folder})", flush=True)
            continue
        cmd = bench_command(a, folder, mode, cfg)
        print(shlex.join(cmd) if a.dry_run else f"{name}: recording ...", flush=True)
        if not a.dry_run and subprocess.run(cmd, check=False).returncode != 0:
            raise InputError(f"{name}: lrref bench failed (its error is above); rerun to resume")


# --- reading -------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One recorded bench run of one mode: its meta, results row, trace and per-problem correctness."""

    name: str
    meta: dict
    row: dict
    trace: Trace
    correct: dict[int, bool] | None  #: problem -> answer right (None: the trace has no texts)


def correctness(trace: Trace, meta: dict) -> dict[int, bool] | None:
    """Problem -> the extracted answer equals the reference (as ``lrref bench`` scores it), from the request texts;
    None when the trace has no texts or the dataset is not at hand."""
    from lrref.bench import extract_answer, load_dataset

    if not trace.requests or any(r.text is None for r in trace.requests):
        return None
    try:
        golds = [p["gold"] for p in load_dataset(meta["dataset"], meta["n"])]
    except (OSError, ValueError, KeyError):
        return None
    out = {}
    for r in trace.requests:
        ans = extract_answer(r.text)
        out[r.request] = ans is not None and r.request < len(golds) and ans == golds[r.request]
    return out


def load_run(folder: Path, mode: str) -> Run:
    """:raises InputError: no results.json or trace for ``mode`` in ``folder``."""
    try:
        res = json.loads((folder / "results.json").read_text())
        row = next(r for r in res["modes"] if r["mode"] == mode)
    except (OSError, ValueError, KeyError, StopIteration):
        raise InputError(f"{folder}: no results.json with a {mode} row") from None
    trace = read_trace(trace_of(folder, mode))
    correct = correctness(trace, res["meta"])
    if correct is not None and sum(correct.values()) != round((row["accuracy"] or 0) * row["requests"]):
        print(f"note: {folder}: {sum(correct.values())} correct from the texts, results.json says accuracy "
              f"{row['accuracy']} of {row['requests']}", file=sys.stderr)
    return Run(folder.name, res["meta"], row, trace, correct)


def recorded(a: argparse.Namespace) -> tuple[Run, list[tuple[Config, Run]], list[str]]:
    """The ar run, the recorded configurations' runs, and the names not recorded yet.

    :raises InputError: no ar run, or a configuration's run on other problems or settings than ar's.
    """
    ar = load_run(a.report / "ar", "ar")
    found, missing = [], []
    for c in CONFIGS:
        folder = a.report / f"lr-async-{c.name}"
        if not (folder / "results.json").exists():
            missing.append(c.name)
            continue
        run = load_run(folder, "lr-async")
        got = (run.meta.get("dataset"), *run_settings(run.meta, "lr-async"))
        want = (ar.meta.get("dataset"), *run_settings(ar.meta, "ar"))
        if got != want:
            raise InputError(f"{folder}: (dataset, problems, max tokens, backend) = {got}, not ar's {want}")
        found.append((c, run))
    if not found:
        raise InputError(f"{a.report}: no lr-async-NAME run recorded yet")
    return ar, found, missing


# --- statistics ----------------------------------------------------------------------------------------


def accuracy(run: Run) -> dict:
    """Correct answers of a run with a Wilson 95% interval (from the texts, else from results.json)."""
    if run.correct is not None:
        k, n = sum(run.correct.values()), len(run.correct)
    else:
        n = run.row["requests"]
        k = round((run.row["accuracy"] or 0) * n)
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "p": k / n if n else math.nan, "ci95": [lo, hi]}


def accuracy_difference(run: Run, ar: Run, rng: np.random.Generator, reps: int) -> dict:
    """Accuracy minus ar's: paired bootstrap over the shared problems, else Newcombe's unpaired interval."""
    if run.correct is not None and ar.correct is not None:
        ids = sorted(set(run.correct) & set(ar.correct))
        d = np.array([float(run.correct[i]) - float(ar.correct[i]) for i in ids])  # per problem: -1, 0 or 1
        boot = d[rng.integers(0, len(ids), (reps, len(ids)))].mean(-1)
        return {"d": float(d.mean()), "ci95": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
                "kind": "paired"}
    x, y = accuracy(run), accuracy(ar)
    # Newcombe (1998) method 10: d -+ sqrt((p1 - l1)^2 + (u2 - p2)^2), sqrt((u1 - p1)^2 + (p2 - l2)^2)
    (l1, u1), (l2, u2) = x["ci95"], y["ci95"]
    d = x["p"] - y["p"]
    return {"d": d, "ci95": [d - math.hypot(x["p"] - l1, u2 - y["p"]), d + math.hypot(u1 - x["p"], y["p"] - l2)],
            "kind": "unpaired"}


def verify_latency(trace: Trace) -> tuple[float | None, int]:
    """Mean seconds per verifier call and the calls: distinct verify spans, identical drafts excluded."""
    spans = {(s.request, s.verify_start, s.verify_end) for s in trace.steps
             if s.verifier not in (None, "identical") and s.verify_start is not None and s.verify_end is not None}
    if not spans:
        return None, 0
    return float(np.mean([end - start for _, start, end in spans])), len(spans)


def tokens_per_s(trace: Trace) -> float:
    """Output tokens over request seconds, summed over the finished requests."""
    x = np.array(list(per_request(trace).values()), dtype=float)
    return float(x[:, 0].sum() / x[:, 1].sum()) if len(x) else math.nan


def config_row(c: Config, run: Run, ar: Run, rng: np.random.Generator, reps: int) -> dict:
    """Everything the table and the figure show for one verifier configuration."""
    alpha = acceptance(run.trace.steps)[0]
    s, lo, hi, n = paired_speedup(run.trace, ar.trace, rng, reps)
    ms, calls = verify_latency(run.trace)
    return {"name": c.name, "label": c.label, "verifier": c.verifier, "threshold": c.threshold,
            "problems": n, "done": run.meta.get("done"),
            "step_acceptance": None if alpha is None else {"k": alpha.k, "n": alpha.n, "p": alpha.p,
                                                           "ci95": [alpha.lo, alpha.hi]},
            "tokens_per_s": tokens_per_s(run.trace), "speedup": s, "speedup_ci95": [lo, hi],
            "accuracy": accuracy(run), "accuracy_vs_ar": accuracy_difference(run, ar, rng, reps),
            "verify_s_per_call": ms, "verify_calls": calls, "verify_share": run.row.get("verify_share"),
            "loadavg": load_averages(run.meta)}


def load_averages(meta: dict) -> list[float | None]:
    """The 1-minute load average when a bench run started and when it last wrote its results."""
    return [(meta.get(k) or [None])[0] for k in ("loadavg_start", "loadavg_now")]


def fmt(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}"


# --- output --------------------------------------------------------------------------------------------


def pct(p: float | None, ci: list[float] | None = None, points: bool = False) -> str:
    """``p`` in percent with its interval; ``points``: a signed difference in percentage points."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    f, unit = ("+.1f", " pp") if points else (".1f", "%")
    return f"{100 * p:{f}}{unit}" + (f" [{100 * ci[0]:{f}}, {100 * ci[1]:{f}}]" if ci else "")


def markdown(ar_row: dict, rows: list[dict]) -> list[str]:
    out = [("| verifier | problems | step acceptance [95% CI] | tok/s | speedup vs ar [95% CI] | accuracy [95% CI] "
           "| accuracy - ar (points) [95% CI] | verifier ms/call (calls) |"), "|---|---|---|---|---|---|---|---|",
           (f"| ar (reference) | {ar_row['problems']} | - | {ar_row['tokens_per_s']:.2f} | 1 | "
           f"{pct(ar_row['accuracy']['p'], ar_row['accuracy']['ci95'])} | - | - |")]
    for r in rows:
        a, d, sa = r["accuracy"], r["accuracy_vs_ar"], r["step_acceptance"]
        ms = "-" if r["verify_s_per_call"] is None else f"{1e3 * r['verify_s_per_call']:.0f} ({r['verify_calls']})"
        paired = "" if d["kind"] == "paired" else " (unpaired)"
        out.append(f"| {r['label']} | {r['problems']} | {pct(sa and sa['p'], sa and sa['ci95'])} | "
                   f"{r['tokens_per_s']:.2f} | {with_ci(r['speedup'], r['speedup_ci95'])} | {pct(a['p'], a['ci95'])} | "
                   f"{pct(d['d'], d['ci95'], True)}{paired} | {ms} |")
    return out


def notes(ar: Run, rows: list[dict], missing: list[str], reps: int) -> list[str]:
    target = Path(str(ar.meta.get("models", {}).get("target", "?"))).name
    hw = ar.meta.get("hardware") or {}
    loads = [("ar", load_averages(ar.meta))] + [(r["name"], r["loadavg"]) for r in rows]
    out = [f"- {JUDGE_NOTE.format(target=target)}.",
           f"- lrref {ar.meta.get('backend')} on {hw.get('cpu_model', '?')} ({ar.meta.get('cpus')} cpus); "
           "load average (1 min) at start / end: "
           + ", ".join(f"{name} {fmt(a)} / {fmt(b)}" for name, (a, b) in loads) + ".",
           (f"- Speedup: tokens/s over ar's on the shared problems, paired bootstrap ({reps} resamples) over problems; "
           "ar and each verifier are separate runs, one after the other. Accuracy: Wilson 95%; its difference to "
           "ar: paired bootstrap over problems. Step acceptance counts token-identical drafts as accepted.")]
    if missing:
        out.append(f"- Not recorded yet: {', '.join(missing)}.")
    return out


def figure(ar_row: dict, rows: list[dict], note: str) -> go.Figure:
    fig = go.Figure()
    fig.add_hline(y=1, line={"color": "grey", "dash": "dot"})
    for r in [ar_row] + rows:
        a, y = r["accuracy"], r.get("speedup", 1.0)
        yci = r.get("speedup_ci95", [1.0, 1.0])
        fig.add_trace(go.Scatter(
            x=[a["p"]], y=[y], mode="markers", name=r.get("label", "ar (reference)"),
            marker={"symbol": "star" if r is ar_row else "circle", "size": 13 if r is ar_row else 10},
            error_x={"type": "data", "symmetric": False, "array": [a["ci95"][1] - a["p"]],
                     "arrayminus": [a["p"] - a["ci95"][0]], "thickness": 1},
            error_y={"type": "data", "symmetric": False, "array": [yci[1] - y], "arrayminus": [y - yci[0]],
                     "thickness": 1}))
    fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=1.06, showarrow=False, font={"size": 11},
                       xanchor="left")
    fig.update_layout(xaxis_title="accuracy (Wilson 95%)", yaxis_title="speedup over ar (paired bootstrap 95% CI)",
                      xaxis={"tickformat": ".0%"}, width=900, height=650)
    return fig


def report(a: argparse.Namespace) -> None:
    ar, found, missing = recorded(a)
    rng = np.random.default_rng(0)
    rows = [config_row(c, run, ar, rng, a.reps) for c, run in found]
    ar_row = {"name": "ar", "problems": len(per_request(ar.trace)), "tokens_per_s": tokens_per_s(ar.trace),
              "accuracy": accuracy(ar)}
    text = notes(ar, rows, missing, a.reps)
    print("\n".join(markdown(ar_row, rows) + [""] + text))
    gamma = (found[0][1].meta.get("config") or {}).get("lr-async", {}).get("gamma")
    title = (f"Verifiers' trade-off: lr-async (gamma {gamma}) speed vs accuracy, {ar_row['problems']} problems, "
             f"<= {run_settings(ar.meta, 'ar')[1]} tokens (lrref {ar.meta.get('backend')}, CPU)")
    note = "judge = the target as its own judge at margin > 2, not the paper's 7B judge"
    fig = figure(ar_row, rows, note)  # everything computed before anything is written
    data = {"ar": ar_row, "rows": rows, "notes": text, "source": str(a.report)}
    atomic_write(a.figures / "verifier_tradeoff.json", json.dumps(data, indent=1) + "\n")
    finish(fig, argparse.Namespace(out=a.figures), "verifier_tradeoff", title)


def main(argv: list[str] | None = None) -> int:
    def command() -> None:
        a = parse_args(argv)
        if a.record is not None:
            record(a)
        else:
            report(a)

    return run_command("verifier_tradeoff", command)


if __name__ == "__main__":
    sys.exit(main())
