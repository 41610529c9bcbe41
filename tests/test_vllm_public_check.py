"""studies/vllm_public_check.py and its data: every row sourced, the scope rule as written, the metrics priced as
their sources timed them, nothing fitted on the rows it predicts."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from lrsim.gpu import engine_vllm
from lrsim.gpu.archs import load_arch
from lrsim.gpu.model import forward_s
from lrsim.gpu.synthesize import parse_spec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def vc():
    sys.path.insert(0, str(ROOT / "studies"))
    spec = importlib.util.spec_from_file_location("vllm_public_check", ROOT / "studies" / "vllm_public_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rows(vc):
    return json.loads(vc.DATA.read_text())["rows"]


def test_every_row_quotes_its_source_and_resolves(rows):
    assert len(rows) >= 15 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        src = r["source"]
        assert src["url"].startswith("https://") and src["quote"] and src["title"], r["id"]
        assert r["metric"] in ("e2e_latency_s", "e2e_tok_s", "tpot_ms") and r["value"] > 0, r["id"]
        assert 1 <= r["batch"] <= 4 and r["engine"] == "vllm", r["id"]
        load_arch(r["arch"])  # every architecture is shipped (or an alias)


def test_scope_rule_as_written(vc, rows):
    why = {r["id"]: vc.excluded(r) for r in rows}
    assert "calibration" in why["lr-readme-qwen3-32b-h200-tp2-ar"]
    assert all("enforce_eager" in why[r["id"]] for r in rows if r.get("cuda_graphs") is False)
    assert all(why[r["id"]] for r in rows if r["device"] == "gh200")
    kept = [r for r in rows if why[r["id"]] is None]
    assert {vc.device_of(r)[0] for r in kept} <= {"a100-80gb", "a100-40gb", "h100-sxm", "rtx-a6000", "h200"}


def test_metrics_are_priced_as_their_sources_timed_them(vc, rows):
    r = next(r for r in rows if r["id"] == "qwen25-7b-a100-bf16-tp1-in6144")
    s = parse_spec("a100-80gb:tp1:bf16:vllm").setup(load_arch("qwen2.5-7b"))
    P, O = 6144, 2048
    decode = forward_s(s, P + np.arange(1, O, dtype=float), 1.0, 1.0, "wall").sum()
    prefill = float(forward_s(s, 0.0, 1.0, float(P), "wall", prefill=True))
    got = vc.predict(r)
    assert got["predicted"] == pytest.approx(O / (prefill + decode))  # e2e tokens/s, prefill included
    tp = next(r for r in rows if r["id"].startswith("gpustack") and r["batch"] == 1)
    assert vc.lengths(tp) == (233, 221)  # the means of the totals the source states
    assert vc.predict(tp)["predicted"] == pytest.approx(vc.predict(tp)["mean_step_ms"])


def test_nothing_is_fitted_on_the_rows_it_predicts(vc, rows):
    """The engine's one fitted constant comes from the calibration row alone: it is excluded from the check."""
    cal = json.loads(engine_vllm.ENGINE_FILE.read_text())["calibrated_on"]
    assert "README" in cal["row"] and cal["tokens_per_s"] == 76.38
    assert vc.CALIBRATION_IDS == ("lr-readme-qwen3-32b-h200-tp2-ar",)
    done, skipped = vc.run_rows([r for r in rows if r["id"].startswith(("lr-readme", "qwen25-7b-a100-bf16"))])
    assert [s["id"] for s in skipped] == ["lr-readme-qwen3-32b-h200-tp2-ar"] and len(done) >= 5


def test_the_engine_constant_reproduces_its_fit():
    sys.path.insert(0, str(ROOT / "studies"))
    from fit_vllm_engine import fit

    assert fit() == json.loads(engine_vllm.ENGINE_FILE.read_text())  # studies/fit_vllm_engine.py --check
