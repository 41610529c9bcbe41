"""lrsim.gpu: expert parallelism (``model:...:tpN:ep``) and data-parallel attention (``:ep:dpa``) on MoE targets:
experts the slowest GPU wakes, the all-to-all, memory, the spec and its refusals."""

from dataclasses import replace

import numpy as np
import pytest

from lrsim import cli
from lrsim.errors import InputError
from lrsim.gpu.archs import load_arch
from lrsim.gpu.collectives import all_to_all
from lrsim.gpu.devices import DeviceSpec
from lrsim.gpu.engine_vllm import forward_ops, kernels, moe_mlp
from lrsim.gpu.model import Efficiencies, Setup, expert_bytes, forward_s, memory_need, setup_memory, weight_bytes
from lrsim.gpu.moe import distinct_experts, experts_per_rank, moe_kernel
from lrsim.gpu.synthesize import parse_spec, profile_name, synthesize

# a toy device and efficiencies with round numbers (1e12 FLOP/s and B/s, both at 50%; 1 us per kernel)
TOY = DeviceSpec(name="toy", label="toy", vendor="", bf16_dense_tflops=1.0, memory_gib=1.0, hbm_tb_s=1.0,
                 link_gb_s=100.0, fabric_gb_s=100.0, host_link_gb_s=10.0, link_latency_us=5.0)
EFF = Efficiencies(flops=0.5, bandwidth=0.5, kernel_us=1.0, splitk_bytes=0.0, host_us=10.0)
# 4 routed experts, 1 per token, hidden 64, expert width 32 (Qwen3-30B-A3B's other shapes)
TINY = replace(load_arch("qwen3-30b-a3b"), name="tiny-moe", experts=4, experts_per_token=1, hidden=64,
               expert_intermediate=32)
QWEN = load_arch("qwen3-30b-a3b")


def toy(n=2, ep=False, dpa=False, arch=TINY):
    return Setup(arch, TOY, EFF, n, "vllm", ep=ep, dp_attention=dpa)


def test_experts_the_slowest_gpu_wakes_by_hand():
    # E = 4, k = 1, one token, 2 GPUs of 2 experts: each expert woken with p = 1/4; a GPU's count ~ Binomial(2, 1/4),
    # F(0) = 9/16, F(1) = 15/16; E[max of 2] = (1 - (9/16)^2) + (1 - (15/16)^2) = 206/256 (exact: 1; the
    # binomial approximation is at its worst with few experts per GPU)
    assert float(experts_per_rank(4, 1, 1, 2)) == pytest.approx(206 / 256, rel=1e-12)
    m = np.array([1, 2, 4, 16, 64, 256, 4096])
    for n in (1, 2, 4, 8):
        mx = experts_per_rank(128, 8, m, n)
        mean = distinct_experts(128, 8, m) / n
        assert np.all(mx >= mean - 1e-9) and np.all(mx <= 128 / n + 1e-9) and np.all(np.diff(mx) >= 0)
    assert np.allclose(experts_per_rank(128, 8, m, 1), distinct_experts(128, 8, m))  # one GPU: E[D]
    assert float(experts_per_rank(128, 8, 4096, 4)) == pytest.approx(32.0)  # every expert woken
    assert experts_per_rank(128, 8, np.ones((2, 3)), 4).shape == (2, 3)


