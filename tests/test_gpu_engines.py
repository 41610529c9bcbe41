"""lrsim.gpu's engines (vllm, hf-eager), number formats, collectives and placement, by hand where a formula is."""

from dataclasses import replace

import numpy as np
import pytest
import simpy

from lrsim import cli
from lrsim.cost.hardware import HardwareSpec
from lrsim.errors import InputError
from lrsim.gpu import engine_vllm
from lrsim.gpu.engines import engine_for, get_engine, listing
from lrsim.gpu.archs import from_config, load_arch
from lrsim.gpu.collectives import all_reduce, custom_all_reduce, nccl_all_gather, nccl_all_reduce
from lrsim.gpu.devices import DeviceSpec, get_device
from lrsim.gpu.dtypes import get_dtype
from lrsim.gpu.fit import load_fit
from lrsim.gpu.model import Efficiencies, Setup, fits, forward_ops, forward_s, kernels, memory_need, weight_bytes
from lrsim.gpu.synthesize import parse_spec, synthesize
from lrsim.sim import SimConfig, simulate
from lrsim.sim.servers import Job, TargetServer

TOY = DeviceSpec(name="toy", label="toy", vendor="", bf16_dense_tflops=1.0, memory_gib=1.0, hbm_tb_s=1.0,
                 link_gb_s=100.0, fabric_gb_s=100.0, host_link_gb_s=10.0, link_latency_us=5.0,
                 fp8_dense_tflops=2.0, generation="hopper")  # 1e12 FLOP/s, 1e12 B/s
EFF = Efficiencies(flops=0.5, bandwidth=0.5, kernel_us=1.0, splitk_bytes=0.0, host_us=10.0)
ARCH = from_config("toy", {"model_type": "qwen2", "num_hidden_layers": 1, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 100})


def toy(tp=1, engine="vllm", dtype="bf16", kv="auto", dev=TOY):
    return Setup(ARCH, dev, EFF, tp, engine, dtype, kv)


# ----------------------------------------------------------------------------- collectives


def test_nccl_all_reduce_picks_its_cheapest_algorithm_by_hand():
    s = toy(tp=2, engine="hf-eager")
    # small: ring LL, latency 6.6 + 2 (n-1) 0.6 us, bus bandwidth min(141 GB/s, 0.5 x 100 GB/s), x n / (2 (n-1))
    assert float(nccl_all_reduce(s, 1e3)) == pytest.approx(7.8e-6 + 1e3 / 50e9 + 1e-6)
    # large: ring Simple, latency 8.4 + 2 x 3.4 us, the whole link
    assert float(nccl_all_reduce(s, 1e9)) == pytest.approx(15.2e-6 + 1e9 / 100e9 + 1e-6)
    # all-gather, ring LL: 6.6 + (n-1) 0.6 us, bandwidth x n / (n-1)
    assert float(nccl_all_gather(s, 1e3)) == pytest.approx(7.2e-6 + 1e3 / 100e9 + 1e-6)
    assert float(nccl_all_reduce(toy(tp=1), 1e9)) == 0.0
    # the latency term grows with n, but not linearly in a ring's 2 (n-1) x 3 us any more
    h100 = get_device("h100-sxm")
    t4, t8 = (float(nccl_all_reduce(Setup(ARCH, h100, EFF, n), 10240.0)) for n in (4, 8))
    assert t4 < t8 < 2 * t4


