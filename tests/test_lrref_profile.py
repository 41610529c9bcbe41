"""lrref profile: shipped architecture configs, the profiler on a tiny config, bad input, the agreement check's rounds."""

import json
import shutil
import subprocess
import sys

import pytest

from lrref import cli
from lrref.archs import ARCH_DIR, load_arch, shipped
from lrsim.latency.profile import read_profile

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


def check_tiny_profile(out, capsys, dtype):
    """What ``lrref profile --arch tiny`` (``FAST``) wrote, at the dtype ``--dtype auto`` chose (``dtype``): the KV
    bytes per token (2 x layers x kv_heads x head_dim x bytes) and the names follow it."""
    width = {"float32": 4, "bfloat16": 2}[dtype]
    p = read_profile(out)
    a = p.arch("tiny")
    assert (a.context, a.batch, a.positions) == ((0, 32), (1, 2), (1, 3)) and a.unmeasured == 0
    assert a.params == 107072 and a.layers == 2 and a.kv_bytes_per_token == 2 * 2 * 2 * 16 * width
    assert p.timed == "wall" and p.name == f"cpu-{dtype}-t1"
    v = p.provenance
    assert (v.dtype, v.threads, v.warmup, v.repeats) == (dtype, 1, 1, 3) and v.torch and v.transformers
    assert v.command.startswith("lrref profile --arch tiny") and v.cpu and v.date
    assert v.extra["arch_configs"] == {"tiny": "lrsim/data/archs/tiny.json"}
    assert set(v.extra["load"]) >= {"other_cores", "busy", "window_s"}
    assert all(t > 0 for L in a.ms for b in L for t in b)
    from lrsim.cli import main as lrsim_main

    capsys.readouterr()
    assert lrsim_main(["profiles", str(out), "--arch", "tiny", "--context", "16", "--batch", "2"]) == 0
    assert f"cpu-{dtype}-t1  tiny context 16 batch 2" in capsys.readouterr().out


