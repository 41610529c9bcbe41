"""lrsim.gpu.moe's fused-MoE kernel paths (kernels.json "moe"): the fit of the published sweeps, the path a format
runs, the curve's shape, and bad data refused in one line."""

from dataclasses import replace

import numpy as np
import pytest

from lrsim.errors import InputError
from lrsim.gpu.archs import load_arch
from lrsim.gpu.engine_vllm import forward_ops, moe_mlp
from lrsim.gpu.moe import MoeSweep, _sweep, fit_sweeps, moe_kernel, moe_kernels, moe_seconds
from lrsim.gpu.synthesize import parse_spec

QWEN = load_arch("qwen3-30b-a3b")


def toy_sweep(t0=10.0, u_b=0.5, u_f=0.25, Ms=(1, 2, 4, 8), big=(4096,)):
    """A sweep whose times follow the model exactly: t = t0 + W / (u_b B) (memory-bound), t0 + F / (u_f P)."""
    sw = MoeSweep("toy", 1.0, 1.0, 4, 4, 1, 8, 16, 2.0, (), (), (), ())
    Ms = tuple(float(m) for m in Ms) + tuple(float(m) for m in big)
    us = tuple(t0 + float(sw.nbytes(m)) / (u_b * 1e12) * 1e6 for m in Ms[:-len(big)]) + \
        tuple(t0 + float(sw.flops(m)) / (u_f * 1e12) * 1e6 for m in big)
    return replace(sw, M=Ms, us=us, memory_bound_M=Ms[:-len(big)], compute_bound_M=tuple(float(m) for m in big))


def test_the_sweep_bytes_and_flops_by_hand():
    sw = toy_sweep()
    # E = 4, k = 1: one token wakes 1 expert of 3 x 8 x 16 x 2 = 768 bytes, its pair's activations (8 + 16) x 4
    assert float(sw.nbytes(1)) == pytest.approx(768 + 96)
    # two tokens: 4 (1 - (3/4)^2) = 1.75 experts, 2 pairs
    assert float(sw.nbytes(2)) == pytest.approx(1.75 * 768 + 2 * 96)
    assert float(sw.flops(3)) == pytest.approx(2 * 3 * 1 * 3 * 8 * 16)  # 2 M k x 3 N K
    half = replace(sw, held=2)  # an expert-parallel rank holding 2 of the 4 experts: half of each
    assert float(half.nbytes(2)) == pytest.approx(float(sw.nbytes(2)) / 2)


def test_the_fit_recovers_a_line_it_was_drawn_from():
    t0, u_b, u_f = fit_sweeps((toy_sweep(),))
    assert (t0, u_b, u_f) == pytest.approx((10.0, 0.5, 0.25), rel=1e-9)
    # no compute-bound point: no u_f; one memory-bound point: no line
    assert fit_sweeps((replace(toy_sweep(), compute_bound_M=()),))[2] is None
    assert fit_sweeps((replace(toy_sweep(), memory_bound_M=(1.0,)),))[:2] == (None, None)


def test_the_shipped_curves_come_from_their_sweeps_and_reproduce_them():
    ks = moe_kernels()
    assert {("triton", "hopper"), ("triton", "blackwell"), ("triton-fp8", "hopper"), ("marlin", "hopper"),
            ("mxfp4", "hopper"), ("mxfp4", "blackwell")} <= set(ks)
    for (path, gen), k in ks.items():
        assert k.source and 0 < k.bandwidth <= 1 and 0 < k.flops <= 1 and k.fixed_us >= 0, (path, gen)
        # the line through the memory-bound points stays within 8% of each of them (FlashInfer's TRT-LLM-gen sweep,
        # which the Blackwell MXFP4 path borrows: within 25%, +22% at one token)
        tol = 0.25 if (path, gen) == ("mxfp4", "blackwell") else 0.08
        for sw in k.sweeps:
            for m in sw.memory_bound_M:
                pred = k.fixed_us + float(sw.nbytes(m)) / (k.bandwidth * sw.bandwidth_tb_s * 1e12) * 1e6
                assert pred == pytest.approx(sw.time_us(m), rel=tol), (path, gen, m)
    # the numbers the docs quote (docs/gpu-model.md, "Mixture of experts: the fused-MoE kernels")
    h = ks[("triton", "hopper")]
    assert (round(h.fixed_us, 1), round(h.bandwidth, 3), round(h.flops, 3)) == (33.5, 0.934, 0.479)
    m = ks[("marlin", "hopper")]
    assert (round(m.fixed_us, 1), round(m.bandwidth, 3), round(m.flops, 3)) == (35.3, 0.428, 0.299)
    assert ks[("mxfp4", "hopper")].bandwidth == 0.552 and ks[("mxfp4", "hopper")].fixed_us == h.fixed_us


def test_a_published_sweep_left_out_of_the_fit_is_priced_within_15_percent():
    # vLLM PR #39902: gpt-oss-120b's experts in bf16 at TP 1 on an H100 (E=128, N=K=2880, top-4), benchmark_moe.py
    k = moe_kernel("bf16", "", "hopper")
    sw = MoeSweep("h100", 3.35, 989.4, 128, 128, 4, 2880, 2880, 2.0, (1.0, 8.0), (85.24, 501.58), (), ())
    for m, t in zip(sw.M, sw.us):
        got = 1e6 * float(k.seconds(sw.nbytes(m), sw.flops(m), 3.35e12, 989.4e12))
        assert got == pytest.approx(t, rel=0.15)


