"""Benchmark composition with a latency profile against its target (issue 10): as fast as replay from traces.

Measures, side by side in one run (wall and CPU seconds of the command, in this process, output discarded):
- ``lrsim plan --hardware h100-ctx0-kernel`` (R1-Distill 32B target, 1.5B draft, alpha1 0.6, alpha2 0.4, a 13 ms
  verifier) over every configuration with M = 16, 32, 64 (target: under 30 s for M <= 64 on 2 cores);
- ``lrsim plan --trace`` on the embedded default traces at M = 16 (what a plan from traces costs today);
- one ``lrsim replay --hardware`` prediction (async k1 = 3, n-gram k2 = 5, 20,000 steps) and one with the context
  growing through 4,000-token requests on ``h100-context-kernel``, each against one ``lrsim replay`` from traces
  (async k1 = 3, k2 = 5, 20,000 steps, no bootstrap) measured in the same run (target: no slower);
- the two halves of a replay done by hand (issue 16): ``lrsim calibrate --profile-out`` on the embedded traces,
  then ``lrsim replay --hardware`` on that calibrated profile with behaviour from the same traces, timed together
  against the one-command replay from traces (target: no slower).
The load average before and after is printed: other processes on the machine slow every number here.

Run: python benchmarks/bench_hardware.py [--json]
"""

import argparse
import contextlib
import io
import os
import platform
import tempfile
import time
from pathlib import Path

from report import report

from lrsim.cli import main as lrsim

TRACES = "replay from traces"  # target: the wall time of the replay from traces measured in the same run
HW = ["--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
      "--verifier-latency", "0.013"]


def cases(calibrated: str) -> list[tuple[str, list, object]]:
    """(what, command line or lines, target) of every case; ``calibrated``: where the calibrate-then-replay case
    writes and reads its profile."""
    return [
        ("plan --hardware, M = 16", ["plan", *HW, "--alpha1", "0.6", "--alpha2", "0.4", "--budget", "16",
                                     "--bootstrap", "0"], 30.0),
        ("plan --hardware, M = 32", ["plan", *HW, "--alpha1", "0.6", "--alpha2", "0.4", "--budget", "32",
                                     "--bootstrap", "0"], 30.0),
        ("plan --hardware, M = 64", ["plan", *HW, "--alpha1", "0.6", "--alpha2", "0.4", "--budget", "64",
                                     "--bootstrap", "0"], 30.0),
        ("plan --trace (embedded default), M = 16", ["plan", "--trace", "--budget", "16", "--bootstrap", "0"], 30.0),
        ("replay --hardware, async k1 = 3, k2 = 5", ["replay", *HW, "--alpha1", "0.78", "--alpha2", "0.29", "--mode",
                                                     "async", "--k1", "3", "--k2", "5", "--steps", "20000"], TRACES),
        ("replay from traces, async k1 = 3, k2 = 5", ["replay", "--mode", "async", "--k1", "3", "--k2", "5",
                                                      "--steps", "20000", "--bootstrap", "0"], TRACES),
        ("replay --hardware, context growth, async k1 = 2",
         ["replay", "--hardware", "h100-context-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
          "--verifier-latency", "0.013", "--alpha1", "0.5", "--mode", "async", "--k1", "2", "--prompt-tokens", "1024",
          "--request-tokens", "4000", "--steps", "20000"], TRACES),
        ("calibrate --profile-out, then replay --hardware on it, async k1 = 3, k2 = 5",
         [["calibrate", "--profile-out", calibrated],
          ["replay", "--hardware", calibrated, "--target-arch", "qwen2.5-coder-1.5b-instruct", "--draft-arch",
           "qwen2.5-coder-0.5b-instruct", "--mode", "async", "--k1", "3", "--k2", "5", "--steps", "20000",
           "--bootstrap", "0"]], TRACES),
    ]


def measure(argv: list) -> tuple[float, float]:
    """Wall and CPU seconds of one lrsim command, or of a list of them run one after the other (output
    discarded); exit code 0 required."""
    if argv and isinstance(argv[0], list):
        times = [measure(a) for a in argv]
        return sum(t[0] for t in times), sum(t[1] for t in times)
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = lrsim(argv)
    if code != 0:
        raise SystemExit(f"bench_hardware: lrsim {' '.join(argv)} exited with {code}")
    return time.perf_counter() - wall, time.process_time() - cpu


def shown(argv: list) -> str:
    """The command line(s) of a case."""
    return " && ".join("lrsim " + " ".join(a) for a in (argv if isinstance(argv[0], list) else [argv]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load0 = os.getloadavg()
    measure(["replay", *HW, "--alpha1", "0.5", "--steps", "500"])  # imports and profile loading, not timed
    with tempfile.TemporaryDirectory(prefix="bench_hardware.") as tmp:
        timed = {what: (argv, target, *measure(argv))
                 for what, argv, target in cases(str(Path(tmp) / "calibrated.json"))}
    ref = next(wall for what, (_, _, wall, _) in timed.items() if what.startswith(TRACES))
    rows = []
    for what, (argv, target, wall, cpu) in timed.items():
        t = ref if target == TRACES else target
        rows.append({"what": f"{what} (wall s)", "measured": wall, "target": t, "ratio": t / wall,
                     "cpu_seconds": cpu, "note": f"{cpu:.1f} CPU-s; target: "
                     + ("the replay from traces" if target == TRACES else f"{t:g} s") + f"; {shown(argv)}"})
    machine = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
               "loadavg_before": load0, "loadavg_after": os.getloadavg()}
    report(machine, rows, args.json, width=52)


if __name__ == "__main__":
    main()
