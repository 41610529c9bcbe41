"""The hf backend's static KV cache and CUDA graphs (issue 42 item 2): greedy tokens identical to the dynamic cache.

On a CPU the static path runs eagerly at the same bucketed shapes (padding rows and positions masked out) that CUDA
graphs capture on a GPU; the random-weight tests need no download and always run, the SmolLM2 one needs the
prepared model (``models`` marker), the CUDA one a GPU.  float32 keeps the numerics independent of batch shape.
"""

import subprocess
import sys

import pytest
import torch
from conftest import require_models

from lrref.backends.static_cache import Bucket, StaticCacheConfig, default_sizes, pow2
from lrsim.errors import InputError

SMALL = StaticCacheConfig(max_rows=8, max_slots=256, graph_positions=32)
PROMPT = 14


def test_buckets_round_rows_and_positions_up_to_powers_of_two():
    c = StaticCacheConfig(max_rows=6, max_slots=512, graph_positions=16)
    assert [pow2(n) for n in (0, 1, 2, 3, 5, 64, 65)] == [1, 1, 2, 4, 8, 64, 128]
    assert c.bucket(1, 1, 10) == Bucket(1, 1, 64, True)  # a decode
    assert c.bucket(3, 5, 100) == Bucket(4, 8, 128, True)  # a verification batch
    assert c.bucket(5, 16, 200) == Bucket(6, 16, 256, True)  # rows capped at max_rows
    assert c.bucket(5, 17, 200) == Bucket(5, 17, 256, False)  # wider than graph_positions: eager, its own shape
    assert c.bucket(2, 10, 500) == Bucket(2, 10, 512, False)  # the padded width would not fit: eager
    assert default_sizes(512, 96, 4) == (8, 4096) and default_sizes(512, 96, 2, width=2, concurrency=4) == (16, 2048)


@pytest.mark.parametrize("kw, words", [({"max_rows": 0}, "max_rows must be >= 1"),
                                       ({"max_slots": 8, "graph_positions": 16}, "graph_positions 16 is more than")])
def test_bad_sizes_are_one_line(kw, words):
    with pytest.raises(InputError, match=words):
        StaticCacheConfig(**kw)


def test_overflow_names_the_sizes_and_the_option():
    c = StaticCacheConfig(max_rows=4, max_slots=128, graph_positions=8)
    with pytest.raises(InputError, match=r"5 rows is more than its 4 rows; raise --graph-max-rows"):
        c.bucket(5, 1, 0)
    with pytest.raises(InputError, match=r"needs 100 \+ 40 = 140 KV slots per row, more than its 128; raise "
                                         r"--graph-max-slots"):
        c.bucket(1, 40, 100)


# --- random weights: always run ---------------------------------------------------------------------------


def random_backend(static=None, cuda_graphs=False, device="cpu", seed=0):
    """The shipped ``tiny`` qwen2 shape, its weights redrawn wide (std 0.25) so that greedy text varies (the
    default init repeats one token), the same for every call with the same ``seed``."""
    from lrref.archs import load_arch
    from lrref.backends.hf_random import RandomBackend

    be = RandomBackend(load_arch("tiny"), prompt_tokens=PROMPT, dtype="float32", threads=1, device=device,
                       static_cache=static, cuda_graphs=cuda_graphs)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in be.model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.25)
    return be


@pytest.fixture(scope="module")
def pair():
    return random_backend(), random_backend(SMALL)


def rounds(be, ngram_k=0, n=4):
    """Three rows of different prefix lengths and caps, extended step by step ``n`` times (prefix cache on)."""
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.ngram import NgramConfig

    ps = [be.encode(f"question {i}") for i in range(3)]
    outs = [[] for _ in ps]
    for _ in range(n):
        reqs = [StepRequest(tuple(ps[i][:8 + 3 * i] + outs[i]), 5 + i) for i in range(3)]
        for i, g in enumerate(be.generate_steps(reqs, Sampling(), NgramConfig(k=ngram_k))):
            outs[i] += g.ids
    return outs


@pytest.mark.parametrize("ngram_k", [0, 3])
def test_engine_tokens_identical_on_random_weights(pair, ngram_k):
    dyn, sta = pair
    n0 = sum(sta.static.stats.buckets.values())
    ref = rounds(dyn, ngram_k)
    assert len(set(ref[0])) > 5  # the text varies: identity means something
    assert rounds(sta, ngram_k) == ref
    st = sta.static.stats
    assert sum(st.buckets.values()) > n0 and st.arenas == 1 and st.captured == 0  # no graphs on a CPU
    assert any(label.startswith("4x") for label in st.buckets)  # three rows ran as a padded bucket of four
    assert sta.stats.reused_tokens > 0 and all(e.kv[0][0].shape[0] == 1 for e in sta.pool._d.values())


