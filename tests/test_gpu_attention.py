"""Attention kernels as they run (lrsim/data/gpus/kernels.json "attention"), chunked prefill and RoPE scaling:
the published curves at their points and between them by hand, the engines' kernels and chunks by release and
device, the refusal of a context past the positions a config reaches."""

import importlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lrsim import cli
from lrsim.errors import InputError
from lrsim.gpu import engine_vllm
from lrsim.gpu.archs import check_context, from_config, load_arch
from lrsim.gpu.devices import DeviceSpec, get_device
from lrsim.gpu.engines import get_engine
from lrsim.gpu.kernels import KERNELS_FILE, MIB, decode_curve, decode_excess_s, prefill_curve
from lrsim.gpu.model import Efficiencies, Setup, forward_s, prefill_passes, prefill_s
from lrsim.gpu.synthesize import parse_spec, synthesize

ROOT = Path(__file__).resolve().parents[1]
AMPERE = DeviceSpec(name="toy-ampere", label="toy", vendor="", bf16_dense_tflops=1.0, memory_gib=1.0, hbm_tb_s=1.935,
                    link_gb_s=100.0, fabric_gb_s=100.0, host_link_gb_s=10.0, link_latency_us=5.0,
                    generation="ampere")  # the A100 PCIe curve's own bandwidth
EFF = Efficiencies(flops=0.5, bandwidth=0.5, kernel_us=1.0, splitk_bytes=0.0, host_us=10.0)
ARCH = from_config("toy", {"model_type": "qwen2", "num_hidden_layers": 1, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 100})
QWEN = json.loads((ROOT / "lrsim" / "data" / "archs" / "qwen2.5-7b.json").read_text())


# ----------------------------------------------------------------------------- the published curves


def test_decode_curve_at_its_points_and_between_them():
    d = decode_curve()
    assert d.bandwidths == (0.96, 1.935, 3.352) and d.floor_mib == 0.5
    # Figure 5's FlashAttention 2.4.2 readings, as written
    assert float(d(64, 3.352)) == pytest.approx(0.434) and float(d(1024, 1.935)) == pytest.approx(0.76)
    # H100's 8 MiB call was measured faster than its 4 MiB one: the 4 MiB time is held, u = 8 / (4 / 0.076)
    assert float(d(8, 3.352)) == pytest.approx(8 / (4 / 0.076))
    # between points a power law in the time: T(x) = x / u at 45.25 MiB, halfway (in log) from 32 to 64 MiB
    t32, t64 = 32 / 0.346, 64 / 0.434
    x = 32 * 2 ** 0.5
    assert float(d(x, 3.352)) == pytest.approx(x / np.sqrt(t32 * t64))
    # between GPUs linear in the bandwidth; clamped beyond the fastest (H200: H100's)
    mid = (1.935 + 3.352) / 2
    assert float(d(64, mid)) == pytest.approx((0.446 + 0.434) / 2)
    assert float(d(64, 4.8)) == float(d(64, 3.352)) and float(d(2048, 3.352)) == pytest.approx(0.839)


@pytest.mark.parametrize("bw", [0.768, 0.96, 1.555, 2.039, 3.35, 4.8, 8.0])
def test_a_larger_decode_call_never_takes_less_time(bw):
    x = np.geomspace(0.01, 4096, 600) * MIB
    t = decode_excess_s(x, bw)
    assert np.all(t[x <= 0.5 * MIB] == 0.0)  # the published floor replaced by the caller's t_k
    assert np.all(np.diff(t) >= -1e-18) and t[-1] > 0  # flat where a time is held: rounding only


def test_prefill_curves_by_kernel_and_generation():
    fa3, fa2 = prefill_curve("fa3", "hopper"), prefill_curve("fa2", "hopper")
    assert float(fa3.causal(16384, 0.0)) == pytest.approx(616 / 989, abs=1e-3)  # the FA3 paper's printed labels
    assert float(fa2.full(4096, 0.0)) == pytest.approx(366 / 989, abs=1e-3)
    assert float(fa3.causal(100, 0.0)) == float(fa3.causal(512, 0.0))  # clamped below the first point
    assert prefill_curve("fa3", "ampere") is prefill_curve("fa2", "ampere")  # FA3 runs on Hopper only
    assert prefill_curve("fa3", "blackwell") is fa3 and prefill_curve("fa2", "") is prefill_curve("fa2", "ampere")
    with pytest.raises(InputError, match="unknown attention kernel 'fa9'"):
        prefill_curve("fa9", "hopper")


