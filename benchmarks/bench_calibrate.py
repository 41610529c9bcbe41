"""Benchmark calibration and the replay study against their targets (issue 44).

- ``lrsim calibrate`` on the committed llama.cpp recording (``studies/data/validation-llamacpp``: 10 traces, 30
  problems per mode, 7 distinct modes): behaviour and every pass-cost fit, in under 5 s (in process, best of
  ``--repeat``, after one warm-up that reads the traces).
- with ``--replay DATA``: ``studies/replay_validation.py --data DATA`` as a subprocess (its defaults), in under
  5 minutes on 2 cores for a 6-problem recording.

The CPU (model name, family and model numbers), its cores and the load average before and after are printed:
other processes slow every number here.

Run: python benchmarks/bench_calibrate.py [--repeat 3] [--replay studies/data/validation-llamacpp-zen5-n6] [--json]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import machine, report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CALIBRATE_S = 5.0
REPLAY_S = 300.0


def calibrate_once(paths: list[Path]) -> float:
    """Seconds of read + calibrate + pass-cost profile (what ``lrsim calibrate`` computes) on ``paths``."""
    from lrsim.cost.fromtraces import profile_from_traces
    from lrsim.prediction.calibrate import calibrate
    from lrsim.trace import read_trace

    t = time.perf_counter()
    traces = [read_trace(p) for p in paths]
    c = calibrate(traces)
    profile_from_traces(traces, "bench", c.alpha2)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, default=ROOT / "studies" / "data" / "validation-llamacpp")
    ap.add_argument("--replay", type=Path, metavar="DATA", help="also time studies/replay_validation.py on DATA")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load0 = os.getloadavg()
    paths = sorted(a.data.glob("*/trace-*.jsonl*"))
    calibrate_once(paths)  # warm-up: imports, caches
    best = min(calibrate_once(paths) for _ in range(a.repeat))
    rows = [{"what": "calibrate, 30 problems x 7 modes (s)", "measured": best, "target": CALIBRATE_S,
             "ratio": CALIBRATE_S / best, "note": f"{len(paths)} traces under {a.data.name}, best of {a.repeat}"}]
    if a.replay:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, str(ROOT / "studies" / "replay_validation.py"), "--data", str(a.replay),
                   "--out", tmp]
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t
        rows.append({"what": "replay_validation.py (s)", "measured": wall, "target": REPLAY_S,
                     "ratio": REPLAY_S / wall, "note": f"--data {a.replay}"})
    report(machine(load0), rows, a.json)


if __name__ == "__main__":
    main()
