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


def test_an_internal_error_keeps_its_traceback(monkeypatch):
    # a plain ValueError is a bug, not bad input: the boundary lets it through
    import lrsim.cli

    def bug(_args):
        raise ValueError("internal: this is a bug")

    monkeypatch.setitem(lrsim.cli.COMMANDS, "plan", bug)
    with pytest.raises(ValueError, match="internal: this is a bug"):
        main(["plan"])


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
    code = ("import sys, pkgutil, importlib, lrsim; [importlib.import_module(m.name) for m in "
            "pkgutil.walk_packages(lrsim.__path__, 'lrsim.')]; sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ----------------------------------------------------------------------------- simulate and sweep


def test_simulate_json(capsys):
    code, out, err = run(capsys, "simulate", "--mode", "sync", "--alpha1", "0.7", "--c1", "0.2", "--k1", "4",
                         "--steps", "3000", "--seed", "1", "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    lo, hi = d["speedup_ci95"]
    assert lo < d["speedup"] < hi and d["steps"] >= 3000 and 0.6 < d["acceptance_rate"] < 0.8
    assert d["config"]["k1"] == 4


def test_simulate_exact_cycle(capsys):
    code, out, _ = run(capsys, "simulate", "--mode", "sync", "--alpha1", "1", "--c1", "0.2", "--k1", "3",
                       "--steps", "3", "--json")
    assert code == 0 and json.loads(out)["sim_time"] == pytest.approx(1.4)


def test_simulate_text_trace_and_chrome(capsys, tmp_path):
    from lrsim.trace import read_trace

    tr, ch = tmp_path / "t.jsonl", tmp_path / "t.json"
    code, out, _ = run(capsys, "simulate", "--mode", "async", "--k1", "3", "--k2", "2", "--width", "2",
                       "--step-tokens", "lognormal:40,0.5", "--verifier-latency", "exp:0.02",
                       "--target-latency", '{"kind": "curve", "x": [1, 8], "seconds": [20, 30], "scale": 0.001}',
                       "--steps", "300", "--trace", str(tr), "--chrome", str(ch))
    assert code == 0 and "speedup" in out and "closed form" in out
    t = read_trace(tr)
    assert t.header.mode == "lr-async" and t.header.config["target_latency"]["seconds"] == [0.02, 0.03]
    assert json.loads(ch.read_text())["traceEvents"]


@pytest.mark.parametrize("argv", [
    ["simulate", "--alpha1", "1.2"], ["simulate", "--mode", "fast"], ["simulate", "--k1", "0"],
    ["simulate", "--k1", "4", "--k2", "4", "--budget", "8"], ["simulate", "--tree", "--mode", "async"],
    ["simulate", "--step-tokens", "weird:3"], ["simulate", "--target-latency", "{bad json"],
    ["simulate", "--target-latency", "/nonexistent.json"], ["simulate", "--verifier-cost", "-1"],
    ["simulate", "--k2", "2", "--token-model", "mean"],
    ["simulate", "--mode", "sync", "--k1", "9",
     "--target-latency", '{"kind": "curve", "x": [1, 8], "seconds": [1, 2]}'],
    ["simulate", "--trace", "/proc/nope/t.jsonl"],
    ["sweep", "--k1", "1,2"], ["sweep", "--k1", "1:2:3", "--out", "x.csv"], ["sweep", "--out", "x.txt"],
    ["sweep", "--alpha1", "0.5:0.9", "--out", "x.csv"], ["sweep", "--scheduler", "garbage", "--out", "x.csv"],
])
def test_sim_bad_input_is_one_line_exit_2(capsys, argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("lrsim: error:"), err
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_sweep_writes_csv(capsys, tmp_path):
    out = tmp_path / "grid.csv"
    code, text, _ = run(capsys, "sweep", "--mode", "sync,async", "--alpha1", "0.6:0.8:2", "--k1", "2,4",
                        "--steps", "300", "--workers", "2", "--out", str(out), "--no-progress")
    assert code == 0 and "wrote 8 rows" in text
    lines = out.read_text().splitlines()
    assert len(lines) == 9 and lines[0].startswith("point,mode,alpha1")


def test_sweep_on_dask_via_cli(capsys, tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "grid.parquet"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as c:
        code, text, err = run(capsys, "sweep", "--k1", "1,2,3", "--steps", "200", "--scheduler", c.scheduler_address,
                              "--out", str(out))
    assert code == 0 and "wrote 3 rows" in text and "lrsim sweep" in err  # the progress bar is on stderr
    import pyarrow.parquet as pq

    assert pq.read_table(out).column("k1").to_pylist() == [1, 2, 3]


def test_a_command_parser_builds_only_what_it_needs_and_the_same_flags():
    """``lrsim --help`` builds no command's flags and imports nothing heavy; a command's parser is the full one's."""
    import lrsim.cli

    code = ("import sys; from lrsim.cli import build_parser; build_parser(['--help']).format_help(); "
            "print([m for m in ('numpy', 'scipy', 'simpy', 'lrsim.sim', 'lrsim.gpu', 'lrsim.dists') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    def commands(parser):  # the subcommands' parsers
        return next(a for a in parser._actions if a.dest == "command").choices

    full = lrsim.cli.build_parser()
    assert lrsim.cli.build_parser(["--help"]).format_help() == full.format_help()
    assert list(commands(full)) == list(lrsim.cli.HELP)
    for name, p in commands(full).items():
        assert commands(lrsim.cli.build_parser([name, "--help"]))[name].format_help() == p.format_help()