def test_profile_a_tiny_config_on_cpu(tmp_path, capsys):
    """On this CPU, whatever it is: the expectations follow the dtype ``--dtype auto`` chose here (float32 on an
    AVX2 CPU, bfloat16 with AVX512-BF16 or AMX); ``tests/test_lrref_cpu.py`` runs it under each mocked CPU kind."""
    from lrref.profiling.profile import resolve_dtype

    out = tmp_path / "tiny.json"
    assert cli.main(["profile", *FAST, "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    check_tiny_profile(out, capsys, resolve_dtype("auto", "cpu"))


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

    from lrref.host import cpu
    from lrref.profiling import timing

    real = timing.time_passes

    def fake(model, cache, shape, *a, **kw):
        if shape.batch == 2 and shape.context == 32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return real(model, cache, shape, *a, **kw)

    monkeypatch.setattr(timing, "time_passes", fake)
    out = tmp_path / "p.json"
    assert cli.main(["profile", *FAST, "--out", str(out)]) == 0
    a = read_profile(out).arch("tiny")
    oom = f"context 32 batch 2: out of memory on {cpu.cpu_model()}"
    assert a.ms[1][1] == (None, None) and a.unmeasured == 2 and a.missing == (oom,)


def test_dtype_auto_is_lrref_cpus():
    """The profiler asks lrref.host.cpu (mocked per CPU kind in tests/test_lrref_cpu.py); explicit dtypes pass
    through."""
    from lrref.host import cpu
    from lrref.profiling.profile import resolve_dtype

    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("float32", "cuda") == "float32" and resolve_dtype("float16", "cpu") == "float16"
    assert resolve_dtype("auto", "cpu") == cpu.resolve_dtype("auto", "cpu")


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


@pytest.mark.models
def test_agreement_rounds_run_a_real_decode_and_the_profiler(tmp_path, monkeypatch):
    """``round_ratios`` (``benchmarks/profile_agreement.py``) on SmolLM2-135M: per round a real lrref ``ar`` decode
    (trace written) and the profiler's passes at its contexts give one finite recorded / predicted ratio.  How close
    to 1 it is, is a timing: ``python benchmarks/lrref_checks.py profile-agreement`` (target: median within 30% of
    1)."""
    import math
    from pathlib import Path

    from conftest import require_models

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # a benchmark, not lrref
    from profile_agreement import round_ratios

    (path,) = require_models(TINY_MODEL)
    ratios = round_ratios(str(path), tmp_path, rounds=2, tokens=12, repeats=1)
    assert len(ratios) == 2 and all(math.isfinite(r) and r > 0 for r in ratios), ratios
    assert sorted(p.name for p in tmp_path.glob("ar*.jsonl")) == ["ar0.jsonl", "ar1.jsonl"]


# --- lrref profile --backend llamacpp ----------------------------------------------------------------------

needs_binding = pytest.mark.skipif(__import__("importlib.util").util.find_spec("xllamacpp") is None,
                                   reason="llama.cpp binding not installed: pip install -e '.[llamacpp]'")
LL_FAST = ["--backend", "llamacpp", "--context", "0,16", "--batch", "1,2", "--positions", "1,3", "--warmup", "0",
           "--repeats", "2", "--quiet"]


@needs_binding
@pytest.mark.models
def test_llamacpp_profile_of_a_tiny_grid_alone_and_co_running(tmp_path, capsys):
    """One profile, entries MODEL@t1 (alone) and MODEL@t1co (beside a co-runner), the setups map lrsim reads, and
    the provenance of every entry; the same model as target and draft is timed once per setup."""
    from conftest import require_models

    from lrsim.latency.profile import SETUP_MODES

    require_models(TINY_MODEL, gguf=True)
    out = tmp_path / "ll.json"
    assert cli.main(["profile", *LL_FAST, "--model", f"{TINY_MODEL},{TINY_MODEL}", "--threads", "1",
                     "--async-threads", "1,1", "--co-context", "8", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    p = read_profile(out)
    alone, co = f"{TINY_MODEL}@t1", f"{TINY_MODEL}@t1co"
    assert list(p.archs) == [alone, co] and p.timed == "wall" and p.name == "cpu-llamacpp"
    assert p.prefill == "unseen"  # per-sequence KV: the simulator adds the prefill of what a row has not seen
    assert p.setups == {"ar": {"target": "t1"}, "sync": {"target": "t1", "draft": "t1"},
                        "async": {"target": "t1co", "draft": "t1co"}}
    assert {p.entry(TINY_MODEL, m, "target") for m in SETUP_MODES} == {alone, co}
    for a in p.archs.values():
        assert (a.context, a.batch, a.positions) == ((0, 16), (1, 2), (1, 3)) and a.unmeasured == 0
        assert a.layers == 30 and a.kv_bytes_per_token == 30 * 3 * (64 + 64) * 2 and a.params > 100_000_000
    assert p.time_ms(co, 8, 2, 2) > 0
    v = p.provenance
    assert v.dtype == "gguf:Q4_1" and v.cpu and v.command.startswith("lrref profile --backend llamacpp")
    x = v.extra
    assert x["binding"] == "xllamacpp" and x["binding_version"] and x["logits"] == "all" and x["llama_system_info"]
    e = x["entries"]
    assert e[alone]["threads"] == e[co]["threads"] == 1 and e[alone]["co_runner"] is None
    assert e[co]["co_runner"]["model"] == TINY_MODEL and e[co]["co_runner"]["passes"] > 0
    assert e[co]["co_runner"]["context"] == [8, 8 + 256] and 0 < e[co]["co_runner"]["duty"] <= 1
    assert all(1 <= n <= 2 for L in e[alone]["timed_passes"] for b in L for n in b)
    assert e[alone]["n_batch"] == 512 and e[alone]["ctx_per_seq"] >= 2048
    assert {"other_cores", "own_cores", "busy"} <= set(e[co]["load"]) and e[co]["load"]["own_cores"] > 0


@needs_binding
@pytest.mark.models
def test_llamacpp_profile_times_what_forward_measures(tmp_path, monkeypatch):
    """Every timed number is a LlamaCppBackend.forward's own seconds (the figure a trace's pass records carry),
    with the shape's rows and positions, and --logits last asks logits of each row's last position only."""
    from conftest import require_models

    from lrref.backends.llamacpp import LlamaCppBackend

    require_models(TINY_MODEL, gguf=True)
    real, seen = LlamaCppBackend.forward, []

    def forward(self, parts, *a, **kw):
        logits, seconds = real(self, parts, *a, **kw)
        seen.append((len(parts), len(parts[0][1]), parts[0][2], seconds))
        return logits, 0.5  # every pass "took" 0.5 s
    monkeypatch.setattr(LlamaCppBackend, "forward", forward)
    out = tmp_path / "ll.json"
    assert cli.main(["profile", *LL_FAST, "--model", TINY_MODEL, "--threads", "1", "--logits", "last",
                     "--budget", "0.9", "--out", str(out)]) == 0
    p = read_profile(out)
    a = p.arch(f"{TINY_MODEL}@t1")
    assert all(t == 500.0 for L in a.ms for b in L for t in b) and "async" not in p.setups
    assert p.provenance.extra["entries"][a.name]["timed_passes"] == [[[2, 2], [2, 2]]] * 2  # 0.5 + 0.5 >= 0.9
    timed = [s for s in seen if s[0] in (1, 2) and s[1] in (1, 3)]
    assert all(first == q - 1 for _, q, first, _ in timed)  # logits at the last position only


@needs_binding
@pytest.mark.models
def test_llamacpp_profile_needs_no_torch(tmp_path):
    from conftest import require_models
    from test_lrref_llamacpp import lrref_without

    require_models(TINY_MODEL, gguf=True)
    out = tmp_path / "ll.json"
    r = lrref_without({"torch", "transformers", "sentence_transformers"}, "profile", *LL_FAST, "--model", TINY_MODEL,
                      "--threads", "1", "--context", "0", "--positions", "1", "--repeats", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "1 entry (smollm2-135m-instruct@t1)" in r.stdout and read_profile(out).arch(f"{TINY_MODEL}@t1").ms


def test_llamacpp_co_runner_failure_is_one_line(tmp_path):
    pytest.importorskip("xllamacpp")
    from lrref.profiling.llamacpp import CoRunner, CoRunnerError, Entry, GGUFModel, LlamaSpec

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF not really")
    m = GGUFModel("broken", str(bad), "Q4_1", 1, 1)
    spec = LlamaSpec(m, None, 1, None, (0,), (1,), (1,))
    with pytest.raises(CoRunnerError) as e, CoRunner(Entry(m, "t1co", 1, m, 1), spec):
        pass
    assert "\n" not in str(e.value) and str(e.value).startswith("the co-runner (broken) crashed:")


@pytest.mark.parametrize("args, message", [
    (["--model", "nope"], "is not a .gguf file (and 'nope' is not a registry name"),
    (["--model", "smollm2-135m-instruct", "--cache-dir", "{tmp}"], "is not prepared in"),
    (["--model", "all-minilm-l6-v2"], "is not a GGUF language model"),
    (["--model", "a,b,c"], "(one or two models), got 3"),
    ([], "(one or two models), got 0"),
    (["--model", "x", "--arch", "tiny"], "--arch is for --backend hf"),
    (["--model", "x", "--dtype", "bfloat16"], "--dtype is for --backend hf"),
    (["--model", "x", "--device", "cuda"], "--device is for --backend hf"),
    (["--model", "x", "--positions", "0"], "--positions: values must be >= 1"),
    (["--model", "x", "--context", "1,x"], "--context: expected comma-separated integers"),
    (["--model", "x", "--batch", "1,65"], "--batch: at most 64 rows"),
    (["--model", "x", "--async-threads", "1"], "--async-threads must be 'TARGET,DRAFT' integers"),
    (["--model", "x", "--async-threads", "1,0"], "--async-threads must be >= 1"),
    (["--model", "x", "--threads", "0"], "--threads must be >= 1"),
    (["--model", "x", "--budget", "0"], "--budget must be > 0"),
    (["--model", "x", "--logits", "some"], "invalid choice"),
    (["--model", "x", "--name", "a b"], "--name uses letters"),
])
def test_llamacpp_bad_input_is_one_line_exit_2_before_any_model(tmp_path, args, message):
    args = [x.replace("{tmp}", str(tmp_path / "empty-cache")) for x in args]
    r = lrref("profile", "--backend", "llamacpp", *args, "--out", str(tmp_path / "p.json"))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("lrref: error:"), r.stderr
    assert message in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("flag, value", [("--async-threads", "1,1"), ("--budget", "1"), ("--logits", "last"),
                                         ("--co-context", "8")])
def test_llamacpp_flags_are_refused_with_hf(tmp_path, flag, value):
    r = lrref("profile", "--arch", "tiny", flag, value, "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and f"{flag} is for --backend llamacpp" in r.stderr and not list(tmp_path.iterdir())


def test_profile_require_idle_refuses_a_busy_machine(tmp_path, monkeypatch, capsys):
    from lrref.host import load

    hz = __import__("os").sysconf("SC_CLK_TCK")
    samples = iter([load.Sample(0.0, 0, 0, (3.0, 2.0, 1.0)), load.Sample(1.0, hz // 2, 0, (3.0, 2.0, 1.0))])
    monkeypatch.setattr(load, "take", lambda proc=None, pid=None: next(samples))
    monkeypatch.setattr(load, "IDLE_SAMPLE_S", 0.0)
    assert cli.main(["profile", *FAST, "--require-idle", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--require-idle: the machine is busy: other processes used 0.50" in err[0]
    assert not list(tmp_path.iterdir())
