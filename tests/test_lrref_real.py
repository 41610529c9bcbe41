"""lrref on real models: SmolLM2-135M (fast) and one short run on the Qwen pair.

Lossless check: greedy decoding + a verifier that accepts only token-identical
steps must reproduce ``ar`` token for token in every LR mode.  float32 keeps
the numerics independent of batch shape (bf16 is not; see docs/design.md, "Design measurements").
The draft is the same small model *sampling at temperature 0.4*, so drafts are
rejected often and accepted sometimes: both paths run.
"""

import json

import pytest
from conftest import SlowTarget, require_models

from lrsim.trace import read_trace

pytestmark = pytest.mark.models  # every test here needs prepared models (pytest -m "not models" skips them)

from lrref.config import MODES

TINY = "smollm2-135m-instruct"
QS = ["Mia buys 3 notebooks at $4 each and 2 pens at $1.50 each. How much does she spend?",
      "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"]


@pytest.fixture(scope="module")
def tiny():
    (path,) = require_models(TINY)
    from lrref.backends.hf import HFBackend

    return str(path), HFBackend(path, dtype="float32", threads=1), HFBackend(path, dtype="float32", threads=1)


def decode_all(tiny, mode, tmp_path, verifier=None, questions=QS, **kw):
    from lrref.decode.decoder import DecodeConfig, Decoder, make_header
    from lrref.verify.verifiers import ExactVerifier
    from lrsim.trace import TraceWriter

    path, tgt, drf = tiny
    base = dict(mode=mode, gamma=3, max_step_tokens=20, max_tokens=56, draft_temperature=0.4, threads=1,
                target_threads=1, draft_threads=1, log_text=True, dtype="float32")
    cfg = DecodeConfig(**(base | kw))
    tp = tmp_path / f"{mode.replace('+', '_')}-{kw.get('width', 1)}.jsonl"
    tw = TraceWriter(tp, make_header(cfg, {"target": path, "draft": path}, "hf", {"name": "exact"}))
    target = SlowTarget(tgt, 0.03) if cfg.base == "lr-async" else tgt  # the draft must get ahead sometimes
    dec = Decoder(cfg, target, drf, verifier or ExactVerifier(normalize=False), tw, draft_path=path)
    try:
        res = [dec.run(i, tgt.encode_chat(q, cfg.system)) for i, q in enumerate(questions)]
    finally:
        dec.close()
        tw.close()
    return res, read_trace(tp)


def test_engine_matches_transformers_generate(tiny):
    """Step-by-step batched decoding (with/without prefix cache, with n-gram) == greedy generate."""
    import torch

    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.ngram import NgramConfig

    _, be, _ = tiny
    prompts = [be.encode_chat(q, "Be brief.") for q in QS + ["What is 12*7?"]]
    refs = [be.model.generate(torch.tensor([p]), max_new_tokens=40, do_sample=False)[0, len(p):].tolist()
            for p in prompts]
    for cache in (False, True):
        for ng in (NgramConfig(), NgramConfig(k=3)):
            be.prefix_cache, be.pool.size = cache, (8 if cache else 0)
            be.pool.clear()
            r0 = be.stats.reused_tokens
            outs = [[] for _ in prompts]
            while True:
                idx = [i for i, o in enumerate(outs) if len(o) < 40 and (not o or o[-1] not in be.eos_ids)]
                if not idx:
                    break
                got = be.generate_steps([StepRequest(tuple(prompts[i] + outs[i]), min(16, 40 - len(outs[i])))
                                         for i in idx], Sampling(), ng)
                for i, g in zip(idx, got):
                    outs[i] += g.ids
                    assert g.forwards >= 1 and g.batch >= 1 and g.end >= g.start
            for o, r in zip(outs, refs):
                assert o == r[:len(o)] and len(o) == min(40, len(r))
            assert (be.stats.reused_tokens > r0) == cache
    be.prefix_cache, be.pool.size = True, 8


