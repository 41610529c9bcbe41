"""lrref CLI: instant help, one-line errors with exit code 2, no torch for bad input."""

import subprocess
import sys

import pytest

from lrref import cli


def lrref(*args, env=None):
    return subprocess.run([sys.executable, "-m", "lrref.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env)


@pytest.mark.parametrize("args, message", [
    (["generate", "--prompt", "hi", "--mode", "bogus"], "unknown mode 'bogus'"),
    (["generate", "--prompt", "hi", "--target", "/no/such/dir"], "does not exist"),
    (["generate", "--prompt", "hi", "--gamma", "x"], "expected an integer"),
    (["generate", "--prompt", "hi", "--temperature", "nan"], "finite number"),
    (["generate", "--prompt", "hi", "--mode", "lr-async", "--width", "2"], "lr-sync only"),
    (["generate", "--prompt", "hi", "--mode", "lr-sync", "--width", "2"], "draft temperature"),
    (["generate", "--prompt-file", "/no/such/file"], "does not exist"),
    (["generate"], "required"),
    (["bench", "--dataset", "/no/such.jsonl"], "does not exist"),
    (["bench", "--modes", "ar,ar"], "distinct"),
    (["models", "prepare", "--models", "nope"], "unknown model"),
    (["models", "prepare", "--format", "onnx"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    (["generate", "--prompt", "hi", "--top-p", "0"], "bad sampling"),
    (["generate", "--prompt", "hi", "--async-threads", "1"], "--async-threads must be"),
    (["generate", "--prompt", "hi", "--dtype", "float16"], "invalid choice"),
    (["generate", "--prompt", "hi", "--verifier", "random", "--threshold", "1.5"], "probability must be in [0, 1]"),
    (["generate", "--prompt", "hi", "--verifier", "math", "--threshold", "1.5"], "threshold must be in [-1, 1]"),
    (["bench", "--verifier", "embedding", "--threshold=-2"], "embedding verifier threshold must be in [-1, 1]"),
    (["bench", "--verifier", "score", "--threshold", "12"], "score verifier threshold must be in [0, 9]"),
    (["bench", "--verifier", "maths"], "invalid choice: 'maths'"),
    (["bench", "--dataset", "gsm8k-train"], "(bundled: bundled, gsm8k-test)"),
    (["bench", "--modes", "ar,sd", "--backend", "vllm"], "builds n-gram into the engine"),
    (["bench", "--modes", "ar,lr-async", "--concurrency", "2"], "is not prepared in"),  # accepted: models next
    (["bench", "--modes", "ar", "--concurrency", "0"], "concurrency must be >= 1"),
])
def test_bad_input_is_one_line_exit_2(args, message, tmp_path):
    r = lrref(*args, "--cache-dir", str(tmp_path)) if args[0] != "frobnicate" else lrref(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrref: error:") and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_missing_default_model_says_how_to_prepare(tmp_path):
    r = lrref("generate", "--prompt", "hi", "--cache-dir", str(tmp_path))
    assert r.returncode == 2 and "lrref models prepare --models qwen2.5-coder-1.5b-instruct" in r.stderr


def test_bad_dataset_content(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"q": 1}\n')
    r = lrref("bench", "--dataset", str(p), "--cache-dir", str(tmp_path))
    assert r.returncode == 2 and "d.jsonl:1" in r.stderr


def test_help_and_validation_do_not_import_torch():
    code = ("import sys, lrref.cli, lrref.decode.decoder, lrref.bench, lrref.models, lrref.verify.verifiers, "
            "lrref.decode.draft_worker, lrref.decode.seed, lrref.config, lrref.backends.base, lrref.backends.vocab, "
            "lrref.backends.build, lrref.backends.auto, lrref.host.cpu, lrref.host.load, lrref.decode.rows, "
            "lrref.decode.request, lrref.decode.lr_sync, lrref.decode.lr_async, lrref.backends.llamacpp, "
            "lrref.backends.llamacpp_ffi, lrref.backends.llamacpp_tokenizer, lrref.backends.np_sampling, "
            "lrref.decode.jobs, lrref.decode.closed_loop, lrref.decode.messages, lrref.backends.random_weights, "
            "lrref.archs, lrref.profiling.profile, lrref.session;"
            "sys.exit('torch' in sys.modules or 'transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    assert lrref("--help").returncode == 0


def test_models_list_on_an_empty_cache(tmp_path, capsys):
    assert cli.main(["models", "list", "--cache-dir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"status": "absent"' in out and "qwen2.5-coder-1.5b-instruct" in out


def test_mode_parsing():
    from lrref.decode.decoder import parse_mode

    assert parse_mode("sd") == ("ar", True)
    assert parse_mode("lr+sd") == ("lr-async", True)
    assert parse_mode("lr-sync+sd") == ("lr-sync", True)
    assert parse_mode("lr-async") == ("lr-async", False)
    with pytest.raises(ValueError):
        parse_mode("ar+sd+sd")


def test_answer_extraction_and_ci():
    from lrref.bench import extract_answer, gold_answer, wilson

    assert extract_answer("so the total is \\boxed{1,234}.") == "1234"
    assert extract_answer("\\(\\boxed{\\$15.00}\\)") == "15"
    assert extract_answer("\\boxed{\\frac{3}{4}}") == "0.75"
    assert extract_answer("\\boxed{x = 5 \\text{ apples}}") == "5"
    assert extract_answer("first 12, finally 15.") == "15"
    assert extract_answer("no digits") is None
    assert gold_answer("2*3 = 6.\n#### 6") == "6" and gold_answer("#### 1,000") == "1000"
    lo, hi = wilson(15, 30)
    assert 0.31 < lo < 0.34 and 0.66 < hi < 0.69
    assert wilson(0, 0) == (0.0, 1.0)


def test_bundled_problems_load():
    from pathlib import Path

    from lrref.bench import load_dataset

    rows = load_dataset(Path(cli.__file__).parent / "data" / "problems.jsonl")
    assert len(rows) == 40 and all(r["gold"] is not None for r in rows)


# --- the error boundary --------------------------------------------------------------------------------


def _one_line_exit_2(r, message):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrref: error:") and message in lines[0], r.stderr


def test_unwritable_trace_is_refused_before_any_model(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    # the cache is empty: had the models been looked up first, the error would be "not prepared"
    r = lrref("generate", "--prompt", "hi", "--mode", "ar", "--trace", str(tmp_path / "file" / "t.jsonl"),
              "--cache-dir", str(tmp_path))
    _one_line_exit_2(r, "cannot write")
    assert "t.jsonl" in r.stderr and not (tmp_path / "file" / "t.jsonl").exists()


def test_unwritable_bench_out_is_refused_before_any_model(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    r = lrref("bench", "--n", "1", "--modes", "ar", "--out", str(tmp_path / "file" / "bench"),
              "--cache-dir", str(tmp_path))
    _one_line_exit_2(r, "cannot write")
    assert (tmp_path / "file").read_text() == "not a directory"


def test_internal_errors_keep_their_traceback(monkeypatch):
    def bug(a):
        raise ValueError("an internal bug")

    monkeypatch.setitem(cli.COMMANDS, "models", bug)
    with pytest.raises(ValueError, match="internal bug"):
        cli.main(["models", "list"])


def test_domain_errors_of_lrref_are_one_line(monkeypatch, capsys):
    from lrref.models import ModelError
    from lrref.decode.draft_worker import WorkerError
    from lrsim.errors import DomainError

    assert issubclass(ModelError, DomainError) and issubclass(WorkerError, DomainError)

    def crash(a):
        raise WorkerError("draft worker crashed: OSError: no model here")

    monkeypatch.setitem(cli.COMMANDS, "models", crash)
    assert cli.main(["models", "list"]) == 2
    assert capsys.readouterr().err == "lrref: error: draft worker crashed: OSError: no model here\n"


def test_a_draft_worker_that_cannot_start_raises_a_one_line_worker_error(tmp_path):
    pytest.importorskip("torch")
    from lrref.backends.base import Sampling
    from lrref.decode.draft_worker import DraftWorker, WorkerError

    with pytest.raises(WorkerError, match="draft worker crashed") as e:
        DraftWorker(str(tmp_path), "float32", 1, 0.0, 8, Sampling(), timeout=300)
    assert "\n" not in str(e.value)


def test_a_vllm_draft_engine_gets_cores_or_a_gpu_of_its_own():
    """lr-async on --backend vllm: the draft process's engine binds the cores the target's bind leaves free (the last
    ones when it leaves none), or sees only the GPU of --draft-device; a GPU without an index is refused."""
    from lrref.decode.draft_worker import vllm_draft_env
    from lrref.host.cpu import bind_cores
    from lrsim.errors import InputError

    # one reading of a core list (lrref.backends.vllm.bound_cores counts it for the pass records' threads)
    assert bind_cores("0-3,6|8-11") == (0, 1, 2, 3, 6) and bind_cores("auto") == bind_cores(None) == ()

    assert vllm_draft_env("cpu", 1, {"VLLM_CPU_OMP_THREADS_BIND": "0"}, cpus=2) == {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert vllm_draft_env("cpu", 2, {"VLLM_CPU_OMP_THREADS_BIND": "0-3,6"}, cpus=8) == {
        "VLLM_CPU_OMP_THREADS_BIND": "4,5"}
    assert vllm_draft_env("cpu", 1, {}, cpus=2) == {"VLLM_CPU_OMP_THREADS_BIND": "1"}  # all cores taken: the last
    assert vllm_draft_env("cpu", 1, {"VLLM_CPU_OMP_THREADS_BIND": "auto"}, cpus=4) == {"VLLM_CPU_OMP_THREADS_BIND": "3"}
    assert vllm_draft_env("cuda:1", 1, {}) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert vllm_draft_env("cuda:1", 1, {"CUDA_VISIBLE_DEVICES": "4,6"}) == {"CUDA_VISIBLE_DEVICES": "6"}
    with pytest.raises(InputError, match="shows 2 GPU"):
        vllm_draft_env("cuda:2", 1, {"CUDA_VISIBLE_DEVICES": "4,6"})
    with pytest.raises(InputError, match="--draft-device cuda:N"):
        vllm_draft_env("cuda", 1, {})
