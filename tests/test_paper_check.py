"""studies/paper_check.py: the data file's provenance, the row logic on small cases, the summaries, bad input."""

import copy
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lrsim import theory
from lrsim.errors import InputError
from lrsim.gpu import synthesize
from lrsim.prediction.calibrate import solve_alpha

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "studies" / "paper_check.py"


@pytest.fixture(scope="module")
def pc():
    spec = importlib.util.spec_from_file_location("paper_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["paper_check"] = mod  # dataclasses look the module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def data(pc):
    return pc.load(pc.DATA)


def tagged(value, status="stated", source="test", **kw):
    return {"value": value, "status": status, "source": source, **kw}


def tiny_row(**inputs) -> dict:
    """One forward row on the paper's hardware with inputs a closed form can check (no band: no interval runs)."""
    base = {"target_hw": tagged("h100-sxm:tp2"), "draft_hw": tagged("h100-sxm:tp1"),
            "target_arch": tagged("qwen2.5-32b"), "draft_arch": tagged("qwen2.5-1.5b"), "mode": tagged("async"),
            "alpha1": tagged(0.6), "gamma": tagged(3), "verifier_s": tagged(0.0005),
            "request_tokens": tagged(2000), "step_tokens": tagged("const:50"), "prompt_tokens": tagged(0, "assumed")}
    return {"id": "tiny", "table": "validation", "group": "g", "label": "tiny", "kind": "forward",
            "experiment": "tiny", "reported": {"value": 1.5, "source": "test"}, "inputs": {**base, **inputs}}


# ----------------------------------------------------------------------------- the data file


def test_every_input_of_every_row_is_tagged_and_hardware_is_the_sources(pc, data):
    rows = pc.by_id(data)
    for r in data["rows"]:
        for name, v in pc.resolve(data, r).items():
            assert v["status"] in ("stated", "borrowed", "assumed") and v["source"], (r["id"], name)
    hw = {i: (pc.resolve(data, rows[i])["target_hw"]["value"], pc.resolve(data, rows[i])["draft_hw"]["value"])
          for i in ("paper-gsm8k-both", "paper-aime-lr", "readme-lr", "readme-both", "rv-LLM-J7B-AIME-lr",
                    "q3-hmmt-both")}
    assert hw["paper-gsm8k-both"] == hw["paper-aime-lr"] == ("h100-sxm:tp2", "h100-sxm:tp1")
    assert hw["readme-lr"] == hw["readme-both"] == hw["rv-LLM-J7B-AIME-lr"] == hw["q3-hmmt-both"] == ("h200:tp2",
                                                                                                      "h200:tp1")
    assert pc.resolve(data, rows["readme-lr"])["target_hw"]["status"] == "stated"


def test_no_row_takes_an_input_from_its_own_reported_speedup(pc, data):
    """The provenance graph: inputs cite other rows only; validation rows only rows of kind 'input'; no cycle."""
    rows = pc.by_id(data)
    cited = 0
    for r in data["rows"]:
        for name, v in pc.resolve(data, r).items():
            src = v.get("from_row")
            if src is None:
                continue
            cited += 1
            assert src != r["id"], (r["id"], name)
            assert rows[src]["reported"]["value"] == v["value"]
            if r["table"] == "validation":
                assert rows[src]["kind"] == "input", (r["id"], name, src)
            assert rows[src]["experiment"] != r["experiment"] or r["table"] != "validation"
    assert cited >= 20  # every n-gram-alone and LR-alone speedup used is cited, so the check has something to check


@pytest.mark.parametrize("mutate, message", [
    (lambda d, rows: rows["rv-LLM-J7B-GSM8K-comp"]["inputs"]["lr_alone"].update(from_row="rv-LLM-J7B-GSM8K-comp",
                                                                                  value=1.75),
     "row's own reported speedup"),
    (lambda d, rows: rows["rv-LLM-J7B-GSM8K-both"]["inputs"]["ngram_alone"].update(from_row="rv-LLM-J7B-GSM8K-lr",
                                                                                     value=1.45),
     "only from rows of kind 'input'"),
    (lambda d, rows: rows["rv-LLM-J7B-GSM8K-lr"].update(table="consistency", inputs={
        **rows["rv-LLM-J7B-GSM8K-lr"]["inputs"], "x": tagged(1.75, from_row="rv-LLM-J7B-GSM8K-comp")}),
     "derive from its own reported speedup"),  # a cycle: comp <- lr <- comp
    (lambda d, rows: d["rows"].append({**copy.deepcopy(rows["readme-both"]), "id": "copy"}), "count each experiment"),
    (lambda d, rows: rows["readme-lr"]["inputs"].update(alpha1=tagged(0.4, "measured")), "needs a value, a status"),
    (lambda d, rows: rows["readme-lr"]["inputs"].pop("gamma"), "missing input(s) gamma"),
    (lambda d, rows: rows["readme-lr"]["inputs"].update(alpha1="shared:nothing"), "names no shared entry"),
])
def test_bad_provenance_is_refused_in_one_line(pc, data, mutate, message):
    d = copy.deepcopy(data)
    mutate(d, pc.by_id(d))
    with pytest.raises(InputError, match=re.escape(message)) as e:
        pc.validate(d)
    assert "\n" not in str(e.value)


def test_each_experiment_is_counted_once(pc, data):
    val = [r for r in data["rows"] if r["table"] == "validation"]
    assert len({r["experiment"] for r in val}) == len(val)
    assert not any(r["id"] == "q3-aime24-both" for r in data["rows"])  # the README's run, counted as readme-both
    assert "1.58x" in pc.by_id(data)["readme-both"]["duplicates"][0]["what"]


# ----------------------------------------------------------------------------- the row logic


def test_forward_row_small_case_matches_its_parts(pc):
    d = {"shared": {}, "model": {}, "rows": [tiny_row()]}
    pc.validate(d)
    out = pc.predict_row(d, "tiny", 2000)
    client = pc.client_us() / 1e3  # the official code's client overhead on every pass (ms), on vLLM 0.10's engine
    t = synthesize("h100-sxm:vllm-0.10", "qwen2.5-32b", 2).time_ms("qwen2.5-32b", 0, 1, 1) + client
    c = synthesize("h100-sxm:vllm-0.10", "qwen2.5-1.5b", 1).time_ms("qwen2.5-1.5b", 0, 1, 1) + client
    assert out["extra"]["c1"] == pytest.approx(c / t, rel=1e-6)  # draft on its own GPU, target at TP 2
    assert out["extra"]["k1"] == 4 and out["extra"]["k2"] == 1 and out["extra"]["alpha2"] is None
    assert out["closed_form"] == pytest.approx(float(theory.f_async(0.6, c / t, 4)), rel=1e-9)
    assert out["lo"] <= out["predicted"] <= out["hi"] and out["hi"] - out["lo"] < 0.2
    assert 1.0 < out["predicted"] < out["closed_form"]  # a verifier and batch costs: below the free closed form
    assert out["previous"] > 1.0  # the what-if: the previous pricing (hf-eager kernel sums at context 0)


def test_ngram_alpha2_reproduces_the_ngram_speedup_on_its_hardware(pc):
    row = tiny_row(ngram_tokens=tagged(6), ngram_alone=tagged(1.4, measured_in="same"))
    d = {"shared": {}, "model": {}, "rows": [row]}
    pc.validate(d)
    a, acf, k2 = pc.token_alpha(d, row, pc.resolve(d, row))
    prof = pc.with_client(synthesize("h100-sxm:vllm-0.10", "qwen2.5-32b", 2), pc.client_us())  # the rows' pricing
    ctx = np.linspace(0, 2000, 33)  # the request's contexts: prompt 0, 2000 tokens
    cost = (sum(prof.time_ms("qwen2.5-32b", L, 1, 7, "linear") for L in ctx)
            / sum(prof.time_ms("qwen2.5-32b", L, 1, 1, "linear") for L in ctx))
    assert k2 == 7 and (1 - a ** 7) / (1 - a) / cost == pytest.approx(1.4, rel=1e-6)
    assert acf == pytest.approx(solve_alpha(1.4, 7)) and acf < a  # priced passes need more acceptance
    out = pc.predict_row(d, "tiny", 1000)
    assert out["extra"]["alpha2"] == a and out["extra"]["k2"] == 7


@pytest.mark.parametrize("rid", ["rv-LLM-J7B-GSM8K-both", "rv-LLM-J7B-GSM8K-comp", "paper-aime-lr"])
def test_a_rows_prediction_does_not_depend_on_its_reported_speedup(pc, data, rid):
    """Run the row logic with the row's reported speedup replaced: every number must come out the same."""
    before = pc.predict_row(data, rid, 400)
    d = copy.deepcopy(data)
    pc.by_id(d)[rid]["reported"]["value"] = 9.99
    after = pc.predict_row(d, rid, 400)
    assert before == after and before["predicted"] > 1.0


def test_composition_recovers_the_lr_alone_speedup(pc, data):
    """The bisection's alpha1 gives back the LR-alone speedup it was inferred from (on the row's hardware)."""
    d = data
    row = pc.by_id(d)["rv-LLM-J7B-GSM8K-comp"]
    inp = pc.resolve(d, row)
    hw = pc.hardware(inp)
    a1 = pc.infer_alpha1(hw, inp, inp["step_tokens"]["value"], 7, 1.45, 1000)
    got = pc.simulate_outcome(pc.behaviour(inp, a1), hw, pc.Setting("async", 7, 1), 1000, 0).speedup
    assert got == pytest.approx(1.45, abs=0.01)


def test_summaries_count_what_they_say(pc):
    R = pc.Result

    def res(i, rep, pred, st, table="validation", target="A"):
        inputs = [f"target_arch = {target} (stated: s)", "alpha1 = 0.5 (borrowed: s)"]
        return R(i, table, "g", i, "forward", rep, "hw", st, inputs, predicted=pred, lo=pred, hi=pred,
                 closed_form=2 * rep, workload=["step_tokens"])
    rows = [res("a", 1.0, 1.05, {"x": "stated", "step_tokens": "assumed"}),
            res("b", 2.0, 2.4, {"x": "borrowed", "step_tokens": "assumed"}),
            res("c", 1.0, 0.5, {"x": "assumed"}, target="B"), res("d", 1.0, 3.0, {"x": "stated"}, "consistency")]
    lines = pc.summaries(rows)
    assert lines[0].startswith("- validation rows, all (3): mean |error| 25.0%, worst -50.0% (c), 1 of 3 within 10%")
    assert "closed form mean |error| 100.0%, 0 within 10%" in lines[0]
    assert "all stated: none (every row has a borrowed or assumed input among: step_tokens, x)" in lines[1]
    assert "(step_tokens) (1): mean |error| 5.0%" in lines[2]
    assert "(step_tokens) (2): mean |error| 12.5%, worst +20.0% (b), 1 of 2 within 10%" in lines[3]
    assert lines[4].endswith("not independent): 2")  # a and b share a target and its acceptance: one setup
    assert lines[5].startswith("- consistency checks (composition; not validation) (1): mean |error| 200.0%")


def test_bad_data_file_is_one_line_and_exit_2(pc, data, tmp_path):
    d = copy.deepcopy(data)
    del pc.by_id(d)["readme-lr"]["inputs"]["alpha1"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    r = subprocess.run([sys.executable, str(SCRIPT), "--data", str(bad), "--out", str(tmp_path)],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["paper_check: error: " + str(bad) + ": row readme-lr: missing input(s) "
                                                                                 "alpha1"]
    assert not (tmp_path / "paper_check.json").exists()
