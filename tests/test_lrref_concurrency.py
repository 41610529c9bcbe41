"""Several requests at once (``Decoder.run_many``, :mod:`lrref.decode.closed_loop`) on the toy backend (no model),
and lr-async under concurrency on random weights (its real draft process, no prepared model).

The toy's numerics do not depend on the batch, so every request must decode exactly as it does alone; the
real-model version of these checks (float32 SmolLM2) is in ``test_lrref_real.py``, the llama.cpp one (lr-async
against ar up to a tie) in ``test_lrref_llamacpp.py``.
"""

import itertools
import json

import pytest
from conftest import SlowTarget
from toy import FakeWorker, ToyBackend, toy_decoder

from lrref.config import DecodeConfig
from lrref.decode.decoder import Decoder
from lrref.verify.verifiers import ExactVerifier, RandomVerifier
from lrsim.errors import InputError
from lrsim.trace import read_trace, recorded_setting

PROMPTS = [[0, 1, 2, k] for k in range(5)] + [[3, 1, k] for k in range(3)]  # 8 distinct toy prompts
TIMES = {"draft_start", "draft_end", "target_start", "target_end", "verify_start", "verify_end"}
MODES = [("ar", {}), ("sd", {}), ("lr-sync", {}), ("lr-sync+sd", {}), ("lr-sync", {"width": 2, "gamma": 2})]


def decode(tmp_path, mode, concurrency, many=True, verifier=None, **kw):
    """Results and trace of PROMPTS: ``run_many`` at ``concurrency``, or one ``run`` after the other."""
    tp = tmp_path / f"{mode}-{kw.get('width', 1)}-{concurrency}-{many}.jsonl"
    dec, tw = toy_decoder(tp, verifier, mode=mode, concurrency=concurrency, **kw)
    try:
        if many:
            res = dec.run_many(list(enumerate(PROMPTS)), concurrency)
        else:
            res = [dec.run(i, p) for i, p in enumerate(PROMPTS)]
    finally:
        tw.close()
    return res, read_trace(tp)


def rows_of(trace, request, drop=frozenset()):
    """A request's step rows in trace order, timing fields (and ``drop``) removed."""
    return [{k: v for k, v in vars(s).items() if k not in TIMES | drop} for s in trace.steps if s.request == request]


@pytest.mark.parametrize("mode, kw", MODES)
def test_concurrency_1_writes_the_rows_of_one_request_at_a_time(tmp_path, mode, kw):
    """The closed loop at concurrency 1 makes the same calls as the single-request path: rows equal but timings."""
    one, t1 = decode(tmp_path, mode, 1, many=False, **kw)
    loop, tl = decode(tmp_path, mode, 1, **kw)
    assert [r.ids for r in loop] == [r.ids for r in one]
    assert [rows_of(tl, i) for i in range(len(PROMPTS))] == [rows_of(t1, i) for i in range(len(PROMPTS))]
    assert [s.request for s in tl.steps] == [s.request for s in t1.steps]  # not interleaved
    assert recorded_setting(tl.header).concurrency == 1 and tl.header.setting["version"] == 1


@pytest.mark.parametrize("mode, kw", MODES)
@pytest.mark.parametrize("n", [2, 3])
def test_every_request_decodes_as_it_does_alone(tmp_path, mode, kw, n):
    one, t1 = decode(tmp_path, mode, 1, many=False, **kw)
    res, tr = decode(tmp_path, mode, n, **kw)
    assert [r.ids for r in res] == [r.ids for r in one] and [r.finish for r in res] == [r.finish for r in one]
    # the same rows per request (batch sizes aside), but requests interleave in the trace
    assert all(rows_of(tr, i, {"target_batch", "draft_batch"}) == rows_of(t1, i, {"target_batch", "draft_batch"})
               for i in range(len(PROMPTS)))
    order = [s.request for s in tr.steps]
    assert any(a > b for a, b in itertools.pairwise(order))
    timed = [s for s in tr.steps if s.target_start is not None]
    assert any(a.request != b.request and a.target_start < b.target_end and b.target_start < a.target_end
               for a in timed for b in timed)  # overlapping rows of one engine share its passes
    alone = max(s.target_batch for s in t1.steps if s.target_batch)
    assert mode.startswith("lr") or max(s.target_batch for s in tr.steps) > alone
    assert recorded_setting(tr.header).concurrency == n and tr.header.config["concurrency"] == n


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_loop_is_closed_at_n_requests_in_flight(tmp_path, n):
    res, tr = decode(tmp_path, "lr-sync", n)
    spans = sorted((q.start, q.end) for q in tr.requests)
    assert len(spans) == len(PROMPTS) and [q.request for q in tr.requests] != []
    for start, _ in spans:
        in_flight = sum(s <= start < e for s, e in spans)
        assert 1 <= in_flight <= n
    # request i + n starts only when one of the first i + n requests has ended
    by_index = {q.request: q for q in tr.requests}
    for i in range(n, len(PROMPTS)):
        assert by_index[i].start >= min(by_index[j].end for j in range(i))
    for q, r in zip(sorted(tr.requests, key=lambda q: q.request), res):
        assert q.start <= q.first_step <= q.end and q.prompt_tokens == len(PROMPTS[q.request])
        assert r.ttft_s == pytest.approx(q.first_step - q.start) and r.wall_s > 0


