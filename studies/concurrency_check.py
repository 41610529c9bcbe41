"""Serving at small scale (issue 11 item 5): measured ``lrref bench --concurrency N`` vs ``lrsim serve``'s prediction.

``python studies/concurrency_check.py [--out runs/concurrency] [--concurrency 1,2,4] [--modes ar,sd,lr-sync]
[--n 12] [--record-only | --compare-only] [--dry-run] [--pack DEST]``

1. **Record** (missing runs only, so an interrupted recording resumes): one ``lrref bench`` run per concurrency
   N on the default CPU pair (Qwen2.5-Coder 0.5B draft, 1.5B target, all-mpnet-base-v2 verifier), the same
   ``--n`` bundled problems in every run, written to ``OUT/cN/`` (``results.json``, one trace per mode).  At
   N = 1 the modes run side by side, one request at a time; at N > 1 each mode decodes all problems in a closed
   loop of N requests whose target steps share forward passes.  Record on a quiet machine: every timing counts.
2. **Compare**: for every run N and mode, ``lrsim serve`` calibrated from the N = 1 run's traces alone
   (behaviour: acceptance, lengths, verifier; timing: the profile those traces calibrate, or with ``--profile``
   a measured one, e.g. ``lrref profile --backend llamacpp``) predicts the throughput (vLLM's
   ``output_throughput``: output tokens over the run's duration) and the mean request latency of a closed loop
   of N requests over the run's number of problems, in the run's own setting (mode, k1, k2, width from its trace
   header).  The table gives both errors against the issue's 10% target; ``OUT/comparison[SUFFIX].json`` keeps
   it, and so does ``figures/concurrency_check[SUFFIX].json`` beside its figure (``.html``, ``.png``: measured
   against predicted per mode and N).
3. **Pack** (``--pack DEST``): the recorded runs' ``results.json`` and gzipped traces into ``DEST/cN/``, which
   ``--out DEST --compare-only`` reads as it reads the recording (the committed data:
   ``studies/data/concurrency-llamacpp/``).

The command it runs for a prediction is :func:`serve_command` (``lrsim serve --trace ... --arrival closed
--concurrency N --requests R --json``), and :func:`predicted` reads the throughput and mean latency from its
JSON: adjust those two functions if ``lrsim serve`` settles on other names.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from common import CONCISE_SYSTEM, FIGURES, gzip_copy, staged, trace_of, traces_of

from lrsim.atomic import atomic_write
from lrsim.errors import InputError, UsageError, run_command
from lrsim.trace import read_trace, recorded_setting

THROUGHPUT_KEYS = ("output_throughput",)  # lrsim serve: output tokens per second over the run
LATENCY_KEYS = ("e2e_mean",)  # lrsim serve: mean end-to-end latency (s)
TARGET = 0.10  # the bound on |predicted / measured - 1|


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/concurrency"), help="folder of the runs (OUT/cN/)")
    ap.add_argument("--concurrency", default="1,2,4,8", help="the runs: requests in flight, comma-separated")
    ap.add_argument("--modes", default="ar,sd,lr-sync,lr-async", help="lrref modes of every run")
    ap.add_argument("--profile", help="compare with timing from this measured profile (default: the N = 1 traces')")
    ap.add_argument("--target-arch", default="qwen2.5-coder-1.5b-instruct", help="with --profile")
    ap.add_argument("--draft-arch", default="qwen2.5-coder-0.5b-instruct", help="with --profile")
    ap.add_argument("--replications", type=int, default=4, help="lrsim serve replications per prediction")
    ap.add_argument("--require-idle", action="store_true", help="lrref bench refuses to start on a busy machine")
    ap.add_argument("--n", type=int, default=12, help="bundled problems per run")
    ap.add_argument("--gamma", type=int, default=2, help="lr-sync depth")
    ap.add_argument("--max-tokens", type=int, default=144)
    ap.add_argument("--max-step-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the decoder")
    ap.add_argument("--record-only", action="store_true", help="record the missing runs, compare nothing")
    ap.add_argument("--compare-only", action="store_true", help="compare the recorded runs, record nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    ap.add_argument("--pack", type=Path, metavar="DEST", help="copy the recorded runs (results.json, gzipped "
                    "traces) into DEST/cN/ and stop")
    ap.add_argument("--figures", type=Path, default=None, help="folder of the comparison's figure (default: the "
                    "repository's figures/)")
    a = ap.parse_args(argv)
    try:
        a.levels = sorted({int(x) for x in a.concurrency.split(",")})
    except ValueError:
        raise UsageError(f"--concurrency: comma-separated integers, got {a.concurrency!r}") from None
    if min(a.levels) < 1 or a.n < 1:
        raise UsageError("--concurrency values and --n must be >= 1")
    if a.record_only and a.compare_only:
        raise UsageError("--record-only and --compare-only exclude each other")
    return a


# --- recording ----------------------------------------------------------------------------------------


def bench_command(a: argparse.Namespace, n: int) -> list[str]:
    """The ``lrref bench`` run at concurrency ``n``."""
    return [sys.executable, "-m", "lrref.cli", "bench", "--n", str(a.n), "--modes", a.modes, "--concurrency", str(n),
            "--out", str(a.out / f"c{n}"), "--gamma", str(a.gamma), "--max-tokens", str(a.max_tokens),
            "--max-step-tokens", str(a.max_step_tokens), "--verifier", "embedding", "--threads", str(a.threads),
            "--system", CONCISE_SYSTEM, "--no-prefix-caching"] + (["--require-idle"] if a.require_idle else [])


def complete(folder: Path, n_problems: int) -> bool:
    """A run whose ``results.json`` says every problem was decoded in every mode."""
    try:
        meta = json.loads((folder / "results.json").read_text())["meta"]
    except (OSError, ValueError, KeyError):
        return False
    return meta.get("n") == n_problems and meta.get("done") == n_problems


def record(a: argparse.Namespace) -> None:
    """Run every missing bench run, one after the other (the models load once per run)."""
    for n in a.levels:
        if complete(a.out / f"c{n}", a.n):
            print(f"c{n}: recorded already ({a.out / f'c{n}'})", flush=True)
            continue
        cmd = bench_command(a, n)
        print(shlex.join(["python", *cmd[1:]]) if a.dry_run else f"c{n}: recording ...", flush=True)
        if not a.dry_run and subprocess.run(cmd, check=False).returncode != 0:
            raise InputError(f"c{n}: lrref bench failed (its error is above); rerun to resume")


# --- comparing ----------------------------------------------------------------------------------------


def pack(a: argparse.Namespace) -> None:
    """Copy every complete run into ``a.pack`` (written to a temporary folder, then moved into place)."""
    missing = [n for n in a.levels if not complete(a.out / f"c{n}", a.n)]
    if missing:
        raise InputError(f"runs not recorded yet: {', '.join(f'c{n}' for n in missing)}")
    with staged(a.pack) as tmp:
        for n in a.levels:
            src, dst = a.out / f"c{n}", tmp / f"c{n}"
            dst.mkdir()
            shutil.copy(src / "results.json", dst / "results.json")
            for t in traces_of(src):
                gzip_copy(t, dst)
    print(f"packed: {a.pack}; then: python studies/concurrency_check.py --out {a.pack} --compare-only "
          f"--concurrency {','.join(map(str, a.levels))} --n {a.n}")


def measured(folder: Path) -> dict[str, dict]:
    """{mode: results row} of one run."""
    return {r["mode"]: r for r in json.loads((folder / "results.json").read_text())["modes"]}


def serve_command(a: argparse.Namespace, calibration: list[Path], trace: Path, n: int, requests: int) -> list[str]:
    """``lrsim serve`` predicting a closed loop of ``n`` requests in the recorded run's setting."""
    s = recorded_setting(read_trace(trace).header)
    hw = ["--hardware", a.profile, "--target-arch", a.target_arch, "--draft-arch", a.draft_arch] if a.profile else []
    return [sys.executable, "-m", "lrsim.cli", "serve", "--trace", *map(str, calibration), *hw, "--mode", s.mode,
            "--k1", str(max(s.k1, 2)), "--k2", str(s.k2), "--width", str(s.width), "--arrival", "closed",
            "--concurrency", str(n), "--requests", str(requests), "--warmup", "0",
            "--replications", str(a.replications), "--no-progress", "--json"]


