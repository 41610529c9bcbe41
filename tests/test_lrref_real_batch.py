"""lrref's decoder on a real model, SmolLM2-135M: concurrent requests decode as alone, a synchronous trace accounts
for every target pass, sampling is reproducible with a seed.  The shared decode and the lossless checks:
test_lrref_real.py (real_decode.py holds what both use).
"""

import pytest
from real_decode import QS, decode_all, tiny_backends

from lrsim.trace import read_trace

pytestmark = pytest.mark.models  # every test here needs prepared models (pytest -m "not models" skips them)


@pytest.fixture(scope="module")
def tiny():
    return tiny_backends()


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


def test_sampling_is_reproducible_with_a_seed(tiny, tmp_path):
    short = dict(temperature=0.7, top_p=0.9, questions=QS[:1], max_tokens=32)  # one question: the seed's effect
    a, _ = decode_all(tiny, "lr-sync+sd", tmp_path, seed=3, **short)
    b, _ = decode_all(tiny, "lr-sync+sd", tmp_path, seed=3, **short)
    c, _ = decode_all(tiny, "lr-sync+sd", tmp_path, seed=4, **short)
    assert [r.ids for r in a] == [r.ids for r in b]
    assert [r.ids for r in a] != [r.ids for r in c]