@pytest.fixture(scope="module")
def decoded(tiny, tmp_path_factory):
    """``decode_all`` with the token-identical verifier, run once per setting in this module: several tests check
    the same decode (lr-sync's: lossless, accepts and rejects, a killed run's trace; lr-async's: lossless, overlap),
    so it runs once.  The tests only read the results and traces (the killed-run test cuts a copy of the trace)."""
    done = {}

    def get(mode, **kw):
        key = (mode, *sorted(kw.items()))
        if key not in done:
            done[key] = decode_all(tiny, mode, tmp_path_factory.mktemp(mode.replace("+", "_")), **kw)
        return done[key]

    return get


@pytest.fixture(scope="module")
def ar_ref(decoded):
    return decoded("ar")


@pytest.mark.parametrize("mode, kw", [(m, {}) for m in MODES if m != "ar"] + [("lr-sync", {"width": 2, "gamma": 2})])
def test_lossless_greedy_exact(decoded, ar_ref, mode, kw):
    ref, _ = ar_ref
    res, tr = decoded(mode, **kw)
    for a, b in zip(ref, res):
        assert b.ids == a.ids, f"{mode}: diverged at token {next(i for i, (x, y) in enumerate(zip(a.ids, b.ids)) if x != y)}"
        assert b.finish == a.finish
    assert len(tr.requests) == len(QS) and not tr.warnings
    committed = [s for s in tr.steps if s.committed]
    assert len(committed) == sum(len(r.steps) for r in res)  # one committed row per output step
    assert sum(r.accepted_steps for r in res) == sum(s.committed == "draft" for s in tr.steps)
    if mode.startswith("lr"):
        decided = [s for s in tr.steps if s.decision is not None]
        assert decided and all(s.verifier in ("identical", "exact") for s in decided)
        assert all((s.verifier == "identical") == bool(s.decision) for s in decided)
        assert all(s.target_forwards and s.target_batch for s in committed if s.committed == "target")
    if "+sd" in mode or mode == "sd":
        assert sum(s.ngram_drafted or 0 for s in tr.steps) > 0


QS3 = QS + ["A train travels 60 km per hour for 3 hours. How far does it go?"]


def decode_many(tiny, mode, tmp_path, concurrency, **kw):
    """QS3 decoded ``concurrency`` at a time (one after the other at 1), greedy, token-identical verifier."""
    from lrref.decode.decoder import DecodeConfig, Decoder, make_header
    from lrref.verify.verifiers import ExactVerifier
    from lrsim.trace import TraceWriter

    path, tgt, drf = tiny
    cfg = DecodeConfig(**(dict(mode=mode, gamma=2, max_step_tokens=16, max_tokens=32, draft_temperature=0.4,
                               threads=1, dtype="float32", concurrency=concurrency) | kw))
    tp = tmp_path / f"{mode.replace('+', '_')}-{concurrency}.jsonl"
    tw = TraceWriter(tp, make_header(cfg, {"target": path, "draft": path}, "hf", {"name": "exact"}))
    dec = Decoder(cfg, tgt, drf, ExactVerifier(normalize=False), tw)
    prompts = [(i, tgt.encode_chat(q, cfg.system)) for i, q in enumerate(QS3)]
    try:
        res = dec.run_many(prompts, concurrency) if concurrency > 1 else [dec.run(i, p) for i, p in prompts]
    finally:
        tw.close()
    return res, read_trace(tp)


@pytest.fixture(scope="module")
def ar_ref3(tiny, tmp_path_factory):
    return decode_many(tiny, "ar", tmp_path_factory.mktemp("ar3"), 1)


@pytest.mark.parametrize("mode, n", [("ar", 3), ("sd", 2), ("lr-sync", 3), ("lr-sync+sd", 2)])
def test_concurrent_requests_decode_as_alone(tiny, ar_ref3, tmp_path, mode, n):
    """Greedy + token-identical verifier at float32: each request's text under --concurrency n is its text alone
    (= ar's, lossless), although its target steps ran in passes with rows of other requests."""
    ref, ref_trace = ar_ref3
    res, tr = decode_many(tiny, mode, tmp_path, n)
    assert [r.ids for r in res] == [r.ids for r in ref] and [r.finish for r in res] == [r.finish for r in ref]
    assert max(s.target_batch for s in ref_trace.steps) == 1  # ar alone
    assert mode not in ("ar", "sd") or max(s.target_batch for s in tr.steps) > 1
    # rows of one engine whose spans overlap ran in the same passes: target steps of different requests did
    timed = [s for s in tr.steps if s.target_start is not None]
    assert any(a.request != b.request and a.target_start < b.target_end and b.target_start < a.target_end
               for a in timed for b in timed)
    starts = sorted(q.start for q in tr.requests)
    assert starts[1] < min(q.end for q in tr.requests)  # requests overlapped in time
    assert tr.header.setting["concurrency"] == n and not tr.warnings


