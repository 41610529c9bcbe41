"""studies/vllm_public_check.py and its data: every row sourced, the scope rule as written, the metrics priced as
their sources timed them, nothing fitted on the rows it predicts."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

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
    s = parse_spec("a100-80gb:tp1:bf16:vllm-v0").setup(load_arch("qwen2.5-7b"))  # vLLM 0.6.3: the V0 engine
    P, O = 6144, 2048
    decode = forward_s(s, P + np.arange(1, O, dtype=float), 1.0, 1.0, "wall").sum()
    prefill = float(forward_s(s, 0.0, 1.0, float(P), "wall", prefill=True))
    got = vc.predict(r)
    assert got["predicted"] == pytest.approx(O / (prefill + decode))  # e2e tokens/s, prefill included
    tp = next(r for r in rows if r["id"].startswith("gpustack") and r["batch"] == 1)
    assert vc.lengths(tp) == (233, 221)  # the means of the totals the source states
    assert vc.predict(tp)["predicted"] == pytest.approx(vc.predict(tp)["mean_step_ms"])


def test_nothing_is_fitted_on_the_rows_it_predicts(vc):
    """Each engine's one fitted constant comes from its calibration row alone: those rows are excluded."""
    every = vc.load_rows()
    fitted = vc.fitted_ids()
    assert set(fitted.values()) == {"vllm-0.11", "vllm-v0", "sglang", "trtllm"}
    assert vc.CLIENT_IDS == ("lr-readme-qwen3-32b-h200-tp2-ar",)
    done, skipped = vc.run_rows(every)
    cal = {s["id"] for s in skipped if s["calibration"]}
    assert cal == set(fitted) | set(vc.CLIENT_IDS)
    assert not cal & {d["id"] for d in done}


def test_each_row_is_priced_on_its_release(vc):
    every = {r["id"]: r for r in vc.load_rows()}
    assert vc.engine_of(every["qwen25-7b-a100-bf16-tp1-in6144"]).name == "vllm-v0"  # vLLM 0.6.3
    assert vc.engine_of(every["gpustack-qwen3-8b-h100sxm-bf16-c2"]).name == "vllm-0.11"
    assert vc.engine_of(every["qwen3doc-qwen3-8b-h20-bf16-tp1-in1-o2048"]).name == "sglang"
    rid = next(i for i, r in every.items() if r["source"]["title"].startswith("LLM-Inference-Bench"))
    assert vc.engine_of(every[rid]).name == "vllm-v0"  # version unstated, published before V1 was the default
    why = {i: vc.excluded(r, list(every.values())) for i, r in every.items()}
    assert "version unstated" in why["nim-llama33-70b-h100-fp8-tp2-c1-i5000-o500-itl"]
    assert "no shipped config" in why["vultr-nemotron-super-49b-v15-b200-fp8-tp1-c1-tpot"]
    assert "repeats a row" in why["gpustack-qwen3-8b-h100sxm-bf16-tp1-c2-vllm-tpot"]


def test_the_engine_constants_reproduce_their_fits():
    sys.path.insert(0, str(ROOT / "studies"))
    import fit_engines
    from lrsim.gpu.engines import get_engine

    for name, f in fit_engines.fits().items():
        assert get_engine(name).step_us == f["step_us"], name  # studies/fit_engines.py --check
    client = fit_engines.client_overhead(get_engine("vllm-0.10").step_us)
    assert json.loads(fit_engines.CLIENT_FILE.read_text()) == client