def test_model_time_is_shared_among_the_requests_of_a_pass(tmp_path):
    """Each pass's forward seconds go to the requests in it by rows: the shares add up to the backend's total."""
    cfg = DecodeConfig(mode="lr-sync", gamma=2, max_step_tokens=6, max_tokens=40, threads=0, draft_temperature=0.5,
                       dtype="float32", concurrency=3)
    tgt, drf = ToyBackend("target"), ToyBackend("draft", deviate=0.3)
    for be in (tgt, drf):
        be.seconds_per_pass = 0.25
    dec = Decoder(cfg, tgt, drf, ExactVerifier(normalize=False))
    res = dec.run_many(list(enumerate(PROMPTS)), 3)
    assert sum(r.target_s for r in res) == pytest.approx(tgt.stats.forward_s) and tgt.stats.forward_s > 0
    assert sum(r.draft_s for r in res) == pytest.approx(drf.stats.forward_s) and drf.stats.forward_s > 0


def test_random_verifier_runs_concurrently(tmp_path):
    """Verdicts of a shared random verifier depend on the order of calls, so only the accounting is checked."""
    res, tr = decode(tmp_path, "lr-sync", 3, verifier=RandomVerifier(0.5, seed=2))
    assert sum(r.accepted for r in res) == sum(s.accepted for s in tr.steps)
    assert len([s for s in tr.steps if s.committed]) == sum(len(r.steps) for r in res)


def test_concurrency_is_checked_and_lr_async_takes_it():
    with pytest.raises(InputError, match="concurrency must be >= 1"):
        DecodeConfig(mode="ar", concurrency=0)
    assert DecodeConfig(mode="lr-async+sd", concurrency=4).concurrency == 4


# --- lr-async: the pipeline on the shared drivers ---------------------------------------------------------------


@pytest.fixture
def fake_worker(monkeypatch):
    """lr-async's draft process replaced by :class:`toy.FakeWorker` (in process, deterministic)."""
    import lrref.decode.decoder

    monkeypatch.setattr(lrref.decode.decoder, "DraftWorker", FakeWorker)


@pytest.mark.parametrize("mode", ["lr-async", "lr-async+sd"])
def test_lr_async_closed_loop_at_1_is_the_single_request_driver(tmp_path, fake_worker, mode):
    """At concurrency 1 the closed loop asks the draft process and the target exactly what the single-request
    driver asks, in the same order: rows equal but timings (the fake draft process does one thing per look)."""
    one, t1 = decode(tmp_path, mode, 1, many=False, verifier=RandomVerifier(0.6, seed=5))
    loop, tl = decode(tmp_path, mode, 1, verifier=RandomVerifier(0.6, seed=5))
    assert [r.ids for r in loop] == [r.ids for r in one] and [r.finish for r in loop] == [r.finish for r in one]
    assert [rows_of(tl, i) for i in range(len(PROMPTS))] == [rows_of(t1, i) for i in range(len(PROMPTS))]
    assert [s.request for s in tl.steps] == [s.request for s in t1.steps]
    assert any(s.cancelled for s in tl.steps) and any(s.committed == "draft" for s in tl.steps)


@pytest.mark.parametrize("mode", ["lr-async", "lr-async+sd"])
@pytest.mark.parametrize("n", [2, 3])
def test_lr_async_requests_decode_as_alone_and_share_both_engines(tmp_path, fake_worker, mode, n):
    """Greedy + token-identical verifier: every request's tokens are its tokens alone (drafts arrive at other
    times, so the rows differ); target rows of different requests share passes, and so do their draft rows."""
    one, _ = decode(tmp_path, mode, 1, many=False)
    res, tr = decode(tmp_path, mode, n)
    assert [r.ids for r in res] == [r.ids for r in one] and [r.finish for r in res] == [r.finish for r in one]
    assert len([s for s in tr.steps if s.committed]) == sum(len(r.steps) for r in res)
    assert sum(r.accepted_steps for r in res) == sum(s.committed == "draft" for s in tr.steps) > 0
    assert all(r.draft_overlapped and r.draft_s > 0 for r in res)
    timed = [s for s in tr.steps if s.target_start is not None]
    assert any(a.request != b.request and a.target_start < b.target_end and b.target_start < a.target_end
               for a in timed for b in timed)
    drafts = [p for p in tr.passes if p.engine == "draft"]
    assert drafts and any(p.rows > 1 and len(p.requests) > 1 for p in drafts)  # one draft engine for all
    spans = sorted((q.start, q.end) for q in tr.requests)
    assert all(1 <= sum(s <= start < e for s, e in spans) <= n for start, _ in spans)
    assert recorded_setting(tr.header).concurrency == n and not tr.warnings


