"""lrsim.gpu.mla: multi-head latent attention (DeepSeek-V3/R1) on the serving engines: the layer's parameters, the
operators' bytes (the latent cache read once per sequence, replicated under TP), the absorbed and expanded paths,
memory, a DeepSeek-V3 profile and plan, and its decode step against a published row."""

from dataclasses import replace

import numpy as np
import pytest

from lrsim import cli
from lrsim.errors import InputError
from lrsim.gpu import mla
from lrsim.gpu.archs import load_arch
from lrsim.gpu.devices import DeviceSpec
from lrsim.gpu.engine_vllm import forward_ops, kernels, layer_ops
from lrsim.gpu.model import Efficiencies, Setup, forward_s, memory_need
from lrsim.gpu.synthesize import parse_spec, synthesize

DSV3 = load_arch("deepseek-v3")
# a toy device: FLOPs free, 1e12 B/s at 50%, no fixed costs, so every operator is its bytes / 5e11
TOY = DeviceSpec(name="toy", label="toy", vendor="", bf16_dense_tflops=1e9, memory_gib=1.0, hbm_tb_s=1.0,
                 link_gb_s=100.0, fabric_gb_s=100.0, host_link_gb_s=10.0, link_latency_us=5.0)
EFF = Efficiencies(flops=0.5, bandwidth=0.5, kernel_us=0.0, splitk_bytes=0.0, host_us=10.0)
BW = 0.5e12


def toy(tp=1, arch=DSV3, **kw):
    return Setup(arch, TOY, EFF, tp, "vllm", **kw)


def test_the_mla_layer_has_deepseek_v3s_published_attention_parameters():
    # the tensors of one layer's attention in deepseek-ai/DeepSeek-V3's checkpoint (config.json's shapes:
    # hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head_dim 128)
    tensors = {"q_a_proj": 1536 * 7168, "q_a_layernorm": 1536, "q_b_proj": 128 * (128 + 64) * 1536,
               "kv_a_proj_with_mqa": (512 + 64) * 7168, "kv_a_layernorm": 512, "kv_b_proj": 128 * (128 + 128) * 512,
               "o_proj": 7168 * 128 * 128, "input_layernorm": 7168, "post_attention_layernorm": 7168}
    assert DSV3.attn_params == sum(tensors.values()) == 187_121_664
    # total and active parameters unchanged (tests/test_gpu_archs_moe.py checks them against the README's)
    assert (DSV3.params, DSV3.active_params) == (671_026_404_352, 36_625_603_584)


def weights_read(s, keys):
    """Bytes of weights the operators ``keys`` of one layer read: 2 t(1 token) - t(2 tokens) on the toy device
    (activations scale with the tokens, weights do not)."""
    one, two = (layer_ops(s, 0.0, float(b), 1.0) for b in (1, 2))
    return sum(2 * float(one[k]) - float(two[k]) for k in keys) * BW


@pytest.mark.parametrize("tp", [1, 8])
def test_the_operators_read_the_mla_weights_once_and_tp_splits_all_but_the_a_projections(tp):
    a = DSV3
    ql, kl, r, P, V, H, h = (a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim,
                             a.heads, a.hidden)
    replicated = h * (ql + kl + r)  # fused_qkv_a_proj: disable_tp, every GPU reads it whole
    sharded = ql * H * (P + r) + kl * H * (P + V) + H * V * h  # q_b, kv_b (the absorbed bmm), o
    assert weights_read(toy(tp), ("qkv_a",)) == pytest.approx(2 * replicated)
    assert weights_read(toy(tp), ("q_b", "mla_up", "o")) == pytest.approx(2 * sharded / tp)
    # together: the layer's projections (its attention parameters less the four norms)
    norms = ql + kl + 2 * h
    assert 2 * (replicated + sharded) == 2 * (a.attn_params - norms)