def test_vllm_custom_all_reduce_one_shot_and_two_shot_by_hand():
    # n = 2: always one-shot: 2 barriers + (n-1) bytes / ingress
    assert float(custom_all_reduce(toy(tp=2), 1e6)) == pytest.approx(10e-6 + 1e6 / 100e9 + 1e-6)
    # n = 8 above 256 KiB: two-shot, 3 barriers + 2 (n-1)/n bytes / bus
    s8 = toy(tp=8)
    assert float(custom_all_reduce(s8, 1e6)) == pytest.approx(15e-6 + 1.75 * 1e6 / 100e9 + 1e-6)
    assert float(custom_all_reduce(s8, 1e5)) == pytest.approx(10e-6 + 7 * 1e5 / 100e9 + 1e-6)
    # the engine decides: vLLM's kernel up to 8 MiB, NCCL beyond and for hf-eager
    assert float(all_reduce(toy(tp=2), 1e6)) == float(custom_all_reduce(toy(tp=2), 1e6))
    assert float(all_reduce(toy(tp=2), 1e8)) == float(nccl_all_reduce(toy(tp=2), 1e8))
    assert float(all_reduce(toy(tp=2, engine="hf-eager"), 1e6)) == float(nccl_all_reduce(toy(tp=2), 1e6))


# ----------------------------------------------------------------------------- the vllm engine


def test_vllm_kernels_per_layer_from_its_model_code():
    q2 = Setup(load_arch("qwen2.5-7b"), get_device("h100"), load_fit()[0], 1, "vllm")
    q3 = Setup(load_arch("qwen3-8b"), get_device("h100"), load_fit()[0], 1, "vllm")
    assert kernels(q2) == 28 * 10 + 10 and kernels(q3) == 36 * 12 + 10
    assert kernels(Setup(q2.arch, q2.device, q2.eff, 2, "vllm")) == 28 * 12 + 13
    assert kernels(Setup(q2.arch, q2.device, q2.eff, 1, "vllm", "fp8")) == 28 * 14 + 10  # + 4 activation quants
    assert kernels(Setup(q2.arch, q2.device, q2.eff, 1, "hf-eager")) == 28 * 39 + 23


def test_vllm_attention_reads_kv_once_per_kv_head_by_hand():
    fast = replace(TOY, bf16_dense_tflops=1000.0)  # so that the bytes, not the FLOPs, bound it
    s = toy(dev=fast)
    L, b, q = 1000.0, 2.0, 1.0
    kv = b * (L + q) * 2 * 16 * 2 * 2 + 2 * b * q * 4 * 16 * 2  # K and V of 2 KV heads, d = 16; q in, out
    assert float(engine_vllm.attention(s, L, b, q)) == pytest.approx(kv / 0.5e12 + 1e-6)
    assert float(engine_vllm.attention(toy(kv="fp8", dev=fast), L, b, q)) < float(engine_vllm.attention(s, L, b, q))
    # on a 0.1 TFLOP/s toy the FLOPs bound it: 4 b H q (L + q) d at FA3's published fraction of the peak for 1001 keys
    # (the toy is a Hopper: 0.472 at 512, 0.571 at 1024 keys, linear in log2), no t_k (kernels.json "attention")
    u = 0.472 + (0.571 - 0.472) * np.log2(1001 / 512)
    slow = replace(TOY, bf16_dense_tflops=0.1)
    assert float(engine_vllm.attention(toy(dev=slow), L, b, q)) == pytest.approx(4 * 2 * 4 * 1001 * 16 / (u * 0.1e12))


def test_vllm_wall_is_step_plus_the_larger_of_kernels_and_launches():
    s = toy(engine="vllm-0.10")  # piecewise CUDA graphs
    k = float(forward_s(s, 0, 1, 1, "kernel_sum"))
    step = get_engine("vllm-0.10").step_us * 1e-6
    graphs = (1 * 2 + engine_vllm.TAIL_LAUNCHES) * 10e-6  # one layer: a graph and the attention call; the tail
    assert float(forward_s(s, 0, 1, 1, "wall")) == pytest.approx(step + max(k, graphs))
    big = float(forward_s(s, 0, 1, 1024, "wall"))  # beyond the capture size: every kernel launched eagerly
    assert big == pytest.approx(step + max(float(forward_s(s, 0, 1, 1024)), kernels(s) * 10e-6))


