"""lrref's decoder on a real model, SmolLM2-135M (concurrent requests and traces: test_lrref_real_batch.py; the command
line: test_lrref_real_cli.py; the Qwen pair: test_lrref_real_qwen.py).

Lossless check: greedy decoding + a verifier that accepts only token-identical
steps must reproduce ``ar`` token for token in every LR mode.  float32 keeps
the numerics independent of batch shape (bf16 is not; see docs/design.md, "Design measurements").
The draft is the same small model *sampling at temperature 0.4*, so drafts are
rejected often and accepted sometimes: both paths run.
"""

import pytest
from conftest import require_models
from real_decode import QS, decode_all, tiny_backends

from lrref.config import MODES
from lrsim.trace import read_trace

pytestmark = pytest.mark.models  # every test here needs prepared models (pytest -m "not models" skips them)


@pytest.fixture(scope="module")
def tiny():
    return tiny_backends()


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


def test_lr_modes_exercise_accept_and_reject(decoded):
    res, tr = decoded("lr-sync")
    decided = [s.decision for s in tr.steps if s.decision is not None]
    assert True in decided and False in decided, decided


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