def test_lr_modes_exercise_accept_and_reject(decoded):
    res, tr = decoded("lr-sync")
    decided = [s.decision for s in tr.steps if s.decision is not None]
    assert True in decided and False in decided, decided


@pytest.mark.parametrize("p_accept", [0.0, 0.5])
def test_sync_trace_accounts_for_every_target_step(tiny, tmp_path, p_accept):
    """Target steps thrown away after a rejection still ran in the cycle's batch: their rows carry the
    target timing, so the forward passes in the trace add up to the passes the decoder ran."""
    from lrref.verify.verifiers import RandomVerifier

    # 56 tokens (2 requests, 1-3 cycles each) hold accepted and rejected decisions and discarded target steps at
    # both p_accept; the sums below are per pass, so more tokens only repeat them
    res, tr = decode_all(tiny, "lr-sync", tmp_path, verifier=RandomVerifier(p_accept, seed=1))
    rows = {(s.request, s.cycle, s.position): s.target_forwards for s in tr.steps if s.target_start is not None}
    assert sum(rows.values()) == sum(r.target_forwards for r in res)
    wasted = [s for s in tr.steps if s.target_start is not None and s.committed is None and not s.accepted]
    assert wasted  # with rejections, some target work was discarded and is visible
    # one pass record per model forward (hf backend): the rows of the target's add up to the same passes
    by = {e: [p for p in tr.passes if p.engine == e] for e in ("target", "draft")}
    assert sum(p.rows for p in by["target"]) == sum(rows.values())
    assert sum(p.rows for p in by["draft"]) == sum(s.draft_forwards or 0 for s in tr.steps) > 0
    assert all(p.threads == 1 and p.seconds > 0 and p.positions_max * p.rows >= p.tokens for p in tr.passes)


def test_async_trace_has_overlap_and_batches(decoded):
    res, tr = decoded("lr-async")  # the lossless test's lr-async decode (56 tokens): the overlap below is structural
    drafts = [s for s in tr.steps if s.draft_start is not None and not s.cancelled]
    targets = [s for s in tr.steps if s.target_start is not None]
    assert drafts and targets
    # the target's step j and the draft's step j (both from the prefix with drafts < j) are written at the same
    # time: at the start of every stage both begin at once, so at least those overlap whatever the speeds
    assert any(t.target_start < d.draft_end and d.draft_start < t.target_end for d in drafts for t in targets
               if (d.request, d.cycle) == (t.request, t.cycle) and d.position >= t.position)
    assert all(r.draft_overlapped and r.draft_s > 0 for r in res)


def test_sampling_is_reproducible_with_a_seed(tiny, tmp_path):
    short = dict(temperature=0.7, top_p=0.9, questions=QS[:1], max_tokens=32)  # one question: the seed's effect
    a, _ = decode_all(tiny, "lr-sync+sd", tmp_path, seed=3, **short)
    b, _ = decode_all(tiny, "lr-sync+sd", tmp_path, seed=3, **short)
    c, _ = decode_all(tiny, "lr-sync+sd", tmp_path, seed=4, **short)
    assert [r.ids for r in a] == [r.ids for r in b]
    assert [r.ids for r in a] != [r.ids for r in c]


def test_killed_run_leaves_a_readable_trace(decoded, tmp_path):
    _, tr = decoded("lr-sync")
    p = tmp_path / "killed.jsonl"  # a copy: the decode's own trace is shared with the other tests
    text = open(tr.path).read()
    cut = text[: len(text) - 40]  # the half-written last line of a killed run
    open(p, "w").write(cut)
    t2 = read_trace(p)
    assert len(t2.steps) + len(t2.requests) == len(tr.steps) + len(tr.requests) - 1 and t2.warnings


