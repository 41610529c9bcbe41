"""lrref profile: shipped architecture configs, the profiler on a tiny config, bad input, agreement with traces."""

import json
import shutil
import statistics
import subprocess
import sys

import pytest

from lrref import cli
from lrref.archs import ARCH_DIR, load_arch, shipped
from lrsim.cost.profile import read_profile

# params and kv_bytes_per_token (bf16) as measured in shared/gpu/h100/*.json
SHARED_SHAPES = {
    "qwen2.5-0.5b": (494032768, 12288), "qwen2.5-1.5b": (1777088000, 28672), "qwen2.5-7b": (7615616512, 57344),
    "qwen2.5-32b": (32763876352, 262144), "qwen3-1.7b": (1720574976, 114688), "qwen3-32b": (32762123264, 262144),
}
FAST = ["--arch", "tiny", "--batch", "1,2", "--positions", "1,3", "--context", "0,32", "--warmup", "1",
        "--repeats", "3", "--threads", "1", "--quiet"]


def lrref(*args):
    return subprocess.run([sys.executable, "-m", "lrref.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("name", sorted(SHARED_SHAPES))
def test_shipped_configs_match_the_measured_shapes(name):
    """Parameters (model built on the meta device) and 2 x layers x kv_heads x head_dim x 2 bytes (bf16)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    a = load_arch(name)
    cfg = dict(a.config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type"), **cfg))
    params = sum(p.numel() for p in model.parameters())
    assert (params, a.kv_bytes_per_token("bfloat16")) == SHARED_SHAPES[name]
    assert a.kv_bytes_per_token("bfloat16") == 2 * a.layers * a.kv_heads * a.head_dim * 2


def test_default_pair_shares_the_qwen25_shapes():
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "vocab_size")
    for coder, base in (("qwen2.5-coder-0.5b", "qwen2.5-0.5b"), ("qwen2.5-coder-1.5b", "qwen2.5-1.5b")):
        assert [load_arch(coder).config[k] for k in keys] == [load_arch(base).config[k] for k in keys]
    assert {"tiny", "qwen2.5-coder-1.5b", "qwen3-32b"} <= set(shipped())
    assert all(json.loads(p.read_text())["_source"] for p in ARCH_DIR.glob("*.json"))


def test_profile_a_tiny_config_on_cpu(tmp_path, capsys):
    out = tmp_path / "tiny.json"
    assert cli.main(["profile", *FAST, "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    p = read_profile(out)
    a = p.arch("tiny")
    assert (a.context, a.batch, a.positions) == ((0, 32), (1, 2), (1, 3)) and a.unmeasured == 0
    assert a.params == 107072 and a.layers == 2 and a.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert p.timed == "wall" and p.name == "cpu-float32-t1"
    v = p.provenance
    assert (v.dtype, v.threads, v.warmup, v.repeats) == ("float32", 1, 1, 3) and v.torch and v.transformers
    assert v.command.startswith("lrref profile --arch tiny") and v.cpu and v.date
    assert v.extra["arch_configs"] == {"tiny": "lrsim/data/archs/tiny.json"}
    assert all(t > 0 for L in a.ms for b in L for t in b)
    from lrsim.cli import main as lrsim_main

    assert lrsim_main(["profiles", str(out), "--arch", "tiny", "--context", "16", "--batch", "2"]) == 0
    assert "cpu-float32-t1  tiny context 16 batch 2" in capsys.readouterr().out


def test_profile_from_a_model_directory(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    shutil.copy(ARCH_DIR / "tiny.json", d / "config.json")
    out = tmp_path / "p.json"
    assert cli.main(["profile", "--model", str(d), *FAST[2:], "--name", "mine", "--out", str(out)]) == 0
    p = read_profile(out)
    assert p.name == "mine" and list(p.archs) == ["my-model"]


def test_out_of_memory_shapes_become_missing_points(tmp_path, monkeypatch):
    import torch

    from lrref import timing

    real = timing.time_passes

    def fake(model, cache, shape, *a, **kw):
        if shape.batch == 2 and shape.context == 32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return real(model, cache, shape, *a, **kw)

    monkeypatch.setattr(timing, "time_passes", fake)
    out = tmp_path / "p.json"
    assert cli.main(["profile", *FAST, "--out", str(out)]) == 0
    a = read_profile(out).arch("tiny")
    assert a.ms[1][1] == (None, None) and a.unmeasured == 2 and a.missing == ("context 32 batch 2: out of memory "
                                                                              f"on {timing.cpu_model()}",)


def test_dtype_auto(monkeypatch):
    from lrref import timing

    assert timing.resolve_dtype("auto", "cuda") == "bfloat16"
    assert timing.resolve_dtype("float32", "cuda") == "float32"
    monkeypatch.setattr(timing, "_cpuinfo", lambda: "flags : fpu avx2 fma")
    assert timing.resolve_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(timing, "_cpuinfo", lambda: "flags : fpu avx512f avx512_bf16")
    assert timing.resolve_dtype("auto", "cpu") == "bfloat16"


@pytest.mark.parametrize("args, message", [
    (["--arch", "nope"], "unknown architecture 'nope'"),
    (["--arch", "tiny", "--batch", "1,x"], "--batch: expected comma-separated integers"),
    (["--arch", "tiny", "--positions", "0"], "--positions: values must be >= 1"),
    (["--arch", "tiny", "--context", "0,0"], "--context: values must be distinct"),
    (["--arch", "tiny", "--context", "510"], "longer than tiny's max_position_embeddings 512"),
    (["--arch", "tiny", "--context", "0", "--repeats", "0"], "--repeats must be >= 1"),
    (["--arch", "tiny", "--context", "0", "--threads", "0"], "--threads must be >= 1"),
    (["--arch", "tiny", "--context", "0", "--warmup", "x"], "invalid int value"),
    (["--arch", "tiny", "--context", "0", "--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
    (["--arch", "tiny", "--context", "0", "--dtype", "int8"], "--dtype must be one of"),
    (["--model", "/no/such/dir"], "does not exist"),
    ([], "give --arch"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    r = lrref("profile", *args, "--out", str(tmp_path / "p.json"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("lrref: error:"), r.stderr
    assert message in lines[0] and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_unwritable_out_and_missing_cuda_are_refused(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["profile", "--arch", "tiny", "--context", "0", "--out", str(blocker / "p.json")]) == 2
    assert "cannot write" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert cli.main(["profile", "--arch", "tiny", "--context", "0", "--device", "cuda",
                         "--out", str(tmp_path / "p.json")]) == 2
        assert "no CUDA device" in capsys.readouterr().err and not (tmp_path / "p.json").exists()


def test_validation_does_not_import_torch():
    code = ("import sys; from lrref import cli; rc = cli.main(['profile', '--arch', 'nope', '--out', '/tmp/x.json']);"
            "sys.exit(10 + rc if 'torch' in sys.modules else rc)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, check=False).returncode == 2


# --- agreement with lrref's own traces ---------------------------------------------------------------

TINY_MODEL = "smollm2-135m-instruct"
TOLERANCE = 0.30  # |recorded / profile - 1| of the median step; see the docstring


@pytest.mark.models
def test_profile_predicts_the_passes_of_an_lrref_ar_trace(tmp_path):
    """The profiler's timing of SmolLM2-135M's architecture (random weights) predicts a real lrref ar decode.

    ``lrref.agreement.round_ratios``: same process, one thread, float32; four rounds, each a real 16-token
    decode (steps of 8) followed at once by the profiler's passes at the contexts it used, so load from other
    processes mostly hits both halves of a round; the statistic is the median over rounds of recorded /
    predicted time of the passes after the first step.  On the 2-core development machine (AMD EPYC), under a
    load average of 5-6 from other jobs, two runs gave rounds 0.97-1.13 (median 1.05) and 0.65-1.15 (median
    0.96); a first design, one decode then one profile, saw 1.02-1.50: the load moved between the halves.
    Hence the median of rounds and the 30% bound; on an idle machine the rounds should agree far closer.
    """
    from conftest import require_models

    from lrref.agreement import round_ratios

    (path,) = require_models(TINY_MODEL)
    ratios = round_ratios(str(path), tmp_path)
    r = statistics.median(ratios)
    print(f"recorded / profile: median {r:.3f}, rounds {[round(x, 3) for x in ratios]}")
    assert abs(r - 1) < TOLERANCE, ratios
