"""studies/validation_summary.py: the README's tables pick the studies' rows and summarise only held-out ones."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "studies" / "validation_summary.py"


@pytest.fixture
def summary():
    spec = importlib.util.spec_from_file_location("validation_summary", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def replay_row(mode: str, protocol: str, role: str, error: float) -> dict:
    return {"run": "g2", "mode": mode, "measured": 0.5, "measured_ci95": [0.45, 0.55], "protocol": protocol,
            "role": role, "error": error}


def conc_row(n: int, mode: str, tps: float, lat: float) -> dict:
    return {"concurrency": n, "mode": mode, "measured_tps": 20.0, "measured_latency_s": 7.0, "tps_error": tps,
            "latency_error": lat}


def test_tables(summary, tmp_path, capsys):
    replay = [replay_row("sd", "fixed", "fit", 0.01), replay_row("sd", "leave-one-out", "held-out", -0.2),
              replay_row("lr-sync", "fixed", "held-out", 0.04), replay_row("lr-sync", "leave-one-out", "held-out", 0.06)]
    (tmp_path / "replay_validation_llamacpp.json").write_text(json.dumps(replay))
    (tmp_path / "replay_validation_llamacpp_profile.json").write_text(json.dumps(replay[:2]))
    conc = [conc_row(1, "ar", 0.05, -0.02), conc_row(4, "ar", 0.2, 0.01)]
    (tmp_path / "concurrency_check.json").write_text(json.dumps(conc))
    (tmp_path / "concurrency_check_profile.json").write_text(json.dumps(conc[:1]))
    assert summary.main(["--figures", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| g2 | sd | 0.500 [0.45, 0.55] | +1.0% (fit) | -20.0% | - | +1.0% (fit) | -20.0% | - |" in out
    assert "| g2 | lr-sync | 0.500 [0.45, 0.55] | +4.0% | +6.0% | - | - | - | - |" in out
    # the fit row is not summarised: fixed held-out is lr-sync alone
    assert "- fixed, traces' profile: held-out mean |error| 4.0%, worst 4.0%, 1 of 1 within 10%" in out
    assert "- leave-one-out, traces' profile: held-out mean |error| 13.0%, worst 20.0%, 1 of 2 within 10%" in out
    assert "| 4 | ar | 20.00 | 7.0 | +20.0% | +1.0% | - | - |" in out
    assert "- traces' profile: 1 of 2 rows within 10% on both" in out
    assert "- measured profile: 1 of 2 rows within 10% on both" in out


def test_missing_study_output_is_one_line(summary, tmp_path, capsys):
    assert summary.main(["--figures", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "replay_validation_llamacpp.json: missing" in err