# --- verifiers -----------------------------------------------------------------------------------------

PAIRS_SAME = [("3 notebooks cost 3 * 4 = 12 dollars.", "The notebooks cost 3 x $4 = $12."),
              ("So the total is 12 + 3 = 15.", "Adding them up, 12 + 3 = 15 in total.")]
PAIRS_DIFF = [("3 notebooks cost 3 * 4 = 12 dollars.", "The train leaves the station at noon."),
              ("So the total is 12 + 3 = 15.", "She has 7 apples left after eating 2.")]


def test_embedding_verifier_on_known_pairs():
    (path,) = require_models("all-minilm-l6-v2")
    from lrref.verify.verifiers import EmbeddingVerifier

    v = EmbeddingVerifier(path, threshold=0.6)
    same = v.verify(PAIRS_SAME)
    diff = v.verify(PAIRS_DIFF)
    assert all(s.decision for s in same) and not any(d.decision for d in diff)
    assert min(s.score for s in same) > max(d.score for d in diff)
    assert abs(v.cosine([("x y z", "x y z")])[0] - 1) < 1e-4


def test_judge_and_score_mechanics_on_the_tiny_model(tiny):
    from lrref.verify.verifiers import JudgeVerifier, ScoreVerifier

    _, be, _ = tiny
    j = JudgeVerifier(be, threshold=0.0)
    assert j.tok_a != j.tok_u
    text = be.tok.decode(j.prompt("s-one", "s-two"))
    assert "<start_s1>\ns-one\n<end_s1>" in text and "[aligned]" in text and text.rstrip().endswith(
        be.tok.decode(j.common).strip() or text.rstrip()[-1])
    m = j.margins(PAIRS_SAME + PAIRS_DIFF)
    assert len(m) == 4 and all(abs(x) < 100 for x in m)
    assert [v.decision for v in JudgeVerifier(be, threshold=1e9).verify(PAIRS_SAME)] == [False, False]
    s = ScoreVerifier(be, threshold=0).verify(PAIRS_SAME, ["Q: notebooks"] * 2)
    assert all(0 <= x.score <= 9 and x.decision for x in s)


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


# --- the real default pair (short) ------------------------------------------------------------------------

QWEN = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")


@pytest.fixture(scope="module")
def qwen():
    dpath, tpath = require_models(*QWEN)
    from lrref.backends.hf import HFBackend

    return str(dpath), str(tpath), HFBackend(tpath, dtype="float32", threads=2), HFBackend(dpath, dtype="float32",
                                                                                           threads=2)


def test_qwen_pair_lossless_short(qwen, tmp_path):
    """Greedy + token-identical acceptance on the default pair: lr-sync+sd and lr-async == ar (float32)."""
    from lrref.decode.decoder import DecodeConfig, Decoder, make_header
    from lrref.verify.verifiers import ExactVerifier
    from lrsim.trace import TraceWriter

    dpath, tpath, tgt, drf = qwen
    q = "A bakery makes 120 muffins. It sells 45 in the morning and 38 in the afternoon. How many are left?"
    outs = {}
    for mode in ("ar", "lr-sync+sd", "lr-async"):
        cfg = DecodeConfig(mode=mode, gamma=2, max_step_tokens=24, max_tokens=48, threads=2, target_threads=1,
                           draft_threads=1, dtype="float32")
        tw = TraceWriter(tmp_path / f"{mode}.jsonl", make_header(cfg, {"target": tpath, "draft": dpath}, "hf", None))
        dec = Decoder(cfg, tgt, drf, ExactVerifier(normalize=False), tw, draft_path=dpath)
        try:
            outs[mode] = dec.run(0, tgt.encode_chat(q, cfg.system))
        finally:
            dec.close()
            tw.close()
    assert len(outs["ar"].ids) == 48
    for m in ("lr-sync+sd", "lr-async"):
        assert outs[m].ids == outs["ar"].ids, m
    assert sum(outs[m].accepted_steps for m in outs) >= 1  # the 0.5B draft does match the 1.5B target sometimes


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
