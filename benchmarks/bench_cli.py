"""Benchmark the ``lrsim`` command's start-up against its target (issue 32): ``lrsim --help`` under 0.5 s.

Measures, in one run, the wall time of fresh processes (best and median of ``--repeat``, after one warm-up that
compiles the bytecode): ``lrsim --help``, each subcommand's ``--help`` (no target: they build their own flags,
and some import numpy for their argument types), and ``python -c pass`` (the interpreter alone, the floor).
``--baseline DIR`` times ``lrsim --help`` of another source tree too (e.g. ``git archive HEAD | tar -x -C DIR``),
in the same run, so before and after share the machine's load.  The load average before and after and the CPU's
model name are printed: other processes on the machine slow every number here.

Run: python benchmarks/bench_cli.py [--repeat 9] [--baseline DIR] [--json]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from report import machine, report

TARGET_S = 0.5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the source tree this benchmark belongs to
SUBCOMMANDS = ("plan", "replay", "theorems", "symbolic", "report", "simulate", "sweep", "calibrate", "serve",
               "profiles")


def wall(cmd: list[str], repeat: int, tree: str = ROOT) -> tuple[float, float]:
    """Best and median wall seconds of ``repeat`` runs of ``cmd`` with the lrsim of source tree ``tree`` (first on
    the path; run from a neutral directory), after one warm-up run; output discarded."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    kw = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tempfile.gettempdir(), check=True)
    subprocess.run(cmd, **kw)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, **kw)
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9, help="timed runs per command (default 9)")
    ap.add_argument("--baseline", metavar="DIR", help="also time `lrsim --help` of the lrsim in this source tree")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load0 = os.getloadavg()
    lrsim = [sys.executable, "-m", "lrsim.cli"]
    rows = []
    best, med = wall(lrsim + ["--help"], args.repeat)
    rows.append({"what": "lrsim --help (s)", "measured": best, "target": TARGET_S, "ratio": TARGET_S / best,
                 "note": f"median {med:.3f} s of {args.repeat}"})
    if args.baseline:
        b, m = wall(lrsim + ["--help"], args.repeat, args.baseline)
        rows.append({"what": "lrsim --help, baseline tree (s)", "measured": b, "target": TARGET_S,
                     "ratio": TARGET_S / b, "note": f"{args.baseline}; median {m:.3f} s"})
    for name in SUBCOMMANDS:
        b, m = wall(lrsim + [name, "--help"], args.repeat)
        rows.append({"what": f"lrsim {name} --help (s)", "measured": b, "target": TARGET_S, "ratio": TARGET_S / b,
                     "note": f"median {m:.3f} s (no target: for comparison)"})
    b, m = wall([sys.executable, "-c", "pass"], args.repeat)
    rows.append({"what": "python -c pass (s)", "measured": b, "target": TARGET_S, "ratio": TARGET_S / b,
                 "note": f"median {m:.3f} s: the interpreter alone"})
    report(machine(load0), rows, args.json)


if __name__ == "__main__":
    main()