def pick(d: dict, keys: tuple[str, ...], what: str) -> float:
    """The first of ``keys`` in ``d`` (top level or under ``'summary'``)."""
    for src in (d, d.get("summary") or {}):
        for k in keys:
            if isinstance(src.get(k), (int, float)):
                return float(src[k])
    raise InputError(f"lrsim serve printed no {what} ({' / '.join(keys)}); its keys: {', '.join(sorted(d))}")


def predicted(cmd: list[str]) -> tuple[float, float]:
    """(throughput tokens/s, mean latency s) that ``lrsim serve`` predicts."""
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise InputError(f"lrsim serve failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    rows = json.loads(r.stdout)  # one row per mode and load: here one of each
    return pick(rows[0], THROUGHPUT_KEYS, "throughput"), pick(rows[0], LATENCY_KEYS, "mean latency")


def compare_one(a: argparse.Namespace, n: int, mode: str, row: dict) -> dict:
    """Measured vs predicted for one mode of run ``n``, calibrated on the N = 1 run's traces."""
    others = traces_of(a.out / "c1")
    trace = trace_of(a.out / f"c{n}", mode)
    tput, lat = predicted(serve_command(a, others, trace, n, row["requests"]))
    def err(p: float, m: float) -> float:
        return p / m - 1

    return {"concurrency": n, "mode": mode, "requests": row["requests"],
            "measured_tps": row["tokens_per_s"], "predicted_tps": round(tput, 3),
            "tps_error": round(err(tput, row["tokens_per_s"]), 4),
            "measured_latency_s": row["latency_mean_s"], "predicted_latency_s": round(lat, 3),
            "latency_error": round(err(lat, row["latency_mean_s"]), 4),
            "calibrated_on": [str(p) for p in others]}


def table(rows: list[dict]) -> str:
    out = ["| N | mode | tok/s measured | predicted | error | latency measured (s) | predicted | error |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['concurrency']} | {r['mode']} | {r['measured_tps']:.2f} | {r['predicted_tps']:.2f} | "
                   f"{100 * r['tps_error']:+.1f}% | {r['measured_latency_s']:.1f} | {r['predicted_latency_s']:.1f} | "
                   f"{100 * r['latency_error']:+.1f}% |")
    ok = sum(abs(r["tps_error"]) <= TARGET and abs(r["latency_error"]) <= TARGET for r in rows)
    return "\n".join(out + ["", f"{ok} of {len(rows)} within {100 * TARGET:.0f}% on both"])


def serve_available() -> bool:
    """``lrsim.serve`` (the serving simulator) is importable."""
    return importlib.util.find_spec("lrsim.serve") is not None


def compare(a: argparse.Namespace) -> None:
    if not serve_available():
        print("lrsim.serve is not importable here (the serving simulator is not merged yet): comparison skipped")
        return
    missing = [n for n in a.levels if not complete(a.out / f"c{n}", a.n)]
    if missing:
        raise InputError(f"runs not recorded yet: {', '.join(f'c{n}' for n in missing)} (run without "
                         "--compare-only)")
    if 1 not in a.levels:
        raise UsageError("the comparison calibrates on the N = 1 run: include 1 in --concurrency")
    rows = [compare_one(a, n, mode, row) for n in a.levels for mode, row in measured(a.out / f"c{n}").items()]
    suffix = "_profile" if a.profile else ""
    name = f"comparison{suffix}.json"
    atomic_write(a.out / name, json.dumps(rows, indent=1) + "\n")
    print(table(rows))
    print(f"\nwritten: {a.out / name}")
    figures = a.figures or FIGURES
    figures.mkdir(parents=True, exist_ok=True)
    atomic_write(figures / f"concurrency_check{suffix}.json", json.dumps(rows, indent=1) + "\n")
    plot(rows, figures, "concurrency_check" + suffix,
         "lrref bench --concurrency N (llama.cpp) vs lrsim serve from the N = 1 traces"
         + (" + a measured profile" if a.profile else ""))


def plot(rows: list[dict], out: Path, name: str, title: str) -> None:
    """Measured (solid) and predicted (dashed) throughput and mean latency against N, one colour per mode."""
    from plotly.subplots import make_subplots

    from lrsim.plots import save_figure

    fig = make_subplots(rows=1, cols=2, subplot_titles=("output throughput (tok/s)", "mean e2e latency (s)"))
    colours = ("#4c78a8", "#f58518", "#e45756", "#54a24b", "#b279a2")
    for i, mode in enumerate(dict.fromkeys(r["mode"] for r in rows)):
        pts = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["concurrency"])
        x = [r["concurrency"] for r in pts]
        for col, key in ((1, "tps"), (2, "latency_s")):
            for kind, dash in (("measured", "solid"), ("predicted", "dash")):
                fig.add_scatter(x=x, y=[r[f"{kind}_{key}"] for r in pts], mode="lines+markers",
                                name=f"{mode} {kind}", legendgroup=mode, showlegend=col == 1,
                                line={"color": colours[i % len(colours)], "dash": dash}, row=1, col=col)
    fig.update_xaxes(type="log", tickvals=sorted({r["concurrency"] for r in rows}), title_text="requests in flight N")
    fig.update_layout(title=title, template="plotly_white", legend={"orientation": "h", "y": -0.25})
    for p in save_figure(fig, out / name):
        print(p)


def main(argv: list[str] | None = None) -> int:
    def command() -> int:
        a = parse_args(argv)
        if a.pack is not None:
            pack(a)
            return 0
        if not a.compare_only:
            record(a)
        if not a.record_only and not a.dry_run:
            compare(a)
        return 0

    return run_command("concurrency_check", command)


if __name__ == "__main__":
    sys.exit(main())
