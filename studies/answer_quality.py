"""Answer quality (issue 19): does Lookahead Reasoning keep the target's answers?  Accuracy of ar and of LR per
verifier at full length, paired on the same problems, beside the speedup.

``python studies/answer_quality.py --record OUT [--rows NAME,...] [--n 40] [--max-tokens 512] [--dry-run]``,
then ``--report OUT`` (table, ``figures/answer_quality.{json,html,png}``, the default the data pick) and
``--pack OUT`` (gzipped traces into ``studies/data/answer-quality/`` with a README).  On another CPU kind, record
into a folder of its own, ``ar`` first, and report both: ``--report OUT OUT2`` pairs every row with the ar of its
own folder (a speedup is a timing of one CPU; a row twice, or off its ar's CPU, is refused) and says how far the
two ars' answers agree.

*Rows* (:data:`ROWS`, in priority order, so a partial recording is useful): ``ar``; then lr-async with
exact-strict (token-identical steps only: the lossless control), math (numbers agree, then cosine >= 0.85), the
embedding at cosine 0.95, 0.90 and 0.85, judge (the target as its own judge, logit margin > 2, the verifier
study's stated setting), score (the target rates 0-9, >= 7) and math-numeric (numbers alone, no embedding model);
then lr-sync with the same verifiers.

*Record* (resumable across sessions): one ``lrref bench`` per row into ``OUT/ROW/`` (its own process, one after
the other), skipped when its ``results.json`` says every problem is done with these settings, recorded again
when interrupted; ``OUT/ROW/provenance.txt`` holds the command, CPU model (lscpu), cpus, git commit, load
averages and dates before and after.  Defaults: llama.cpp, the default pair (Qwen2.5-Coder 1.5B target, 0.5B
draft), greedy, lrref's decoding defaults (gamma 4, 96-token steps, its default system prompt; sync 2 threads,
lr-async 1 + 1), ``--max-tokens 512`` (answers on the default pair ran 221-376 tokens on 6 GSM8K test problems:
the cap leaves room, and the report counts the capped answers), the first 40 problems of the bundled GSM8K test
subset (``--dataset gsm8k-test``, not used to tune lrref before this study), text logging on.  Run it alone on the
machine: every row's speed is a timing.

*Report* (from the recorded files only): per row the problems, accuracy (Wilson 95%), ar's accuracy on the same
problems, ``lost`` (ar right, the row wrong) and ``gained``, the exact two-sided McNemar p of those, step
acceptance (token-identical drafts count as accepted; Wilson 95%), the speedup over ar (tokens/s on the shared
problems, paired bootstrap 95% CI over problems) and the answers that hit the cap.  The default rule
(:func:`pick_default`): the fastest lr-async row whose loss against ar is not significant (p >= 0.05) and at most
3 points.

*Held out*: the default was picked, and the current math rule (issue 33) designed, after seeing the rows on
problems 1-40; only problems 41-80 (``--n 80``, ``studies/data/answer-quality-n80``) are held out, and only for
the math rule (docs/validation/answer-quality.md, its headline).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from common import FIGURES, finish, gzip_copy, paired_speedup, per_request, staged, trace_of, traces_of, with_ci

from lrsim.atomic import atomic_write
from lrsim.errors import InputError, OneLineParser, UsageError, run_command
from lrsim.prediction.calibrate import acceptance
from lrsim.stats import mcnemar_exact, paired_outcomes, wilson
from lrsim.trace import Trace, read_trace

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "studies" / "data" / "answer-quality"
AR_RATE = 22.9  # tok/s: this study's ar row (40 GSM8K test problems, llama.cpp, 2 threads; studies/data/answer-quality)
AR_MACHINE = "AMD EPYC Zen 4, 2 cores, llama.cpp"
MEAN_TOKENS = 310  # output tokens per GSM8K answer, default pair and system prompt (this study's ar: 12,379 / 40)


@dataclass(frozen=True)
class Row:
    """One recorded configuration: folder name, lrref mode, verifier, threshold, exact-strict, label, and its speed
    relative to ar assumed by ``--dry-run`` (with the measurement it comes from)."""

    name: str
    mode: str
    verifier: str | None
    threshold: float | None
    label: str
    speed: float  # x ar, for the plan only
    strict: bool = False


# relative speeds for the plan, on the AMD EPYC Zen 4 (2 cores) against this study's ar (22.9 tok/s): every
# lr-async row but score measured by this study (2026-11-25: exact-strict 0.233x, math-0.85 0.281x, embedding 0.95 /
# 0.90 / 0.85 0.270x / 0.303x / 0.333x, judge-2 0.179x, math-numeric 0.294x); lr-async score-7 0.176x measured on
# the AMD EPYC with AVX2 against its own ar (2026-11-26); lr-sync math-0.85 0.225x, embedding 0.90 / 0.85 0.240x /
# 0.287x measured (0.80 / 0.79 / 0.86 of their lr-async rows); on the AMD EPYC with AVX2 against its own ar (2026-11-26)
# lr-sync exact-strict 0.176x, embedding 0.95 0.225x, math-numeric 0.260x (0.76 / 0.83 / 0.88 of the Zen 4's
# lr-async rows); the other lr-sync rows (judge, score) assumed at 0.82x (the mean of those six ratios) of theirs.
_VERIFIERS = (  # (suffix, verifier, threshold, strict, label, lr-async speed, lr-sync speed)
    ("exact-strict", "exact", None, True, "exact-strict (token-identical only: lossless control)", 0.233, 0.176),
    ("math-0.85", "math", 0.85, False, "math: numbers agree, then cosine >= 0.85", 0.281, 0.225),
    ("embedding-0.95", "embedding", 0.95, False, "embedding, cosine >= 0.95", 0.270, 0.225),
    ("embedding-0.90", "embedding", 0.90, False, "embedding, cosine >= 0.90", 0.303, 0.240),
    ("embedding-0.85", "embedding", 0.85, False, "embedding, cosine >= 0.85", 0.333, 0.287),
    ("judge-2", "judge", 2.0, False, "judge (target as judge), margin > 2", 0.179, 0.147),
    ("score-7", "score", 7.0, False, "score (target rates 0-9), >= 7", 0.176, 0.144),
    ("math-numeric", "math", -1.0, False, "math, numbers alone (no embedding model)", 0.294, 0.260),
)
ROWS = (Row("ar", "ar", None, None, "ar (target alone)", 1.0),) + tuple(
    Row(f"{mode}-{suffix}", mode, v, t, label, speed_async if mode == "lr-async" else speed_sync, strict)
    for mode in ("lr-async", "lr-sync")
    for suffix, v, t, strict, label, speed_async, speed_sync in _VERIFIERS)
JUDGE_NOTE = ("judge: the target model judges its own steps at logit margin > 2 (the verifiers' study's stated "
              "setting, not tuned); the paper's judge is a 7B model")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--record", type=Path, metavar="OUT", help="record the missing rows into OUT (resumable)")
    what.add_argument("--report", type=Path, nargs="+", metavar="OUT",
                      help="report the rows recorded in OUT (several: one recording per CPU, each with its own ar)")
    what.add_argument("--pack", type=Path, metavar="OUT", help="gzip OUT's complete rows into --dest with a README")
    ap.add_argument("--rows", default=",".join(r.name for r in ROWS), help="rows to record (default: all, in order)")
    ap.add_argument("--n", type=int, default=40, help="problems per row (the first N of --dataset)")
    ap.add_argument("--dataset", default="gsm8k-test", help="lrref bench --dataset (name or JSONL)")
    ap.add_argument("--max-tokens", type=int, default=512, help="generated-token cap per problem")
    ap.add_argument("--gamma", type=int, default=4, help="look-ahead depth (lrref's default)")
    ap.add_argument("--backend", default="llamacpp", choices=("llamacpp", "hf"))
    ap.add_argument("--threads", type=int, default=2, help="threads of ar and lr-sync")
    ap.add_argument("--async-threads", default="1,1", help="lr-async 'TARGET,DRAFT' threads")
    ap.add_argument("--lrref-args", default="", help="more lrref bench arguments, appended (e.g. smaller models)")
    ap.add_argument("--dry-run", action="store_true", help="--record: print the plan and the commands, run nothing")
    ap.add_argument("--hours", type=float, default=None,
                    help="--record: start only the rows whose planned time fits in this many hours from now, in "
                         "order (a session's budget ends between rows, not inside one)")
    ap.add_argument("--ar-rate", type=float, default=None,
                    help="--dry-run/--hours: ar tokens/s assumed (default: OUT/ar's when it was recorded on this CPU, "
                         f"else {AR_RATE:g}, {AR_MACHINE})")
    ap.add_argument("--mean-tokens", type=float, default=MEAN_TOKENS, help="--dry-run/--hours: tokens per answer assumed")
    ap.add_argument("--figures", type=Path, default=FIGURES, help="--report: folder of the figure and the JSON")
    ap.add_argument("--stem", default="answer_quality",
                    help="--report: file name of the figure and the JSON, without suffix (e.g. answer_quality_n80)")
    ap.add_argument("--reps", type=int, default=2000, help="--report: bootstrap resamples")
    ap.add_argument("--dest", type=Path, default=DATA, help="--pack: destination (must not exist)")
    a = ap.parse_args(argv)
    known = {r.name: r for r in ROWS}
    names = [x.strip() for x in a.rows.split(",") if x.strip()]
    if not names or any(x not in known for x in names) or len(set(names)) != len(names):
        raise UsageError(f"--rows: distinct names from {', '.join(known)}; got {a.rows!r}")
    if (min(a.n, a.max_tokens, a.gamma, a.threads, a.reps) < 1 or (a.ar_rate is not None and a.ar_rate <= 0)
            or a.mean_tokens <= 0
            or (a.hours is not None and a.hours <= 0)):
        raise UsageError("--n, --max-tokens, --gamma, --threads, --reps, --ar-rate, --mean-tokens and --hours "
                         "must be > 0")
    if not a.stem or Path(a.stem).name != a.stem:
        raise UsageError(f"--stem must be a plain file name without suffix, got {a.stem!r}")
    a.selected = [known[x] for x in names]
    return a


# --- recording ----------------------------------------------------------------------------------------


def bench_command(a: argparse.Namespace, folder: Path, row: Row) -> list[str]:
    """The ``lrref bench`` run of one row."""
    cmd = [sys.executable, "-m", "lrref.cli", "bench", "--modes", row.mode, "--dataset", a.dataset,
           "--n", str(a.n), "--out", str(folder), "--backend", a.backend, "--max-tokens", str(a.max_tokens),
           "--gamma", str(a.gamma), "--threads", str(a.threads), "--async-threads", a.async_threads, "--log-text"]
    cmd += ["--no-prefix-caching"] if a.backend == "llamacpp" else []  # every request prefills its own prompt
    if row.verifier is not None:
        cmd += ["--verifier", row.verifier] + (["--exact-strict"] if row.strict else [])
        cmd += [] if row.threshold is None else [f"--threshold={row.threshold:g}"]
    return cmd + shlex.split(a.lrref_args)


def settings(meta: dict, mode: str) -> tuple:
    """(dataset, problems, token cap, gamma, backend) of a bench run, from its results.json meta."""
    cfg = (meta.get("config") or {}).get(mode, {})
    return (meta.get("dataset_name"), meta.get("n"), cfg.get("max_tokens"), cfg.get("gamma"), meta.get("backend"))


def complete(folder: Path, row: Row, a: argparse.Namespace) -> bool:
    """Whether ``folder`` holds a finished run of these settings.

    :raises InputError: a run there of other settings (mixing them would pair unlike runs).
    """
    try:
        meta = json.loads((folder / "results.json").read_text())["meta"]
    except (OSError, ValueError, KeyError):
        return False
    got, want = settings(meta, row.mode), (a.dataset, a.n, a.max_tokens, a.gamma, a.backend)
    if got != want:
        raise InputError(f"{folder} holds a run of (dataset, problems, max tokens, gamma, backend) = {got}, not "
                         f"{want}: use another OUT or move it away")
    return meta.get("done") == a.n


def row_hours(a: argparse.Namespace, r: Row) -> float:
    """Planned hours of one row: problems x tokens per answer / (ar's tokens/s x the row's speed relative to ar)."""
    return a.n * a.mean_tokens / (a.ar_rate * r.speed) / 3600


def fitting(a: argparse.Namespace, todo: list[Row]) -> list[Row]:
    """The leading rows of ``todo`` whose cumulative planned time fits in ``--hours`` (all without it)."""
    if a.hours is None:
        return todo
    total = 0.0
    for i, r in enumerate(todo):
        total += row_hours(a, r)
        if total > a.hours:
            return todo[:i]
    return todo


def plan(a: argparse.Namespace, todo: list[Row]) -> list[str]:
    """The plan's lines: each row to record with its estimated time, and the total."""
    total, lines = 0.0, []
    for r in todo:
        hours = row_hours(a, r)
        total += hours
        lines.append(f"  {r.name:28s} {hours:5.2f} h (at {a.ar_rate * r.speed:5.2f} tok/s), cumulative {total:5.2f} h")
    head = (f"{len(todo)} row(s) to record, {a.n} problems each, cap {a.max_tokens} tokens; estimated at "
            f"{a.mean_tokens:g} tokens per answer, ar at {a.ar_rate:.3g} tok/s ({a.ar_source}) "
            "and each row's speed "
            f"relative to ar from the earlier recordings: {total:.1f} h")
    if a.hours is not None:
        fit = fitting(a, todo)
        head += (f"; --hours {a.hours:g}: {len(fit)} row(s) fit"
                 + (f", the rest wait for the next run (from {todo[len(fit)].name})" if len(fit) < len(todo) else ""))
    return [head] + lines


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unknown"
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "unknown")