@pytest.mark.parametrize("engine, decode, verify, prefill", [
    ("vllm-0.10", "piecewise", "piecewise", "eager"),  # PIECEWISE up to 512 tokens
    ("vllm-0.11", "full", "piecewise", "eager"),  # FULL_AND_PIECEWISE: full graphs for uniform decode batches
    ("vllm", "full", "piecewise", "eager"),
    ("vllm-v0", "full", "eager", "eager"),  # V0: decode graphs up to batch 256, the rest eager
    ("sglang", "full", "eager", "eager"),
    ("trtllm", "full", "eager", "eager"),
    ("hf-eager", "eager", "eager", "eager"),
])
def test_each_release_launches_a_pass_as_its_cuda_graphs_run_it(engine, decode, verify, prefill):
    e = get_engine(engine)
    assert (e.graph(1, 4), e.graph(5, 20), e.graph(1, 4096)) == (decode, verify, prefill)
    if engine == "hf-eager":
        return
    s = toy(engine=engine)
    launches = {"full": 1 + engine_vllm.TAIL_LAUNCHES, "piecewise": 2 + engine_vllm.TAIL_LAUNCHES,
                "eager": kernels(s)}
    for (M, q), mode in (((4, 1), decode), ((20, 5), verify), ((4096, 1), prefill)):
        assert float(engine_vllm.host_s(s, M, q)) == pytest.approx(launches[mode] * 10e-6), (M, q)
        k = float(forward_s(s, 0, M / q, q, "kernel_sum"))
        assert float(forward_s(s, 0, M / q, q, "wall")) == pytest.approx(e.step_us * 1e-6 + max(k, launches[mode]
                                                                                                * 10e-6))


def test_releases_map_to_their_engines_and_every_constant_has_a_source():
    assert [engine_for("vllm", v).name for v in ("0.4.2", "0.7.2", "0.8.0", "0.10.1", "0.11.0", "0.13.2", "0.14.0",
                                                  "0.20.1")] == ["vllm-v0", "vllm-v0", "vllm-0.10", "vllm-0.10",
                                                                 "vllm-0.11", "vllm-0.11", "vllm", "vllm"]
    assert engine_for("vllm").name == "vllm" and engine_for("sglang", "0.5.3").name == "sglang"
    with pytest.raises(InputError, match="unknown engine family 'tgi'"):
        engine_for("tgi", "2.0")
    with pytest.raises(InputError, match="unknown engine 'mlc': known are vllm, "):
        get_engine("mlc")
    fitted = []
    for name in ("vllm", "vllm-0.11", "vllm-0.10", "vllm-v0", "sglang", "trtllm"):
        e = get_engine(name)
        assert e.kernels == "fused" and e.step_us > 0, name
        for k in ("cuda_graphs", "capture_tokens", "overlap", "step_us", "usable_memory"):
            assert e.sources[k]["from"], (name, k)
        if e.fitted:
            fitted.append(e.fitted)
    assert len(fitted) == len(set(fitted)) == 4  # at most one row per engine, never one row for two
    assert get_engine("vllm").overlap and not get_engine("vllm-0.11").overlap
    out = listing()
    assert out.splitlines()[1].startswith("vllm ") and "release notes: vLLM v0.14.0" in out


def test_a_spec_names_an_engine_release():
    assert parse_spec("h200:tp2:sglang").engine == "sglang"
    assert parse_spec("model:b200:tp1:vllm-0.10").text() == "b200:tp1:bf16:vllm-0.10:wall"
    assert parse_spec("h100").engine == "vllm"
    with pytest.raises(InputError, match="unknown suffix 'mlc'"):
        parse_spec("h100:mlc")
    h100 = load_arch("qwen3-8b")
    new, old = (float(forward_s(parse_spec(f"h100:{e}").setup(h100), 512, 1, 1, "wall")) for e in ("vllm", "vllm-0.10"))
    assert new < old  # full graphs and an overlapping scheduler: a faster decode step


