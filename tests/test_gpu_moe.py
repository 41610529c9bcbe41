"""lrsim.gpu.moe and the fused engines' MoE layers: experts a pass wakes, bytes read, what a batch costs."""

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lrsim.errors import InputError
from lrsim.gpu.archs import load_arch
from lrsim.gpu.engine_vllm import forward_ops, kernels, layer_groups
from lrsim.gpu.model import forward_s, weight_bytes
from lrsim.gpu.moe import MXFP4_BYTES, distinct_experts, moe_kernel
from lrsim.gpu.synthesize import parse_spec

ROOT = Path(__file__).resolve().parents[1]


def test_distinct_experts_by_hand():
    # E = 128, k = 8: one token wakes 8; two independent tokens 128 (1 - (120/128)^2) = 15.5
    assert float(distinct_experts(128, 8, 1)) == pytest.approx(8.0)
    assert float(distinct_experts(128, 8, 2)) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert float(distinct_experts(128, 8, 10_000)) == pytest.approx(128.0)
    d = distinct_experts(128, 8, np.arange(1, 300))
    assert np.all(np.diff(d) > 0) and d[-1] < 128  # grows with the tokens, never past every expert
    # overlap rho: M tokens count as 1 + (M - 1)(1 - rho) independent ones; rho -> 1 reads one token's k
    assert float(distinct_experts(128, 8, 9, overlap=0.5)) == pytest.approx(float(distinct_experts(128, 8, 5)))
    assert float(distinct_experts(128, 8, 1000, overlap=0.9999)) < 9  # N = 1.1: barely more than one token's 8


def test_an_moe_batch_costs_more_than_a_dense_one_as_its_tokens_wake_experts():
    moe = parse_spec("h100:vllm").setup(load_arch("qwen3-30b-a3b"))
    dense = parse_spec("h100:vllm").setup(load_arch("qwen3-32b"))

    def beta(s, n):  # a pass of n rows over one row's, decode at 2K
        return float(forward_s(s, 2048, n, 1, "wall") / forward_s(s, 2048, 1, 1, "wall"))

    assert beta(moe, 16) > 2 * beta(dense, 16)  # a dense model reads its weights once for every row
    ops1, ops16 = (forward_ops(moe, 2048.0, float(b), 1.0) for b in (1, 16))
    fixed = 48 * moe_kernel("bf16", "", "hopper").fixed_us * 1e-6  # the 48 fused-MoE calls' t0, whatever M
    assert float(ops16["experts"]) > 4 * float(ops1["experts"])
    assert float(ops16["experts"]) - fixed > 8 * (float(ops1["experts"]) - fixed)  # 8 experts woken -> ~82 of 128
    assert "mlp" not in ops1 and float(ops1["router"]) > 0


def test_layer_groups_and_kernels_follow_the_config():
    gpt = load_arch("gpt-oss-20b")  # every layer MoE, alternating sliding-window (128) and full attention
    assert sorted(layer_groups(gpt)) == [(12, True, 0), (12, True, 128)]
    assert sorted(layer_groups(load_arch("qwen3-8b"))) == [(36, False, 0)]
    s = parse_spec("h100:vllm").setup(load_arch("qwen3-30b-a3b"))
    dense_like = 48 * (10 + 2) + 10
    assert kernels(s) == dense_like + 48 * (7 - 3)  # the fused MoE's 7 kernels instead of the MLP's 3
    # a sliding-window layer reads at most its window of KV
    full = replace(gpt, sliding_layers=())
    sliding, every = (float(forward_ops(parse_spec("h200:vllm").setup(a), 16384.0, 1.0, 1.0)["attention"])
                      for a in (gpt, full))
    assert sliding < 0.65 * every  # half the layers read 128 cached tokens instead of 16,384 (fixed costs stay)


def test_mxfp4_experts_are_read_at_4_25_bits():
    a = load_arch("gpt-oss-120b")
    experts = a.moe_layers * a.experts * a.expert_params
    assert MXFP4_BYTES == pytest.approx(4.25 / 8)
    assert weight_bytes(a) == pytest.approx((a.params - experts) * 2 + experts * MXFP4_BYTES)


def test_the_moe_check_keeps_its_rule():
    sys.path.insert(0, str(ROOT / "studies"))
    spec = importlib.util.spec_from_file_location("moe_public_check", ROOT / "studies" / "moe_public_check.py")
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    res = mc.run()
    why = {s["id"]: s["why"] for s in res["skipped"]}
    assert "MI300X" in why["cookbook-llama4scout-mi300x-tp8-chat-c1-tpot"]
    assert "ix870-dsr1-h200-sglang-tp8-c8-tpot" in {r["id"] for r in res["rows"]}  # MLA priced (lrsim.gpu.mla)
    assert "no shipped config" in why["cookbook-glm46-b200-tp8-chat-c1-tpot"]
    assert len(res["rows"]) >= 20 and {r["arch"] for r in res["rows"]} >= {"qwen3-30b-a3b", "gpt-oss-120b"}
    with pytest.raises(InputError, match="routing overlap"):
        parse_spec("h100:vllm").setup(load_arch("qwen3-30b-a3b")).__class__(
            load_arch("qwen3-30b-a3b"), parse_spec("h100").device, parse_spec("h100").setup(load_arch(
                "qwen3-8b")).eff, 1, "vllm", routing_overlap=1.0)
