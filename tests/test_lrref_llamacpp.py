"""The llama.cpp backend (``--backend llamacpp``) on SmolLM2-135M's GGUF file, and one short test on the Qwen pair.

The same properties as the HF backend's tests: batched steps equal batch-1
decoding, n-gram speculation changes no token, every LR mode with greedy
decoding and a token-identical verifier reproduces this backend's own ``ar``
(up to a float tie: ``TIE``),
lr-async cancels and accounts for stale target work, the traces calibrate; and
the command line: its trace header, no torch needed, one-line errors.
Skipped without the binding (``pip install -e '.[llamacpp]'``; CI installs it
with ``.[test]``); the tests that load a model carry the ``models`` marker and
fail without its GGUF when ``LRREF_REQUIRE_MODELS`` is set.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import SlowTarget, require_models

from lrsim.trace import read_trace

TINY = "smollm2-135m-instruct"
QWEN = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")
# llama.cpp's logits after one prefix move with how the prefix is cut into passes (its CPU flash attention): on
# SmolLM2 they moved by up to 1.4 between splits of one prefix (2-core AMD EPYC with AVX2, 2026-11-26; see
# lrref.backends.llamacpp), and lr-async's cuts depend on timing. A mode may part from ar only where both tokens are
# within TIE of the top logit, at the prefix where they part; every token before must match.
TIE = 1.5
QS = ["Mia buys 3 notebooks at $4 each and 2 pens at $1.50 each. How much does she spend?",
      "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"]
MISSING = "--backend llamacpp needs the llama.cpp binding: pip install -e '.[llamacpp]'"
needs_binding = pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None,
                                   reason="llama.cpp binding not installed: pip install -e '.[llamacpp]' "
                                          "(CI installs it with .[test])")
# `python -c BLOCKED.format(names=...)` runs the lrref command with those top-level packages unimportable
BLOCKED = ("import sys\n"
           "class Block:\n"
           "    def find_spec(self, name, path=None, target=None):\n"
           "        if name.split('.')[0] in {names!r}: raise ImportError('blocked: ' + name)\n"
           "sys.meta_path.insert(0, Block())\n"
           "from lrref.cli import main\n"
           "sys.exit(main(sys.argv[1:]))\n")


def lrref_without(names: set, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED.format(names=names), *args], capture_output=True, text=True,
                          timeout=300, env=env, check=False)


@pytest.fixture(scope="module")
def tiny():
    """SmolLM2's GGUF path, a target (8 slots) and a draft (4 slots) on it, one thread each."""
    (path,) = require_models(TINY, gguf=True)
    from lrref.backends.llamacpp import LlamaCppBackend

    tgt, drf = LlamaCppBackend(path, threads=1), LlamaCppBackend(path, threads=1, slots=4)
    yield str(path), tgt, drf
    tgt.close()
    drf.close()


def _greedy_by_steps(be, prompts, ngram, step_cap, n=40):
    """Decode every prompt to ``n`` tokens in batched steps of at most ``step_cap`` tokens."""
    from lrref.backends.base import Sampling, StepRequest

    outs = [[] for _ in prompts]
    while True:
        idx = [i for i, o in enumerate(outs) if len(o) < n and (not o or o[-1] not in be.eos_ids)]
        if not idx:
            return outs
        got = be.generate_steps([StepRequest(tuple(prompts[i] + outs[i]), min(step_cap, n - len(outs[i])))
                                 for i in idx], Sampling(), ngram)
        for i, g in zip(idx, got):
            assert g.forwards >= 1 and g.batch >= 1 and g.end >= g.start
            outs[i] += g.ids


@needs_binding
@pytest.mark.models
def test_batched_steps_equal_batch_one_decoding(tiny):
    """Batched steps (with and without n-gram) == one token per call, one row at a time."""
    from lrref.backends.ngram import NgramConfig

    _, be, _ = tiny
    prompts = [be.encode_chat(q, "Be brief.") for q in [*QS, "What is 12*7?"]]
    ref = [_greedy_by_steps(be, [p], NgramConfig(), 1)[0] for p in prompts]
    assert all(len(r) == 40 or r[-1] in be.eos_ids for r in ref)
    for ng in (NgramConfig(), NgramConfig(k=3)):
        assert _greedy_by_steps(be, prompts, ng, 16) == ref, ng


