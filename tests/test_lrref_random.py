"""``--random-weights`` (models from architecture configs, tokenizer-free) and ``--device``, on the CPU with ``tiny``.

No prepared model is needed: the tiny architecture is shipped (``lrsim/data/archs/tiny.json``).
"""

import json
import subprocess
import sys

import pytest

from lrref import cli
from lrref.archs import ARCH_DIR, load_arch
from lrref.config import DecodeConfig
from lrsim.errors import InputError
from lrsim.trace import read_trace

FAST = ["--max-tokens", "24", "--max-step-tokens", "6", "--gamma", "2", "--threads", "1", "--prompt-tokens", "12",
        "--async-threads", "1,1"]


def lrref(*args):
    return subprocess.run([sys.executable, "-m", "lrref.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_random_backend_is_tokenizer_free_and_ends_steps_at_the_cap():
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.hf_random import PLACEHOLDER, RandomBackend

    be = RandomBackend(load_arch("tiny"), seed=3, token_limit=300, prompt_tokens=12, dtype="float32", threads=1)
    p = be.encode_chat("a question", "any system")
    assert len(p) == 12 and all(0 <= t < 300 for t in p) and be.encode_chat("a question") == p
    assert be.encode_chat("another question") != p and be.eos_ids == () and be.name == "random:tiny"
    outs = be.generate_steps([StepRequest(tuple(p), 5), StepRequest(tuple(p[:7]), 3)], Sampling())
    assert [(o.finish, o.n_tokens) for o in outs] == [("cap", 5), ("cap", 3)]
    assert all(0 <= t < 300 for o in outs for t in o.ids) and outs[0].text == PLACEHOLDER * 5
    assert str(be.model.device) == "cpu" and be.device.type == "cpu"


def check_random_trace(path, p=0.5):
    tr = read_trace(path)
    h = tr.header
    assert h.models["target"] == "random:tiny" and "random weights" in h.notes
    assert h.config["random_weights"]["target"] == "tiny" and h.config["random_weights"]["acceptance_p"] == p
    assert h.config["random_weights"]["target_config"] == "lrsim/data/archs/tiny.json"
    assert h.hardware["device"] == "cpu" and h.config["verify_identical"] is True
    assert all(q.output_tokens == 24 and q.finish == "max_tokens" for q in tr.requests)
    done = [s for s in tr.steps if s.target_tokens and not s.cancelled]
    assert all(s.target_tokens <= 6 for s in done) and sum(s.target_tokens == 6 for s in done) > len(done) / 2
    # a step's model time: its passes, within its span (the hf engine measures it; drafts too, in any process)
    assert all(0 < s.target_busy <= s.target_end - s.target_start + 1e-6 for s in done)
    assert all(0 < s.draft_busy <= s.draft_end - s.draft_start + 1e-6 for s in tr.steps if s.draft_tokens)
    decided = [s for s in tr.steps if s.decision is not None]
    assert all(s.verifier == "random" for s in decided)  # no "identical" shortcut: acceptance is p's alone
    return tr


def test_bench_random_weights_ar_sd_sync_async_and_calibrate(tmp_path, capsys):
    out = tmp_path / "b"
    assert cli.main(["bench", "--random-weights", "tiny", "--n", "3", "--modes", "ar,sd,lr-sync,lr-async",
                     "--threshold", "0.5", "--out", str(out), "--json", *FAST]) == 0
    res = json.loads((out / "results.json").read_text())
    assert [r["mode"] for r in res["modes"]] == ["ar", "sd", "lr-sync", "lr-async"]
    assert res["meta"]["models"] == {"target": "random:tiny", "draft": "random:tiny"} and res["meta"]["verifier"] == \
        "random"
    traces = sorted(out.glob("trace-*.jsonl"))
    decided = [s.decision for t in traces for s in check_random_trace(t).steps if s.decision is not None]
    assert True in decided and False in decided
    capsys.readouterr()
    from lrsim.cli import main as lrsim_main

    assert lrsim_main(["calibrate", *map(str, traces), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["alpha1"] is not None and cal["requests"] == 12


def test_generate_needs_no_prompt_and_a_smaller_draft_vocabulary_is_read(tmp_path, capsys):
    d = tmp_path / "small-vocab"
    d.mkdir()
    cfg = json.loads((ARCH_DIR / "tiny.json").read_text()) | {"vocab_size": 300}
    (d / "config.json").write_text(json.dumps(cfg))
    tp = tmp_path / "g.jsonl"
    assert cli.main(["generate", "--random-weights", f"tiny,{d}", "--mode", "lr-sync", "--trace", str(tp), "--json",
                     *FAST]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 24
    h = read_trace(tp).header
    assert h.config["random_weights"]["token_limit"] == 300 and h.models["draft"] == "random:small-vocab"
    assert h.config["random_weights"]["draft_config"] == str(d / "config.json")


def test_random_weights_with_concurrency(tmp_path):
    out = tmp_path / "c"
    assert cli.main(["bench", "--random-weights", "tiny", "--n", "3", "--modes", "ar,lr-sync", "--concurrency", "2",
                     "--out", str(out), *FAST]) == 0
    tr = check_random_trace(out / "trace-lr-sync.jsonl")
    assert tr.header.setting["concurrency"] == 2


@pytest.mark.parametrize("args, message", [
    (["--random-weights", "tiny", "--verifier", "embedding"], "needs --verifier random"),
    (["--random-weights", "nope"], "unknown architecture 'nope'"),
    (["--random-weights", "tiny,tiny,tiny"], "TARGET_ARCH[,DRAFT_ARCH]"),
    (["--random-weights", "tiny", "--max-tokens", "500", "--prompt-tokens", "100"], "max_position_embeddings 512"),
    (["--prompt-tokens", "10"], "--prompt-tokens is for --random-weights"),
    (["--random-weights", "tiny", "--device", "cuda"], "torch sees no CUDA device here"),
    (["--random-weights", "tiny", "--draft-device", "cuda:3"], "torch sees no CUDA device here"),
    (["--device", "gpu"], "device must be cpu, cuda or cuda:N"),
    (["--backend", "vllm", "--device", "cuda"], "are for --backend hf"),
])
def test_refused_combinations_are_one_line_exit_2(tmp_path, args, message):
    if "cuda" in " ".join(args):
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present")
    r = lrref("bench", "--modes", "ar,lr-sync", "--n", "1", "--out", str(tmp_path / "o"), "--cache-dir",
              str(tmp_path), "--max-tokens", "24", *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrref: error:") and message in lines[0], r.stderr
    assert not [f for f in (tmp_path / "o").rglob("*") if f.is_file()]  # nothing written


def test_devices_in_the_config_and_the_setting():
    from lrref.decode.decoder import hardware_label

    c = DecodeConfig(mode="lr-async", device="cuda:0", draft_device="cuda:1", target_threads=1)
    assert (c.device, c.draft_on) == ("cuda:0", "cuda:1") and DecodeConfig(device="cuda").draft_on == "cuda"
    assert hardware_label(c, "NVIDIA H100 80GB HBM3") == "gpu=NVIDIA H100 80GB HBM3"
    assert hardware_label(DecodeConfig(mode="lr-sync", threads=2)) == "threads=2"
    with pytest.raises(InputError, match="draft-device must be"):
        DecodeConfig(draft_device="tpu")

