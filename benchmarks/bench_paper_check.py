"""Benchmark the paper check against its target (issue 17): the full ``studies/paper_check.py`` in under 5 minutes.

Runs the study once as a subprocess at its defaults (20,000 simulated steps per central prediction, 2 processes)
into a temporary folder (``--out DIR`` among the flags: there instead), prints its report, then its wall time with
the machine (CPU model, cores, load average before and
after: other processes on the machine slow it; the study is seeded, so load changes its time, never its numbers).

Run: python benchmarks/bench_paper_check.py [extra paper_check flags, e.g. --jobs 1]
"""

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 300.0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(ROOT / "studies" / "paper_check.py"), "--out", tmp, *sys.argv[1:]]
        w, c0 = time.perf_counter(), os.times()
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall, c1 = time.perf_counter() - w, os.times()
    cpu = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    if r.returncode != 0:
        print(r.stderr.strip() or r.stdout[-2000:], file=sys.stderr)
        return r.returncode
    print(r.stdout.rstrip())  # the study's report (tables, summaries), then the timing
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
          f"{load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"studies/paper_check.py {' '.join(sys.argv[1:]) or '(defaults)'}: wall {wall:.1f} s, CPU {cpu:.1f} s "
          f"(all processes); target < {TARGET_S:.0f} s: {'met' if wall < TARGET_S else 'NOT met'} "
          f"({TARGET_S / wall:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