@needs_binding
@pytest.mark.models
def test_shared_prefixes_copy_kv_and_keep_tokens(tiny):
    """The gamma + 1 rows of a cycle share a prefix: it is prefilled once and copied, with the same tokens."""
    from lrref.backends.base import Sampling, StepRequest

    _, be, _ = tiny
    p = be.encode_chat(QS[0], "Be brief.")
    first = be.generate_steps([StepRequest(tuple(p), 30)], Sampling())[0].ids
    reqs = [StepRequest(tuple(p + first[:j]), 12) for j in (0, 5, 10, 15)]
    alone = [be.generate_steps([r], Sampling())[0].ids for r in reqs]
    c0, r0 = be.stats.kv_copies, be.stats.reused_tokens
    assert [o.ids for o in be.generate_steps(reqs, Sampling())] == alone
    assert be.stats.kv_copies > c0 and be.stats.reused_tokens - r0 >= 3 * len(p)


@needs_binding
@pytest.mark.models
def test_without_prefix_caching_a_request_reuses_only_its_own_kv(tiny):
    """Prefix caching off: a new request's prompt is prefilled whole although another request fed it; the rows
    of one request still share their prefix; on (the default), the cached prompt is reused."""
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.llamacpp import LlamaCppBackend

    path, _, _ = tiny
    cold = LlamaCppBackend(path, threads=1, slots=4, prefix_caching=False)
    try:
        p = cold.encode_chat(QS[0], "Be brief.")
        cold.generate_steps([StepRequest(tuple(p), 4, request=0)], Sampling())
        r0 = cold.stats.reused_tokens
        cold.generate_steps([StepRequest(tuple(p), 4, request=1)], Sampling())
        assert cold.stats.reused_tokens == r0  # request 1 prefilled all of its prompt
        cold.generate_steps([StepRequest(tuple(p), 4, request=1), StepRequest(tuple(p), 4, request=1)], Sampling())
        assert cold.stats.reused_tokens - r0 >= 2 * (len(p) - 1)  # its own KV: reused by both rows
        r1 = cold.stats.reused_tokens
        first = cold.run
        cold.begin_run()  # the next mode of a bench: its request 1 is another request, whatever its index
        cold.generate_steps([StepRequest(tuple(p), 4, request=1)], Sampling())
        assert cold.stats.reused_tokens == r1
        # bench decodes problem 1 in every mode in turn: each decoder resumes its own run, and a third mode's
        # request 1 prefills again while the first mode's still finds its own KV
        third = cold.begin_run()
        cold.generate_steps([StepRequest(tuple(p), 4, request=1)], Sampling())
        assert cold.stats.reused_tokens == r1 and third == cold.run
        cold.resume_run(first)
        cold.generate_steps([StepRequest(tuple(p), 4, request=1)], Sampling())
        assert cold.stats.reused_tokens - r1 >= len(p) - 1
    finally:
        cold.close()
    warm = LlamaCppBackend(path, threads=1, slots=4)
    try:
        assert warm.prefix_caching
        warm.generate_steps([StepRequest(tuple(p), 4, request=0)], Sampling())
        r0 = warm.stats.reused_tokens
        warm.generate_steps([StepRequest(tuple(p), 4, request=1)], Sampling())
        assert warm.stats.reused_tokens - r0 >= len(p) - 1
    finally:
        warm.close()


@needs_binding
@pytest.mark.models
def test_more_rows_than_slots_queue(tiny):
    from lrref.backends.base import Sampling, StepRequest

    _, _, small = tiny  # 4 slots
    p = small.encode_chat(QS[1], "Be brief.")
    reqs = [StepRequest(tuple(p + [small.encode(str(i))[0]]), 6) for i in range(7)]
    batched = small.generate_steps(reqs, Sampling())
    assert [o.ids for o in batched] == [small.generate_steps([r], Sampling())[0].ids for r in reqs]