def test_decode_attention_reads_the_latent_once_per_sequence():
    s, L = toy(), 32768.0
    t = float(mla.latent_attention(s, L, 1.0, 1.0))
    latent = (L + 1) * (512 + 64) * 2  # the cached latent and RoPE key, bf16
    small = (2 * 512 + 64) * 128 * 2  # the absorbed queries in and the latent outputs out, every head
    assert t * BW == pytest.approx(latent + small)
    # it scales with kv_lora_rank + rope, not with heads x head_dim: doubling the latent doubles the cache bytes
    wide = toy(arch=replace(DSV3, kv_lora_rank=1024))
    assert float(mla.latent_attention(wide, L, 1.0, 1.0)) / t == pytest.approx((1024 + 64) / 576, rel=2e-3)
    dense_equivalent = (L + 1) * 2 * DSV3.kv_heads * DSV3.head_dim * 2  # K and V of 128 heads of 192: 85x more
    assert latent * 80 < dense_equivalent
    # b rows read b latents
    assert float(mla.latent_attention(s, L, 4.0, 1.0)) == pytest.approx(4 * t, rel=1e-9)


def test_tp_splits_the_heads_not_the_latent_cache():
    L = 32768.0
    one, eight = (float(mla.latent_attention(toy(n), L, 1.0, 1.0)) for n in (1, 8))
    assert eight == pytest.approx(one, rel=0.01)  # each GPU reads the whole latent for its 16 heads
    assert eight * BW > (L + 1) * 576 * 2  # not an eighth of it
    # memory: every GPU caches its rows' whole latent (vLLM: one KV head per rank)
    kv = DSV3.kv_bytes_per_token() * 32768
    for tp in (1, 8):
        assert float(memory_need(DSV3, 32767, 1, 1, tp, "fp8") - memory_need(DSV3, 0, 1, 1, tp, "fp8")) == \
            pytest.approx(kv - DSV3.kv_bytes_per_token(), rel=1e-12)
    # the weights: a TP-8 GPU holds more than an eighth (the replicated a-projections), DP attention more still
    w1, w8 = (float(memory_need(DSV3, 0, 1, 1, tp, "fp8")) for tp in (1, 8))
    extra = mla.replicated_params(DSV3) * (1 - 1 / 8)  # fp8: 1 byte per weight
    assert w8 > w1 / 8 + extra and mla.replicated_params(DSV3) == 61 * 7168 * 2112
    assert float(memory_need(DSV3, 0, 8, 1, 8, "fp8", dp_attention=True)) > w8


def test_absorbed_for_decode_and_verification_expanded_for_prefill():
    s = parse_spec("h200:tp8:fp8").setup(DSV3)
    assert mla.DECODE_MAX_Q == 128
    assert bool(mla.absorbed(1, False)) and bool(mla.absorbed(64, False)) and bool(mla.absorbed(128, False))
    assert not mla.absorbed(129, False) and not mla.absorbed(1, True)
    q = np.array([1.0, 16.0, 128.0, 129.0])
    ops = mla.attention_ops(s, 2048.0, 1.0, q)
    fast = mla.bmm(s, q, 16, 512, 128) + mla.bmm(s, q, 16, 128, 512)
    assert np.allclose(ops["mla_up"][:3], fast[:3]) and ops["mla_up"][3] == pytest.approx(
        float(mla.up_projection(s, 2048.0, 1.0, 129.0)))
    # at decode the absorbed path is the cheap one: the expanded one up-projects the whole cached context
    dec = float(mla.latent_attention(s, 8192.0, 1.0, 1.0) + fast[0])
    exp = float(mla.expanded_attention(s, 8192.0, 1.0, 1.0) + mla.up_projection(s, 8192.0, 1.0, 1.0))
    assert dec < exp / 5
    # a prefill: kv_b over the prompt, causal FlashAttention with 192-wide q/k and 128-wide v heads
    pre = mla.attention_ops(s, 0.0, 1.0, 2048.0, prefill=True)
    assert float(pre["attention"]) == pytest.approx(float(mla.expanded_attention(s, 0.0, 1.0, 2048.0, True)))
    assert float(forward_s(s, 0.0, 1.0, 2048.0, prefill=True)) > float(forward_s(s, 2048.0, 1.0, 64.0))