def test_every_attention_point_is_cited():
    a = json.loads(KERNELS_FILE.read_text())["attention"]
    assert a["decode"]["source"].count("Figure") >= 2 and "http" in a["decode"]["url"]
    for kernel in a["prefill"]["kernels"].values():
        for gen, c in kernel.items():
            if isinstance(c, dict):
                assert c["source"] and c["url"].startswith("https://"), gen
                assert all(0 < u <= 1 for _, u in c["causal"] + c["full"])


def test_flashinfer_engines_decode_within_30_percent_of_the_published_h200_sweep():
    """SGLang's decode (FlashInfer 0.2+ / FA3: the GEMM fit's bandwidth plus t_k) against FlashInfer 0.6's published
    batch-1 sweep on an H200, its smallest call's time taken as the floor that t_k replaces (the FA2 curve's rule):
    studies/decode_kernel_check.py's rows."""
    check = json.loads(KERNELS_FILE.read_text())["attention"]["decode"]["flashinfer_check"]
    assert check["url"].startswith("https://github.com/tile-ai/TileOPs/blob/")
    spec = importlib.util.spec_from_file_location("decode_kernel_check", ROOT / "studies" / "decode_kernel_check.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    rows = study.rows()
    assert len(rows) == 8 and rows[0]["in_step_us"] == pytest.approx(parse_spec(study.SPEC).setup(ARCH).kernel_s * 1e6)
    for r in rows:
        assert 0.7 < r["model_us"] / r["in_step_us"] < 1.3, r


# ----------------------------------------------------------------------------- the operator


def toy(engine="vllm-v0", dev=AMPERE, release=""):
    return Setup(ARCH, dev, EFF, 1, engine, release=release)


def test_v0_decode_attention_by_hand_on_the_ampere_curve():
    fast = replace(AMPERE, bf16_dense_tflops=1000.0)  # so that the bytes, not the FLOPs, bound it
    s = toy(dev=fast)
    L, b, q = 100_000.0, 8.0, 1.0
    x = b * (L + q) * 2 * 16 * 2 * 2 + 2 * b * q * 4 * 16 * 2  # K and V of 2 KV heads, d = 16; q in, out
    u, u0 = float(decode_curve()(x / MIB, 1.935)), 0.036
    t = 1e-6 + x / (u * 1.935e12) - 0.5 * MIB / (u0 * 1.935e12)  # t_k + T(x) - T(x_0)
    assert float(engine_vllm.attention(s, L, b, q)) == pytest.approx(t)
    # a tiny call costs t_k alone, as every kernel; V1 on Ampere runs FA2's flash-decoding too: the same curve
    assert float(engine_vllm.attention(s, 10.0, 1.0, 1.0)) == pytest.approx(1e-6)
    assert float(engine_vllm.attention(toy(engine="vllm-0.11", dev=fast), L, b, q)) == pytest.approx(t)
    # FA3 on Hopper (vLLM V1, V0 from 0.7) and SGLang's kernels keep the GEMM fit's bandwidth: no published sweep
    hopper = replace(fast, generation="hopper")
    for engine, release in (("vllm-0.11", ""), ("vllm-v0", "0.7.2"), ("sglang", "")):
        got = float(engine_vllm.attention(toy(engine=engine, dev=hopper, release=release), L, b, q))
        assert got == pytest.approx(x / (0.5 * 1.935e12) + 1e-6), engine
    assert float(engine_vllm.attention(toy(dev=hopper, release="0.6.3"), L, b, q)) == pytest.approx(t)  # FA2 there


def test_prefill_attention_by_hand_causal_chunk_and_cache():
    slow = replace(AMPERE, bf16_dense_tflops=1e-3)  # so that the FLOPs bound it
    s = toy(dev=slow)
    c = prefill_curve("fa2", "ampere")
    L, q, H, d = 4096.0, 2048.0, 4, 16
    tri, rect = 2 * H * q * q * d, 4 * H * q * L * d  # causal within the chunk, every row over the cache
    want = (tri / float(c.causal(q, 0.0)) + rect / float(c.full(L + q, 0.0))) / 1e9
    assert float(engine_vllm.attention(s, L, 1.0, q, prefill=True)) == pytest.approx(want)
    assert float(c.causal(2048, 0.0)) == pytest.approx(0.46) and float(c.full(6144, 0.0)) == pytest.approx(0.645)


def test_the_engines_attention_kernel_by_release_and_device():
    v0 = get_engine("vllm-v0")
    assert [v0.attention_kernel("hopper", r) for r in ("0.4.2", "0.6.3", "0.7.0", "0.7.2")] == ["fa2"] * 2 + ["fa3"] * 2
    assert v0.attention_kernel("hopper") == "fa3" and v0.attention_kernel("ampere", "0.7.2") == "fa2"
    assert get_engine("vllm").attention_kernel("blackwell") == "fa3"
    assert get_engine("sglang").attention_kernel("ada") == "fa2"
    h100 = Setup(load_arch("qwen2.5-7b"), get_device("h100"), EFF, 1, "vllm-v0", release="0.6.3")
    assert h100.attention_kernel == "fa2" and replace(h100, release="0.7.2").attention_kernel == "fa3"


# ----------------------------------------------------------------------------- chunked prefill


@pytest.mark.parametrize("engine, device, mml, release, chunk", [
    ("vllm", "h100", None, None, 8192),  # V1 server default on >= 70 GiB, not an A100
    ("vllm", "h200", None, None, 8192),
    ("vllm", "a100", None, None, 2048),  # the A100 by its name (vLLM PR #17885)
    ("vllm-0.10", "l40s", None, None, 2048),  # under 70 GiB
    ("sglang", "h100", None, None, 8192),
    ("sglang", "b200", None, None, 16384),  # 160 GiB and more
    ("trtllm", "h100", None, None, None),  # enable_chunked_prefill False
    ("hf-eager", "h100", None, None, None),
    ("vllm-v0", "a100", 32768, "0.6.3", None),  # V0 chunks only past 32K positions
    ("vllm-v0", "a100", 131072, "0.4.2", None),  # before PR #6666 (0.5.3)
    ("vllm-v0", "a100", 131072, "0.6.3", 512),  # before PR #10544 (0.6.5)
    ("vllm-v0", "a100", 131072, "0.7.2", 2048),
    ("vllm-v0", "a100", 131072, None, 2048),
])
def test_chunk_tokens_as_each_release_sets_them(engine, device, mml, release, chunk):
    assert get_engine(engine).chunk_tokens(get_device(device), mml, release) == chunk


def test_prefill_passes_by_hand():
    L, q = prefill_passes(1000, 1, 512)
    assert L.tolist() == [0, 512] and q.tolist() == [512, 488]
    L, q = prefill_passes(1000, 2, 512)  # two rows in lockstep: 256 tokens each a step
    assert L.tolist() == [0, 256, 512, 768] and q.tolist() == [256] * 3 + [232]
    assert prefill_passes(400, 1, 512)[1].tolist() == [400] and prefill_passes(400, 1, None)[1].tolist() == [400]
    with pytest.raises(InputError, match="must be >= 1"):
        prefill_passes(0, 1, 512)


def test_a_chunked_prefill_is_its_passes_and_costs_more_than_one_pass():
    s = parse_spec("a100:vllm-v0").setup(load_arch("qwen2.5-7b"))
    P = 20_000
    L, q = prefill_passes(P, 1, 512)
    assert len(L) == 40
    chunked = prefill_s(s, P, chunk=512)
    assert chunked == pytest.approx(float(np.sum(forward_s(s, L, 1.0, q, "wall", prefill=True))))
    whole = prefill_s(s, P, chunk=0)
    assert whole == pytest.approx(float(forward_s(s, 0.0, 1.0, float(P), "wall", prefill=True)))
    assert chunked > whole  # 40 engine steps, the weights read 40 times, the cache re-read
    assert prefill_s(s, P) == whole  # V0 at qwen2.5-7b's 32768 positions: no chunking by default
    times = [prefill_s(s, p, chunk=512) for p in (512, 2048, 8192, 32768)]
    assert all(a < b for a, b in zip(times, times[1:]))


# ----------------------------------------------------------------------------- RoPE scaling and the refusal


def test_max_context_follows_vllms_rule():
    assert load_arch("qwen2.5-7b").max_context == 32768
    yarn = from_config("q", QWEN | {"rope_scaling": {"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 32768}})
    assert (yarn.rope_type, yarn.rope_factor, yarn.max_context) == ("yarn", 4.0, 131072)
    assert from_config("q", QWEN | {"rope_scaling": {"rope_type": "linear", "factor": 2}}).max_context == 65536
    assert load_arch("llama-3.1-8b").max_context == 131072  # llama3 states the stretched length already
    assert load_arch("gpt-oss-20b").max_context == 4096 * 32 == load_arch("gpt-oss-20b").max_positions


def test_a_context_past_the_positions_is_refused_in_one_line():
    a = load_arch("qwen2.5-7b")
    check_context(a, 32768)
    with pytest.raises(InputError) as e:
        check_context(a, 40000)
    assert str(e.value) == ("qwen2.5-7b: 40000 tokens exceed the 32768 positions it reaches (max_position_embeddings "
                            "32768 and no rope_scaling in its config); give a config.json with rope_scaling (e.g. "
                            "YaRN) to price longer contexts")
    with pytest.raises(InputError, match="exceed the 32768 positions"):
        parse_spec("h100").setup(a, context=40000)
    with pytest.raises(InputError, match="40000 tokens exceed"):
        prefill_s(parse_spec("h100").setup(a), 40000)
    yarn = from_config("q", QWEN | {"rope_scaling": {"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 32768}})
    assert prefill_s(parse_spec("h100").setup(yarn, context=131072), 129024) > 0
    with pytest.raises(InputError, match="yarn rope scaling x4.*a larger rope_scaling factor"):
        check_context(yarn, 140000)


@pytest.mark.parametrize("rs, why", [
    ({"factor": 4.0}, "must be an object with a rope_type"),
    ({"type": "yarn", "factor": 4.0}, "yarn needs original_max_position_embeddings"),
    ({"type": "linear", "factor": -1}, "factor must be a positive number"),
    ("yarn", "must be an object"),
])
def test_a_bad_rope_scaling_is_one_line_at_the_cli(tmp_path, capsys, rs, why):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(QWEN | {"rope_scaling": rs}))
    with pytest.raises(InputError, match=why):
        from_config("q", QWEN | {"rope_scaling": rs})
    assert cli.main(["profiles", "--synthesize", "h100", "--arch", str(f), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert why in err and len(err.splitlines()) == 1 and not (tmp_path / "p.json").exists()


def test_a_yarn_config_prices_the_grid_past_its_native_positions(tmp_path):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(QWEN | {"rope_scaling": {"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 32768}}))
    plain, yarn = (next(iter(synthesize("h200", a).archs.values())) for a in ("qwen2.5-7b", str(f)))
    i = plain.context.index(32768)
    assert plain.ms[i][0][0] is None and yarn.ms[i][0][0] is not None  # RoPE scaling costs nothing per token
    assert yarn.ms[0][0][0] == plain.ms[0][0][0]
    assert any("max_position_embeddings 32768" in n for n in plain.missing)


# ----------------------------------------------------------------------------- the validation prices rows as they ran


@pytest.fixture(scope="module")
def vc():
    sys.path.insert(0, str(ROOT / "studies"))  # the study and its fit_engines import
    return importlib.import_module("vllm_public_check")


@pytest.mark.parametrize("rid, passes, chunk", [
    ("qwen25-7b-a100-bf16-tp1-in129024", 252, 512),  # vLLM 0.6.2, max_model_len 131072: V0 chunks of 512
    ("qwen25-7b-a100-bf16-tp1-in30720", 1, None),  # fits the script's default 32768: no chunking
    ("qwen2-7b-a100-bf16-tp1-in129024", 1, None),  # vLLM 0.4.2, before chunking by default
    ("rh-r1-llama-8b-h100-bf16-n1-p10240-o1536", 5, 2048),  # vLLM 0.7.2 serving 131072 positions
])
def test_the_validation_prefills_each_row_as_its_release_did(vc, rid, passes, chunk):
    row = next(r for r in vc.load_rows() if r["id"] == rid)
    p = vc.predict(row)
    assert (p["prefill_passes"], p["prefill_chunk"]) == (passes, chunk)
