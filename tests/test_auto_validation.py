"""studies/auto_validation.py (issue 34 item 4a): the committed figure JSON is what the script computes from the
committed recording, and its bar verdicts follow from its rows."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "studies"))
import auto_validation as av

DATA = ROOT / "studies" / "data" / "auto-validation-cpu"


def test_the_figure_is_the_recordings_report(tmp_path):
    assert av.main(["--report", str(DATA), "--figures", str(tmp_path), "--reps", "2000"]) == 0
    got = json.loads((tmp_path / "auto_validation.json").read_text())
    want = json.loads((ROOT / "figures" / "auto_validation.json").read_text())
    assert got["rows"] == want["rows"] and got["verdict"] == want["verdict"]
    rows = {r["mode"]: r for r in got["rows"]}
    best = max((r for m, r in rows.items() if m != "auto"), key=lambda r: r["tokens_per_s"])
    assert got["verdict"]["best_fixed"] == best["mode"]
    assert got["verdict"]["met"] == (rows["auto"]["tokens_per_s"] / best["tokens_per_s"] >= av.BAR)
    assert got["verdict"]["met"] == (got["verdict"]["auto_over_best"] >= av.BAR)
    v = got["verdict"]  # the headline (README, docs/validation/adaptive.md): ar best, auto 0.99x of it without prefills
    assert v["best_fixed_without_prefill"] == "ar" and round(v["auto_over_best_without_prefill"], 2) == 0.99
    assert v["met_without_prefill"] == (v["auto_over_best_without_prefill"] >= av.BAR)
    assert [u["config"] for u in got["auto_run"]["uses"]] == ["ar"]  # auto stayed in ar
    assert got["auto_run"]["decisions"] == got["auto_run"]["reproduced"]  # every decision recomputes


def test_bad_folders_are_one_line(tmp_path, capsys):
    assert av.main(["--report", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err
    assert av.main(["--pack", str(DATA)]) == 2  # --dest missing
    assert av.main(["--pack", str(DATA), "--dest", str(DATA)]) == 2  # exists
    with pytest.raises(SystemExit):
        av.main(["--help"])