def test_eager_attention_gets_an_additive_mask():
    dyn, sta = random_backend(), random_backend()
    for be in (dyn, sta):
        be.model.config._attn_implementation = "eager"
    sta.set_static_cache(SMALL)
    assert sta.static.mask_kind == "additive" and rounds(sta, 3) == rounds(dyn, 3)


def test_packing_the_holes_away_keeps_tokens(pair):
    """Every row's valid slots packed to the left after every pass (what a full cache does) changes no token."""
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.ngram import NgramConfig

    dyn, _ = pair
    sta = random_backend(StaticCacheConfig(max_rows=4, max_slots=64, graph_positions=8))
    ps = [tuple(dyn.encode(f"question {i}")[:4] * 3)[:8 + i] for i in range(3)]  # repeats: n-gram proposals
    reqs = [StepRequest(p, 8) for p in ps]
    eng = sta.engine(Sampling(), NgramConfig(k=3))
    handles, done, holes = eng.add(reqs), {}, 0
    while eng.active:
        done.update(eng.step())
        if eng.active:
            holes += int((~eng.mask).sum())
            eng._compact()
            assert bool(eng.mask[:, -1].any())
    ref = [o.ids for o in dyn.generate_steps(reqs, Sampling(), NgramConfig(k=3))]
    assert [done[h].ids for h in handles] == ref
    assert holes > 0 and sta.static.stats.compactions > 0
    full = random_backend(StaticCacheConfig(max_rows=4, max_slots=17, graph_positions=4))  # runs out once
    assert [o.ids for o in full.generate_steps(reqs, Sampling(), NgramConfig(k=3))] == ref
    assert full.static.stats.compactions == 1


def test_a_batch_beyond_the_rows_is_one_line(pair):
    from lrref.backends.base import Sampling, StepRequest

    sta = random_backend(StaticCacheConfig(max_rows=2, max_slots=64, graph_positions=8))
    p = tuple(sta.encode("q"))
    with pytest.raises(InputError, match="3 rows is more than its 2 rows; raise --graph-max-rows"):
        sta.generate_steps([StepRequest(p, 2)] * 3, Sampling())
    with pytest.raises(InputError, match="more than its 64; raise --graph-max-slots"):
        sta.generate_steps([StepRequest(p * 5, 2)], Sampling())


def decode(target, draft, mode, **kw):
    """Two requests in ``mode`` (greedy target, the draft sampling at 0.1 so that its steps are sometimes the
    target's and sometimes not); the results and the target's pass records."""
    from lrref.backends.passes import PassBuffer
    from lrref.decode.decoder import DecodeConfig, Decoder
    from lrref.verify.verifiers import ExactVerifier

    base = {"mode": mode, "gamma": 2, "max_step_tokens": 4, "max_tokens": 24, "draft_temperature": 0.1, "threads": 1,
            "dtype": "float32"}
    cfg = DecodeConfig(**(base | kw))
    dec = Decoder(cfg, target, draft if cfg.is_lr else None, ExactVerifier(normalize=False) if cfg.is_lr else None)
    log = PassBuffer("target", 0.0)
    target.pass_log = log
    try:
        return [dec.run(i, target.encode(f"request {i}")) for i in range(2)], log.take()
    finally:
        target.pass_log = None
        dec.close()


@pytest.fixture(scope="module")
def models():
    """Dynamic and static (target, draft) pairs; the draft has the target's weights."""
    return {"dynamic": (random_backend(), random_backend()), "static": (random_backend(SMALL), random_backend(SMALL))}


@pytest.mark.parametrize("mode", ["ar", "sd", "lr-sync", "lr-sync+sd"])
def test_modes_identical_on_random_weights(models, mode):
    (ref, ref_passes), (got, passes) = (decode(*models[k], mode) for k in ("dynamic", "static"))
    assert [r.ids for r in got] == [r.ids for r in ref] and all(len(r.ids) == 24 for r in got)
    if mode.startswith("lr"):
        assert [r.accepted for r in got] == [r.accepted for r in ref]
        assert 0 < sum(r.accepted for r in got) < sum(r.verified for r in got)  # accepted and rejected drafts
    key = [(p["rows"], p["tokens"], p["outputs"], p["positions_max"], p["context_max"]) for p in passes]
    assert key == [(p["rows"], p["tokens"], p["outputs"], p["positions_max"], p["context_max"]) for p in ref_passes]
    # the static cache's passes carry the padded shape they ran at (rows and positions up to powers of two, slots
    # up to the bucket's context), the dynamic cache's none
    assert all(p["bucket"] is None for p in ref_passes) and passes
    for p in passes:
        rows, rest = p["bucket"].split("x")
        width, slots = rest.split("@")
        assert int(rows) >= p["rows"] and int(width) >= p["positions_max"] and int(slots) >= p["context_max"]


