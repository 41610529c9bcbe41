"""The lrsim command: outputs, JSON keys, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from lrsim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json(capsys):
    code, out, err = run(capsys, "plan", "--alpha1", "0.6", "--c1", "0.1", "--alpha2", "0.6", "--c2", "0.05",
                         "--budget", "16", "--mode", "async", "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    assert (d["k1"], d["k2"]) == (4, 4)
    assert d["speedup"] > max(d["pure_token"], d["pure_step"])


def test_plan_text(capsys):
    code, out, _ = run(capsys, "plan", "--mode", "sync", "--budget", "8")
    assert code == 0 and "best split" in out and "pure token SD" in out


@pytest.mark.parametrize("argv", [
    ["plan", "--alpha1", "1.2"], ["plan", "--alpha2", "0"], ["plan", "--c1", "-1"], ["plan", "--c2", "0"],
    ["plan", "--budget", "0"], ["plan", "--budget", "3.5"], ["plan", "--alpha1", "abc"], ["plan", "--mode", "x"],
    ["plan", "--c1", "inf"], ["theorems", "--resolution", "0"], ["nonsense"], [],
])
def test_bad_input_is_one_line_exit_2(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("lrsim: error:")


def test_console_script_has_no_traceback():
    p = subprocess.run([sys.executable, "-m", "lrsim.cli", "plan", "--alpha1", "2"], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1


def test_theorems_json(capsys):
    code, out, _ = run(capsys, "theorems", "--json", "--resolution", "3", "--stages", "2000")
    assert code == 0
    names = [t["name"] for t in json.loads(out)["theorems"]]
    assert len(names) == 5 and names[-1].startswith("Theorem 4")


def test_report_runs(capsys):
    code, out, _ = run(capsys, "report", "--resolution", "3")
    assert code == 0 and "Theorem 4" in out and "S2 (closed form): differs" in out


def test_lrsim_never_imports_torch():
    code = "import sys, lrsim.cli, lrsim.theorems, lrsim.symbolic, lrsim.planner; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
