"""studies/verifier_tradeoff.py and studies/replay_validation.py without models: which runs are recorded, what the
report computes from recorded files, where the figures go."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from lrsim.trace import Header, RequestRecord, Setting, StepRecord, write_trace

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def load(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(STUDIES))  # the scripts import studies/common.py
    spec = importlib.util.spec_from_file_location(name, STUDIES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def vt(monkeypatch):
    return load("verifier_tradeoff", monkeypatch)


def dataset(tmp: Path, golds: list[int]) -> Path:
    p = tmp / "problems.jsonl"
    p.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"#### {g}"}) + "\n" for i, g in enumerate(golds)))
    return p


def fake_run(folder: Path, mode: str, ds: Path, answers: list[int], seconds: list[float], n: int | None = None,
             done: int | None = None, verify: list[tuple[float, float]] = ()) -> None:
    """A recorded bench run of one mode: results.json and a trace with texts (20 tokens per request)."""
    folder.mkdir(parents=True)
    n = len(answers) if n is None else n
    right = sum(a == i + 1 for i, a in enumerate(answers))  # the fake dataset's gold of problem i is i + 1
    meta = {"n": n, "done": n if done is None else done, "dataset": str(ds), "backend": "llamacpp",
            "config": {mode: {"max_tokens": 256, "gamma": 2}}, "loadavg_start": [0.1, 0, 0],
            "loadavg_now": [0.2, 0, 0], "cpus": 2, "hardware": {"cpu_model": "test cpu"},
            "models": {"target": "/x/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"}}
    row = {"mode": mode, "requests": len(answers), "accuracy": right / len(answers), "verify_share": 0.01}
    (folder / "results.json").write_text(json.dumps({"meta": meta, "modes": [row]}))
    reqs = [RequestRecord(request=i, start=10.0 * i, end=10.0 * i + s, output_tokens=20, text=f"so \\boxed{{{a}}}")
            for i, (a, s) in enumerate(zip(answers, seconds))]
    steps = [StepRecord(request=0, cycle=0, position=0, verifier="identical", decision=True)]
    for j, (t0, t1) in enumerate(verify):
        steps += [StepRecord(request=0, cycle=1, position=j, verifier="embedding", verify_start=t0, verify_end=t1,
                             decision=j % 2 == 0)]
    setting = Setting("async" if mode == "lr-async" else "ar", 2 if mode == "lr-async" else 1, 1)
    write_trace(folder / f"trace-{mode}.jsonl", Header(source="lrref", mode=mode, setting=setting.to_dict()),
                steps, reqs)


def test_record_runs_only_the_missing_runs(vt, tmp_path, capsys):
    ds = dataset(tmp_path, [1, 2, 3, 4])
    fake_run(tmp_path / "out" / "ar", "ar", ds, [1, 2, 3, 4], [1, 1, 1, 1])
    fake_run(tmp_path / "out" / "lr-async-judge-2", "lr-async", ds, [1, 2, 3, 4], [1, 1, 1, 1], done=2)
    vt.record(vt.parse_args(["--record", str(tmp_path / "out"), "--n", "4", "--dry-run",
                             "--configs", "judge-2,random-0.5"]))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("3 runs of 4 problems, at most 1024")
    assert "not the paper's 7B judge" in out[1]
    assert out[2].startswith("ar: recorded already")
    assert "--modes lr-async" in out[3] and "--verifier judge --threshold 2" in out[3] and "--log-text" in out[3]
    assert "--verifier random --threshold 0.5" in out[4] and "'Solve the problem" in out[4]


def test_record_refuses_a_run_of_other_settings(vt, tmp_path, capsys):
    ds = dataset(tmp_path, [1, 2])
    fake_run(tmp_path / "out" / "ar", "ar", ds, [1, 2], [1, 1])
    assert vt.main(["--record", str(tmp_path / "out"), "--n", "3", "--dry-run"]) == 2
    assert "holds a run of (problems, max tokens, backend) = (2, 256, 'llamacpp')" in capsys.readouterr().err


def test_report_computes_from_the_recorded_files(vt, tmp_path, capsys):
    ds = dataset(tmp_path, [1, 2, 3, 4])
    out = tmp_path / "out"
    fake_run(out / "ar", "ar", ds, [1, 2, 0, 0], [2, 2, 2, 2])  # 2 right, 10 tok/s
    fake_run(out / "lr-async-random-0.5", "lr-async", ds, [1, 0, 3, 4], [1, 1, 1, 1],  # 3 right, 20 tok/s
             verify=[(1.0, 1.2), (2.0, 2.4)])
    assert vt.main(["--report", str(out), "--figures", str(tmp_path / "fig"), "--reps", "200"]) == 0
    data = json.loads((tmp_path / "fig" / "verifier_tradeoff.json").read_text())
    r = data["rows"][0]
    assert r["speedup"] == pytest.approx(2.0) and r["tokens_per_s"] == pytest.approx(20.0)
    assert r["accuracy"]["k"] == 3 and data["ar"]["accuracy"]["k"] == 2
    assert r["accuracy_vs_ar"]["d"] == pytest.approx(0.25) and r["accuracy_vs_ar"]["kind"] == "paired"
    assert r["verify_s_per_call"] == pytest.approx(0.3) and r["verify_calls"] == 2  # identical drafts excluded
    assert r["step_acceptance"]["k"] == 2 and r["step_acceptance"]["n"] == 3
    text = capsys.readouterr().out
    assert "| random, p = 0.5 | 4 | 66.7% [" in text and "2.000 [" in text and "+25.0 pp [" in text
    assert "Not recorded yet: embedding-0.85, embedding-0.95, judge-2, score-7" in text
    assert "7B judge" in text and (tmp_path / "fig" / "verifier_tradeoff.html").exists()


def test_report_without_ar_is_one_line(vt, tmp_path, capsys):
    assert vt.main(["--report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no results.json with a ar row" in err[0]


def test_replay_validation_names_its_outputs_by_data_set(monkeypatch):
    rv = load("replay_validation", monkeypatch)
    assert rv.output_stem(Path("studies/data/validation")) == "replay_validation"
    assert rv.output_stem(Path("studies/data/validation-llamacpp/")) == "replay_validation_llamacpp"
    assert rv.output_stem(Path("runs/mine")) == "replay_validation_mine"


def test_replay_validation_flags_ci_that_resolve_five_percent(monkeypatch, tmp_path):
    import numpy as np

    from lrsim.trace import read_trace

    rv = load("replay_validation", monkeypatch)
    ds = dataset(tmp_path, [1] * 40)
    fake_run(tmp_path / "ar", "ar", ds, [1] * 40, [2.0] * 40)
    fake_run(tmp_path / "lr", "lr-async", ds, [1] * 40, [1.0 + 0.01 * (i % 3) for i in range(40)])
    ar, lr = read_trace(tmp_path / "ar" / "trace-ar.jsonl"), read_trace(tmp_path / "lr" / "trace-lr-async.jsonl")
    f = rv.measured_fields(lr, ar, np.random.default_rng(0))
    assert f["problems"] == 40 and f["resolves_5pct"] and f["measured_half_width"] < 0.01
    assert rv.measured_fields(ar, ar, np.random.default_rng(0))["measured"] == pytest.approx(1.0)