def git_commit() -> str:
    def git(*args) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)

    try:
        head = git("rev-parse", "HEAD").stdout.strip() or "unknown"
        return head + ("" if git("diff", "--quiet", "HEAD").returncode == 0 else " (dirty)")
    except OSError:
        return "unknown"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def record_row(a: argparse.Namespace, row: Row) -> None:
    """One bench run into ``OUT/ROW`` with its provenance.txt (written when the run has finished)."""
    folder = a.record / row.name
    folder.mkdir(parents=True, exist_ok=True)
    cmd = bench_command(a, folder, row)
    prov = [f"command: {shlex.join(cmd)}", f"date_start: {_stamp()}", f"cpu_model: {cpu_model()}",
            f"cpus: {os.cpu_count()}", f"git_commit: {git_commit()}",
            f"loadavg_start: {Path('/proc/loadavg').read_text().strip() if Path('/proc/loadavg').exists() else '?'}"]
    (folder / "provenance.txt").unlink(missing_ok=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        raise InputError(f"{row.name}: lrref bench failed (its error is above); rerun to resume")
    load = Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "?"
    atomic_write(folder / "provenance.txt", "\n".join(prov + [f"loadavg_end: {load}", f"date_end: {_stamp()}"]) + "\n")


def planned_ar_rate(a: argparse.Namespace) -> tuple[float, str]:
    """ar's tokens/s for the plan and where it comes from: ``--ar-rate``, else ``OUT/ar``'s when it is complete and
    was recorded on this CPU (model and instruction set), else :data:`AR_RATE`."""
    if a.ar_rate is not None:
        return a.ar_rate, "--ar-rate"
    from lrref.host.cpu import cpu_flags
    from lrref.host.cpu import cpu_model as this_model

    try:
        ar = load_run(a.record / "ar", ROWS[0])
    except InputError:
        return AR_RATE, AR_MACHINE
    here = (this_model(), isa(cpu_flags() or ()))
    if ar.meta.get("done") != ar.meta.get("n") or cpu_of(ar.meta) != here:
        return AR_RATE, AR_MACHINE
    return tokens_per_s(ar.trace), f"measured by {a.record / 'ar'} on this CPU"


def record(a: argparse.Namespace) -> None:
    """Record every selected row that is not complete, in order; with ``--dry-run`` print the plan only."""
    a.ar_rate, a.ar_source = planned_ar_rate(a)
    todo = []
    for r in a.selected:
        if complete(a.record / r.name, r, a):
            print(f"{r.name}: recorded already ({a.record / r.name})", flush=True)
        else:
            todo.append(r)
    print("\n".join(plan(a, todo)), flush=True)
    if any(r.verifier == "judge" for r in todo):
        print(JUDGE_NOTE, flush=True)
    for r in fitting(a, todo):
        cmd = bench_command(a, a.record / r.name, r)
        if a.dry_run:
            print(shlex.join(cmd), flush=True)
            continue
        print(f"{r.name}: recording ...", flush=True)
        record_row(a, r)
    if todo and not a.dry_run:
        print(f"recorded: {a.record}; then: python studies/answer_quality.py --report {a.record} "
              f"(and --pack {a.record})", flush=True)


# --- reading -------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One recorded bench run of one row: its meta, results row, trace and per-problem correctness."""

    row: Row
    meta: dict
    result: dict
    trace: Trace
    correct: dict[int, bool]
    ar: Run | None = None  # the ar this row is paired with (its folder's: the same CPU)


def correctness(trace: Trace, meta: dict) -> dict[int, bool]:
    """Problem -> answer right: the request records' ``correct`` (lrref writes it), else from their texts and the
    dataset.

    :raises InputError: neither is there.
    """
    if trace.requests and all(r.correct is not None for r in trace.requests):
        return {r.request: bool(r.correct) for r in trace.requests}
    from lrref.answers import extract_answer, is_correct
    from lrref.bench import dataset_path, load_dataset

    try:
        golds = [p["gold"] for p in load_dataset(dataset_path(meta.get("dataset_name") or meta["dataset"]))]
    except (OSError, ValueError, KeyError):
        golds = None
    if golds is None or any(r.text is None for r in trace.requests):
        raise InputError(f"{trace.path}: its requests carry neither `correct` nor texts with the dataset at hand")
    return {r.request: bool(is_correct(extract_answer(r.text), golds[r.request])) for r in trace.requests}


def load_run(folder: Path, row: Row) -> Run:
    """:raises InputError: no results.json with the row's mode, or no trace."""
    try:
        res = json.loads((folder / "results.json").read_text())
        result = next(r for r in res["modes"] if r["mode"] == row.mode)
    except (OSError, ValueError, KeyError, StopIteration):
        raise InputError(f"{folder}: no results.json with a {row.mode} row") from None
    trace = read_trace(trace_of(folder, row.mode))
    return Run(row, res["meta"], result, trace, correctness(trace, res["meta"]))


def isa(flags) -> str | None:
    """The widest vector and bfloat16 instructions among CPU ``flags``: ``AMX``, ``AVX-512 + BF16``, ``AVX-512``,
    ``AVX2``, or None."""
    flags = set(flags)
    return next((name for flag, name in (("amx_tile", "AMX"), ("avx512_bf16", "AVX-512 + BF16"),
                                         ("avx512f", "AVX-512"), ("avx2", "AVX2")) if flag in flags), None)


def cpu_of(meta: dict) -> tuple[str, str | None]:
    """(CPU model, instruction set) a bench run recorded: a row's speed is only paired with an ar of the same."""
    hw = meta.get("hardware") or {}
    return hw.get("cpu_model") or "?", isa(hw.get("cpu_flags") or ())


def cpu_name(meta: dict) -> str:
    """``AMD EPYC, AVX2``: the CPU of a run, for tables and figures."""
    model, kind = cpu_of(meta)
    return model + (f", {kind}" if kind else "")


def recorded(out: Path) -> tuple[Run, list[Run], list[str]]:
    """The ar run, the other complete rows' runs (in :data:`ROWS` order), and the rows missing or incomplete.

    :raises InputError: no complete ar run, or a row recorded with other settings than ar's.
    """
    ar = load_run(out / "ar", ROWS[0])
    if ar.meta.get("done") != ar.meta.get("n"):
        raise InputError(f"{out / 'ar'}: ar is not complete ({ar.meta.get('done')} of {ar.meta.get('n')} problems)")
    runs, missing = [], []
    for r in ROWS[1:]:
        folder = out / r.name
        if not (folder / "results.json").exists():
            missing.append(r.name)
            continue
        run = load_run(folder, r)
        if run.meta.get("done") != run.meta.get("n"):
            missing.append(f"{r.name} (incomplete: {run.meta.get('done')} of {run.meta.get('n')})")
            continue
        got, want = settings(run.meta, r.mode)[:3], settings(ar.meta, "ar")[:3]
        if got != want or run.meta.get("backend") != ar.meta.get("backend"):
            raise InputError(f"{folder}: (dataset, problems, max tokens) = {got}, not ar's {want} (or another backend)")
        if cpu_of(run.meta) != cpu_of(ar.meta):
            raise InputError(f"{folder}: recorded on {cpu_name(run.meta)}, its ar on {cpu_name(ar.meta)}: a speedup "
                             "pairs runs of one CPU (record ar on that CPU into a folder of its own)")
        runs.append(run)
    return ar, runs, missing


def recorded_all(outs: list[Path]) -> tuple[list[Run], list[Run], list[str]]:
    """Every folder's ar, every complete row (the first folder's first, each paired with its own folder's ar) and
    the rows complete in none of them.

    :raises InputError: as :func:`recorded`, or one row complete in two folders (one row per configuration).
    """
    ars, runs, missing, seen = [], [], {}, {}
    for out in outs:
        ar, rs, miss = recorded(out)
        ars.append(ar)
        for run in rs:
            if run.row.name in seen:
                raise InputError(f"{run.row.name}: complete in both {seen[run.row.name]} and {out}; keep one")
            seen[run.row.name] = out
            run.ar = ar
            runs.append(run)
        for m in miss:
            missing.setdefault(m.split(" ")[0], m)
    order = {r.name: i for i, r in enumerate(ROWS)}
    runs.sort(key=lambda run: order[run.row.name])
    return ars, runs, [m for name, m in missing.items() if name not in seen]


# --- statistics ----------------------------------------------------------------------------------------


def capped(trace: Trace) -> int:
    """Requests that stopped at the token cap."""
    return sum(r.finish == "max_tokens" for r in trace.requests)


def quality_row(run: Run, ar: Run, reps: int) -> dict:
    """One row of the table and the JSON: accuracy and its paired comparison with ar, acceptance, speedup.

    The bootstrap draws from a generator seeded by the row's name, so a row's intervals stay the same when
    other rows are recorded beside it (one generator shared in table order moved them by +-0.01)."""
    rng = np.random.default_rng(zlib.crc32(run.row.name.encode()))
    ids = sorted(set(run.correct) & set(ar.correct))
    k, n = sum(run.correct[i] for i in ids), len(ids)
    k_ar = sum(ar.correct[i] for i in ids)
    p = paired_outcomes({i: run.correct[i] for i in ids}, ar.correct)
    s, lo, hi, _ = paired_speedup(run.trace, ar.trace, rng, reps)
    alpha = acceptance(run.trace.steps)[0]
    r = run.row
    return {"name": r.name, "label": r.label, "mode": r.mode, "verifier": r.verifier, "threshold": r.threshold,
            "exact_strict": r.strict, "n": n, "accuracy": k / n if n else math.nan, "accuracy_ci95": list(wilson(k, n)),
            "ar_accuracy": k_ar / n if n else math.nan, "lost": p.lost, "gained": p.gained, "p_value": p.p_value,
            "accuracy_diff": p.difference if n else math.nan,  # the row's accuracy minus ar's, Newcombe's 95%
            "accuracy_diff_ci95": list(p.difference_ci()),
            "speedup": s, "speedup_ci95": [lo, hi], "tokens_per_s": tokens_per_s(run.trace),
            "step_acceptance": None if alpha is None else alpha.p,
            "step_acceptance_ci95": None if alpha is None else [alpha.lo, alpha.hi],
            "capped": capped(run.trace), "ar_capped": capped(ar.trace), "loadavg": load_averages(run.meta),
            "cpu": cpu_name(run.meta)}


def ar_row(ar: Run) -> dict:
    k, n = sum(ar.correct.values()), len(ar.correct)
    return {"name": "ar", "label": ROWS[0].label, "mode": "ar", "verifier": None, "threshold": None,
            "cpu": cpu_name(ar.meta),
            "exact_strict": False, "n": n, "accuracy": k / n if n else math.nan, "accuracy_ci95": list(wilson(k, n)),
            "ar_accuracy": k / n if n else math.nan, "lost": 0, "gained": 0, "p_value": 1.0, "speedup": 1.0,
            "speedup_ci95": [1.0, 1.0], "tokens_per_s": tokens_per_s(ar.trace), "step_acceptance": None,
            "capped": capped(ar.trace), "ar_capped": capped(ar.trace), "loadavg": load_averages(ar.meta)}


def ar_agreement(ar: Run, ref: Run) -> dict:
    """How far two ar runs on different CPUs agree, problem by problem: ``n`` shared problems, ``same_correct``
    (both right or both wrong), ``same_text`` (the same answer text; None without texts).  Greedy decoding is
    deterministic per CPU, but another instruction set sums in another order and can flip a near tie."""
    ids = sorted(set(ar.correct) & set(ref.correct))
    a, b = ({r.request: r.text for r in run.trace.requests} for run in (ar, ref))
    has_texts = all(t.get(i) is not None for t in (a, b) for i in ids)
    same_text = sum(a[i] == b[i] for i in ids) if has_texts else None
    return {"cpu": cpu_name(ar.meta), "ref_cpu": cpu_name(ref.meta), "n": len(ids),
            "same_correct": sum(ar.correct[i] == ref.correct[i] for i in ids), "same_text": same_text}


def tokens_per_s(trace: Trace) -> float:
    """Output tokens over request seconds, summed over the finished requests."""
    x = np.array(list(per_request(trace).values()), dtype=float)
    return float(x[:, 0].sum() / x[:, 1].sum()) if len(x) else math.nan


def load_averages(meta: dict) -> list[float | None]:
    """The 1-minute load average when a bench run started and when it last wrote its results."""
    return [(meta.get(k) or [None])[0] for k in ("loadavg_start", "loadavg_now")]


def rule_passes(p_value: float, loss: float, alpha: float = 0.05, max_loss: float = 0.03) -> bool:
    """The default rule's test on one row: its loss against ar (ar's accuracy minus the row's) not significant
    (exact McNemar ``p_value >= alpha``) and at most ``max_loss``."""
    return p_value >= alpha and loss <= max_loss + 1e-12


def pass_probability(n: int, lost_rate: float, gained_rate: float, alpha: float = 0.05, max_loss: float = 0.03
                     ) -> float:
    """How often the default rule passes a verifier whose problems are lost with probability ``lost_rate`` and
    gained with ``gained_rate`` (each problem independently), on ``n`` problems: the exact sum over the trinomial
    counts ``P(lost = l, gained = g) = n! / (l! g! (n-l-g)!) pl^l pg^g (1-pl-pg)^(n-l-g)`` of the outcomes
    :func:`rule_passes` accepts.  A verifier that truly loses 10 points should pass rarely; at n = 40 it does
    not."""
    if not (0 <= lost_rate and 0 <= gained_rate and lost_rate + gained_rate <= 1) or n < 1:
        raise ValueError(f"bad rates or n: {lost_rate}, {gained_rate}, {n}")
    rest = 1 - lost_rate - gained_rate
    total = 0.0
    for l in range(n + 1):  # noqa: E741 - the formula's name
        for g in range(n - l + 1):
            if rule_passes(mcnemar_exact(l, g), (l - g) / n, alpha, max_loss):
                total += (math.comb(n, l) * math.comb(n - l, g) * lost_rate**l * gained_rate**g
                          * rest ** (n - l - g))
    return total


def pick_default(rows: list[dict], mode: str = "lr-async", alpha: float = 0.05, max_loss: float = 0.03
                 ) -> dict | None:
    """The issue's rule for lrref's default verifier: among ``mode``'s rows, the fastest that :func:`rule_passes`
    (loss on the same problems; 0.03 = 3 points); None when no row qualifies."""
    ok = [r for r in rows if r["mode"] == mode
          and rule_passes(r["p_value"], r["ar_accuracy"] - r["accuracy"], alpha, max_loss)]
    return max(ok, key=lambda r: r["speedup"], default=None)


def latest_rows(*tables: list[dict]) -> list[dict]:
    """Each row at its latest recording: a later table's row replaces an earlier row of the same name (the 80-problem
    re-recording of a 40-problem row), in the order the names first appear."""
    out: dict[str, dict] = {}
    for rows in tables:
        for r in rows:
            out[r["name"]] = r
    return list(out.values())


# --- output --------------------------------------------------------------------------------------------


def pct(p: float | None, ci: list[float] | None = None) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return f"{100 * p:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def markdown(rows: list[dict]) -> list[str]:
    out = [("| mode | verifier | CPU | problems | accuracy [95% CI] | ar on them | lost / gained | McNemar p | "
            "difference vs ar [95% CI] | step acceptance [95% CI] | speedup vs ar [95% CI] | capped (ar) |"),
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = "-" if r["mode"] == "ar" else f"{r['lost']} / {r['gained']}"
        p = "-" if r["mode"] == "ar" else f"{r['p_value']:.3g}"
        diff = "-" if r["mode"] == "ar" else (f"{100 * r['accuracy_diff']:+.1f} [{100 * r['accuracy_diff_ci95'][0]:+.1f}, "
                                               f"{100 * r['accuracy_diff_ci95'][1]:+.1f}]")
        speed = "1" if r["mode"] == "ar" else with_ci(r["speedup"], r["speedup_ci95"])
        out.append(f"| {r['mode']} | {'-' if r['mode'] == 'ar' else r['label']} | {r['cpu']} | {r['n']} | "
                   f"{pct(r['accuracy'], r['accuracy_ci95'])} | {pct(r['ar_accuracy'])} | {vs} | {p} | {diff} | "
                   f"{pct(r['step_acceptance'], r.get('step_acceptance_ci95'))} | {speed} | "
                   f"{r['capped']} ({r['ar_capped']}) |")
    return out


def notes(ars: list[Run], rows: list[dict], missing: list[str], reps: int, pick: dict | None,
          agree: list[dict]) -> list[str]:
    ar = ars[0]
    cfg = (ar.meta.get("config") or {}).get("ar", {})
    cpus = " and ".join(f"{cpu_name(x.meta)} ({x.meta.get('cpus')} cpus)" for x in ars)
    out = [(f"- {ar.meta.get('n')} problems of `{ar.meta.get('dataset_name') or ar.meta.get('dataset')}`, cap "
            f"{cfg.get('max_tokens')} tokens, greedy; lrref {ar.meta.get('backend')} on {cpus}; each row a separate "
            "run, one after the other" + ("; each row paired with the ar recorded on its own CPU." if len(ars) > 1
                                          else ".")),
           ("- Accuracy: Wilson 95%. lost = ar right and the row wrong, gained = the other way, on the same "
            "problems; p = exact two-sided McNemar (binomial) test of lost vs gained. Speedup: tokens/s over ar's on "
            f"the shared problems, paired bootstrap ({reps} resamples). Step acceptance counts token-identical "
            "drafts."),
           f"- {JUDGE_NOTE}.",
           "- Load average (1 min) at start / end: " + ", ".join(
               f"{r['name'] if r['mode'] != 'ar' or len(ars) == 1 else 'ar on ' + r['cpu']} {fmt(r['loadavg'][0])} / "
               f"{fmt(r['loadavg'][1])}" for r in rows) + "."]
    rule = "- Default by the rule (fastest lr-async row with p >= 0.05 and a loss <= 3 points): "
    if pick is None:
        out.append(rule + "none qualifies.")
    else:
        lo, hi = pick["accuracy_diff_ci95"]
        out.append(rule + f"{pick['label']} ({pick['speedup']:.3f}x, lost {pick['lost']} / gained {pick['gained']}, "
                   f"p = {pick['p_value']:.3g}; difference vs ar {100 * pick['accuracy_diff']:+.1f} points, 95% "
                   f"interval {100 * lo:+.1f} to {100 * hi:+.1f}).")
    n = max((r["n"] for r in rows), default=0)
    if n:
        out.append(f"- What the rule can show at n = {n}: it passes a verifier that truly loses 10 points (10% of "
                   f"problems lost, none gained) with probability {pass_probability(n, 0.10, 0.0):.2f}, and one "
                   f"that loses 15% and gains 5% with {pass_probability(n, 0.15, 0.05):.2f}; the 95% interval of a "
                   "row's difference vs ar (Newcombe) is the honest statement of its loss, not the rule's verdict.")
    for g in agree:
        text = "" if g["same_text"] is None else f", the same answer text on {g['same_text']}"
        out.append(f"- ar on {g['cpu']} against ar on {g['ref_cpu']}: right or wrong alike on {g['same_correct']} of "
                   f"{g['n']} problems{text}.")
    if missing:
        out.append(f"- Not recorded yet: {', '.join(missing)}.")
    return out


def fmt(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}"


def figure(rows: list[dict]) -> go.Figure:
    """Accuracy loss against ar (points, paired bootstrap CI) vs speedup (paired bootstrap CI), one marker per row."""
    fig = go.Figure()
    fig.add_hline(y=0, line={"color": "grey", "dash": "dot"})
    fig.add_vline(x=1, line={"color": "grey", "dash": "dot"})
    cpus = list(dict.fromkeys(r["cpu"] for r in rows))
    for (mode, symbol), cpu in ((m, c) for m in (("lr-async", "circle"), ("lr-sync", "square")) for c in cpus):
        rs = [r for r in rows if r["mode"] == mode and r["cpu"] == cpu]
        if not rs:
            continue
        loss = [-100 * r["accuracy_diff"] for r in rs]
        name = mode if len(cpus) == 1 else f"{mode} ({cpu})"
        fig.add_trace(go.Scatter(
            x=[r["speedup"] for r in rs], y=loss, mode="markers+text", name=name,
            marker={"symbol": symbol if cpu == cpus[0] else symbol + "-open", "size": 10},
            text=[r["name"].removeprefix(mode + "-") for r in rs], textposition="top center",
            error_x={"type": "data", "symmetric": False, "thickness": 1,
                     "array": [r["speedup_ci95"][1] - r["speedup"] for r in rs],
                     "arrayminus": [r["speedup"] - r["speedup_ci95"][0] for r in rs]},
            error_y={"type": "data", "symmetric": False, "thickness": 1,
                     "array": [100 * (r["accuracy_diff"] - r["accuracy_diff_ci95"][0]) for r in rs],
                     "arrayminus": [100 * (r["accuracy_diff_ci95"][1] - r["accuracy_diff"]) for r in rs]}))
    ends = [c for r in rows if r["mode"] != "ar" for c in r["speedup_ci95"]]
    if ends and max(ends) < 0.9:  # all far below ar: zoom in on the rows (ar's line at 1 leaves the plot)
        fig.update_xaxes(range=[min(ends) - 0.03, max(ends) + 0.03])
    fig.update_layout(xaxis_title="speedup over ar (paired bootstrap 95% CI; ar = 1)",
                      yaxis_title="accuracy lost against ar, points (paired bootstrap 95% CI)", width=950, height=650)
    return fig


def report(a: argparse.Namespace) -> None:
    ars, runs, missing = recorded_all(a.report)
    rows = [ar_row(ar) for ar in ars] + [quality_row(r, r.ar, a.reps) for r in runs]
    pick = pick_default(rows)
    agree = [ar_agreement(ar, ars[0]) for ar in ars[1:]]
    text = notes(ars, rows, missing, a.reps, pick, agree)
    print("\n".join(markdown(rows) + [""] + text))
    fig = figure([r for r in rows if r["mode"] != "ar"])  # everything computed before anything is written
    data = {"rows": rows, "default_pick": None if pick is None else pick["name"],
            "rule": "fastest lr-async row with exact McNemar p >= 0.05 against ar and a loss <= 3 points",
            "notes": text, "ar_agreement": agree, "source": [str(p) for p in a.report]}
    atomic_write(a.figures / f"{a.stem}.json", json.dumps(data, indent=1) + "\n")
    title = (f"Answer quality vs speed: {rows[0]['n']} GSM8K test problems, <= "
             f"{settings(ars[0].meta, 'ar')[2]} tokens (lrref {ars[0].meta.get('backend')}, CPU)")
    finish(fig, argparse.Namespace(out=a.figures), a.stem, title)


# --- packing -------------------------------------------------------------------------------------------


def cpu_label(prov: dict, meta: dict) -> str:
    """``AMD EPYC, AVX-512 + BF16 (2 cpus)``: lscpu's model name does not tell two CPU kinds of one vendor apart
    (this project had an AVX2-only and a Zen 4 AMD EPYC), the widest vector and bfloat16 instructions
    ``lrref bench`` found (its ``hardware.cpu_flags``) do."""
    kind = isa((meta.get("hardware") or {}).get("cpu_flags") or ())
    model = prov.get("cpu_model", "?") + (f", {kind}" if kind else "")
    return f"{model} ({prov.get('cpus', '?')} cpus)"


def _rel(p: Path) -> Path:
    try:
        return p.resolve().relative_to(ROOT)
    except ValueError:
        return p


def readme(out: Path, runs: list[tuple[Row, dict, dict]], dest: Path = DATA) -> str:
    """The packed data's README: what, how recorded, the problems' source, one line per row (``dest``: where it
    is packed; a folder beside :data:`DATA`, another CPU's recording, is reported together with it)."""
    report = " ".join(str(_rel(d)) for d in dict.fromkeys([DATA, dest]))
    head = f"""# Answer-quality traces (issue 19)

Recorded by `python studies/answer_quality.py --record {out}` (one `lrref bench` per row, one after the other;
every row on the same problems). Per row: `results.json` and `results.csv` (that run's table and meta),
`provenance.txt` (the exact command, CPU model, cpus, git commit, load averages, dates) and the gzipped trace
with step and answer texts. Packed by `python studies/answer_quality.py --pack {out}`; reported by
`python studies/answer_quality.py --report {report}`.

Problems: `lrref/data/gsm8k_test.jsonl`, the first 100 lines of GSM8K's test set (openai/grade-school-math,
`grade_school_math/data/test.jsonl` at commit 3101c7d5072418e28b9008a6636bde82a006892c, MIT licence; see
`lrref/data/README.md`); each row decodes the first N of them.

| row | mode | verifier | problems | CPU | load average start / end (1 min) | recorded (UTC) |
|---|---|---|---|---|---|---|
"""
    lines = []
    for row, res, prov in runs:
        load = " / ".join(prov.get(k, "?").split()[0] if prov.get(k) else "?" for k in ("loadavg_start", "loadavg_end"))
        lines.append(f"| `{row.name}` | {row.mode} | {'-' if row.verifier is None else row.label} | "
                     f"{res['meta'].get('n')} | {cpu_label(prov, res['meta'])} | {load} | "
                     f"{prov.get('date_start', '?')} to {prov.get('date_end', '?')} |")
    return head + "\n".join(lines) + "\n"


def pack(a: argparse.Namespace) -> None:
    """Copy every complete row of ``OUT`` (results, provenance, gzipped traces) to ``--dest`` with a README;
    everything is written to a temporary folder first, then moved into place.

    :raises InputError: no complete ar row, a row without provenance.txt, or ``--dest`` exists.
    """
    if a.dest.exists():
        raise InputError(f"{a.dest} exists: move it away first")
    if not a.dest.parent.is_dir():
        raise InputError(f"{a.dest.parent}: no such folder")
    ar, runs, _ = recorded(a.pack)
    found = []
    for run in [ar] + runs:
        folder = a.pack / run.row.name
        if not (folder / "provenance.txt").exists():
            raise InputError(f"{folder}/provenance.txt missing (recorded by another script?)")
        prov = dict(ln.split(": ", 1) for ln in (folder / "provenance.txt").read_text().splitlines() if ": " in ln)
        found.append((run.row, {"meta": run.meta}, prov))
    with staged(a.dest) as tmp:
        for row, _, _ in found:
            src, dst = a.pack / row.name, tmp / row.name
            dst.mkdir()
            for f in ("results.json", "results.csv", "provenance.txt"):
                shutil.copy2(src / f, dst / f)
            for t in traces_of(src):
                gzip_copy(t, dst)
        (tmp / "README.md").write_text(readme(a.pack, found, a.dest))
    print(f"packed {len(found)} row(s) into {a.dest}")


def main(argv: list[str] | None = None) -> int:
    def command() -> None:
        a = parse_args(argv)
        if a.record is not None:
            record(a)
        elif a.report is not None:
            report(a)
        else:
            pack(a)

    return run_command("answer_quality", command)


if __name__ == "__main__":
    sys.exit(main())