@needs_binding
@pytest.mark.models
def test_cancel_stops_rows_and_frees_slots(tiny):
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.ngram import NgramConfig

    _, be, _ = tiny
    eng = be.engine(Sampling(), NgramConfig())
    p = be.encode_chat(QS[1], "Be brief.")
    h = eng.add([StepRequest(tuple(p), 50), StepRequest(tuple(p[:-3]), 50)])
    eng.step()
    out = dict(eng.cancel([h[0]]))
    assert out[h[0]].finish == "cancelled" and out[h[0]].forwards == 1 and eng.active == 1
    eng.cancel([h[1]])
    assert eng.active == 0 and sum(s.owner is None for s in be.slots) == be.n_slots


@needs_binding
@pytest.mark.models
def test_sampling_is_seeded(tiny):
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.ngram import NgramConfig

    _, be, _ = tiny
    p = tuple(be.encode_chat(QS[0], "Be brief."))
    s = Sampling(temperature=0.8, top_p=0.9, top_k=50)
    a = [o.ids for o in be.generate_steps([StepRequest(p, 24, 1), StepRequest(p, 24, 2)], s, NgramConfig(k=3))]
    b = [o.ids for o in be.generate_steps([StepRequest(p, 24, 1), StepRequest(p, 24, 2)], s, NgramConfig(k=3))]
    assert a == b and a[0] != a[1]


@needs_binding
@pytest.mark.models
def test_set_threads_reaches_the_context(tiny):
    """The protocol's ``set_threads`` sets llama.cpp's own pool of this context (0 leaves it)."""
    _, be, _ = tiny
    try:
        be.set_threads(2)
        assert be.threads == 2 and be.lib.llama_n_threads(be.ctx) == 2
        be.set_threads(0)
        assert be.lib.llama_n_threads(be.ctx) == 2
    finally:
        be.set_threads(1)
    assert be.lib.llama_n_threads(be.ctx) == 1


@needs_binding
@pytest.mark.models
def test_text_matches_the_hf_tokenizer(tiny):
    """Chat template, tokenization and decoding agree with the converted model's HF tokenizer."""
    (hf_dir,) = require_models(TINY)
    from transformers import AutoTokenizer

    from lrref.backends.llamacpp_tokenizer import gguf_quant, gguf_vocab

    path, be, _ = tiny
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    for system in (None, "Be brief."):
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": QS[0]}]
        ids = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                  add_special_tokens=False).input_ids
        assert be.encode_chat(QS[0], system) == ids
        assert be.decode(ids) == tok.decode(ids, skip_special_tokens=True)
    assert be.vocab() == tok.get_vocab() == gguf_vocab(path)  # the vocabulary check reads it without the weights
    assert gguf_quant(path) == be.quant == "Q4_1"


@needs_binding
@pytest.mark.models
def test_judge_and_score_verifiers_run_on_this_backend(tiny):
    from lrref.backends.base import Sampling, StepRequest
    from lrref.verify.verifiers import JudgeVerifier, ScoreVerifier

    _, be, _ = tiny
    pairs = [("3 notebooks cost 3 * 4 = 12 dollars.", "The notebooks cost 3 x $4 = $12."),
             ("So the total is 12 + 3 = 15.", "The train leaves the station at noon.")]
    m = JudgeVerifier(be, threshold=0.0).margins(pairs)
    assert len(m) == 2 and all(abs(x) < 100 for x in m)
    assert all(0 <= v.score <= 9 for v in ScoreVerifier(be, threshold=0).verify(pairs, ["Q: notebooks"] * 2))
    p = be.encode_chat(QS[0], "Be brief.")
    first = be.generate_steps([StepRequest(tuple(p), 1)], Sampling())[0].ids[0]
    from lrref.backends.passes import PassBuffer, attached

    log = PassBuffer("target", 0.0)
    with attached({be: log}):
        assert int(be.next_token_logits([p, p[:-3]]).argmax(-1)[0]) == first
    (rec,) = log.take()  # the judge's and the scorer's prompts are verifier passes
    assert rec["engine"] == "verifier" and rec["rows"] == 2 and rec["outputs"] == 2 and be.pass_log is None


# --- the decoder on this backend -------------------------------------------------------------------------


