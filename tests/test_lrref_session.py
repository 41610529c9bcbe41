"""``lrref.Session``: the config's checks (one line, the command's texts), no change to the arguments or the
environment, a decode round trip on random weights (no model needed) and on llama.cpp (prepared models), and the
command still writing the same trace header through it."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_models

from lrref import cli
from lrsim.errors import InputError, UsageError
from lrsim.trace import read_trace

GOLDEN = Path(__file__).parent / "golden" / "lrref-generate-header.json"
# random weights of the shipped tiny architecture, fast: the run the golden header was recorded from
FAST = dict(max_tokens=24, max_step_tokens=6, gamma=2, threads=1, prompt_tokens=12)
FAST_ARGS = ["--max-tokens", "24", "--max-step-tokens", "6", "--gamma", "2", "--threads", "1", "--prompt-tokens", "12"]


def config(**kw):
    from lrref import SessionConfig

    return SessionConfig(**kw)


# --- the config's checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, message", [
    (dict(modes=("bogus",)), "unknown mode 'bogus'"),
    (dict(modes=("ar", "ar")), "modes must list distinct modes"),
    (dict(modes=()), "modes must list distinct modes"),
    (dict(backend="tpu"), "backend must be one of auto, hf, vllm, llamacpp, got 'tpu'"),
    (dict(modes=("lr-async",), width=2), "width > 1 is implemented for lr-sync only"),
    (dict(device="gpu"), "device must be cpu, cuda or cuda:N"),
    (dict(threads=-1), "threads must be >= 0, got -1"),
    (dict(top_p=0.0), "bad sampling"),
    (dict(verifier="random", threshold=1.5), "probability must be in [0, 1]"),
    (dict(verifier="maths"), "unknown verifier 'maths'"),
    (dict(backend="vllm", modes=("ar", "sd")), "--backend vllm builds n-gram into the engine"),
    (dict(backend="vllm", modes=("auto",)), "--mode auto switches n-gram on and off between cycles"),
    (dict(backend="llamacpp", device="cuda"), "are for --backend hf, not llamacpp"),
    (dict(backend="hf", prefix_caching=False), "--no-prefix-caching applies to the llama.cpp backend"),
    (dict(prompt_tokens=10), "--prompt-tokens is for --random-weights"),
    (dict(random_weights="tiny", verifier="embedding"), "needs --verifier random"),
    (dict(random_weights="nope"), "unknown architecture 'nope'"),
    (dict(random_weights="tiny", max_tokens=500, prompt_tokens=100), "max_position_embeddings 512"),
])
def test_bad_config_is_one_line(kw, message):
    with pytest.raises(InputError) as e:
        config(**kw)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_every_mode_takes_concurrency():
    """lr-async too: its requests share the target's passes and the one draft process's."""
    c = config(modes=("ar", "sd", "lr-sync", "lr-async", "lr-async+sd"), concurrency=4)
    assert {c.decode_config(m).concurrency for m in c.modes} == {4}


@pytest.mark.parametrize("args", [
    ["generate", "--prompt", "hi", "--mode", "bogus"],
    ["generate", "--prompt", "hi", "--verifier", "math", "--threshold", "1.5"],
    ["generate", "--random-weights", "tiny", "--verifier", "exact"],
    ["generate", "--prompt-tokens", "10", "--prompt", "hi"],
    ["bench", "--modes", "ar", "--concurrency", "0"],
    ["bench", "--backend", "vllm", "--modes", "ar,sd"],
    ["generate", "--prompt", "hi", "--backend", "hf", "--no-prefix-caching"],
])
def test_the_command_says_what_the_config_raises(args, capsys, tmp_path):
    """The CLI's one line is the config's message (the config is where the check lives)."""
    a = cli.build_parser().parse_args([*args, "--cache-dir", str(tmp_path)])
    modes = [a.mode] if a.cmd == "generate" else a.modes.split(",")
    with pytest.raises(InputError) as e:
        cli.session_config(a, modes)
    assert cli.main([*args, "--cache-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"lrref: error: {e.value}\n"


def test_config_defaults_and_decode_options():
    c = config()
    assert c.modes == ("lr-sync",) and c.verifier_config.name == "exact" and c.backend == "auto"
    assert not c.verifier_config.normalize and config(verifier="exact").verifier_config.normalize  # default: strict
    assert config(random_weights="tiny", max_tokens=64).verifier_config.name == "random"
    assert config(modes="ar, sd").modes == ("ar", "sd")
    d = c.decode_config("lr+sd", max_tokens=64)
    assert (d.mode, d.base, d.ngram_k, d.max_tokens, d.gamma) == ("lr+sd", "lr-async", 4, 64, 4)
    with pytest.raises(InputError, match="not a decoding option: dtype"):
        c.decode_config("ar", dtype="float32")
    with pytest.raises(AttributeError):  # frozen
        c.gamma = 3  # type: ignore[misc]


# --- no mutation ---------------------------------------------------------------------------------------


def test_arguments_and_environment_are_unchanged(tmp_path):
    """A Session built from parsed arguments and used (lr-sync here, lr-async in its draft process) changes neither
    the Namespace nor os.environ.  The libraries set their own defaults once per process (lrref's modules
    HF_HUB_OFFLINE when imported, torch KMP_* when it builds its first model): done here first."""
    from lrref import Session
    from lrref.archs import load_arch
    from lrref.backends.hf_random import RandomBackend

    RandomBackend(load_arch("tiny"), seed=0, token_limit=300, prompt_tokens=12, dtype="float32", threads=1)
    a = cli.build_parser().parse_args(["bench", "--random-weights", "tiny", "--threshold", "0.5", "--modes",
                                       "lr-sync,lr-async", *FAST_ARGS])
    args, env = copy.deepcopy(vars(a)), dict(os.environ)
    c = cli.session_config(a, a.modes.split(","))
    with Session(c) as s:
        assert s.generate("a question", trace=tmp_path / "t.jsonl").tokens == 24
        assert s.generate("a question", "lr-async", trace=False).tokens == 24
    assert vars(a) == args and a.verifier is None and a.backend == "auto" and not hasattr(a, "random")
    assert dict(os.environ) == env


def test_decoder_gives_prefix_caching_to_the_draft_process(monkeypatch):
    """lr-async's draft process gets prefix caching as a start argument, down to its llama.cpp backend."""
    from lrref.backends import build
    from lrref.backends import llamacpp as ll
    from lrref.config import DecodeConfig
    from lrref.decode import decoder, draft_worker
    from lrref.verify.verifiers import ExactVerifier

    seen = {}

    class Worker:
        def __init__(self, *a, **kw):
            seen["worker"] = kw["prefix_caching"]

        def close(self):
            pass

    monkeypatch.setattr(decoder, "DraftWorker", Worker)
    decoder.Decoder(DecodeConfig(mode="lr-async"), object(), verifier=ExactVerifier(), draft_path="d.gguf",
                    draft_kind="llamacpp", prefix_caching=False).close()

    def backend(*a, **kw):
        seen["process"] = a[-1]
        raise KeyboardInterrupt  # the worker's way out

    monkeypatch.setattr(draft_worker, "draft_backend", backend)
    draft_worker.worker_main(None, "d.gguf", "auto", 1, 0.0, 8, {}, {}, 8, "llamacpp", "cpu", None, False)
    monkeypatch.setattr(ll, "LlamaCppBackend", lambda path, **kw: kw)
    assert build.draft_backend("llamacpp", "d.gguf", "auto", 1, 8, prefix_caching=False)["prefix_caching"] is False
    assert seen == {"worker": False, "process": False}


