"""The scripts in examples/ run as a user would run them (``python examples/NAME.py``), on embedded data."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
#: what each script must print (its answer, not just anything)
EXPECT = {
    "plan_budget.py": "best: k1 = 4, k2 = 4, 3.817x",
    "predict_gpu.py": "async k1 = 4 on h100-ctx0-kernel:",
    "replay_traces.py": "5 traces:",
    "serve_under_load.py": "lr-async stops beating ar at",
    "html_report.py": "wrote ",
    "notebook_plan.py": "best split by step acceptance",
    "decode_session.py": "[lr-sync] 64 tokens in",
}


def test_every_example_is_checked():
    assert sorted(p.name for p in EXAMPLES) == sorted(EXPECT)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    args = [str(tmp_path / "page.html")] if script.name == "html_report.py" else []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert EXPECT[script.name] in r.stdout
    if args:
        assert (tmp_path / "page.html").stat().st_size > 1_000_000  # plotly.js inline


def test_notebook_is_a_jupytext_notebook():
    jupytext = pytest.importorskip("jupytext")
    nb = jupytext.read(ROOT / "examples" / "notebook_plan.py")
    kinds = [c.cell_type for c in nb.cells]
    assert kinds.count("code") >= 4 and kinds.count("markdown") >= 3