def decode_all(tiny, mode, tmp_path, verifier=None, **kw):
    """Both questions decoded in ``mode`` (the lr-async draft in a llama.cpp draft process), one after the other or,
    with ``concurrency`` 2, at once (a closed loop); results, trace, and the row-passes the target engine ran."""
    from lrref.backends.llamacpp import header_info
    from lrref.decode.decoder import DecodeConfig, Decoder, make_header
    from lrref.verify.verifiers import ExactVerifier
    from lrsim.trace import TraceWriter

    path, tgt, drf = tiny
    base = {"mode": mode, "gamma": 3, "max_step_tokens": 20, "max_tokens": 56, "draft_temperature": 0.4, "threads": 1,
            "target_threads": 1, "draft_threads": 1, "log_text": True}
    cfg = DecodeConfig(**(base | kw))
    tp = tmp_path / f"{mode.replace('+', '_')}-{kw.get('width', 1)}-{cfg.concurrency}.jsonl"
    info = header_info(tgt, path if cfg.is_lr else None, cfg.main_threads, cfg.draft_threads)
    tw = TraceWriter(tp, make_header(cfg, {"target": path, "draft": path}, "llamacpp", {"name": "exact"},
                                     backend_info=info))
    target = SlowTarget(tgt, 0.03) if cfg.base == "lr-async" else tgt
    dec = Decoder(cfg, target, drf, verifier or ExactVerifier(normalize=False), tw, draft_path=path,
                  draft_kind="llamacpp")
    f0 = sum(b * n for b, n in tgt.stats.pass_rows.items())
    try:
        prompts = [(i, tgt.encode_chat(q, cfg.system)) for i, q in enumerate(QS)]
        if cfg.concurrency > 1:
            res = dec.run_many(prompts, cfg.concurrency)
        else:
            res = [dec.run(i, p) for i, p in prompts]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp), sum(b * n for b, n in tgt.stats.pass_rows.items()) - f0


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory):
    """:func:`decode_all` once per (mode, settings), shared by the lossless and the trace tests."""
    memo = {}

    def run(mode: str, **kw):
        key = (mode, tuple(sorted(kw.items())))
        if key not in memo:
            memo[key] = decode_all(tiny, mode, tmp_path_factory.mktemp(mode.replace("+", "_")), **kw)
        return memo[key]

    return run


def _logits_after(tgt, q: str, prefix: list[int]):
    """The target's next-token logits after ``prefix``, generated for question ``q`` (one batch-1 pass)."""
    from lrref.decode.decoder import DecodeConfig

    return tgt.next_token_logits([tgt.encode_chat(q, DecodeConfig().system) + prefix])[0]


def _gaps(lg, tokens: tuple[int, ...]) -> list[float]:
    """How far each of ``tokens`` is below the top of the logits ``lg``."""
    return [float(lg.max() - lg[t]) for t in tokens]


@needs_binding
@pytest.mark.models
@pytest.mark.parametrize("mode, kw", [("sd", {}), ("lr-sync", {}), ("lr-sync+sd", {}), ("lr-async", {}),
                                      ("lr-async+sd", {}), ("lr-sync", {"width": 2, "gamma": 2}),
                                      ("lr-async", {"concurrency": 2}), ("lr-async+sd", {"concurrency": 2})])
def test_lossless_against_own_ar(tiny, runs, mode, kw):
    """Every token equals ar's, except that the two may part where ar's top two tokens are a float tie (TIE); with
    ``concurrency`` 2 both requests decode at once, each against its own ar run, their target rows sharing passes
    and their draft rows the draft process's passes."""
    _, tgt, _ = tiny
    ref, _, _ = runs("ar")
    res, tr, _ = runs(mode, **kw)
    for q, a, b in zip(QS, ref, res):
        first = next((i for i, (x, y) in enumerate(zip(a.ids, b.ids)) if x != y), None)
        if first is None:
            assert b.ids == a.ids and b.finish == a.finish, mode
        else:
            gaps = _gaps(_logits_after(tgt, q, a.ids[:first]), (a.ids[first], b.ids[first]))
            assert max(gaps) <= TIE, f"{mode}: diverged at token {first}, {gaps} below the top logit, not a tie"
    assert len(tr.requests) == len(QS) and not tr.warnings
    assert len([s for s in tr.steps if s.committed]) == sum(len(r.steps) for r in res)
    if mode.startswith("lr"):
        decided = [s for s in tr.steps if s.decision is not None]
        assert decided and all((s.verifier == "identical") == bool(s.decision) for s in decided)
    if "+sd" in mode or mode == "sd":
        assert sum(s.ngram_drafted or 0 for s in tr.steps) > 0
    if kw.get("concurrency", 1) > 1:
        assert tr.header.setting["concurrency"] == 2 and max(q.start for q in tr.requests) < min(
            q.end for q in tr.requests)
        for engine in ("target", "draft"):
            assert any(p.requests == [0, 1] for p in tr.passes if p.engine == engine), engine


