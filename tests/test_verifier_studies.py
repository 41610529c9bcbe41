"""studies/counterfactual.py and studies/verifier_check.py without models: which steps get continued, the report's
shares and intervals, the docs table's markers, and bad input (one line, exit 2)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from lrsim.trace import Header, RequestRecord, StepRecord, write_trace

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def load(monkeypatch, name):
    monkeypatch.syspath_prepend(str(STUDIES))
    spec = importlib.util.spec_from_file_location(name, STUDIES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def cf(monkeypatch):
    return load(monkeypatch, "counterfactual")


@pytest.fixture
def vc(monkeypatch):
    return load(monkeypatch, "verifier_check")


def lr_run(folder: Path) -> None:
    """One lr-async request: an identical step, a step the verifier accepted, a rejected draft (its target step
    committed), then another accepted step; and a second request with one accepted step."""
    folder.mkdir(parents=True)
    meta = {"n": 2, "done": 2, "dataset_name": "gsm8k-test", "config": {"lr-async": {"max_tokens": 100,
                                                                                      "max_step_tokens": 40}}}
    (folder / "results.json").write_text(json.dumps({"meta": meta, "modes": [{"mode": "lr-async"}]}))
    S = StepRecord
    steps = [S(request=0, cycle=0, position=0, branch=0, verifier="identical", decision=True, committed="draft",
               draft_text="A.\n\n", target_text="A.\n\n", draft_tokens=3, target_tokens=3),
             S(request=0, cycle=0, position=1, branch=0, verifier="math", decision=True, score=0.9, committed="draft",
               draft_text="B1.\n\n", target_text="B2.\n\n", draft_tokens=4, target_tokens=5),
             S(request=0, cycle=0, position=2, branch=0, verifier="math", decision=False, committed="target",
               draft_text="C1.\n\n", target_text="C2.\n\n", draft_tokens=4, target_tokens=6),
             S(request=0, cycle=1, position=0, branch=0, verifier="math", decision=True, score=0.95,
               committed="draft", draft_text="D1.\n\n", target_text="D2.\n\n", draft_tokens=2, target_tokens=2),
             S(request=1, cycle=0, position=0, branch=0, verifier="math", decision=True, score=0.99,
               committed="draft", draft_text="E1.\n\n", target_text="E2.\n\n", draft_tokens=7, target_tokens=7)]
    reqs = [RequestRecord(request=i, start=0.0, end=1.0, output_tokens=10) for i in range(2)]
    write_trace(folder / "trace-lr-async.jsonl", Header(source="lrref", mode="lr-async", config={}), steps, reqs)


def test_counterfactual_continues_each_accepted_non_identical_step_from_its_prefix(cf, tmp_path):
    lr_run(tmp_path / "row")
    cases, meta = cf.cases(tmp_path / "row")
    assert [(c.request, c.index, c.prefix, c.draft, c.target, c.used) for c in cases] == [
        (0, 1, "A.\n\n", "B1.\n\n", "B2.\n\n", 3),
        (0, 3, "A.\n\nB1.\n\nC2.\n\n", "D1.\n\n", "D2.\n\n", 3 + 4 + 6),
        (1, 0, "", "E1.\n\n", "E2.\n\n", 0)]
    assert meta["config"]["lr-async"]["max_tokens"] == 100 and cases[0].key == "0:1"


def test_counterfactual_report_shares_and_intervals(cf, tmp_path, capsys):
    out = tmp_path / "cf"
    out.mkdir()
    rows = [{"key": f"{i}:0", "answer_draft": d, "answer_target": t, "right_draft": d == "1", "right_target": t == "1"}
            for i, (d, t) in enumerate([("1", "1"), ("2", "1"), ("1", "2"), ("3", "3")])]
    (out / "lr-async-x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = cf.summarise(rows)
    assert (s["steps"], s["changed"], s["right_to_wrong"], s["wrong_to_right"]) == (4, 2, 1, 1)
    assert s["changed_ci95"][0] < 0.5 < s["changed_ci95"][1]
    assert cf.main(["--report", str(out), "--figures", str(tmp_path / "fig")]) == 0
    assert "| lr-async-x | 4 | 2 (50.0%)" in capsys.readouterr().out
    assert json.loads((tmp_path / "fig" / "counterfactual.json").read_text())["rows"]["lr-async-x"]["steps"] == 4


def test_counterfactual_dry_run_plans_and_resumes(cf, tmp_path, capsys):
    lr_run(tmp_path / "row")
    out = tmp_path / "cf"
    out.mkdir()
    (out / "row.jsonl").write_text(json.dumps({"key": "0:1"}) + "\n")
    assert cf.main(["--record", str(out), str(tmp_path / "row"), "--dry-run"]) == 0
    assert "row: 3 accepted non-identical steps, 2 to continue (4 continuations)" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    ([], "give --record OUT ROW_DIR... or --report OUT"),
    (["--record", "x"], "--record needs at least one ROW_DIR"),
    (["--report", "/no/such/dir"], "no recorded rows"),
    (["--record", "x", "/no/such/row", "--dry-run"], "no results.json"),
])
def test_counterfactual_bad_input_is_one_line(cf, capsys, args, message):
    assert cf.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_verifier_check_writes_its_table_between_the_markers(vc, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# T\n\nbefore\n\n{vc.START}\nold\n{vc.END}\n\nafter\n")
    res = {"pairs": 1, "cards": {"exact": {"equal_accepted": 0, "equal": 1, "different_rejected": 0, "different": 0,
                                           "right": 0}},
           "table": [{"id": 1, "target": "a | b", "draft": "c", "same": True, "why": "w", "numeric": "prose",
                      "exact": False}], "notes": ["judge: left out (no model)"]}
    vc.write_docs(page, vc.markdown(res))
    text = page.read_text()
    assert "old" not in text and text.startswith("# T\n\nbefore") and text.endswith("after\n")
    assert "| exact | 0 / 1 | 0 / 0 | 0 / 1 |" in text and "`a \\| b`" in text and "reject ✗" in text
    assert "- judge: left out (no model)" in text
    page.write_text("no markers")
    from lrsim.errors import InputError

    with pytest.raises(InputError, match="no <!-- pairs --> ... <!-- /pairs --> markers"):
        vc.write_docs(page, "x")


def test_verifier_check_refuses_an_unknown_verifier(vc, capsys):
    assert vc.main(["--pairs", "--verifiers", "math,maths"]) == 2
    assert "unknown verifier(s) maths" in capsys.readouterr().err


def test_counterfactual_report_splits_a_math_row_by_the_current_rule(cf, tmp_path, capsys):
    """A row recorded with the math verifier is split by what the current rule says of each continued step:
    prose needs the recorded cosine to reach 0.95, agreeing numbers 0.85, and operand order counts."""
    folder = tmp_path / "row"
    folder.mkdir()
    meta = {"config": {"lr-async": {"max_tokens": 100, "max_step_tokens": 40, "threshold": 0.85}}}
    (folder / "results.json").write_text(json.dumps({"meta": meta, "modes": [{"mode": "lr-async"}]}))
    pairs = [("We add the apples.\n\n", "Now we count them.\n\n", 0.90),  # prose below 0.95: rejected now
             ("Then 3 + 4 = 7.\n\n", "So 4 + 3 = 7.\n\n", 0.90),  # the same sum: kept
             ("So 10 - 4 = 6.\n\n", "So 4 - 10 = 6.\n\n", 0.99)]  # operands swapped: rejected now
    steps = [StepRecord(request=0, cycle=i, position=0, branch=0, verifier="math", decision=True, score=c,
                        committed="draft", draft_text=d, target_text=t, draft_tokens=5, target_tokens=5)
             for i, (t, d, c) in enumerate(pairs)]
    write_trace(folder / "trace-lr-async.jsonl", Header(source="lrref", mode="lr-async", config={}), steps,
                [RequestRecord(request=0, start=0.0, end=1.0, output_tokens=15)])
    out = tmp_path / "cf"
    out.mkdir()
    rows = [{"key": f"0:{i}", "answer_draft": d, "answer_target": "1", "right_draft": d == "1", "right_target": True}
            for i, d in enumerate(("2", "1", "1"))]
    (out / "row.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cf.current_math_rule([folder]) == {"row": {"0:0": False, "0:1": True, "0:2": False}}
    assert cf.main(["--report", str(out), "--figures", str(tmp_path / "fig"), str(folder)]) == 0
    got = capsys.readouterr().out
    assert "| row: kept by the current rule | 1 | 0 (0.0%)" in got
    assert "| row: rejected by the current rule | 2 | 1 (50.0%)" in got
