"""lrsim.gpu: the operator-level hardware model, device specs, modelled profiles and their CLI (torch-free)."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from lrsim import cli
from lrsim.errors import InputError
from lrsim.gpu import devices, get_device, parse_spec, profile_for_spec, synthesize
from lrsim.gpu.archs import from_config, load_arch, shipped
from lrsim.gpu.devices import DeviceSpec, device_for_name, device_from_dict
from lrsim.gpu.fit import FIT_ARCHS, embedded_points, load_fit, predict_ms
from lrsim.gpu.model import Efficiencies, Setup, attention, elementwise, forward_s, gemm, kernels
from lrsim.gpu.synthesize import Grid
from lrsim.latency.profile import read_profile, write_profile

# params and kv_bytes_per_token (bf16) as measured in shared/gpu/h100/*.json (also checked by test_lrref_profile)
SHARED_SHAPES = {
    "qwen2.5-0.5b": (494032768, 12288), "qwen2.5-1.5b": (1777088000, 28672), "qwen2.5-7b": (7615616512, 57344),
    "qwen2.5-32b": (32763876352, 262144), "qwen3-1.7b": (1720574976, 114688), "qwen3-32b": (32762123264, 262144),
    "tiny": (107072, 256)}
TOY = DeviceSpec(name="toy", label="toy", vendor="", bf16_dense_tflops=1.0, memory_gib=1.0, hbm_tb_s=1.0,
                 link_gb_s=100.0, fabric_gb_s=100.0, host_link_gb_s=10.0, link_latency_us=5.0)  # 1e12 FLOP/s, 1e12 B/s
TOY_EFF = Efficiencies(flops=0.5, bandwidth=0.5, kernel_us=1.0, splitk_bytes=0.0, host_us=10.0)
TOY_ARCH = from_config("toy", {"model_type": "qwen2", "num_hidden_layers": 1, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128,
                               "vocab_size": 100})


def toy(tp=1, eff=TOY_EFF):
    return Setup(TOY_ARCH, TOY, eff, tp)


@pytest.mark.parametrize("name", sorted(SHARED_SHAPES))
def test_shipped_shapes_give_the_measured_parameter_counts(name):
    a = load_arch(name)
    assert (a.params, a.kv_bytes_per_token()) == SHARED_SHAPES[name]


def test_gemm_is_a_roofline_plus_a_kernel_by_hand():
    # M = 1: memory-bound: 2 (NK + MK + MN) = 2 (1e6 + 1e3 + 1e3) bytes at 0.5e12 B/s, + 1 us
    assert float(gemm(toy(), 1.0, 1000, 1000)) == pytest.approx(2.004e6 / 0.5e12 + 1e-6, rel=1e-12)
    # M = 1000: compute-bound: 2 MNK = 2e9 FLOPs at 0.5e12 FLOP/s, + 1 us
    assert float(gemm(toy(), 1000.0, 1000, 1000)) == pytest.approx(2e9 / 0.5e12 + 1e-6, rel=1e-12)
    # skinny GEMMs' extra output traffic: N x min(M, rows) x bytes
    s = Setup(TOY_ARCH, replace(TOY, bf16_dense_tflops=1000.0),
              Efficiencies(flops=0.5, bandwidth=0.5, kernel_us=1.0, splitk_bytes=10.0, splitk_rows=4.0))
    assert float(gemm(s, 8.0, 1000, 1000)) == pytest.approx(
        (2 * (1e6 + 8e3 + 8e3) + 1000 * 4 * 10) / 0.5e12 + 1e-6, rel=1e-12)
    assert float(elementwise(toy(), 1e6, 3)) == pytest.approx(1e6 / 0.5e12 + 3e-6)


def test_ring_bandwidths_by_hand():
    # collectives themselves: tests/test_gpu_engines.py
    assert TOY.ring_bandwidth(4) == 100e9 and get_device("mi300x").ring_bandwidth(2) == 64e9
    assert get_device("mi300x").ring_bandwidth(8) == 448e9 and get_device("h100-pcie").ring_bandwidth(4) == 64e9


def test_attention_paths_by_hand():
    s = toy()
    # q = 1: b (L+1) heads head_dim x 2 (K, V) x 2 bytes at attn_decode x B, + 1 kernel
    want = 2 * 11 * 4 * 16 * 2 * 2 / (TOY_EFF.attn_decode * 1e12) + 1e-6
    assert float(attention(s, 10.0, 2.0, 1.0)) == pytest.approx(want)
    # q > 1: 4 b H ceil(q/64) 64 (L+q) d FLOPs at attn_masked x F, + (L+q) ns/token + per-layer us + 1 kernel
    e = TOY_EFF
    for q, tiles in ((2, 64), (64, 64), (65, 128)):
        want = (4 * 1 * 4 * tiles * (1000 + q) * 16 / (e.attn_masked * 1e12) + (1000 + q) * e.masked_ns_per_token * 1e-9
                + e.masked_layer_us * 1e-6 + 1e-6)
        assert float(attention(s, 1000.0, 1.0, float(q))) == pytest.approx(want, rel=1e-12)


def test_wall_is_the_kernel_sum_or_the_hosts_launches():
    s = toy()
    k = float(forward_s(s, 0, 1, 1, "kernel_sum"))
    assert float(forward_s(s, 0, 1, 1, "wall")) == pytest.approx(max(k, kernels(s) * 10e-6))
    assert kernels(s) == 39 + 23 and kernels(toy(tp=2)) == 41 + 23 + 1
    with pytest.raises(InputError, match="timing kind"):
        forward_s(s, 0, 1, 1, "eager")


def test_tp_must_divide_the_heads():
    with pytest.raises(InputError, match="TP 4 does not divide qwen2.5-1.5b's 12 attention heads and 2 KV heads"):
        synthesize("h200:hf-eager", "qwen2.5-1.5b", tp=4)
    assert synthesize("h200", "qwen2.5-1.5b", tp=4).time_ms("qwen2.5-1.5b", 0, 1, 1) > 0  # vLLM replicates KV heads
    with pytest.raises(InputError, match="TP 3 does not divide"):
        synthesize("h200", "qwen2.5-32b", tp=3)
    p = profile_for_spec("h200:tp4:hf-eager")  # whole device: the 1.5B is there, every point null with the reason
    assert p.arch("qwen2.5-1.5b").unmeasured == len(Grid().context) * len(Grid().batch) * len(Grid().positions)
    with pytest.raises(InputError, match="does not divide"):
        p.time_ms("qwen2.5-1.5b", 0, 1, 1)
    assert p.time_ms("qwen2.5-32b", 0, 1, 1) > 0


def test_models_that_do_not_fit_are_refused_and_points_that_do_not_fit_are_null():
    with pytest.raises(InputError, match=r"qwen2.5-32b \(bf16\) does not fit l40s at TP 1: needs 65.5 GB"):
        synthesize("l40s", "qwen2.5-32b")
    assert synthesize("l40s", "qwen2.5-32b", tp=2).arch("qwen2.5-32b").time_ms(0, 1, 1) > 0
    assert synthesize("l40s:int4", "qwen2.5-32b").arch("qwen2.5-32b").time_ms(0, 1, 1) > 0  # 4-bit weights fit
    # the H100 run's skips are reproduced (hf-eager): 32B at 8192 tokens fits 2 rows, not 4; at 16384, 1, not 2
    a = synthesize("h100-sxm:hf-eager:kernel", "qwen2.5-32b",
                   grid=Grid((8192, 16384), (1, 2, 4), (1,))).arch("qwen2.5-32b")
    assert [[v is not None for (v,) in row] for row in a.ms] == [[True, True, False], [True, False, False]]
    assert any("does not fit: L=8192 b=4" in m for m in a.missing)


def test_spec_parsing():
    got = [(m.device.name, m.tp, m.dtype, m.engine, m.kv_dtype, m.timed) for m in map(parse_spec, (
        "h200:tp2", "h200", "H100", "h200:eager", "a100:tp4:kernel", "model:h200-sxm:tp2:wall", "h100:fp8:tp4",
        "h100:kv-fp8:int4", "h200:hf-eager:kernel"))]
    assert got == [("h200", 2, "bf16", "vllm", "auto", "wall"), ("h200", 1, "bf16", "vllm", "auto", "wall"),
                   ("h100-sxm", 1, "bf16", "vllm", "auto", "wall"), ("h200", 1, "bf16", "hf-eager", "auto", "wall"),
                   ("a100-80gb", 4, "bf16", "vllm", "auto", "kernel_sum"), ("h200", 2, "bf16", "vllm", "auto", "wall"),
                   ("h100-sxm", 4, "fp8", "vllm", "auto", "wall"), ("h100-sxm", 1, "int4", "vllm", "fp8", "wall"),
                   ("h200", 1, "bf16", "hf-eager", "auto", "kernel_sum")]
    assert parse_spec("h100:fp8:tp4").text() == "h100-sxm:tp4:fp8:vllm:wall"
    for bad, msg in (("nope", "unknown device 'nope'"), ("h200:tp0", "TP degree"), ("h200:tq2", "unknown suffix 'tq2'"),
                     ("h200:tp2:tp4", "two tp suffixes"), ("h200:fp8:hf-eager", "hf-eager engine is priced in bf16"),
                     ("h200:int3", "unknown suffix 'int3'")):
        with pytest.raises(InputError, match=msg):
            parse_spec(bad)


def test_a_users_device_file(tmp_path):
    d = {k: v for k, v in get_device("h200").to_dict().items() if v not in (None, [], "")}
    f = tmp_path / "mine.json"
    f.write_text(json.dumps(d | {"name": "mine", "hbm_tb_s": 2 * d["hbm_tb_s"]}))
    m = parse_spec(f"{f}:tp2:eager")
    assert (m.device.name, m.tp, m.engine, m.timed) == ("mine", 2, "hf-eager", "wall")
    assert parse_spec(m.text()).device.name == "mine"  # the file path round-trips through the spec
    fast, base = synthesize(str(f), "qwen2.5-32b", tp=2), synthesize("h200", "qwen2.5-32b", tp=2)
    assert fast.time_ms("qwen2.5-32b", 0, 1, 1) < base.time_ms("qwen2.5-32b", 0, 1, 1)
    for patch, msg in (({"hbm_tb_s": -1}, "hbm_tb_s must be"), ({"speed": 1}, "unknown key"), ({"domain": 0}, "domain"),
                       ({"generation": "volta"}, "generation must be")):
        with pytest.raises(InputError, match=msg):
            device_from_dict(d | patch, "mine.json")
    with pytest.raises(InputError, match="missing 'source'"):
        device_from_dict({k: v for k, v in d.items() if k != "source"}, "mine.json")


def test_embedded_devices_name_their_datasheets():
    ds = devices()
    assert [d.name for d in ds] == ["h100-sxm", "h100-pcie", "h200", "a100-80gb", "l40s", "b200", "mi300x",
                                    "a100-40gb", "rtx-a6000", "h20"]
    assert [d.name for d in ds if d.fp8_flops is None] == ["a100-80gb", "a100-40gb", "rtx-a6000"]  # no FP8 tensor cores
    assert all(d.source and d.url.startswith("https://") and d.bf16_dense_tflops > 0 for d in ds)
    assert device_for_name("NVIDIA H100 80GB HBM3") == "h100-sxm" and device_for_name("NVIDIA H200") == "h200"
    assert device_for_name("NVIDIA H100 PCIe") == "h100-pcie" and device_for_name("a GPU") is None


def test_synthesized_profile_reads_back_and_says_it_is_modelled(tmp_path):
    p = synthesize("h200:hf-eager:kernel", "qwen2.5-32b", tp=2)
    write_profile(p, tmp_path / "p.json")
    q = read_profile(tmp_path / "p.json")
    assert q.name == "model-h200-tp2-bf16-hf-eager-kernel" and q.timed == "kernel_sum"
    assert list(q.archs) == ["qwen2.5-32b"] and q.provenance.extra["engine"] == "hf-eager"
    assert q.provenance.extra["modelled"] is True and q.provenance.extra["tp"] == 2
    assert q.provenance.extra["efficiencies"] == load_fit()[0].to_dict()
    assert "MODELLED" in q.provenance.notes[0] and q.provenance.device.endswith("(modelled)")
    assert q.time_ms("qwen2.5-32b", 1024, 1, 1) == p.time_ms("qwen2.5-32b", 1024, 1, 1)
    assert q.prefill_ms("qwen2.5-32b", 512) > q.time_ms("qwen2.5-32b", 0, 1, 1)
    whole = profile_for_spec("h100-sxm")
    assert set(whole.archs) == set(shipped()) and whole.timed == "wall" and whole.provenance.extra["engine"] == "vllm"
    assert profile_for_spec("h100-sxm:kernel").timed == "kernel_sum"
    assert list(profile_for_spec("h100-sxm", ("qwen2.5-7b",)).archs) == ["qwen2.5-7b"]  # only what is asked for


@pytest.mark.parametrize("spec", ["h100-sxm", "h200:tp2", "b200:eager", "mi300x:tp8", "l40s:tp2", "h100:tp8:fp8",
                                  "a100:tp4:int4:kv-fp8", "h200:tp2:hf-eager:kernel"])
def test_more_batch_context_or_positions_never_cheaper(spec):
    p = profile_for_spec(spec)
    for a in p.archs.values():
        ms = np.array([[[np.nan if v is None else v for v in r] for r in c] for c in a.ms], dtype=float)
        for axis in range(3):
            d = np.diff(ms, axis=axis)
            assert np.all(d[~np.isnan(d)] >= -1e-9), (spec, a.name, axis)


def test_held_out_32b_shapes_within_ten_percent_on_the_h100():
    """The validation's claim, kept: fitted on 0.5B/1.5B/7B only, the 32B kernel sums within 10% on average."""
    eff, rec = load_fit()
    assert tuple(rec["fitted_on"]["archs"]) == FIT_ARCHS
    for p in embedded_points("kernel_sum", ("qwen2.5-32b", "qwen3-32b")):
        rel = predict_ms(p, eff) / p.ms - 1
        assert np.mean(np.abs(rel)) < 0.10 and np.max(np.abs(rel)) < 0.15, (p.profile, p.arch)