@needs_binding
@pytest.mark.models
def test_a_divergence_away_from_a_tie_fails(tiny, runs):
    """The tie allowance refuses a token the target ranks far below its top one (in place of ar's token 10, the
    token the target ranks lowest there)."""
    _, tgt, _ = tiny
    (a, *_), _, _ = runs("ar")
    lg = _logits_after(tgt, QS[0], a.ids[:10])
    gaps = _gaps(lg, (a.ids[10], int(lg.argmin())))
    assert gaps[0] <= TIE < gaps[1]


@needs_binding
@pytest.mark.models
@pytest.mark.parametrize("mode", ["lr-sync+sd", "lr-async"])
def test_trace_accounts_for_all_target_work(runs, mode):
    """Every row-pass the engine ran is in the trace, discarded work included: cancelled lr-async rows carry
    their partial step's passes and times."""
    res, tr, row_passes = runs(mode)
    timed = [s for s in tr.steps if s.target_start is not None]
    assert sum(s.target_forwards for s in timed) == row_passes
    # ... and every pass is a pass record: the target's here, the draft's (lr-async: from the draft process)
    by = {e: [p for p in tr.passes if p.engine == e] for e in ("target", "draft")}
    assert sum(p.rows for p in by["target"]) == row_passes and by["draft"] and not tr.warnings
    assert sum(p.rows for p in by["draft"]) >= sum(s.draft_forwards or 0 for s in tr.steps) > 0
    end = max(r.end for r in tr.requests)
    for p in tr.passes:
        assert 0 < p.start < end and p.seconds > 0 and p.tokens >= p.rows and p.outputs >= p.rows
        assert p.threads == 1 and p.context_max >= p.context and set(p.requests) <= {0, 1}
    if mode == "lr-sync+sd":
        assert any(p.outputs > p.rows for p in by["target"])  # n-gram proposals verified in the pass
    wasted = [s for s in timed if s.cancelled or (s.committed is None and not s.accepted)]
    assert wasted and all(s.target_end >= s.target_start for s in wasted)
    if mode == "lr-async":
        assert any(s.cancelled for s in timed)
        assert all(r.draft_overlapped and r.draft_s > 0 for r in res)


@needs_binding
@pytest.mark.models
def test_traces_calibrate_and_record_the_backend(runs):
    from lrsim.prediction.calibrate import calibrate

    c = calibrate([runs(m)[1] for m in ("lr-sync+sd", "lr-async")])
    assert c.alpha1 is not None and c.target_s_per_token and c.target_s_per_forward and c.c1 is not None
    assert c.alpha2 is not None and c.k2 == 5
    assert max(c.target_s_per_forward) > 1  # passes with several rows (the cycle's batched target steps)
    h = runs("lr-async")[1].header
    info = h.config["backend_info"]
    assert h.hardware["dtype"] == info["dtype"] == "gguf:Q4_1" and info["target"]["quant"] == "Q4_1"
    assert info["target"]["threads"] == 1 and info["draft"] == {"gguf": "smollm2-135m-instruct-q4_1.gguf",
                                                                 "quant": "Q4_1", "threads": 1}


