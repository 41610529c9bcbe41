"""Side-by-side benchmark of decoding modes on GSM8K-format problems.

One request at a time (``concurrency = 1``), each problem is run in every mode
before moving to the next problem, so slow drifts of machine load hit all modes
alike.  With ``concurrency = N > 1`` each mode decodes all problems in turn, N
at a time in a closed loop (:meth:`lrref.decode.decoder.Decoder.run_many`: the next
problem starts when one ends, and the target steps of all requests in flight
share forward passes).  Per mode: tokens/s (throughput: tokens over the mode's
wall time, which is the sum of request times at concurrency 1 and the span
from the first start to the last end otherwise), speedup vs ``ar``, request
latency (mean, median), time to the first committed step, time per output
token, step acceptance, n-gram acceptance, accuracy with a Wilson 95%
interval, and where the wall time went (target / draft / verifier / waiting
for the overlapped draft / control overhead).  Writes ``results.json`` and
``results.csv`` (atomically) and one trace per mode.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from lrsim.atomic import atomic_write
from lrsim.stats import paired_outcomes, wilson

from .answers import extract_answer, gold_answer, is_correct

DATA = Path(__file__).parent / "data"
#: problem sets shipped with lrref, by the name ``lrref bench --dataset`` takes (see lrref/data/README.md)
DATASETS = {"bundled": "problems.jsonl", "gsm8k-test": "gsm8k_test.jsonl"}
DATASET_HELP = ("problems: a bundled set by name (bundled: the 40 problems lrref was developed on, the default; "
                "gsm8k-test: the first 100 problems of GSM8K's test set; verifier rules were chosen on 1-40) or a GSM8K-format "
                "JSONL file (question, answer ending '#### N')")


def dataset_path(name: str | None) -> str:
    """A bundled problem set's file by name (``None``: ``bundled``), else ``name`` itself as a path."""
    name = name or "bundled"
    return str(DATA / DATASETS[name]) if name in DATASETS else name


def load_dataset(path: str | os.PathLike, n: int | None = None) -> list[dict]:
    """GSM8K-format JSONL (``question``, ``answer`` ending ``#### N``) -> ``[{question, gold}]``."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                q, a = obj["question"], str(obj["answer"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{i}: not a GSM8K record with question/answer ({e})") from None
            rows.append({"question": q, "gold": gold_answer(a)})
            if n is not None and len(rows) >= n:
                break
    if not rows:
        raise ValueError(f"{path}: no problems")
    return rows


@dataclass
class ModeStats:
    """Totals of one mode over the problems."""

    mode: str
    requests: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    target_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    wait_s: float = 0.0
    overhead_s: float = 0.0
    verified: int = 0
    accepted: int = 0
    steps: int = 0
    accepted_steps: int = 0
    ngram_drafted: int = 0
    ngram_accepted: int = 0
    target_forwards: int = 0
    correct: int = 0
    trace: str = ""
    answers: list = field(default_factory=list)
    concurrency: int = 1
    latencies: list = field(default_factory=list)  # per request, s
    ttfts: list = field(default_factory=list)  # per request: start to the first committed step, s
    tpots: list = field(default_factory=list)  # per request: latency / output tokens, s
    outcomes: dict = field(default_factory=dict)  # problem index -> answer right (None: no reference)
    capped: int = 0  # requests that stopped at the token cap
    draft_overlapped: bool = False  # the draft ran in its own process (lr-async): its time is not the main's

    def add(self, r, correct: bool | None, answer: str | None, index: int | None = None) -> None:
        self.latencies.append(r.wall_s)
        if r.ttft_s is not None:
            self.ttfts.append(r.ttft_s)
        if r.ids:
            self.tpots.append(r.wall_s / len(r.ids))
        self.requests += 1
        self.tokens += len(r.ids)
        for k in ("wall_s", "target_s", "draft_s", "verify_s", "wait_s", "overhead_s"):
            setattr(self, k, getattr(self, k) + getattr(r, k))
        self.verified += r.verified
        self.accepted += r.accepted
        self.steps += len(r.steps)
        self.accepted_steps += r.accepted_steps
        self.ngram_drafted += r.ngram_drafted
        self.ngram_accepted += r.ngram_accepted
        self.target_forwards += r.target_forwards
        self.correct += bool(correct)
        self.answers.append(answer)
        self.outcomes[self.requests - 1 if index is None else index] = correct
        self.capped += getattr(r, "finish", None) == "max_tokens"
        self.draft_overlapped = self.draft_overlapped or bool(getattr(r, "draft_overlapped", False))

    def span(self, wall_s: float) -> None:
        """Several requests at once: the mode's wall time is its span, and its overhead what the models left."""
        self.wall_s = wall_s
        draft_inline = 0.0 if self.draft_overlapped else self.draft_s
        self.overhead_s = wall_s - self.target_s - self.verify_s - self.wait_s - draft_inline

    def latency_row(self) -> dict:
        """Request latency (mean, median), time to the first committed step and time per output token (means)."""
        mean = lambda xs: round(statistics.fmean(xs), 4) if xs else None  # noqa: E731
        return {"concurrency": self.concurrency, "latency_mean_s": mean(self.latencies),
                "latency_p50_s": round(statistics.median(self.latencies), 4) if self.latencies else None,
                "ttft_mean_s": mean(self.ttfts), "tpot_mean_s": mean(self.tpots)}

    def row(self, ar_tps: float | None) -> dict:
        tps = self.tokens / self.wall_s if self.wall_s else 0.0
        lo, hi = wilson(self.correct, self.requests)
        w = self.wall_s or 1.0
        return {
            "mode": self.mode, "requests": self.requests, "tokens": self.tokens, "wall_s": round(self.wall_s, 2),
            "tokens_per_s": round(tps, 3), "speedup_vs_ar": round(tps / ar_tps, 3) if ar_tps else None,
            "step_acceptance": round(self.accepted / self.verified, 3) if self.verified else None,
            "accepted_steps": self.accepted_steps, "steps": self.steps,
            "ngram_acceptance": round(self.ngram_accepted / self.ngram_drafted, 3) if self.ngram_drafted else None,
            "tokens_per_target_forward": round(self.tokens / self.target_forwards, 3) if self.target_forwards else None,
            "accuracy": round(self.correct / self.requests, 3) if self.requests else None,
            "accuracy_ci95": [round(lo, 3), round(hi, 3)], "correct": self.correct, "capped": self.capped,
            "target_share": round(self.target_s / w, 3), "draft_s": round(self.draft_s, 2),
            "draft_share_inline": None if self.draft_overlapped or not self.draft_s else round(self.draft_s / w, 3),
            "verify_share": round(self.verify_s / w, 3), "wait_share": round(self.wait_s / w, 3),
            "overhead_share": round(self.overhead_s / w, 4),
        } | self.latency_row() | {"trace": self.trace}


