"""The GEMM kernel curves (lrsim/data/gpus/kernels.json, lrsim.gpu.kernels): each loads with its source, and the
model prices each format's GEMMs at its own kernel's efficiency."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lrsim.errors import InputError
from lrsim.gpu import kernels
from lrsim.gpu.archs import load_arch
from lrsim.gpu.devices import get_device
from lrsim.gpu.dtypes import DTYPES, get_dtype
from lrsim.gpu.fit import load_fit
from lrsim.gpu.ops import gemm
from lrsim.gpu.setup import Setup


def _setup(device: str = "h100-sxm", dtype: str = "bf16") -> Setup:
    return Setup(load_arch("qwen2.5-7b"), get_device(device), load_fit()[0], engine="vllm", dtype=dtype)


def test_every_curve_loads_with_a_source():
    cs = kernels.curves()
    assert {"cublas-bf16", "marlin-w4a16", "marlin-w8a16", "cutlass-fp8-w8a8", "cutlass-fp8-block"} <= set(cs)
    raw = json.loads(kernels.KERNELS_FILE.read_text(encoding="utf-8"))
    for name, c in cs.items():
        assert c.source.strip() and c.peak in ("bf16", "fp8")
        if name != "cublas-bf16":  # every published curve names where it was read
            assert raw["curves"][name]["url"].startswith("https://")
        for r in (c.bandwidth, c.flops):
            assert all(0 < y <= 1.0 for y in r.y)


def test_every_format_has_a_curve_or_says_whose_it_borrows():
    for name, f in DTYPES.items():
        assert kernels.curve_for(f.kernel_curve).name
    weight_only = get_dtype("fp8", has_fp8=False)
    assert kernels.curve_for(weight_only.kernel_curve).name == "marlin-w8a16"
    assert "fp8_marlin" in kernels.borrowed("fp8-weight-only")
    assert "Marlin" in kernels.borrowed("int8")  # an int8 W8A8 checkpoint rides the w8a16 curve
    assert kernels.borrowed("int4") is None  # int4 has its own
    with pytest.raises(InputError, match="no kernel curve"):
        kernels.curve_for("int3")


def test_int4_decode_reads_about_a_quarter_of_the_bf16_weight_bytes():
    ratio = DTYPES["bf16"].weight_bytes / DTYPES["int4"].weight_bytes
    assert 3.8 < ratio < 4.0  # 4 bits + an fp16 scale per 128 weights: 3.88x less traffic
    # at M = 1 both are memory-bound: the int4 GEMM is faster by the byte ratio times Marlin's bandwidth ratio
    N = K = 8192
    t16 = float(gemm(_setup(), 1.0, N, K, kernels=0))
    t4 = float(gemm(_setup(dtype="int4"), 1.0, N, K, kernels=0, fmt=DTYPES["int4"]))
    r_b = kernels.curve_for("int4").bandwidth(1.0, get_device("h100-sxm").hbm_tb_s)
    split_k = 1.0 + 8192 * min(1, load_fit()[0].splitk_rows) * load_fit()[0].splitk_bytes / (2 * N * K)
    assert t16 / t4 == pytest.approx(ratio * float(r_b) * split_k, rel=0.01)


def test_marlin_bandwidth_ratio_falls_with_the_device_bandwidth():
    c = kernels.curve_for("int4")
    a10, a100, h100 = (float(c.bandwidth(1, b)) for b in (0.6, 2.039, 3.35))
    assert a10 == pytest.approx(1.0) and a100 == pytest.approx(0.81) and h100 == pytest.approx(0.54)


def test_marlin_efficiency_falls_toward_compute_bound_at_large_m():
    c = kernels.curve_for("int4")
    r_f = c.flops(np.array([256.0, 1024.0, 4000.0, 16384.0]), 3.35)
    assert r_f[0] == pytest.approx(0.74) and r_f[-1] == pytest.approx(0.61)
    assert np.all(np.diff(r_f) <= 0.011)  # no recovery beyond the source's wobble (0.60 -> 0.61)
    # priced: a prefill-sized int4 GEMM is slower than the bf16 one (dequantization, mma.sync), not 4x faster
    M, N, K = 4096.0, 8192, 8192
    t16 = float(gemm(_setup(), M, N, K, kernels=0))
    t4 = float(gemm(_setup(dtype="int4"), M, N, K, kernels=0, fmt=DTYPES["int4"]))
    assert t4 / t16 == pytest.approx(1 / 0.61, rel=0.02)


def test_fp8_w8a8_runs_at_the_fp8_peak_times_its_curve():
    c = kernels.curve_for("fp8")
    assert c.peak == "fp8" and DTYPES["fp8"].fp8_peak
    M, N, K = 8192.0, 8192, 8192  # compute-bound
    s = _setup(dtype="fp8")
    t8 = float(gemm(s, M, N, K, kernels=0, fmt=DTYPES["fp8"]))
    expect = 2 * M * N * K / (s.eff.flops * float(c.flops(M, 3.35)) * s.device.fp8_flops)
    assert t8 == pytest.approx(expect, rel=1e-9)
    t16 = float(gemm(_setup(), M, N, K, kernels=0))
    assert 1.5 < t16 / t8 < 2.0  # FP8 doubles the peak; the published ratio takes ~17% of it back


def test_block_fp8_is_a_priced_format_with_its_own_curve():
    f = get_dtype("fp8-block")
    assert f.fp8_peak and kernels.curve_for(f.kernel_curve).name == "cutlass-fp8-block"
    assert get_dtype("fp8-block", has_fp8=False).kernel_curve == "fp8-weight-only"  # no FP8 cores: Marlin
    s = _setup(dtype="fp8-block")
    assert float(gemm(s, 64.0, 8192, 8192, fmt=f)) > float(gemm(s, 64.0, 8192, 8192, fmt=DTYPES["fp8"]))


def test_bf16_is_unchanged_by_the_curves():
    s = _setup()
    M, N, K = np.array([1.0, 64.0, 4096.0]), 4096, 4096
    e = s.eff
    nbytes = 2 * N * K + 2 * M * K + 2 * M * N + N * np.minimum(M, e.splitk_rows) * e.splitk_bytes
    expect = np.maximum(2 * M * N * K / (e.flops * s.device.flops), nbytes / (e.bandwidth * s.device.bandwidth))
    assert np.allclose(gemm(s, M, N, K, kernels=0), expect)
