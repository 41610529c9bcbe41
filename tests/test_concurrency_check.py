"""studies/concurrency_check.py without models: which runs it records, what it calibrates each prediction on."""

import importlib.util
import json
from pathlib import Path

import pytest

from lrsim.trace import Header, Setting, write_trace

SCRIPT = Path(__file__).resolve().parents[1] / "studies" / "concurrency_check.py"


@pytest.fixture
def check(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # the script imports studies/common.py
    spec = importlib.util.spec_from_file_location("concurrency_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_run(folder: Path, n: int, problems: int, done: int | None = None) -> None:
    """A recorded run: results.json and one (empty) trace per mode with its setting."""
    folder.mkdir(parents=True)
    rows = [{"mode": m, "requests": problems, "tokens_per_s": 10.0 * n, "latency_mean_s": 5.0 + n}
            for m in ("ar", "lr-sync")]
    meta = {"n": problems, "done": problems if done is None else done, "concurrency": n}
    (folder / "results.json").write_text(json.dumps({"meta": meta, "modes": rows}))
    for mode, s in (("ar", Setting("ar", 1, 1)), ("lr-sync", Setting("sync", 3, 1, 1, "per_pair"))):
        s = Setting(s.mode, s.k1, s.k2, s.width, s.verify_calls, "threads=2", n)
        write_trace(folder / f"trace-{mode}.jsonl", Header(source="lrref", mode=mode, setting=s.to_dict()), [])


def test_records_only_the_missing_runs(check, tmp_path, capsys):
    fake_run(tmp_path / "c1", 1, 4)
    fake_run(tmp_path / "c2", 2, 4, done=3)  # interrupted
    check.record(check.parse_args(["--out", str(tmp_path), "--concurrency", "1,2,4", "--n", "4", "--dry-run"]))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("c1: recorded already")
    assert "--concurrency 2" in out[1] and "--concurrency 4" in out[2] and "--n 4" in out[2]
    assert "'Solve the problem" in out[1]  # the system prompt is quoted as one argument


def test_each_run_is_predicted_from_the_single_request_run(check, tmp_path, monkeypatch, capsys):
    for n in (1, 2, 4):
        fake_run(tmp_path / f"c{n}", n, 4)
    calls = []

    def fake_predicted(cmd):
        calls.append(cmd)
        return 11.0, 6.0

    monkeypatch.setattr(check, "predicted", fake_predicted)
    monkeypatch.setattr(check, "serve_available", lambda: True)
    check.compare(check.parse_args(["--out", str(tmp_path), "--n", "4", "--concurrency", "1,2,4", "--compare-only",
                                    "--figures", str(tmp_path / "fig")]))
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert [(r["concurrency"], r["mode"]) for r in rows] == [(n, m) for n in (1, 2, 4) for m in ("ar", "lr-sync")]
    r = rows[2]  # c2 ar: measured 20 tok/s and 7 s
    assert r["tps_error"] == pytest.approx(11 / 20 - 1, abs=1e-4)
    assert r["latency_error"] == pytest.approx(6 / 7 - 1, abs=1e-4)
    assert all("/c1/" in p for r in rows for p in r["calibrated_on"]) and len(rows[0]["calibrated_on"]) == 2
    sync = calls[3]
    assert sync[sync.index("--mode") + 1] == "sync" and sync[sync.index("--k1") + 1] == "3"
    assert sync[sync.index("--concurrency") + 1] == "2" and sync[sync.index("--requests") + 1] == "4"
    assert "--hardware" not in sync and "2 of 6 within 10%" in capsys.readouterr().out  # c1: 11 vs 10, 6 vs 6
    check.compare(check.parse_args(["--out", str(tmp_path), "--n", "4", "--concurrency", "1,2", "--compare-only",
                                    "--profile", "p.json", "--figures", str(tmp_path / "fig")]))
    assert calls[-1][calls[-1].index("--hardware") + 1] == "p.json" and (tmp_path / "comparison_profile.json").exists()
    assert (tmp_path / "fig" / "concurrency_check.html").exists()
    assert (tmp_path / "fig" / "concurrency_check_profile.html").exists()


def test_packed_runs_compare_like_the_recording(check, tmp_path, monkeypatch):
    for n in (1, 2):
        fake_run(tmp_path / "rec" / f"c{n}", n, 4)
    dest = tmp_path / "data" / "conc"
    args = ["--out", str(tmp_path / "rec"), "--n", "4", "--concurrency", "1,2"]
    assert check.main(args + ["--pack", str(dest)]) == 0
    assert sorted(p.name for p in (dest / "c2").iterdir()) == ["results.json", "trace-ar.jsonl.gz",
                                                                "trace-lr-sync.jsonl.gz"]
    assert check.main(args + ["--pack", str(dest)]) == 2  # never over an existing folder
    monkeypatch.setattr(check, "serve_available", lambda: True)
    seen = []
    monkeypatch.setattr(check, "predicted", lambda cmd: seen.append(cmd) or (11.0, 6.0))
    check.compare(check.parse_args(["--out", str(dest), "--n", "4", "--concurrency", "1,2", "--compare-only",
                                    "--figures", str(tmp_path / "fig")]))
    assert len(seen) == 4 and all(str(dest / "c1" / "trace-ar.jsonl.gz") in c for c in seen)
    incomplete = tmp_path / "rec2"
    fake_run(incomplete / "c1", 1, 4, done=2)
    assert check.main(["--out", str(incomplete), "--n", "4", "--concurrency", "1", "--pack", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_without_lrsim_serve_the_comparison_is_skipped(check, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(check, "serve_available", lambda: False)
    assert check.main(["--out", str(tmp_path), "--compare-only"]) == 0
    assert "comparison skipped" in capsys.readouterr().out and not (tmp_path / "comparison.json").exists()


def test_serve_output_keys(check):
    assert check.pick({"summary": {"output_throughput": 3}}, check.THROUGHPUT_KEYS, "throughput") == 3.0
    assert check.pick({"output_throughput": 2, "summary": {"output_throughput": 3}}, check.THROUGHPUT_KEYS, "throughput") == 2.0
    from lrsim.errors import InputError

    with pytest.raises(InputError, match="no mean latency"):
        check.pick({"x": 1}, check.LATENCY_KEYS, "mean latency")