def test_vllm_is_cheaper_than_hf_eager_where_kernels_dominate():
    a, dev, eff = load_arch("qwen3-32b"), get_device("h200"), load_fit()[0]
    v, h = (float(forward_s(Setup(a, dev, eff, 2, e), 1024, 1, 1)) for e in ("vllm", "hf-eager"))
    assert v < 0.75 * h  # 12 kernels a layer instead of 53, KV read once per KV head
    assert set(forward_ops(Setup(a, dev, eff, 2, "vllm"), 0.0, 1.0, 1.0)) >= {"qkv", "attention", "all_reduce"}


# ----------------------------------------------------------------------------- number formats


def test_formats_set_bytes_and_peaks():
    assert get_dtype("int4").weight_bytes == pytest.approx(0.5 + 2 / 128)
    assert get_dtype("fp8", has_fp8=True).fp8_peak and not get_dtype("fp8", has_fp8=False).fp8_peak  # A100: w8a16
    with pytest.raises(InputError, match="unknown dtype 'fp4'"):
        get_dtype("fp4")
    a = load_arch("llama-3.1-70b")
    emb = 2 * a.vocab * a.hidden  # embedding and LM head (untied) stay bf16
    assert weight_bytes(a, "bf16") == pytest.approx(2 * a.params)
    assert weight_bytes(a, "fp8") == pytest.approx((a.params - emb) + 2 * emb)
    dev, eff = get_device("h100"), load_fit()[0]
    t = {d: float(forward_s(Setup(a, dev, eff, 4, "vllm", d), 0, 1, 1, "kernel_sum")) for d in ("bf16", "fp8", "int4")}
    assert t["int4"] < t["fp8"] < t["bf16"]  # decode reads the weights: fewer bytes, faster
    assert not bool(fits(Setup(a, dev, eff, 1, "vllm"), 0, 1, 1)) and bool(fits(Setup(a, dev, eff, 1, "vllm", "int4"),
                                                                                     0, 1, 1))
    assert float(memory_need(a, 8192, 4, 1, 4, kv_dtype="fp8")) < float(memory_need(a, 8192, 4, 1, 4))


def test_hf_eager_prices_bf16_only():
    with pytest.raises(InputError, match="hf-eager engine is priced in bf16"):
        Setup(ARCH, TOY, EFF, 1, "hf-eager", "fp8")
    with pytest.raises(InputError, match="unknown engine"):
        Setup(ARCH, TOY, EFF, 1, "mlc")


# ----------------------------------------------------------------------------- placement


def test_draft_and_judge_default_to_a_gpu_of_their_own():
    hw = HardwareSpec("model:h100:tp4:fp8", "qwen2.5-32b", "qwen2.5-1.5b", judge_arch="qwen2.5-7b")
    assert hw.specs["draft"] == hw.specs["judge"] == "model:h100-sxm:tp1:fp8:vllm:wall"
    assert hw.colocated == "none" and any("devices of its own" in n for n in hw.notes())
    # the draft at TP 1 on its own GPU, not forced onto the target's TP 4
    assert hw.draft("async").seconds(0, 1, 1) == pytest.approx(
        synthesize("h100:fp8", "qwen2.5-1.5b").time_ms("qwen2.5-1.5b", 0, 1, 1) / 1e3)
    own = HardwareSpec("model:h100:tp4", "qwen2.5-32b", "qwen2.5-1.5b", draft_hardware="model:a100:tp1")
    assert own.draft("async").seconds(0, 1, 1) > hw.draft("async").seconds(0, 1, 1)
    co = HardwareSpec("model:h100:tp4", "qwen2.5-32b", "qwen2.5-1.5b", draft_hardware="colocated")
    assert co.colocated == "draft" and co.specs["draft"] == "model:h100-sxm:tp1:bf16:vllm:wall"
    measured = HardwareSpec("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b")
    assert measured.specs["draft"] == "h100-ctx0-kernel"  # a measured profile keeps its own entries


