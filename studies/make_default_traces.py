"""The embedded default traces (``lrsim/data/default/``): the first problems of a validation recording.

``python studies/make_default_traces.py [--data studies/data/validation-llamacpp] [--n 10]``

Takes ``g2``'s ``ar``, ``sd``, ``lr-async`` and ``lr-async+sd`` traces and ``g2s``'s ``lr-sync`` trace (every
mode side by side on the same problems, recorded alone on the machine by ``studies/record_validation.sh``), keeps
their first ``--n`` requests (problems) with the step and pass records of those requests (the runs decode one
request at a time, so a pass belongs to a kept request when it starts before the last kept request ends), and
writes them gzipped into ``lrsim/data/default/`` with a README naming the source, the machine and the command.
``lrsim calibrate``, ``replay``, ``plan --trace``, ``serve --trace`` and ``report`` read them when given no trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from dataclasses import replace
from pathlib import Path

from lrsim.errors import InputError, run_command
from lrsim.trace import Trace, read_trace

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "lrsim" / "data" / "default"
PICK = {"trace-ar.jsonl.gz": ("g2", "trace-ar.jsonl.gz"), "trace-sd.jsonl.gz": ("g2", "trace-sd.jsonl.gz"),
        "trace-lr-async.jsonl.gz": ("g2", "trace-lr-async.jsonl.gz"),
        "trace-lr-async_sd.jsonl.gz": ("g2", "trace-lr-async_sd.jsonl.gz"),
        "trace-lr-sync.jsonl.gz": ("g2s", "trace-lr-sync.jsonl.gz")}


def first_requests(t: Trace, n: int) -> Trace:
    """``t`` with its first ``n`` requests and the steps and passes that belong to them."""
    keep = {r.request for r in sorted(t.requests, key=lambda r: r.start)[:n]}
    if len(keep) < n:
        raise InputError(f"{t.path}: {len(keep)} finished requests, fewer than --n {n}")
    end = max(r.end for r in t.requests if r.request in keep)
    passes = [p for p in t.passes if (set(p.requests) <= keep if p.requests else p.start <= end)]
    return replace(t, steps=[s for s in t.steps if s.request in keep],
                   requests=[r for r in t.requests if r.request in keep], passes=passes, warnings=[])


def write(t: Trace, path: Path) -> None:
    """The trace as gzipped JSON Lines (deterministic: no timestamp in the gzip header)."""
    from lrsim.trace import _line  # the writer's own record serialisation

    body = "".join(_line(rec) for rec in [t.header, *t.steps, *t.requests, *t.passes]).encode()
    path.write_bytes(gzip.compress(body, mtime=0))


def readme(data: Path, n: int) -> str:
    prov = (data / "README.md").read_text(encoding="utf-8")
    table = [ln for ln in prov.splitlines() if ln.startswith("| `g2")]
    return "\n".join([
        "# Embedded default traces", "",
        f"The first {n} problems of the validation recording `{data.relative_to(ROOT)}` (`g2`: `ar`, `sd`, `lr-async`,",
        "`lr-async+sd` at gamma 2; `g2s`: `lr-sync` at gamma 2), written by `python studies/make_default_traces.py`:",
        "real `lrref bench` traces of the default CPU pair (draft Qwen2.5-Coder-0.5B-Instruct, target",
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF on llama.cpp, embedding verifier), `--max-tokens 144",
        "--max-step-tokens 64`, sync modes on 2 threads, lr-async's target on 1 thread beside its draft process on the",
        "other, with pass records (one per forward pass). `lrsim calibrate`, `lrsim replay`, `lrsim plan --trace`,",
        "`lrsim serve --trace` and `lrsim report` read them when given no trace.", "",
        "Recordings they come from (machine, load and dates from the data folder's README):", "",
        "| run | modes | gamma | problems | CPU | load average start / end (1 min) | recorded (UTC) |",
        "|---|---|---|---|---|---|---|", *table, ""])


def main(argv: list[str] | None = None) -> int:
    def command() -> str:
        ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        ap.add_argument("--data", type=Path, default=ROOT / "studies" / "data" / "validation-llamacpp")
        ap.add_argument("--n", type=int, default=10, help="problems to keep")
        a = ap.parse_args(argv)
        if a.n < 1:
            raise InputError("--n must be >= 1")
        picked = {name: first_requests(read_trace(a.data / run / src), a.n) for name, (run, src) in PICK.items()}
        for old in DEST.glob("trace-*.jsonl.gz"):
            old.unlink()
        for name, t in picked.items():
            write(t, DEST / name)
        (DEST / "README.md").write_text(readme(a.data.resolve(), a.n), encoding="utf-8")
        sizes = {p.name: p.stat().st_size for p in DEST.glob("trace-*.jsonl.gz")}
        return json.dumps(sizes, indent=1)

    return run_command("make_default_traces", command)


if __name__ == "__main__":
    sys.exit(main())
