"""``lrref verify``: a verifier's verdict on step pairs and why, as text and JSON; bad input is one line, exit 2.

The math verifier runs with ``--threshold -1`` (numbers alone: no embedding model), exact and random need none."""

import json

import pytest

from lrref.cli import main


def run(capsys, *args):
    code = main(["verify", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_math_says_why_it_rejects(capsys):
    code, out, _ = run(capsys, "--threshold", "-1", "10 - 4 = 6", "4 - 10 = 6")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("rejected  math (equations): the draft computes -6 (4 - 10)")
    assert "target: numbers 4, 6, 10; results 6" in out and "draft:  numbers 4, 6, 10; results -6, 6" in out


def test_math_json_has_the_verdict_the_reason_and_the_claims(capsys):
    code, out, _ = run(capsys, "--threshold", "-1", "--json", "25% of 80 = 20", "80 x 25 / 100 = 20")
    v = json.loads(out)
    assert code == 0 and v["accepted"] is True and v["reason"] == "same" and v["score"] == 1.0
    assert v["claims"]["target"]["results"] == ["20"] and v["claims"]["draft"]["numbers"] == ["20", "25", "80", "100"]
    code, out, _ = run(capsys, "--threshold", "-1", "--json", "She earns 12 dollars per hour.", "She earns 12.")
    v = json.loads(out)
    assert v["accepted"] is False and v["reason"] == "units" and "dollar/hour" in v["detail"]


def test_pairs_file_gives_one_verdict_a_line(capsys, tmp_path):
    f = tmp_path / "pairs.jsonl"
    f.write_text(json.dumps({"target": "a b", "draft": "a  b"}) + "\n\n" + json.dumps({"target": "a", "draft": "b"}))
    code, out, _ = run(capsys, "--verifier", "exact", "--pairs", str(f), "--json")
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and [(r["line"], r["accepted"]) for r in rows] == [(1, True), (3, False)]
    code, out, _ = run(capsys, "--verifier", "random", "--threshold", "1", "--pairs", str(f))
    assert code == 0 and out.startswith("line 1: accepted  random: score ") and "line 3: accepted" in out


@pytest.mark.parametrize("lines, message", [
    (['{"target": "a", "draft": "b"}', "{oops"], "pairs.jsonl:2: not JSON"),
    (['{"target": "a"}'], "pairs.jsonl:1: expected an object with string fields 'target' and 'draft'"),
    (['{"target": "a", "draft": 3}'], "pairs.jsonl:1: expected an object"),
    (['{"target": "a", "draft": "b", "context": 1}'], "pairs.jsonl:1: 'context' must be a string"),
    ([""], "pairs.jsonl: no pairs"),
])
def test_a_bad_pairs_file_is_one_line_naming_the_line(capsys, tmp_path, lines, message):
    f = tmp_path / "pairs.jsonl"
    f.write_text("\n".join(lines))
    code, out, err = run(capsys, "--threshold", "-1", "--pairs", str(f))
    assert code == 2 and message in err and err.count("\n") == 1 and out == ""


@pytest.mark.parametrize("args, message", [
    (["only the target"], "give TARGET_STEP and DRAFT_STEP, or --pairs FILE.jsonl"),
    ([], "give TARGET_STEP and DRAFT_STEP, or --pairs FILE.jsonl"),
    (["a", "b", "--pairs", "x.jsonl"], "not both"),
    (["--threshold", "1.5", "a", "b"], "math verifier threshold must be in [-1, 1], got 1.5"),
    (["--verifier", "maths", "a", "b"], "invalid choice: 'maths'"),
    (["--pairs", "/no/such/file.jsonl"], "cannot read /no/such/file.jsonl"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1 and out == ""