def test_lossless_lr_sync_on_the_static_cache(models):
    ar, _ = decode(*models["static"], "ar")
    lr, _ = decode(*models["static"], "lr-sync", gamma=3)
    assert [r.ids for r in lr] == [r.ids for r in ar]


# --- refusals -----------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no CUDA")
def test_cuda_graphs_refused_without_cuda(tmp_path):
    with pytest.raises(InputError, match="CUDA graphs need a CUDA device, this model is on cpu"):
        random_backend(cuda_graphs=True)
    trace = tmp_path / "t.jsonl"
    for extra in ([], ["--device", "cuda"]):
        r = subprocess.run([sys.executable, "-m", "lrref.cli", "generate", "--random-weights", "tiny", "--max-tokens",
                            "16", "--cuda-graphs", "--trace", str(trace), *extra], capture_output=True, text=True,
                           timeout=120, check=False)
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "--cuda-graphs" in r.stderr and "CUDA" in r.stderr
    assert not trace.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, words", [
    (["--graph-max-rows", "4"], "--graph-max-rows needs --cuda-graphs"),
    (["--cuda-graphs", "--backend", "llamacpp"], "--cuda-graphs is for --backend hf, not llamacpp")])
def test_graph_flags_that_do_not_go_together(tmp_path, args, words):
    r = subprocess.run([sys.executable, "-m", "lrref.cli", "generate", "--prompt", "q", "--trace",
                        str(tmp_path / "t.jsonl"), *args], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_sizes_and_the_session_models(monkeypatch):
    """``--cuda-graphs``' sizes (defaults from the run, or the flags) and what it does to a session's models: on a
    CPU model the static cache alone (its CUDA check passed here by pretending)."""
    from lrref import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def sizes(*flags):
        a = cli.build_parser().parse_args(["generate", "--prompt", "q", "--backend", "hf", "--device", "cuda",
                                           "--cuda-graphs", *flags])
        return cli.graph_config(a, cli.session_config(a, [a.mode]))

    assert sizes() == StaticCacheConfig(max_rows=8, max_slots=4096)
    assert sizes("--gamma", "2", "--graph-max-slots", "512") == StaticCacheConfig(max_rows=4, max_slots=512)
    assert sizes("--graph-max-rows", "2") == StaticCacheConfig(max_rows=2, max_slots=4096)


def test_a_session_on_the_static_cache_says_so_in_its_trace(tmp_path):
    """SessionConfig.static_cache (what --cuda-graphs sets) puts the target and lr-sync's in-process draft on the
    static cache; the trace header's backend_info records it (no graphs on a CPU)."""
    from lrref import Session, SessionConfig
    from lrsim.trace import read_trace

    cfg = SessionConfig(random_weights="tiny", backend="hf", verifier="random", modes=("lr-sync",), max_tokens=16,
                        max_step_tokens=4, gamma=2, threads=1, prompt_tokens=8,
                        static_cache=StaticCacheConfig(max_rows=8, max_slots=128))
    with Session(cfg) as s:
        assert s.target.static.cfg == StaticCacheConfig(max_rows=8, max_slots=128) and s.draft.static is not None
        s.generate("q", trace=tmp_path / "t.jsonl")
    info = read_trace(tmp_path / "t.jsonl").header.config["backend_info"]
    assert info == {"static_cache": {"max_rows": 8, "max_slots": 128, "graph_positions": 64, "cuda_graphs": False},
                    "cuda_graphs": False}


# --- a real model (SmolLM2-135M) --------------------------------------------------------------------------


@pytest.mark.models
def test_real_model_tokens_identical():
    (path,) = require_models("smollm2-135m-instruct")
    from lrref.backends.base import Sampling, StepRequest
    from lrref.backends.hf import HFBackend
    from lrref.backends.ngram import NgramConfig

    qs = ["What is 12*7?", "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"]
    out = {}
    for name, static in (("dynamic", None), ("static", StaticCacheConfig(max_rows=4, max_slots=256,
                                                                           graph_positions=16))):
        be = HFBackend(path, dtype="float32", threads=1, static_cache=static)
        ps = [be.encode_chat(q, "Be brief.") for q in qs]
        outs = [[] for _ in ps]
        for _ in range(3):
            got = be.generate_steps([StepRequest(tuple(p + o), 10) for p, o in zip(ps, outs)], Sampling(),
                                    NgramConfig(k=3))
            for o, g in zip(outs, got):
                o += g.ids
        out[name] = outs
    assert out["static"] == out["dynamic"] and all(len(o) == 30 for o in out["static"])


# --- CUDA: capture and replay -------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graphs_replay_identical_tokens():
    dyn = random_backend(device="cuda")
    cg = random_backend(SMALL, cuda_graphs=True, device="cuda")
    assert rounds(cg, 3) == rounds(dyn, 3)
    st = cg.static.stats
    assert st.captured > 0 and st.replayed > st.captured
