"""lrref's command line end to end on real models: ``generate`` and ``bench`` on SmolLM2-135M, and the vocabulary
check of a mismatched pair (SmolLM2 draft, Qwen target) before any weights load.

Apart from :mod:`test_lrref_real` (the decoder's own checks) so that the model tests spread over pytest-xdist's workers
file by file.
"""

import json

import pytest
from conftest import require_models
from real_decode import QS, QWEN, TINY

from lrsim.trace import read_trace

pytestmark = pytest.mark.models  # every test here needs prepared models (pytest -m "not models" skips them)


# --- CLI end to end -----------------------------------------------------------------------------------


def test_cli_generate_and_bench_on_the_tiny_model(tmp_path, capsys):
    require_models(TINY, "all-minilm-l6-v2")
    from lrref import cli

    common = ["--target", TINY, "--draft", TINY, "--embedding", "all-minilm-l6-v2", "--dtype", "float32",
              "--threads", "1", "--max-tokens", "40", "--max-step-tokens", "16", "--gamma", "2",
              "--draft-temperature", "0.8"]
    tp = tmp_path / "g.jsonl"
    assert cli.main(["generate", "--prompt", QS[0], "--mode", "lr-sync+sd", "--json", "--trace", str(tp)] + common) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"text", "steps", "accepted_steps", "trace", "wall_s"} <= set(out)
    assert out["trace"] == str(tp) and read_trace(tp).requests[0].output_tokens == out["tokens"]
    assert "".join(s["text"] for s in out["steps"]).strip() == out["text"].strip()
    h = read_trace(tp).header
    assert h.config["mode"] == "lr-sync+sd" and h.config["ngram_k"] == 4 and "help" in h.config
    assert h.config["verifier"]["name"] == "exact" and not h.config["verifier"]["normalize"]  # the default
    assert h.backend == "hf"
    od = tmp_path / "bench"
    assert cli.main(["bench", "--n", "2", "--modes", "ar,lr-sync,lr-async+sd", "--out", str(od), "--json"]
                    + common) == 0
    res = json.loads((od / "results.json").read_text())
    assert [r["mode"] for r in res["modes"]] == ["ar", "lr-sync", "lr-async+sd"]
    assert res["modes"][0]["speedup_vs_ar"] == 1.0 and res["modes"][0]["requests"] == 2
    assert all(0 <= r["overhead_share"] < 1 for r in res["modes"])
    assert (od / "results.csv").read_text().count("\n") == 4
    assert len(read_trace(od / "trace-lr-async_sd.jsonl").requests) == 2
    # answers paired against ar, per mode; the traces' request records carry the answers
    assert res["modes"][0]["lost_vs_ar"] is None and all(r["paired_n"] == 2 for r in res["modes"][1:])
    assert all(r["lost_vs_ar"] + r["gained_vs_ar"] <= 2 and 0 < r["p_vs_ar"] <= 1 for r in res["modes"][1:])
    assert all(q.correct is not None for q in read_trace(od / "trace-lr-sync.jsonl").requests)
    load = res["meta"]["load"]  # what else ran: results.json and every trace's header (rewritten at close)
    assert load["own_cores"] > 0 and load["window_s"] > 0 and isinstance(load["busy"], bool)
    assert read_trace(od / "trace-ar.jsonl").header.hardware["load"]["busy_above_cores"] == load["busy_above_cores"]


def test_cli_bench_with_concurrency(tmp_path, capsys):
    """``lrref bench --concurrency 2``: a closed loop per mode; throughput over the span, latencies, traces."""
    require_models(TINY)
    from lrref import cli

    od = tmp_path / "c2"
    assert cli.main(["bench", "--n", "3", "--modes", "ar,lr-sync", "--concurrency", "2", "--out", str(od), "--json",
                     "--target", TINY, "--draft", TINY, "--verifier", "exact", "--exact-strict", "--dtype", "float32",
                     "--threads", "1", "--max-tokens", "24", "--max-step-tokens", "12", "--gamma", "2",
                     "--draft-temperature", "0.4"]) == 0
    res = json.loads((od / "results.json").read_text())
    assert res["meta"]["concurrency"] == 2 and res["meta"]["done"] == 3
    for r in res["modes"]:
        assert r["concurrency"] == 2 and r["requests"] == 3
        assert 0 < r["ttft_mean_s"] < r["latency_mean_s"] and r["latency_p50_s"] > 0 and r["tpot_mean_s"] > 0
        assert r["wall_s"] < 3 * r["latency_mean_s"]  # requests overlapped: the span is less than their sum
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["wall_s"], rel=0.02)
        tr = read_trace(od / f"trace-{r['mode']}.jsonl")
        assert tr.header.setting["version"] == 2 and tr.header.setting["concurrency"] == 2
        assert sorted(q.request for q in tr.requests) == [0, 1, 2] and all(q.first_step for q in tr.requests)
        assert all(q.correct is not None for q in tr.requests)  # the closed loop passes the references too
    assert res["modes"][1]["paired_n"] == 3
    assert "latency_mean_s" in (od / "results.csv").read_text().splitlines()[0]


def test_mismatched_vocabularies_are_refused(tmp_path):
    require_models(TINY, QWEN[1])
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "lrref.cli", "generate", "--prompt", "hi", "--mode", "lr-sync",
                        "--target", QWEN[1], "--draft", TINY, "--verifier", "exact", "--trace",
                        str(tmp_path / "t.jsonl")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "different vocabularies" in r.stderr and "Traceback" not in r.stderr


def test_vocabularies_are_compared_before_any_weights_load(tmp_path, monkeypatch, capsys):
    require_models(TINY, QWEN[1])
    from lrref import cli
    from lrref.backends import hf

    def no_weights(*a, **k):
        raise AssertionError("weights loaded before the vocabulary check")

    monkeypatch.setattr(hf.HFBackend, "__init__", no_weights)
    assert cli.main(["generate", "--prompt", "hi", "--mode", "lr-sync", "--target", QWEN[1], "--draft", TINY,
                     "--verifier", "exact", "--backend", "hf", "--trace", str(tmp_path / "t.jsonl")]) == 2
    assert "different vocabularies" in capsys.readouterr().err