@needs_binding
@pytest.mark.models
def test_qwen_pair_lossless_short():
    """The default pair's Q4_K_M files (repacked kernels on passes of several rows and chunked prefill): lr-sync == ar.

    One thread per model: two threads on cores other jobs share are several times slower (OpenMP barriers)."""
    dpath, tpath = (str(p) for p in require_models(*QWEN, gguf=True))
    from lrref.backends.llamacpp import LlamaCppBackend
    from lrref.decode.decoder import DecodeConfig, Decoder
    from lrref.verify.verifiers import ExactVerifier

    tgt, drf = LlamaCppBackend(tpath, threads=1), LlamaCppBackend(dpath, threads=1, slots=4)
    q = "A bakery makes 120 muffins. It sells 45 in the morning and 38 in the afternoon. How many are left?"
    outs = {}
    for mode in ("ar", "lr-sync"):
        cfg = DecodeConfig(mode=mode, gamma=2, max_step_tokens=24, max_tokens=40, threads=1)
        outs[mode] = Decoder(cfg, tgt, drf, ExactVerifier(normalize=False)).run(0, tgt.encode_chat(q, cfg.system))
    tgt.close()
    drf.close()
    assert len(outs["ar"].ids) == 40 and outs["lr-sync"].ids == outs["ar"].ids
    assert max(tgt.stats.pass_rows) >= 2  # the cycle's target steps shared passes
    assert outs["lr-sync"].accepted_steps >= 1  # the 0.5B draft does match the 1.5B target sometimes


# --- command line ------------------------------------------------------------------------------------------


@needs_binding
@pytest.mark.models
def test_cli_generate_writes_a_llamacpp_trace_without_torch(tmp_path):
    """lr-sync+sd from the command line with torch and transformers unimportable: the header names the binding,
    its version, the threads and the GGUF quantisation; --dtype is reported as not applying."""
    require_models(TINY, gguf=True)
    from lrref.backends.llamacpp_ffi import PINNED

    tp = tmp_path / "g.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    r = lrref_without({"torch", "transformers", "sentence_transformers"}, "generate", "--backend", "llamacpp",
                      "--prompt", QS[1], "--mode", "lr-sync+sd", "--json", "--target", TINY, "--draft", TINY,
                      "--verifier", "exact", "--threads", "1", "--max-tokens", "30", "--max-step-tokens", "12",
                      "--gamma", "2", "--dtype", "float32", "--trace", str(tp), env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == 30
    said = [x for x in r.stderr.splitlines() if not x.startswith("lrref: warning: the machine was busy")]
    assert said == ["lrref: --backend llamacpp: --dtype float32 ignored (GGUF quantised weights)"]
    assert set(read_trace(tp).header.hardware["load"]) >= {"other_cores", "busy", "loadavg_end", "window_s"}
    h = read_trace(tp).header
    info = h.config["backend_info"]
    assert h.backend == "llamacpp" and h.hardware["dtype"] == "gguf:Q4_1" and h.hardware["torch_threads"] is None
    assert info["binding"] == "xllamacpp" and info["binding_version"] == PINNED
    assert info["omp_wait_policy"] == "PASSIVE" and "does not apply" in info["dtype_note"]
    assert info["target"]["quant"] == info["draft"]["quant"] == "Q4_1"
    assert info["target"]["threads"] == info["draft"]["threads"] == 1


def test_missing_binding_is_one_line_exit_2(tmp_path):
    """Without xllamacpp importable: one line naming the extra, exit 2, before any model is looked up."""
    r = lrref_without({"xllamacpp"}, "generate", "--backend", "llamacpp", "--prompt", "hi", "--mode", "ar",
                      "--trace", str(tmp_path / "t.jsonl"), "--cache-dir", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"lrref: error: {MISSING}"


@needs_binding
def test_unprepared_or_bad_gguf_is_one_line_exit_2(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "lrref.cli", "generate", "--backend", "llamacpp", "--prompt",
                               "hi", "--mode", "ar", "--trace", str(tmp_path / "t.jsonl"), *args],
                              capture_output=True, text=True, timeout=120, check=False)

    for r, message in [(run("--target", str(tmp_path / "none.gguf")), "is not a .gguf file"),
                       (run("--target", TINY, "--cache-dir", str(tmp_path)),
                        f"`lrref models prepare --models {TINY} --format gguf`"),
                       (run("--target", "all-minilm-l6-v2", "--cache-dir", str(tmp_path)), "not a GGUF")]:
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert message in r.stderr and "Traceback" not in r.stderr