# --- decoding: random weights (no model needed) -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_session():
    from lrref import Session

    with Session(backend="hf", random_weights="tiny", threshold=0.5, modes=("lr-sync", "lr-async"), **FAST) as s:
        yield s


def test_generate_round_trip(tiny_session, tmp_path):
    s = tiny_session
    assert s.paths == {"target": "random:tiny", "draft": "random:tiny"} and s.backend == "hf"
    r = s.generate("a question", trace=tmp_path / "g.jsonl")
    assert (r.tokens, r.finish, r.mode, r.trace) == (24, "max_tokens", "lr-sync", str(tmp_path / "g.jsonl"))
    assert r.result.ids and len(r.steps) == len(r.result.steps) and sum(x["tokens"] for x in r.steps) == 24
    assert list(r.to_dict()) == ["text", "steps", "accepted_steps", "tokens", "finish", "trace", "wall_s",
                                 "tokens_per_s", "mode"]
    tr = read_trace(tmp_path / "g.jsonl")
    assert tr.requests[0].output_tokens == 24 and tr.header.config["verifier"]["name"] == "random"
    a = s.generate("a question", "lr-async", trace=False, max_tokens=12)
    assert (a.tokens, a.trace, a.mode) == (12, None, "lr-async")
    with pytest.raises(InputError, match="empty prompt"):
        s.generate("")