def test_tp2_splits_the_weights_not_the_fixed_costs():
    """A 32B decode at TP 2: half the weight reads, the same per-kernel costs on each GPU, plus the all-reduces."""
    one, two = (synthesize("h200:hf-eager:kernel", "qwen2.5-32b", tp=n).time_ms("qwen2.5-32b", 0, 1, 1)
                for n in (1, 2))
    s1, s2 = (Setup(load_arch("qwen2.5-32b"), get_device("h200"), load_fit()[0], n) for n in (1, 2))
    f1, f2 = (kernels(s) * s.kernel_s * 1e3 for s in (s1, s2))  # ms of per-kernel fixed costs
    # NCCL's cheapest all-reduce of 10 KB over 2 NVLink GPUs: ring LL, 6.6 + 2 x 0.6 us of latency (tuning.cc)
    rings = 2 * 64 * (6.6 + 2 * 0.6) * 1e-3  # ms: two all-reduces per layer, latency alone
    assert (one - f1) / 2 + f2 + rings < two < (one - f1) / 2 + f2 + 1.2 * rings


def test_cli_devices_and_synthesize(tmp_path, capsys):
    assert cli.main(["profiles", "--devices"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "mi300x" in out and "datasheet" in out
    assert cli.main(["profiles", "--devices", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(devices())
    f = tmp_path / "h200.json"
    assert cli.main(["profiles", "--synthesize", "h200", "--arch", "qwen2.5-32b", "--tp", "2", "--out", str(f)]) == 0
    assert "wrote" in capsys.readouterr().out and read_profile(f).name == "model-h200-tp2-bf16-vllm-wall"
    assert cli.main(["profiles", str(f), "--arch", "qwen2.5-32b", "--context", "1024"]) == 0
    assert "model-h200-tp2-bf16-vllm-wall" in capsys.readouterr().out
    g = tmp_path / "all.json"
    assert cli.main(["profiles", "--synthesize", "b200:eager", "--out", str(g)]) == 0
    assert read_profile(g).timed == "wall" and set(read_profile(g).archs) == set(shipped())
    assert cli.main(["profiles", "--synthesize", "h100:tp4:fp8", "--arch", "llama-3.1-70b", "--out", str(g)]) == 0
    assert read_profile(g).provenance.extra["dtype"] == "fp8"


@pytest.mark.parametrize("args, msg", [
    (["--synthesize", "h999", "--arch", "qwen2.5-32b"], "unknown device 'h999'"),
    (["--synthesize", "h200", "--arch", "nope"], "unknown architecture 'nope'"),
    (["--synthesize", "h200:hf-eager", "--arch", "qwen2.5-1.5b", "--tp", "4"], "does not divide"),
    (["--synthesize", "l40s", "--arch", "qwen3-32b"], "does not fit"),
    (["--synthesize", "h100", "--arch", "llama-3.1-70b"], "needs"),
    (["--synthesize", "h200", "--arch", "tiny", "--timed", "fast"], "--timed"),
    (["--synthesize", "h200:tp2", "--arch", "tiny", "--tp", "4"], "TP lives in the spec"),
    (["--synthesize", "h200:fp4", "--arch", "tiny"], "unknown suffix 'fp4'"),
    (["--synthesize", "a100:hf-eager:int4", "--arch", "tiny"], "hf-eager engine is priced in bf16"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, msg):
    out = tmp_path / "x.json"
    assert cli.main(["profiles", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lrsim: error: ") and msg in err and "\n" not in err
    assert not out.exists()


def test_cli_synthesize_needs_out_and_its_flags_need_it(capsys):
    assert cli.main(["profiles", "--synthesize", "h200"]) == 2
    assert "--out" in capsys.readouterr().err
    assert cli.main(["profiles", "--tp", "2"]) == 2
    assert "--tp goes with --synthesize" in capsys.readouterr().err
    assert cli.main(["profiles"]) == 0 and "h100-ctx0-kernel" in capsys.readouterr().out


def test_hardware_model_spec_through_the_resolver():
    """``--hardware model:h200:tp2``: the resolver (lrsim's load_profile on main) hands the spec to lrsim.gpu."""
    from lrsim.cost.library import load_profile

    p = load_profile("model:h200:tp2")
    assert p.name == "model-h200-tp2-bf16-vllm-wall" and math.isfinite(p.time_ms("qwen2.5-32b", 1024, 1, 1))