def write_results(out_dir: Path, meta: dict, rows: list[dict]) -> tuple[Path, Path]:
    """``results.json`` (meta + rows) and ``results.csv`` (rows), each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    j = out_dir / "results.json"
    atomic_write(j, json.dumps({"meta": meta, "modes": rows}, indent=1) + "\n")
    buf = io.StringIO()
    cols = [k for k in rows[0] if k != "trace"] if rows else []
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()})
    c = out_dir / "results.csv"
    atomic_write(c, buf.getvalue())
    return j, c


def format_table(rows: Sequence[dict]) -> str:
    """Markdown table of the per-mode rows."""
    head = ("| mode | tok/s | speedup vs ar | latency (s) | first step (s) | step accept | n-gram accept | "
            "accuracy [95% CI] | target | draft (s) | verify | wait | overhead |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    out = [head]
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    for r in rows:
        sec = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        out.append(f"| {r['mode']} | {r['tokens_per_s']:.2f} | {r['speedup_vs_ar'] or '-'} | "
                   f"{sec(r['latency_mean_s'])} | {sec(r['ttft_mean_s'])} | {pct(r['step_acceptance'])} | "
                   f"{pct(r['ngram_acceptance'])} | "
                   f"{pct(r['accuracy'])} [{100 * r['accuracy_ci95'][0]:.0f}, {100 * r['accuracy_ci95'][1]:.0f}] | "
                   f"{pct(r['target_share'])} | {r['draft_s']:.0f} | {pct(r['verify_share'])} | "
                   f"{pct(r['wait_share'])} | {pct(r['overhead_share'])} |")
    return "\n".join(out)


def run_bench(problems: list[dict], modes: Sequence[str], make_decoder: Callable[[str], object],
              encode: Callable[[str], list[int]], decode: Callable[[Sequence[int]], str],
              log: Callable[[str], None] = print,
              progress: Callable[[list["ModeStats"]], None] | None = None, concurrency: int = 1,
              warmup: Sequence[str] = ()) -> list[ModeStats]:
    """Run every problem in every mode; ``make_decoder(mode)`` builds a Decoder.

    ``concurrency = 1``: problem-major order, one request at a time.  ``N > 1``: mode-major, N requests at once.
    ``warmup``: questions each mode's decoder decodes first, untimed and unrecorded (:meth:`Decoder.warm_up`).
    """
    decs = {m: make_decoder(m) for m in modes}
    stats = {m: ModeStats(m, trace=str(getattr(decs[m].trace, "path", "")), concurrency=concurrency) for m in modes}
    for m, dec in decs.items():
        for q in warmup:
            log(f"[warm-up] {m:>12}: {dec.warm_up(encode(q)):.1f} s (not timed, not in the trace)")
    try:
        if concurrency == 1:
            _problem_major(problems, decs, stats, encode, log, progress)
        else:
            _mode_major(problems, decs, stats, encode, log, progress, concurrency)
    finally:
        for d in decs.values():
            d.close()
            if getattr(d, "trace", None):
                d.trace.close()
    return [stats[m] for m in modes]


def _record(st: ModeStats, i: int, r, problems: list[dict], log: Callable[[str], None]) -> None:
    """Score one finished request and log its line."""
    p = problems[i]
    ans = extract_answer(r.text)
    ok = is_correct(ans, p["gold"])
    st.add(r, ok, ans, i)
    log(f"[{i + 1}/{len(problems)}] {st.mode:>12}: {len(r.ids):4d} tok {r.wall_s:7.1f} s "
        f"{len(r.ids) / max(r.wall_s, 1e-9):6.2f} tok/s steps {len(r.steps):2d} "
        f"accepted {r.accepted_steps:2d} answer {ans} gold {p['gold']} {'ok' if ok else 'x'}")


def _problem_major(problems, decs, stats, encode, log, progress) -> None:
    """One request at a time: each problem in every mode, then the next problem."""
    for i, p in enumerate(problems):
        ids = encode(p["question"])
        for m, dec in decs.items():
            _record(stats[m], i, dec.run(i, ids, p["gold"]), problems, log)
        if progress:
            progress(list(stats.values()))


def _mode_major(problems, decs, stats, encode, log, progress, concurrency: int) -> None:
    """``concurrency`` requests at once: every problem of one mode (closed loop), then the next mode."""
    prompts = [(i, encode(p["question"])) for i, p in enumerate(problems)]
    for m, dec in decs.items():
        results = dec.run_many(prompts, concurrency, lambda i, r, st=stats[m]: _record(st, i, r, problems, log),
                               refs={i: p["gold"] for i, p in enumerate(problems)})
        stats[m].span(max(r.end for r in results) - min(r.start for r in results))
        if progress:
            progress(list(stats.values()))


def paired_vs_ar(st: ModeStats, ar: ModeStats | None) -> dict:
    """Paired answers of one mode against ``ar`` on the problems both decoded: ``lost_vs_ar`` (ar right, this
    mode wrong), ``gained_vs_ar``, their exact McNemar ``p_vs_ar`` and ``paired_n``; all None for ``ar`` itself,
    without an ``ar`` run beside it, or when answers were not checked (a problem without a reference)."""
    keys = ("paired_n", "lost_vs_ar", "gained_vs_ar", "p_vs_ar")
    if ar is None or st is ar or not st.outcomes or any(v is None for v in [*st.outcomes.values(),
                                                                            *ar.outcomes.values()]):
        return dict.fromkeys(keys)
    p = paired_outcomes(st.outcomes, ar.outcomes)
    return dict(zip(keys, (p.n, p.lost, p.gained, round(p.p_value, 6))))


def summarize(stats: Sequence[ModeStats]) -> list[dict]:
    """Per-mode rows (:meth:`ModeStats.row`), with the paired comparison against ``ar`` when ``ar`` ran."""
    ar = next((s for s in stats if s.mode == "ar"), None)
    ar_tps = ar.tokens / ar.wall_s if ar and ar.wall_s else None
    return [s.row(ar_tps) | paired_vs_ar(s, ar) for s in stats]


def format_paired(rows: Sequence[dict]) -> str | None:
    """One line per mode on whether its answers held against ``ar``'s (None when nothing was paired)."""
    out = [f"  {r['mode']}: lost {r['lost_vs_ar']} (ar right, {r['mode']} wrong), gained {r['gained_vs_ar']}, "
           f"exact McNemar p = {r['p_vs_ar']:.3g} on {r['paired_n']} problems"
           for r in rows if r.get("paired_n")]
    return "answers against ar (paired, same problems):\n" + "\n".join(out) if out else None


__all__ = ["load_dataset", "extract_answer", "gold_answer", "wilson", "run_bench", "summarize", "write_results",
           "format_table", "format_paired", "paired_vs_ar", "ModeStats", "replace"]