def test_the_approximation_against_a_seeded_monte_carlo():
    rng = np.random.default_rng(7)
    E, k, n, trials = 32, 4, 4, 4000  # gpt-oss-20b's experts and top-k at EP 4
    for tokens in (1, 4, 16):
        picks = np.argsort(rng.random((trials, tokens, E)), axis=2)[:, :, :k]  # k distinct experts per token
        woken = np.zeros((trials, E), bool)
        np.put_along_axis(woken, picks.reshape(trials, -1), True, axis=1)
        sim = woken.reshape(trials, n, E // n).sum(axis=2).max(axis=1).mean()
        assert float(experts_per_rank(E, k, tokens, n)) == pytest.approx(sim, rel=0.05)


def test_all_to_all_by_hand():
    # n = 4 inside the domain: egress min(fabric 100, 3 x link 100) = 100 GB/s; 1 MB of which 3/4 leaves:
    # 2 x 5 us + 7.5 us + 1 us
    assert float(all_to_all(toy(4), 1e6)) == pytest.approx(10e-6 + 0.75e6 / 100e9 + 1e-6, rel=1e-12)
    assert float(all_to_all(toy(1), 1e6)) == 0.0
    # beyond the NVLink domain the host link: 9 GPUs of a domain of 8, 10 GB/s
    assert float(all_to_all(toy(9), 9e6)) == pytest.approx(10e-6 + 8e6 / 10e9 + 1e-6, rel=1e-12)


def test_an_expert_parallel_moe_layer_by_hand():
    h, i = 64, 32
    expert = 3 * h * i * 2  # one bf16 expert: 12,288 bytes
    # the fused-MoE call on a device without a generation: the Triton path's Hopper numbers (kernels.json "moe"),
    # t = t0 + max(F / (u_f P), W / (u_b B)); a toy of 1,000 TFLOP/s keeps the FLOPs under the bytes
    k = moe_kernel("bf16")
    fast = Setup(TINY, replace(TOY, bf16_dense_tflops=1000.0), EFF, 2, "vllm")
    # TP 2: one woken expert, half of it per GPU; 1 token-expert pair's activations (h + i) x 2 x 2
    tp = moe_mlp(fast, 1.0)["experts"]
    assert float(tp) == pytest.approx((expert / 2 + (h + i) * 4) / (k.bandwidth * 1e12) + k.fixed_us * 1e-6,
                                      rel=1e-12)
    # EP 2: the slowest GPU's 206/256 experts whole, half the pairs
    ep = moe_mlp(replace(fast, ep=True), 1.0)["experts"]
    assert float(ep) == pytest.approx((206 / 256 * expert + (h + i) * 4 / 2) / (k.bandwidth * 1e12)
                                      + k.fixed_us * 1e-6, rel=1e-12)
    # on the 1 TFLOP/s toy the FLOPs 2 x 3 h i / 2 bound it: F / (u_f P)
    assert float(moe_mlp(toy(2), 1.0)["experts"]) == pytest.approx(3 * h * i / (k.flops * 1e12) + k.fixed_us * 1e-6,
                                                                   rel=1e-12)
    # DP attention: 2 rows over 2 GPUs, one token each way: dispatch + combine of 1 x k x h x 2 = 128 bytes,
    # 2 x (2 x 5 us + 1/2 x 128 / 100 GB/s + 1 us)
    ops = moe_mlp(toy(2, ep=True, dpa=True), 2.0, 1.0)
    assert float(ops["dispatch_combine"]) == pytest.approx(2 * (10e-6 + 64 / 100e9 + 1e-6), rel=1e-12)
    assert "dispatch_combine" not in moe_mlp(toy(2, ep=True), 2.0)


def test_ep_keeps_the_all_reduce_and_dp_attention_exchanges_tokens_instead():
    tp, ep, dpa = (parse_spec(f"h100:tp4:vllm{x}").setup(QWEN) for x in ("", ":ep", ":ep:dpa"))
    o_tp, o_ep, o_dpa = (forward_ops(s, 2048.0, 8.0, 1.0) for s in (tp, ep, dpa))
    assert float(o_ep["all_reduce"]) == float(o_tp["all_reduce"]) > 0 and "dispatch_combine" not in o_ep
    assert float(o_dpa["all_reduce"]) == 0 and float(o_dpa["dispatch_combine"]) > 0
    # attention on each GPU's own rows, all KV heads: 8 rows over 4 GPUs = one GPU's 2 rows at TP 1
    one = parse_spec("h100:tp1:vllm").setup(QWEN)
    assert float(o_dpa["attention"]) == pytest.approx(float(forward_ops(one, 2048.0, 2.0, 1.0)["attention"]))
    assert float(forward_ops(dpa, 2048.0, 7.0, 1.0)["attention"]) == pytest.approx(float(o_dpa["attention"]))
    # kernels: TP's two all-reduces per layer and three per pass go; dispatch and combine per MoE layer come
    assert kernels(ep) == kernels(tp)
    assert kernels(dpa) == kernels(tp) - 2 * QWEN.layers - 3 + 2 * QWEN.moe_layers


def test_expert_parallelism_pays_its_imbalance_at_small_batches_only():
    tp, ep = (parse_spec(f"h100:tp4:vllm{x}").setup(QWEN) for x in ("", ":ep"))
    b = np.array([1.0, 4.0, 16.0, 64.0])
    e_tp, e_ep = (forward_ops(s, 2048.0, b, 1.0)["experts"] for s in (tp, ep))
    fixed = QWEN.moe_layers * moe_kernel("bf16", "", "hopper").fixed_us * 1e-6  # the calls' t0, EP or not
    assert np.all(np.diff(e_ep) > 0) and float(e_ep[0]) > float(e_tp[0])
    assert float(e_ep[0]) - fixed > 1.6 * (float(e_tp[0]) - fixed)  # one token: 3.45 of 32 whole vs 8/4: 1.72x
    big_tp, big_ep = (float(forward_ops(s, 0.0, 64.0, 64.0)["experts"]) for s in (tp, ep))
    assert big_ep < big_tp  # 4096 tokens wake every expert, 32 per GPU either way: no imbalance left, and a GPU
    # reads only its own quarter of the token-expert pairs' hidden states
    dpa = parse_spec("h100:tp4:sglang:ep:dpa").setup(QWEN)
    comm = forward_ops(dpa, 2048.0, b, 1.0)["dispatch_combine"]
    assert np.all(np.diff(comm) >= 0) and float(comm[-1]) > float(comm[0])
    assert np.all(np.diff(forward_s(dpa, 2048.0, b, 1.0, "wall")) > 0)


def test_memory_under_ep_and_dp_attention():
    a, n = QWEN, 4
    ep, dpa = (parse_spec(f"h100:tp4:vllm{x}").setup(a) for x in (":ep", ":ep:dpa"))
    assert float(setup_memory(ep, 2048, 8, 1)) == float(memory_need(a, 2048, 8, 1, 4))  # E / n whole = 1 / n of each
    ex = expert_bytes(a)
    assert ex == a.moe_layers * a.experts * a.expert_params * 2 and 0 < ex < weight_bytes(a)
    rows = 2  # ceil(7 / 4) on the busiest GPU, every KV head, activations unsharded
    want = (weight_bytes(a) - ex + ex / n + a.kv_bytes_per_token() * rows * (2048 + 1)
            + rows * (a.vocab * 4 + 3 * a.intermediate * 2 + 4 * a.hidden * 4))
    assert float(setup_memory(dpa, 2048, 7, 1)) == pytest.approx(want, rel=1e-12)


def test_the_spec_reads_ep_and_dpa():
    m = parse_spec("model:h100:tp4:sglang:ep:dpa:ro0.5")
    assert (m.ep, m.dp_attention, m.attn_tp) == (True, True, 1)
    assert m.text() == "h100-sxm:tp4:bf16:sglang:ep:dpa:ro0.5:wall" and parse_spec(m.text()) == m
    assert profile_name(m) == "model-h100-sxm-tp4-bf16-sglang-ro0.5-ep-dpa-wall"
    assert replace(m, tp=1).text() == "h100-sxm:tp1:bf16:sglang:ro0.5:wall"  # a draft's own GPU: plain TP 1
    p = synthesize("h200:tp8:vllm:ep", "qwen3-235b-a22b")
    assert p.provenance.extra["ep"] and "expert parallel 8" in " ".join(p.provenance.notes)
    assert synthesize("h100:tp4:vllm:ep:dpa", "qwen3-30b-a3b").archs["qwen3-30b-a3b"].unmeasured == 0


@pytest.mark.parametrize("spec,arch,msg", [
    ("h100:tp3:vllm:ep:dpa", "qwen3-30b-a3b", "EP over 3 GPUs does not divide qwen3-30b-a3b's 128 routed experts"),
    ("h100:tp16:vllm:ep", "mixtral-8x7b", "EP over 16 GPUs does not divide mixtral-8x7b's 8 routed experts"),
    ("h100:tp4:vllm:ep", "qwen3-32b", "expert parallelism (:ep) needs a mixture-of-experts model; qwen3-32b is dense"),
    ("h100:tp4:vllm-v0:ep:dpa", "qwen3-30b-a3b", "engine vllm-v0 has no data-parallel attention (:dpa); vllm,"),
    ("h100:tp4:vllm:dpa", "qwen3-30b-a3b", "DP attention (:dpa) is priced with expert parallelism only"),
    ("h100:vllm:ep", "qwen3-30b-a3b", "expert parallelism and DP attention over one GPU are TP 1"),
    ("h100:tp2:vllm:ep:dpa", "qwen3-235b-a22b", "does not fit h100-sxm at DP attention 2 + EP 2: needs 243.1 GB"),
])
def test_bad_layouts_are_one_line_exit_2_nothing_written(tmp_path, capsys, spec, arch, msg):
    out = tmp_path / "p.json"
    assert cli.main(["profiles", "--synthesize", spec, "--arch", arch, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err and not out.exists()


def test_plan_refuses_a_bad_layout_in_one_line(capsys):
    assert cli.main(["plan", "--hardware", "model:h100:tp6:vllm:ep:dpa", "--target-arch", "qwen3-30b-a3b",
                     "--draft-arch", "qwen3-0.6b", "--alpha1", "0.6"]) == 2
    err = capsys.readouterr().err.strip()
    assert "EP over 6 GPUs does not divide qwen3-30b-a3b's 128 routed experts (128 % 6 = 2)" in err
    assert "\n" not in err
    with pytest.raises(InputError, match="needs a mixture-of-experts model"):
        Setup(load_arch("qwen3-8b"), TOY, EFF, 2, "vllm", ep=True)