def test_a_mode_the_session_did_not_load_is_refused(tmp_path):
    from lrref import Session

    with Session(backend="hf", random_weights="tiny", modes=("ar",), **FAST) as s:
        assert s.verifier is None and s.draft is None and "draft" not in s.paths
        with pytest.raises(InputError, match="mode lr-sync needs models this session did not load"):
            s.generate("q", "lr-sync", trace=False)
        assert s.generate("q", "sd", trace=False).tokens == 24
    with pytest.raises(InputError, match="closed"):
        s.generate("q", "ar", trace=False)


def test_no_prefix_caching_where_auto_picks_hf_is_refused_before_any_model(tmp_path):
    from lrref import Session

    seen = []
    with pytest.raises(UsageError, match="^--no-prefix-caching applies to the llama.cpp backend"):
        Session(random_weights="tiny", max_tokens=64, prefix_caching=False, log=seen.append,
                outputs=[tmp_path / "x" / "t.jsonl"])
    assert seen == [] and not (tmp_path / "x").exists()


def test_bench(tiny_session, tmp_path):
    b = tiny_session.bench(["q1", {"question": "q2", "gold": "7"}], out=tmp_path / "b", meta={"command": "test"})
    assert [r["mode"] for r in b.rows] == ["lr-sync", "lr-async"] and all(r["requests"] == 2 for r in b.rows)
    res = json.loads(b.results.read_text())
    assert list(res["meta"])[:4] == ["command", "n", "done", "models"] and res["meta"]["done"] == 2
    assert res["meta"]["verifier"] == "random" and res["meta"]["threshold"] == 0.5
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["results.csv", "results.json",
                                                                   "trace-lr-async.jsonl", "trace-lr-sync.jsonl"]
    assert b.to_dict()["results"] == str(b.results)


# --- the command through the session ------------------------------------------------------------------------


def _stable(header) -> dict:
    """A trace header without what depends on the machine or the moment (the hardware's values, run id, date)."""
    h = header.to_dict() if hasattr(header, "to_dict") else dict(header)
    for k in ("run_id", "created"):
        h.pop(k, None)
    h["hardware"] = sorted(h["hardware"])
    return h


