"""benchmarks/bench_readme.py's command runner: the output passes through, the exit code and pytest's summary lines
(how long each test run took) come back.  No timing is asserted."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_timed_passes_the_output_through_and_keeps_pytests_summaries(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # a benchmark, not a package
    import bench_readme

    script = ("echo building; echo '==== 1495 passed, 1 skipped in 203.04s (0:03:23) ===='; "
              "echo '3 passed, 14 warnings in 78.15s (0:01:18)'; echo '2 failed in 1.0s'; exit 3")
    wall, rc, runs = bench_readme.timed(["bash", "-c", script], ROOT, dict(os.environ))
    assert rc == 3 and wall >= 0
    assert runs == ["1495 passed, 1 skipped in 203.04s (0:03:23)", "3 passed, 14 warnings in 78.15s (0:01:18)",
                    "2 failed in 1.0s"]
    assert "building" in capsys.readouterr().err
