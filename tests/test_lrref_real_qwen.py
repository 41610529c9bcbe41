"""The default pair (Qwen2.5-Coder 0.5B draft, 1.5B target) on the transformers backend, short: lossless in lr-sync+sd
and lr-async.  The llama.cpp backend's run of the same pair is in :mod:`test_lrref_llamacpp`.

Apart from :mod:`test_lrref_real` so that the model tests spread over pytest-xdist's workers file by file.
"""

import pytest
from conftest import require_models
from real_decode import QWEN

pytestmark = pytest.mark.models  # every test here needs prepared models (pytest -m "not models" skips them)


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