def test_kernels_of_an_mla_layer():
    s = parse_spec("h200:tp8:fp8").setup(DSV3)
    dense = 10 + 2 + 4  # a dense layer's 10, TP's two all-reduces, w8a8's four activation quantizations
    mla_layer = dense + 5 + 1  # q_a and kv_a norms, q_b, two bmm; a fifth quantized linear
    moe = 58 * (7 - 3 + 3)  # the fused MoE's 7 kernels for the MLP's 3, and a shared expert's 3
    assert kernels(s) == 61 * mla_layer + moe + 10 + 3
    assert "qkv" not in forward_ops(s, 0.0, 1.0, 1.0) and "qkv_a" in forward_ops(s, 0.0, 1.0, 1.0)


def test_deepseek_v3_synthesizes_on_h200_tp8_fp8_with_and_without_ep(tmp_path, capsys):
    for spec in ("h200:tp8:fp8", "h200:tp8:fp8:ep", "h200:tp8:fp8:sglang:ep:dpa"):
        p = synthesize(spec, "deepseek-r1")
        a = p.archs["deepseek-v3"]
        assert a.kv_bytes_per_token == 61 * 576 * 2 and 0 < p.time_ms("deepseek-v3", 2048, 1, 1)
        assert p.time_ms("deepseek-v3", 2048, 1, 1) < p.time_ms("deepseek-v3", 2048, 8, 1) < \
            p.time_ms("deepseek-v3", 2048, 8, 4)
    out = tmp_path / "x.json"
    assert cli.main(["profiles", "--synthesize", "h200:tp8:fp8", "--arch", "deepseek-v3", "--out", str(out)]) == 0
    assert out.is_file()
    assert cli.main(["plan", "--hardware", "model:h200:tp8:fp8", "--target-arch", "deepseek-v3", "--draft-arch",
                     "deepseek-r1-distill-qwen-1.5b", "--alpha1", "0.6", "--alpha2", "0.5", "--budget", "16"]) == 0
    assert "deepseek-v3 target" in capsys.readouterr().out


def test_bf16_does_not_fit_and_hf_eager_refuses_in_one_line():
    with pytest.raises(InputError, match=r"deepseek-v3 \(bf16\) does not fit h200 at TP 8"):
        synthesize("h200:tp8", "deepseek-v3")
    with pytest.raises(InputError) as e:
        Setup(DSV3, parse_spec("h200").device, EFF, 8, "hf-eager")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("deepseek-v3: multi-head latent attention (MLA) and mixture-of-experts "
                                              "pricing is not modelled yet (256 routed experts, 8 per token")
    assert "transformers' eager ones are not" in msg


def test_decode_step_is_in_a_sane_band_and_near_a_published_row():
    # Published: SemiAnalysis InferenceX issue #870 (2026-03-05), DeepSeek-R1-0528 FP8, SGLang 0.5.7, TP 8 on
    # H200, 1k/1k at concurrency 8: mean TPOT 12.8 ms (studies/data/moe_public/measurements.json,
    # ix870-dsr1-h200-sglang-tp8-c8-tpot); single-request decode of DeepSeek-V3/R1 on 8 H200s is reported at
    # tens of tokens/s.  A wide band only: nothing here was measured.
    s = parse_spec("h200:tp8:fp8").setup(DSV3)
    one = 1e3 * float(forward_s(s, 2048.0, 1.0, 1.0, "wall"))
    assert 5.0 < one < 60.0
    c8 = 1e3 * float(forward_s(parse_spec("h200:tp8:fp8:sglang").setup(DSV3), 1536.0, 8.0, 1.0, "wall"))
    assert 0.6 * 12.8 < c8 < 1.4 * 12.8