def test_the_achieved_bandwidth_rises_with_the_batch_and_the_time_never_falls():
    for fmt, w, gen, B, P in (("bf16", 2.0, "hopper", 3.35e12, 989.4e12), ("fp8", 1.0, "hopper", 3.35e12, 1978.9e12),
                              ("int4", 0.5 + 2 / 128, "hopper", 3.35e12, 989.4e12),
                              ("bf16", 2.0, "blackwell", 8.0e12, 2250e12)):  # on an H100, on a B200
        k = moe_kernel(fmt, "", gen)
        sw = MoeSweep("x", 3.35, 989.4, 128, 128, 8, 768, 2048, w, (), (), (), ())  # Qwen3-30B-A3B's experts
        M = np.array([1, 2, 4, 8, 16, 32, 64, 128], dtype=float)
        W, F = sw.nbytes(M), sw.flops(M)
        frac, t = k.achieved(W, F, B, P), k.seconds(W, F, B, P)
        assert np.all(np.diff(frac) > 0) and np.all(np.diff(t) > 0)
        assert frac[0] < 0.5 * k.bandwidth and frac[-1] < k.bandwidth  # one token: the fixed time dominates


def test_each_format_runs_its_kernel_path():
    assert moe_kernel("bf16", "", "hopper").path == moe_kernel("fp16", "", "hopper").path == "triton"
    assert moe_kernel("fp8", "", "hopper").path == moe_kernel("fp8-block", "", "hopper").path == "triton-fp8"
    assert moe_kernel("fp8", "", "hopper").peak == "fp8" and moe_kernel("int4", "", "hopper").peak == "bf16"
    assert moe_kernel("int4", "", "hopper").path == moe_kernel("int8", "", "hopper").path == "marlin"
    assert moe_kernel("fp8-weight-only", "", "ampere").path == "marlin"  # no FP8 cores: vLLM's Marlin FP8 MoE
    assert moe_kernel("bf16", "mxfp4", "hopper").path == "mxfp4"  # gpt-oss: the checkpoint's experts, any dtype
    assert moe_kernel("bf16", "", "blackwell").generation == "blackwell"
    assert moe_kernel("bf16", "", "ada") == replace(moe_kernel("bf16", "", "ampere"), generation="ampere")
    marlin_b = moe_kernel("int4", "", "blackwell")
    assert marlin_b.generation == "blackwell" and "hopper" in marlin_b.borrowed
    assert marlin_b.fixed_us == moe_kernel("int4", "", "hopper").fixed_us
    # a setup picks by its format and device: A100 FP8 falls back to Marlin, gpt-oss runs MXFP4
    a100 = parse_spec("a100-80gb:fp8:vllm").setup(QWEN)
    assert a100.fmt.kernel_curve == "fp8-weight-only"
    gpt = parse_spec("h100:tp4:vllm").setup(load_arch("gpt-oss-120b"))
    assert moe_kernel(gpt.fmt.kernel_curve, gpt.arch.weights_format, gpt.device.generation).path == "mxfp4"


def test_moe_mlp_prices_the_experts_at_the_path_by_hand():
    s = parse_spec("h100:vllm").setup(QWEN)  # TP 1, bf16, Hopper: the Triton path
    k = moe_kernel("bf16", "", "hopper")
    h, i = QWEN.hidden, QWEN.expert_intermediate
    W = 8 * 3 * h * i * 2 + 1 * 8 * (h + i) * 2 * 2  # one token: 8 experts whole, 8 pairs' activations
    got = float(moe_mlp(s, 1.0)["experts"])
    assert got == pytest.approx(k.fixed_us * 1e-6 + W / (k.bandwidth * 3.35e12), rel=1e-12)
    assert got == pytest.approx(float(moe_seconds(s, W, 2.0 * 8 * 3 * h * i)), rel=1e-12)
    # FP8 runs at the FP8 peak and its own numbers; int4 at Marlin's
    for fmt, path in (("fp8", "triton-fp8"), ("int4", "marlin")):
        q = parse_spec(f"h100:{fmt}:vllm").setup(QWEN)
        assert float(moe_mlp(q, 1.0)["experts"]) > moe_kernel(fmt, "", "hopper").fixed_us * 1e-6
        assert moe_kernel(q.fmt.kernel_curve, "", "hopper").path == path


def test_one_token_pays_the_calls_fixed_time_in_every_moe_layer():
    # under a CUDA graph the host launches nothing per kernel, but the device still runs each layer's fused-MoE call
    s = parse_spec("b200:tp8:sglang").setup(load_arch("qwen3-235b-a22b"))
    t0 = moe_kernel("bf16", "", "blackwell").fixed_us * 1e-6
    ex = float(forward_ops(s, 1024.0, 1.0, 1.0)["experts"])
    assert 94 * t0 < ex < 94 * t0 * 1.5  # 94 MoE layers; one token's 8 experts of 9.4 MB per GPU add little


def test_bad_moe_data_is_one_line():
    base = {"bandwidth_tb_s": 1.0, "peak_tflops": 1.0, "experts": 4, "top_k": 1, "intermediate": 8, "hidden": 16,
            "weight_bytes": 2, "M": [1, 2], "us": [10.0, 12.0], "memory_bound_M": [1, 2]}
    assert _sweep(base, "x").held == 4
    for bad, match in (({"us": [10.0]}, "equal length"), ({"memory_bound_M": [3]}, "does not hold"),
                       ({"top_k": 0}, "top_k"), ({"M": [1, -2]}, "positive"), ({"weight_bytes": True}, "weight_bytes")):
        with pytest.raises(InputError, match=match) as e:
            _sweep(base | bad, "kernels.json: moe.paths.t.generations.g.sweeps[0]")
        assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="no fused-MoE kernel path for experts in 'int3'"):
        moe_kernel("int3", "", "hopper")
    with pytest.raises(InputError, match="no fused-MoE curve for GPU generation 'volta'"):
        moe_kernel("bf16", "", "volta")