# random weights: the real draft process (hf), no prepared model; both lr-async modes at N = 2 in one bench each
RANDOM = ["--random-weights", "tiny", "--threshold", "0.5", "--n", "4", "--concurrency", "2", "--max-tokens", "36",
          "--max-step-tokens", "6", "--gamma", "2", "--prompt-tokens", "12", "--async-threads", "1,1"]


@pytest.fixture
def slow_target(monkeypatch):
    """Decoders whose target pauses 20 ms before each pass, so that the draft process is ahead of it at times
    however the cores are shared (:class:`conftest.SlowTarget`): else, on a busy machine, lr-async may commit
    every target step before its draft arrives and verify nothing (no alpha1 to calibrate)."""
    import lrref.decode.decoder as decoder

    real = decoder.Decoder
    monkeypatch.setattr(decoder, "Decoder", lambda cfg, target, *a, **kw: real(cfg, SlowTarget(target, 0.02), *a,
                                                                                 **kw))


@pytest.mark.parametrize("mode", ["lr-async", "lr-async+sd"])
def test_lr_async_bench_at_concurrency_2_on_random_weights(tmp_path, capsys, slow_target, mode):
    """``lrref bench --concurrency 2`` in lr-async: a valid trace lrsim reads and calibrates, whose draft passes
    batched the rows of two requests."""
    pytest.importorskip("torch")
    from lrref import cli
    from lrsim.cli import main as lrsim_main

    out = tmp_path / "b"
    assert cli.main(["bench", "--modes", mode, "--out", str(out), "--json", *RANDOM]) == 0
    row = json.loads(capsys.readouterr().out)["modes"][0]
    assert row["concurrency"] == 2 and row["requests"] == 4 and row["tokens"] == 4 * 36
    assert row["draft_share_inline"] is None and row["wall_s"] < 4 * row["latency_mean_s"]
    tp = out / f"trace-{mode.replace('+', '_')}.jsonl"
    tr = read_trace(tp)
    assert recorded_setting(tr.header).concurrency == 2 and tr.header.mode == "lr-async" and not tr.warnings
    assert sorted(q.request for q in tr.requests) == [0, 1, 2, 3]
    assert all(q.output_tokens == 36 for q in tr.requests)
    assert len([s for s in tr.steps if s.committed]) == sum(q.steps for q in tr.requests)
    starts = sorted(q.start for q in tr.requests)
    assert starts[1] < min(q.end for q in tr.requests)  # two requests in flight
    by = {e: [p for p in tr.passes if p.engine == e] for e in ("target", "draft")}
    assert any(p.rows > 1 and len(p.requests) > 1 for p in by["target"])
    assert any(p.rows > 1 and len(p.requests) > 1 for p in by["draft"])  # one draft engine served both
    if mode.endswith("+sd"):
        assert sum(s.ngram_drafted or 0 for s in tr.steps) > 0
    assert lrsim_main(["calibrate", str(tp), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["alpha1"] is not None and cal["requests"] == 4


def test_bench_warm_up_requests_are_neither_timed_nor_recorded(tmp_path, capsys):
    """``lrref bench --warmup 1``: each mode decodes one request first (logged), and nothing of it reaches the
    traces (no step, pass or request record names it) or the results (requests and tokens are the timed ones')."""
    pytest.importorskip("torch")
    from lrref import cli
    from lrref.decode.decoder import WARMUP_REQUEST

    out = tmp_path / "w"
    args = ["--random-weights", "tiny", "--threshold", "0.5", "--n", "2", "--max-tokens", "24", "--max-step-tokens",
            "6", "--gamma", "2", "--prompt-tokens", "12", "--async-threads", "1,1", "--threads", "1"]
    assert cli.main(["bench", "--modes", "ar,lr-sync,lr-async", "--warmup", "1", "--out", str(out), "--json",
                     *args]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["meta"]["warmup"] == 1 and [r["requests"] for r in doc["modes"]] == [2, 2, 2]
    assert cap.err.count("[warm-up]") == 3
    for m in ("ar", "lr-sync", "lr-async"):
        tr = read_trace(out / f"trace-{m}.jsonl")
        assert sorted(q.request for q in tr.requests) == [0, 1] and not tr.warnings
        assert {s.request for s in tr.steps} == {0, 1}
        assert all(WARMUP_REQUEST not in p.requests for p in tr.passes) and tr.passes
    assert cli.main(["bench", "--modes", "ar", "--warmup", "-1", "--out", str(tmp_path / "x"), *args]) == 2
    assert "--warmup must be >= 0" in capsys.readouterr().err
