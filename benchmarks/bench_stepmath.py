"""Benchmark the math verifier's numeric check against its target (issue 33): under 1 ms a step pair.

Times :func:`lrref.verify.stepmath.agree` over the hand-made pairs of ``tests/data/step_pairs.jsonl`` and over
the accepted non-identical step pairs of the answer-quality study's traces (real steps, longer), best and median
per pair of ``--repeat`` passes, in one run.  The load average before and after and the CPU's model name are
printed: other processes slow every number here.

Run: python benchmarks/bench_stepmath.py [--repeat 7] [--json]
"""

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path

from report import machine, report

from lrref.verify.stepmath import agree

TARGET_S = 1e-3
ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "studies" / "data" / "answer-quality"


def hand_made() -> list[tuple[str, str]]:
    rows = [json.loads(x) for x in (ROOT / "tests" / "data" / "step_pairs.jsonl").read_text().splitlines()]
    return [(r["target"], r["draft"]) for r in rows]


def recorded(limit: int = 400) -> list[tuple[str, str]]:
    """Step pairs a verifier judged in the study's traces (target text, draft text), at most ``limit``."""
    out = []
    for path in sorted(STUDY.rglob("trace-*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for line in f:
                row = json.loads(line)
                if row.get("type") == "step" and row.get("target_text") and row.get("draft_text"):
                    out.append((row["target_text"], row["draft_text"]))
                    if len(out) >= limit:
                        return out
    return out


def per_pair(pairs: list[tuple[str, str]], repeat: int) -> tuple[float, float]:
    """Best and median seconds per pair over ``repeat`` passes of every pair."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for a, b in pairs:
            agree(a, b)
        times.append((time.perf_counter() - t) / len(pairs))
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="timed passes (default 7)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load0 = os.getloadavg()
    rows = []
    for name, pairs in (("hand-made pairs", hand_made()), ("recorded step pairs", recorded())):
        if not pairs:
            continue
        best, med = per_pair(pairs, args.repeat)
        rows.append({"what": f"agree(), {name} (s/pair)", "measured": best, "target": TARGET_S,
                     "ratio": TARGET_S / best, "note": f"median {med * 1e3:.3f} ms over {len(pairs)} pairs"})
    report(machine(load0), rows, args.json)


if __name__ == "__main__":
    main()