def test_the_command_writes_the_header_it_wrote_before(tmp_path, capsys):
    """``lrref generate`` on random weights: the header is the one recorded before the session existed
    (tests/golden/lrref-generate-header.json; regenerate it only for a deliberate change of the header), and the
    one the session writes for the same config."""
    from lrref import Session

    tp = tmp_path / "cli.jsonl"
    assert cli.main(["generate", "--random-weights", "tiny", "--mode", "lr-sync", "--threshold", "0.5", *FAST_ARGS,
                     "--trace", str(tp), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace"] == str(tp) and out["tokens"] == 24
    with open(tp, encoding="utf-8") as f:
        header = json.loads(f.readline())
    assert _stable(header) == json.loads(GOLDEN.read_text())
    with Session(backend="hf", random_weights="tiny", threshold=0.5, **FAST) as s:
        s.generate("a question", trace=tmp_path / "api.jsonl")
    with open(tmp_path / "api.jsonl", encoding="utf-8") as f:
        assert _stable(json.loads(f.readline())) == _stable(header)


def test_import_is_light_and_session_is_lazy():
    code = ("import sys, lrref; assert 'lrref.session' not in sys.modules; from lrref import Session, SessionConfig;"
            "SessionConfig(random_weights='tiny', max_tokens=64); sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- llama.cpp, prepared models ---------------------------------------------------------------------------


@pytest.mark.models
def test_llamacpp_lr_async_without_prefix_caching_leaves_the_environment(tmp_path):
    """Prefix caching off reaches the target backend and the trace header; the draft process gets it as an
    argument, so os.environ is what it was."""
    pytest.importorskip("xllamacpp")
    (path,) = require_models("smollm2-135m-instruct", gguf=True)
    from lrref import Session
    from lrref.backends import llamacpp_ffi

    llamacpp_ffi.load()  # sets its OpenMP default once per process
    env = dict(os.environ)
    with Session(backend="llamacpp", target=str(path), draft=str(path), verifier="exact", prefix_caching=False,
                 modes=("lr-async", "lr-sync"), threads=1, max_tokens=16, max_step_tokens=8, gamma=2) as s:
        assert s.target.prefix_caching is False and s.draft.prefix_caching is False and s.dtype == "gguf:Q4_1"
        r = s.generate("Tom reads 18 pages a day. How many pages does he read in 2 weeks?", "lr-async",
                       trace=tmp_path / "a.jsonl")
    assert r.tokens == 16 and dict(os.environ) == env
    assert read_trace(tmp_path / "a.jsonl").header.config["backend_info"]["prefix_caching"] is False


def test_a_threshold_needs_a_verifier_now_that_the_default_takes_none():
    from lrref.session import SessionConfig
    from lrsim.errors import UsageError

    with pytest.raises(UsageError, match="--threshold needs --verifier"):
        SessionConfig(threshold=0.9)
    assert SessionConfig(threshold=0.9, verifier="math").verifier_config.t == 0.9
    assert SessionConfig(random_weights="tiny", threshold=0.3, max_tokens=64).verifier_config.t == 0.3


@pytest.mark.parametrize("draft_device, refused", [(None, True), ("cuda", True), ("cuda:0", True), ("cpu", True),
                                                   ("cuda:1", False)])
def test_lr_async_on_a_vllm_gpu_target_needs_a_gpu_of_its_own_for_the_draft(draft_device, refused):
    """lr-async on --backend vllm on a GPU: the draft's engine goes to the GPU --draft-device names, never to the
    target's (GPU 0: each engine would claim most of its memory); other modes and a CPU target are not concerned."""
    from types import SimpleNamespace

    from lrref.config import DecodeConfig
    from lrref.session import Session

    def check(mode, cuda=True):
        fake = SimpleNamespace(target=SimpleNamespace(cuda=cuda), paths={"target": "t", "draft": "d"}, draft=object(),
                               backend="vllm", config=SimpleNamespace(modes=(mode,), random=None),
                               _modes=[DecodeConfig(mode=mode)])
        Session._check(fake, DecodeConfig(mode=mode, draft_device=draft_device))

    if refused:
        with pytest.raises(UsageError, match="--draft-device cuda:N, N >= 1"):
            check("lr-async")
    else:
        check("lr-async")
    check("lr-sync")
    check("lr-async", cuda=False)
