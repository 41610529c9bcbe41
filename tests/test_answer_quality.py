"""studies/answer_quality.py without models (the report's numbers from synthetic recorded runs, the plan, resuming,
packing, the default rule), and one smoke recording with the tiny model (marked ``models``)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from lrsim.trace import Header, RequestRecord, StepRecord, read_trace, write_trace

STUDIES = Path(__file__).resolve().parents[1] / "studies"


@pytest.fixture
def aq(monkeypatch):
    monkeypatch.syspath_prepend(str(STUDIES))  # the script imports studies/common.py
    spec = importlib.util.spec_from_file_location("answer_quality", STUDIES / "answer_quality.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "answer_quality", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def fake_run(folder: Path, mode: str, correct: list[bool], seconds: list[float], done: int | None = None,
             decisions: list[bool] = (), n: int | None = None, max_tokens: int = 512, capped: int = 0,
             cpu: str = "test cpu", flags: list[str] | None = None) -> None:
    """A recorded bench run of one row on CPU ``cpu`` with ``flags``: results.json, provenance.txt, a trace whose
    requests carry ``correct`` (20 tokens each; the first ``capped`` stopped at the cap)."""
    folder.mkdir(parents=True)
    n = len(correct) if n is None else n
    meta = {"n": n, "done": n if done is None else done, "dataset": "/x/gsm8k_test.jsonl", "dataset_name": "gsm8k-test",
            "backend": "llamacpp", "config": {mode: {"max_tokens": max_tokens, "gamma": 4}},
            "loadavg_start": [0.1, 0, 0], "loadavg_now": [0.2, 0, 0], "cpus": 2,
            "hardware": {"cpu_model": cpu, "cpu_flags": flags}}
    (folder / "results.json").write_text(json.dumps({"meta": meta, "modes": [{"mode": mode}]}))
    (folder / "results.csv").write_text("mode\n" + mode + "\n")
    (folder / "provenance.txt").write_text("cpu_model: test cpu\ncpus: 2\nloadavg_start: 0.10 0 0\n"
                                           "loadavg_end: 0.20 0 0\ndate_start: a\ndate_end: b\n")
    reqs = [RequestRecord(request=i, start=10.0 * i, end=10.0 * i + s, output_tokens=20, correct=c, prompt_tokens=50,
                          finish="max_tokens" if i < capped else "eos")
            for i, (c, s) in enumerate(zip(correct, seconds))]
    steps = [StepRecord(request=0, cycle=j, position=0, branch=0, verifier="embedding", decision=d)
             for j, d in enumerate(decisions)]
    write_trace(folder / f"trace-{mode}.jsonl", Header(source="lrref", mode=mode, config={"mode": mode}), steps, reqs)


def study(tmp_path: Path) -> Path:
    """ar right on 6 of 10 problems at 10 tok/s; lr-async embedding 0.85 loses 5 and gains none at 20 tok/s;
    lr-async math loses 1 and gains 1 at 15 tok/s; lr-async exact-strict keeps every answer at 8 tok/s."""
    out = tmp_path / "out"
    ar = [True] * 6 + [False] * 4
    fake_run(out / "ar", "ar", ar, [2.0] * 10, capped=1)
    fake_run(out / "lr-async-embedding-0.85", "lr-async", [False] * 5 + [True] + [False] * 4, [1.0] * 10,
             decisions=[True, True, True, False])
    fake_run(out / "lr-async-math-0.85", "lr-async", [False] + [True] * 5 + [False] * 3 + [True], [20 / 15] * 10,
             decisions=[True, False])
    fake_run(out / "lr-async-exact-strict", "lr-async", ar, [2.5] * 10)
    fake_run(out / "lr-async-judge-2", "lr-async", ar[:5], [1.0] * 5, done=5, n=10)  # interrupted
    return out


def test_report_rows_hold_the_paired_numbers(aq, tmp_path, capsys):
    out = study(tmp_path)
    assert aq.main(["--report", str(out), "--figures", str(tmp_path / "fig"), "--reps", "200"]) == 0
    data = json.loads((tmp_path / "fig" / "answer_quality.json").read_text())
    rows = {r["name"]: r for r in data["rows"]}
    assert list(rows) == ["ar", "lr-async-exact-strict", "lr-async-math-0.85", "lr-async-embedding-0.85"]
    emb = rows["lr-async-embedding-0.85"]
    assert (emb["n"], emb["lost"], emb["gained"]) == (10, 5, 0)
    assert emb["p_value"] == pytest.approx(0.0625) and emb["accuracy"] == pytest.approx(0.1)
    assert emb["ar_accuracy"] == pytest.approx(0.6) and emb["speedup"] == pytest.approx(2.0)
    assert emb["accuracy_ci95"][0] < 0.1 < emb["accuracy_ci95"][1] and emb["step_acceptance"] == pytest.approx(0.75)
    assert (emb["mode"], emb["verifier"], emb["threshold"]) == ("lr-async", "embedding", 0.85)
    m = rows["lr-async-math-0.85"]
    assert (m["lost"], m["gained"], m["p_value"]) == (1, 1, 1.0) and m["speedup"] == pytest.approx(1.5)
    assert rows["lr-async-exact-strict"]["speedup"] == pytest.approx(0.8) and rows["ar"]["capped"] == 1
    assert data["default_pick"] == "lr-async-math-0.85"  # the fastest without a significant loss of > 3 points
    text = capsys.readouterr().out
    assert "| 5 / 0 | 0.0625 |" in text and "lr-async-judge-2 (incomplete: 5 of 10)" in text
    assert "math: numbers agree, then cosine >= 0.85 (1.500x" in text
    assert (tmp_path / "fig" / "answer_quality.html").exists()


def test_report_pairs_each_row_with_the_ar_of_its_own_cpu(aq, tmp_path, capsys):
    """Rows recorded on a second CPU sit in a folder of their own with that CPU's ar: their speedup and their
    lost / gained come from it, and the two ars are compared problem by problem."""
    out, other = study(tmp_path), tmp_path / "other"
    avx2 = ["avx2", "fma"]
    fake_run(other / "ar", "ar", [True] * 5 + [False] * 5, [4.0] * 10, cpu="AMD EPYC", flags=avx2)  # 5 tok/s
    fake_run(other / "lr-sync-math-0.85", "lr-sync", [True] * 4 + [False] * 5 + [True], [8.0] * 10, cpu="AMD EPYC",
             flags=avx2)
    fig = tmp_path / "fig"
    assert aq.main(["--report", str(out), str(other), "--figures", str(fig), "--reps", "50"]) == 0
    data = json.loads((fig / "answer_quality.json").read_text())
    assert [(r["name"], r["cpu"]) for r in data["rows"]] == [
        ("ar", "test cpu"), ("ar", "AMD EPYC, AVX2"), ("lr-async-exact-strict", "test cpu"),
        ("lr-async-math-0.85", "test cpu"), ("lr-async-embedding-0.85", "test cpu"), ("lr-sync-math-0.85",
                                                                                      "AMD EPYC, AVX2")]
    sync = data["rows"][-1]
    # against the AVX2 ar (4 s a problem), not the first folder's (2 s): 0.5x, not 0.25x; lost 1, gained 1 of its 5
    assert sync["speedup"] == pytest.approx(0.5) and (sync["lost"], sync["gained"], sync["ar_accuracy"]) == (1, 1, 0.5)
    assert data["ar_agreement"] == [{"cpu": "AMD EPYC, AVX2", "ref_cpu": "test cpu", "n": 10, "same_correct": 9,
                                     "same_text": None}]
    text = capsys.readouterr().out
    assert "right or wrong alike on 9 of 10 problems" in text and "| lr-sync | math" in text
    assert "lr-sync-math-0.85" not in text.split("Not recorded yet:")[1]
    assert "paired with the ar recorded on its own CPU" in text


def test_a_rows_intervals_do_not_depend_on_the_other_rows(aq, tmp_path):
    """Each row's bootstrap is seeded by its name: recording another row leaves the intervals in place."""
    out = study(tmp_path)
    def cis(fig):
        assert aq.main(["--report", str(out), "--figures", str(fig), "--reps", "200"]) == 0
        rows = json.loads((fig / "answer_quality.json").read_text())["rows"]
        return {r["name"]: (r.get("speedup_ci95"), r.get("accuracy_diff_ci95")) for r in rows if r["mode"] != "ar"}
    before = cis(tmp_path / "a")
    fake_run(out / "lr-async-embedding-0.95", "lr-async", [True] * 3 + [False] * 7, [1.5] * 10)
    after = cis(tmp_path / "b")
    assert set(after) - set(before) == {"lr-async-embedding-0.95"}
    assert all(after[k] == v for k, v in before.items())