def test_a_hardware_spec_is_data_until_its_loader_runs(monkeypatch):
    import importlib

    syn = importlib.import_module("lrsim.gpu.synthesize")  # the module (lrsim.gpu.synthesize is also a function)
    hw = HardwareSpec("model:h100:tp4:kv-fp8", "no-such-model", "qwen2.5-1.5b")  # constructing reads nothing
    with pytest.raises(InputError, match="no-such-model"):
        hw.load()
    parsed = []
    real = syn.parse_spec
    monkeypatch.setattr(syn, "parse_spec", lambda spec: parsed.append(spec) or real(spec))
    hw = HardwareSpec("model:h200:tp2:ep", "qwen3-30b-a3b", "qwen3-0.6b", judge_arch="qwen3-0.6b",
                      kv_dtype="fp8").load()
    # the draft's and judge's GPU (TP 1, no EP) derive from the one parsed target spec, not from its text
    assert parsed == ["model:h200:tp2:ep"]
    assert hw.specs["draft"] == hw.specs["judge"] == "model:h200:tp1:bf16:vllm:kv-fp8:wall"
    assert hw.profiles["draft"] is hw.profiles["judge"] and hw.load() is hw


@pytest.mark.parametrize("kw, msg", [
    ({"target_tp": 2, "tp_efficiency": 0.9}, "TP lives in the model: spec"),
    ({"kv_dtype": "fp4"}, "kv_dtype must be fp8"),
    ({"verifier_hardware": "model:h100"}, "give judge_arch too"),
])
def test_placement_refuses_what_it_cannot_mean(kw, msg):
    with pytest.raises(InputError, match=msg):
        HardwareSpec("model:h100:tp2", "qwen2.5-32b", "qwen2.5-1.5b", **kw)
    with pytest.raises(InputError, match="prices a modelled profile"):
        HardwareSpec("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b", kv_dtype="fp8")


def test_a_stall_moves_every_finish_by_its_length():
    env = simpy.Environment()
    srv = TargetServer(env, lambda b, extra=0: 1.0, grid=True)
    ends = []
    job = Job(0, 10, 3.0, 10)
    job.on_done = lambda j, now: ends.append(now)
    srv.submit([job])
    assert srv.stall(0.5, 2.0) == 2.5
    assert srv.stall(1.0, 1.0) == 3.5  # queued behind the first stall
    env.run()
    assert ends == [6.0] and srv.stalled == 3.0  # 3 passes of 1 s, plus 3 s stalled


def test_colocated_draft_slows_async_not_sync():
    base = dict(alpha1=0.6, c1=0.2, k1=4, steps=3000)
    a0, a1 = (float(simulate(SimConfig(mode="async", colocated=c, **base)).speedup) for c in ("none", "draft"))
    s0, s1 = (float(simulate(SimConfig(mode="sync", colocated=c, **base)).speedup) for c in ("none", "draft"))
    assert a1 < a0 and s1 == s0  # sync never drafts while the target runs
    with pytest.raises(InputError, match="colocated"):
        SimConfig(mode="async", colocated="gpu0")


def test_cli_placement_flags(capsys):
    args = ["replay", "--hardware", "model:h100:tp2", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
            "--alpha1", "0.6", "--mode", "async", "--k1", "4", "--json"]
    assert cli.main(args) == 0
    own = capsys.readouterr().out
    assert cli.main(args + ["--draft-hardware", "colocated"]) == 0
    co = capsys.readouterr().out
    import json

    assert json.loads(co)["speedup"] < json.loads(own)["speedup"]
    assert cli.main(args + ["--target-tp", "2", "--tp-efficiency", "0.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "TP lives in the model: spec" in err and "\n" not in err


def test_spec_text_round_trips():
    for spec in ("h100:tp4:fp8", "a100:int4:kv-fp8:kernel", "h200:tp2:hf-eager"):
        m = parse_spec(spec)
        assert parse_spec(m.text()) == m
    assert np.isfinite(synthesize("h100:tp8:fp8", "llama-3.1-70b").time_ms("llama-3.1-70b", 32768, 4, 8))
