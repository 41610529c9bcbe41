"""What the real-model tests share (test_lrref_real*.py): the models' names, the questions, SmolLM2-135M as target
and draft in float32, and one decode of a few questions with a trace.

Two modules rather than one so that pytest-xdist's workers (``--dist loadfile``) share the model tests evenly.
"""

from conftest import SlowTarget, require_models

from lrsim.trace import read_trace

TINY = "smollm2-135m-instruct"
QWEN = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")  # the default pair: draft, target
QS = ["Mia buys 3 notebooks at $4 each and 2 pens at $1.50 each. How much does she spend?",
      "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"]


def tiny_backends():
    """(model directory, target backend, draft backend): SmolLM2-135M twice, float32, one thread each."""
    (path,) = require_models(TINY)
    from lrref.backends.hf import HFBackend

    return str(path), HFBackend(path, dtype="float32", threads=1), HFBackend(path, dtype="float32", threads=1)


def decode_all(tiny, mode, tmp_path, verifier=None, questions=QS, **kw):
    """``questions`` decoded one after the other in ``mode`` (greedy unless ``kw`` says otherwise; the draft samples
    at 0.4), token-identical verifier unless ``verifier``: (results, the trace read back)."""
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
