"""The public Python API (lrsim.api, re-exported from lrsim): typed results, light import, one-line errors."""

import json
import subprocess
import sys

import pytest

import lrsim
from lrsim.errors import InputError
from lrsim.planner import plan as planner_plan

H100 = ("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b")


def test_import_lrsim_is_light():
    code = ("import sys, lrsim; heavy = [m for m in ('numpy', 'scipy', 'simpy', 'plotly', 'sympy', 'torch') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_public_names_are_exported_and_are_not_shadowed_modules():
    for name in lrsim.__all__:
        assert hasattr(lrsim, name), name
    import importlib

    for module in ("lrsim.prediction.replay", "lrsim.serve", "lrsim.prediction.calibrate"):  # submodules must not replace API functions
        importlib.import_module(module)

    assert callable(lrsim.plan) and callable(lrsim.predict) and callable(lrsim.simulate_serving)


def test_plan_matches_the_planner_and_the_cli_json():
    p = lrsim.plan(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=16, mode="async")
    q = planner_plan(0.6, 0.1, 0.6, 0.05, 16, "async")
    assert (p.k1, p.k2, p.speedup) == (q.k1, q.k2, q.speedup) == (4, 4, pytest.approx(3.817, abs=1e-3))
    assert p.pure_token == q.pure_token.speedup and p.pure_step == q.pure_step.speedup
    assert p.to_dict() == q.to_dict()
    from lrsim.cli import main

    assert p.source == "closed form" and "best split" in str(p)
    assert repr(p).startswith("PlanResult(source='closed form', mode='async', k1=4, k2=4, speedup=3.817")
    assert len(p.table) == 10 and p.table[0]["k1"] == 4 and p.table.column("rank") == list(range(1, 11))
    assert main(["plan", "--json"]) == 0  # the command and the API agree on the defaults


def test_plan_json_equals_api_to_dict(capsys):
    from lrsim.cli import main

    main(["plan", "--alpha1", "0.7", "--c1", "0.2", "--budget", "12", "--mode", "sync", "--json"])
    cli = json.loads(capsys.readouterr().out)
    api = lrsim.plan(alpha1=0.7, c1=0.2, budget=12, mode="sync").to_dict()
    assert json.loads(json.dumps(api)) == cli


def test_table_prints_and_converts():
    t = lrsim.Table.from_dicts([{"a": 1, "b": 0.123456}, {"a": 22, "c": "x"}], title="t")
    assert t.columns == ("a", "b", "c") and len(t) == 2
    assert t.to_dicts() == [{"a": 1, "b": 0.123456, "c": None}, {"a": 22, "b": None, "c": "x"}]
    assert list(t) == t.to_dicts() and t.column("a") == [1, 22]
    assert str(t).splitlines() == ["t", " a       b  c", " 1  0.1235  -", "22       -  x"]
    assert t.to_csv().splitlines() == ["a,b,c", "1,0.123456,", "22,,x"]
    assert t.to_dict()["rows"] == [[1, 0.123456, None], [22, None, "x"]]
    assert "<th>a</th>" in t._repr_html_() and repr(t) == "Table(2 rows: a, b, c)"
    with pytest.raises(KeyError):
        t.column("z")


def test_simulate_returns_the_simulator_result():
    s = lrsim.simulate("sync", alpha1=0.7, c1=0.2, k1=3, steps=2000, step_tokens=52)
    assert s.mode == "sync" and s.k1 == 3 and s.speedup == s.raw.speedup
    assert s.speedup_ci95[0] < s.theory_speedup < s.speedup_ci95[1]
    assert s.to_dict()["config"]["k1"] == 3 and "Lookahead Reasoning simulation" in str(s)


def test_predict_from_numbers_on_a_profile():
    hw = lrsim.hardware(*H100, verifier_latency=0.013)
    p = lrsim.predict("async", 4, alpha1=0.6, hardware=hw, steps=3000)
    assert (p.mode, p.k1, p.k2) == ("async", 4, 1) and 1.5 < p.speedup < 2.5
    assert p.closed_form > p.speedup and any("verifier: 13 ms" in n for n in p.notes)
    assert p.to_dict()["speedup"] == p.speedup


def test_predict_from_the_embedded_traces_uses_their_recorded_setting():
    traces = lrsim.load_traces()
    assert len(traces) == 5
    p = lrsim.predict(traces=traces, steps=2000, bootstrap=0)
    assert p.mode == lrsim.predict(traces=traces[:1], steps=500, bootstrap=0).mode  # the first trace's mode
    q = lrsim.predict("sync", 3, traces=[str(t.path) for t in traces], steps=2000, bootstrap=0)
    assert (q.mode, q.k1) == ("sync", 3) and q.alpha1 == pytest.approx(p.alpha1)


@pytest.mark.parametrize("kw, match", [
    ({}, "give traces"),
    ({"alpha1": 0.6}, "give traces"),
    ({"traces": ["/nonexistent/trace.jsonl"]}, "no such trace file"),
])
def test_predict_refuses_bad_input_in_one_line(kw, match):
    with pytest.raises(InputError, match=match) as e:
        lrsim.predict("async", 4, **kw)
    assert "\n" not in str(e.value)


def test_bad_input_is_an_input_error():
    with pytest.raises(InputError, match="alpha1"):
        lrsim.plan(alpha1=1.5)
    with pytest.raises(InputError, match="unknown setting"):
        lrsim.simulate("sync", alpah1=0.5)
    with pytest.raises(InputError, match="no architecture"):
        lrsim.hardware("h100-ctx0-kernel", "no-such-arch")
    with pytest.raises(InputError, match="latency profile"):
        lrsim.load_profile("no-such-profile")
    with pytest.raises(InputError, match="rates"):
        lrsim.simulate_serving([])


def test_simulated_plan_on_a_profile():
    hw = lrsim.hardware(*H100, verifier_latency=0.013)
    p = lrsim.plan(alpha1=0.6, alpha2=0.4, budget=4, hardware=hw)
    assert p.source.startswith("numbers on h100-ctx0-kernel") and p.budget == 4
    assert p.table.columns == ("rank", "mode", "k1", "k2", "width", "positions", "speedup")
    assert all(r["positions"] <= 4 for r in p.table if r["mode"] != "async")
    assert p.speedup >= max(p.pure_token, 1.0) * 0.9 and "Plan from numbers" in str(p)


def test_simulate_serving_rows_and_crossover():
    hw = lrsim.hardware(*H100)
    s = lrsim.simulate_serving([0.5, 8.0], modes=("ar", "lr-async"), hardware=hw, alpha1=0.55, k1=4,
                               requests=60, replications=2, warmup=0.2, workers=1)
    assert len(s.table) == 4 and set(s.table.column("mode")) == {"ar", "lr-async"}
    tpot = {(r["mode"], r["rate"]): r["tpot_mean"] for r in s.table}
    assert tpot[("lr-async", 0.5)] < tpot[("ar", 0.5)]  # LR pays at low load
    assert {c["metric"] for c in s.crossovers} == {"tpot_mean", "e2e_p50"}
    assert s.to_dict()["rows"][0]["mode"] == "ar" and "Crossover" in str(s)


def test_simulate_serving_takes_the_workload_lengths_as_lrsim_serve_does():
    """prompt_tokens is a SimConfig field too: given to simulate_serving it is each request's prompt (a Dist)."""
    from lrsim.dists import Constant

    kw = dict(modes=("ar",), hardware=lrsim.hardware(*H100), requests=20, replications=1, workers=1, k1=1)
    short, long = (lrsim.simulate_serving(1.0, prompt_tokens=Constant(n), output_tokens=Constant(64), **kw)
                   for n in (16, 4000))
    assert short.table.column("ttft_mean")[0] < long.table.column("ttft_mean")[0]  # a longer prefill


def test_check_theorems_small():
    t = lrsim.check_theorems(resolution=4, stages=2000)
    assert len(t.verdicts) == 5 and set(t.verdicts.values()) <= {"holds", "fails"}
    assert t.verdicts[next(n for n in t.verdicts if n.startswith("Theorem 3"))] == "fails"  # the theory page's finding
    assert len(t.to_dict()["theorems"]) == 5 and "Theorem 1" in str(t)


def test_load_profile_and_traces():
    prof = lrsim.load_profile("h100-ctx0-kernel")
    assert "qwen2.5-32b" in prof.archs and prof.time_ms("qwen2.5-32b", 0, 1, 1) > 0
    assert lrsim.load_traces()[0].header.mode


def test_the_api_imports_no_command_line_module():
    """The API's texts come from lrsim.format (shared with the CLI), not from lrsim.commands or the serve CLI."""
    code = ("import sys, lrsim; lrsim.plan(); lrsim.simulate(steps=200); "
            "lrsim.simulate_serving(1.0, modes=('ar',), requests=10, replications=1, workers=1, k1=1); "
            "print(sorted(m for m in sys.modules if m.startswith(('lrsim.commands', 'lrsim.cli', "
            "'lrsim.serve.command'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_private_name_is_imported_across_packages():
    """``from X import _name`` is allowed from a module of the importer's own package only."""
    import ast
    from pathlib import Path

    root = Path(lrsim.__file__).resolve().parent
    crossing = []
    for path in root.rglob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom) and any(a.name.startswith("_") and not a.name.startswith("__")
                                                     for a in n.names):
                if not (n.level == 1 and "." not in (n.module or "")):  # not a module of the same package
                    crossing.append(f"{path.relative_to(root)}: from {'.' * n.level}{n.module or ''}")
    assert crossing == []