@pytest.mark.parametrize("where, message", [
    ("both", "complete in both"),
    ("cpu", "recorded on AMD EPYC, AVX2, its ar on test cpu"),
])
def test_report_refuses_a_row_twice_or_off_its_ars_cpu(aq, tmp_path, capsys, where, message):
    out, other = study(tmp_path), tmp_path / "other"
    fake_run(other / "ar", "ar", [True] * 10, [4.0] * 10)
    row = "lr-async-math-0.85" if where == "both" else "lr-sync-math-0.85"
    fake_run(other / row, "lr-sync" if where == "cpu" else "lr-async", [True] * 10, [4.0] * 10,
             cpu="AMD EPYC" if where == "cpu" else "test cpu", flags=["avx2"] if where == "cpu" else None)
    assert aq.main(["--report", str(out), str(other), "--figures", str(tmp_path / "fig")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and not (tmp_path / "fig").exists()


def test_plan_takes_ars_rate_from_an_ar_recorded_on_this_cpu(aq, tmp_path, capsys):
    from lrref.host.cpu import cpu_flags, cpu_model

    out = tmp_path / "out"
    fake_run(out / "ar", "ar", [True] * 4, [2.5] * 4, cpu=cpu_model(), flags=sorted(cpu_flags() or ()))  # 8 tok/s
    args = ["--record", str(out), "--n", "4", "--dry-run", "--rows", "ar,lr-async-judge-2", "--mean-tokens", "300"]
    assert aq.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"ar at 8 tok/s (measured by {out / 'ar'} on this CPU)" in lines[1]
    # 4 problems x 300 tokens at 8 tok/s x 0.179 (judge) = 838 s
    assert "0.23 h (at  1.43 tok/s)" in lines[2]
    fake_run(tmp_path / "elsewhere" / "ar", "ar", [True] * 4, [2.5] * 4, cpu="another cpu")
    assert aq.main(args[:1] + [str(tmp_path / "elsewhere")] + args[2:]) == 0
    assert f"ar at {aq.AR_RATE:g} tok/s ({aq.AR_MACHINE})" in capsys.readouterr().out


def test_pick_default_rule(aq):
    def row(name, speedup, lost, gained, n=40, mode="lr-async"):
        from lrsim.stats import mcnemar_exact

        return {"name": name, "mode": mode, "speedup": speedup, "p_value": mcnemar_exact(lost, gained),
                "ar_accuracy": 0.75, "accuracy": 0.75 - (lost - gained) / n}

    rows = [row("fast-lossy", 2.0, 6, 0), row("mid-small-loss", 1.5, 2, 1), row("mid-loss", 1.7, 4, 1),
            row("slow", 0.9, 0, 0), row("sync-fast", 3.0, 0, 0, mode="lr-sync")]
    # fast-lossy: p = 0.031 (significant); mid-loss: p = 0.375 but 7.5 points lost; mid-small-loss: 2.5 points
    assert aq.pick_default(rows)["name"] == "mid-small-loss"
    assert aq.pick_default(rows, mode="lr-sync")["name"] == "sync-fast"
    assert aq.pick_default(rows, max_loss=0.0)["name"] == "slow"
    assert aq.pick_default([row("lossy", 2.0, 6, 0)]) is None


def test_record_plans_resumes_and_refuses_other_settings(aq, tmp_path, capsys):
    out = study(tmp_path)
    assert aq.main(["--record", str(out), "--n", "10", "--dry-run", "--ar-rate", "12.5", "--mean-tokens", "300",
                    "--rows", "ar,lr-async-judge-2,lr-async-math-numeric,lr-sync-score-7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"ar: recorded already ({out / 'ar'})"
    assert lines[1].startswith("3 row(s) to record, 10 problems each, cap 512 tokens")
    # 10 problems x 300 tokens at 12.5 tok/s x 0.179 (judge) = 1,341 s
    assert "lr-async-judge-2" in lines[2] and "0.37 h (at  2.24 tok/s)" in lines[2]
    cmds = [ln for ln in lines if "lrref.cli bench" in ln]
    assert len(cmds) == 3 and "--verifier judge --threshold=2" in cmds[0] and "--log-text" in cmds[0]
    assert "--verifier math --threshold=-1" in cmds[1] and "--dataset gsm8k-test" in cmds[1]
    assert "--modes lr-sync" in cmds[2] and "--gamma 4" in cmds[2] and "--max-tokens 512" in cmds[2]
    assert aq.main(["--record", str(out), "--n", "10", "--max-tokens", "256", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a run of (dataset, problems, max tokens, gamma, backend)" in err[0]


def test_hours_start_only_the_rows_that_fit(aq, tmp_path, capsys):
    out = study(tmp_path)
    args = ["--record", str(out), "--n", "10", "--dry-run", "--ar-rate", "12.5", "--mean-tokens", "300", "--rows",
            "lr-async-judge-2,lr-async-math-numeric,lr-sync-score-7"]
    # planned: judge 3,000 tokens / (12.5 x 0.179) = 0.372 h, math-numeric / (12.5 x 0.294) = 0.227 h (cumulative
    # 0.599 h), lr-sync score / (12.5 x 0.140) = 0.476 h (1.075 h)
    assert aq.main(args + ["--hours", "0.7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "--hours 0.7: 2 row(s) fit, the rest wait for the next run (from lr-sync-score-7)" in lines[0]
    cmds = [ln for ln in lines if "lrref.cli bench" in ln]
    assert len(cmds) == 2 and "--modes lr-sync" not in " ".join(cmds)
    assert aq.main(args + ["--hours", "0.3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "0 row(s) fit" in lines[0] and not [ln for ln in lines if "lrref.cli bench" in ln]
    assert aq.main(args + ["--hours", "1.2"]) == 0
    assert "3 row(s) fit" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("args, message", [
    (["--record", "x", "--rows", "ar,bogus"], "--rows: distinct names"),
    (["--record", "x", "--rows", "ar,ar"], "--rows: distinct names"),
    (["--record", "x", "--n", "0"], "must be > 0"),
    (["--record", "x", "--hours", "0"], "must be > 0"),
    (["--report", "/no/such/folder"], "no results.json with a ar row"),
])
def test_bad_input_is_one_line(aq, capsys, args, message):
    assert aq.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_pack_gzips_complete_rows_with_a_readme(aq, tmp_path, capsys):
    out = study(tmp_path)
    dest = tmp_path / "packed"
    assert aq.main(["--pack", str(out), "--dest", str(dest)]) == 0
    assert sorted(p.name for p in dest.iterdir()) == ["README.md", "ar", "lr-async-embedding-0.85",
                                                      "lr-async-exact-strict", "lr-async-math-0.85"]
    t = read_trace(dest / "lr-async-embedding-0.85" / "trace-lr-async.jsonl.gz")
    assert [r.correct for r in t.requests][:6] == [False] * 5 + [True]
    readme = (dest / "README.md").read_text()
    assert "MIT licence" in readme and "| `lr-async-math-0.85` | lr-async |" in readme
    assert aq.main(["--report", str(dest), "--figures", str(tmp_path / "fig2"), "--reps", "50"]) == 0  # reads .gz
    assert aq.main(["--pack", str(out), "--dest", str(dest)]) == 2  # never over an existing folder
    assert "exists: move it away" in capsys.readouterr().err


def test_the_readme_tells_two_cpus_of_one_name_apart(aq):
    """lscpu names an AVX2-only and a Zen 4 AMD EPYC alike; the flags lrref bench recorded tell them apart."""
    prov = {"cpu_model": "AMD EPYC", "cpus": "2"}
    hw = lambda *flags: {"hardware": {"cpu_flags": list(flags)}}
    assert aq.cpu_label(prov, hw("avx2", "fma")) == "AMD EPYC, AVX2 (2 cpus)"
    assert aq.cpu_label(prov, hw("avx2", "avx512f", "avx512_bf16")) == "AMD EPYC, AVX-512 + BF16 (2 cpus)"
    assert aq.cpu_label(prov, hw("avx512f", "avx512_bf16", "amx_tile")).startswith("AMD EPYC, AMX ")
    assert aq.cpu_label({}, {}) == "? (? cpus)"  # an old row without flags or provenance


@pytest.mark.models
def test_smoke_records_two_problems_with_the_tiny_model(aq, tmp_path, capsys):
    from conftest import require_models

    require_models("smollm2-135m-instruct", gguf=True)
    require_models("all-minilm-l6-v2")
    out = tmp_path / "out"
    tiny = ("--target smollm2-135m-instruct --draft smollm2-135m-instruct --embedding all-minilm-l6-v2 "
            "--max-step-tokens 8")
    args = ["--n", "2", "--max-tokens", "32", "--gamma", "2", "--rows", "ar,lr-async-math-0.85", "--lrref-args", tiny]
    assert aq.main(["--record", str(out), *args]) == 0
    prov = (out / "lr-async-math-0.85" / "provenance.txt").read_text()
    assert "cpu_model:" in prov and "git_commit:" in prov and "loadavg_end:" in prov and "--verifier math" in prov
    assert aq.main(["--record", str(out), *args]) == 0  # resumed: nothing left to record
    assert "lr-async-math-0.85: recorded already" in capsys.readouterr().out
    t = read_trace(out / "lr-async-math-0.85" / "trace-lr-async.jsonl")
    assert len(t.requests) == 2 and all(r.correct is not None for r in t.requests)
    assert {s.verifier for s in t.steps if s.decision is not None} <= {"math", "identical"}
    assert aq.main(["--report", str(out), "--figures", str(tmp_path / "fig"), "--reps", "50"]) == 0
    rows = json.loads((tmp_path / "fig" / "answer_quality.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["ar", "lr-async-math-0.85"] and rows[1]["n"] == 2


def test_lrrefs_default_verifier_is_the_studys_pick(aq):
    """Issue 19 item 2, issue 33 item 4: lrref's default verifier is the row the study's rule picks, each row at its
    latest recording (the math row re-recorded on 80 problems replaces its 40-problem row)."""
    from lrref.verify.verifiers import DEFAULT_STRICT, DEFAULT_THRESHOLDS, DEFAULT_VERIFIER

    figs = STUDIES.parent / "figures"
    n40, n80 = (json.loads((figs / f).read_text()) for f in ("answer_quality.json", "answer_quality_n80.json"))
    assert n80["rows"][1]["name"] == "lr-async-math-0.85" and n80["rows"][1]["n"] == 80
    assert n80["default_pick"] is None  # the current math rule lost 11, gained 3 on 80 problems
    pick = aq.pick_default(aq.latest_rows(n40["rows"], n80["rows"]))
    strict = DEFAULT_VERIFIER == "exact" and DEFAULT_STRICT
    assert pick["name"] == ("lr-async-exact-strict" if strict
                            else f"lr-async-{DEFAULT_VERIFIER}-{DEFAULT_THRESHOLDS[DEFAULT_VERIFIER]:.2f}")
    assert pick["p_value"] >= 0.05 and pick["ar_accuracy"] - pick["accuracy"] <= 0.03


def test_latest_rows_replace_by_name(aq):
    a, b = [{"name": "x", "n": 40}, {"name": "y", "n": 40}], [{"name": "x", "n": 80}]
    assert aq.latest_rows(a, b) == [{"name": "x", "n": 80}, {"name": "y", "n": 40}]


def test_pass_probability_of_the_default_rule(aq):
    """Exact: with one problem the rule passes unless it is lost; with no loss it always passes; a true 10-point
    loss passes often at n = 40 and rarely at n = 400."""
    assert aq.pass_probability(1, 0.3, 0.2) == pytest.approx(0.7)
    assert aq.pass_probability(40, 0.0, 0.0) == pytest.approx(1.0)
    p40, p400 = aq.pass_probability(40, 0.10, 0.0), aq.pass_probability(400, 0.10, 0.0)
    assert 0.05 < p40 < 0.5 and p400 < 1e-6
    assert aq.pass_probability(40, 0.15, 0.05) > p40  # the same mean loss, more noise
    with pytest.raises(ValueError):
        aq.pass_probability(40, 0.7, 0.5)
