"""lrsim.gpu.archs: mixture-of-experts and MLA configs: shipped copies against published total and active parameter
counts, the fields read, the KV cache of MLA, what is refused (pricing, missing fields), dense shapes unchanged.

Torch-free except the cross-checks against transformers' own models (built on the meta device; skipped without it).
"""

import json
from pathlib import Path

import pytest

from lrsim.errors import InputError
from lrsim.gpu import profile_for_spec, synthesize
from lrsim.gpu.archs import ALIASES, ARCH_DIR, arch_for_model, from_config, load_arch, read_arch, shipped
from lrsim.latency.profile import read_profile, write_profile

PUBLIC = Path(__file__).resolve().parents[1] / "studies" / "data" / "moe_public" / "configs.json"

# Published counts (studies/data/moe_public/configs.json: the model cards, Mistral's announcement, DeepSeek's README),
# and which count of active parameters each publisher gives: Qwen and Mistral count the input embedding table too
# (ArchConfig.active_params_with_embeddings), OpenAI and DeepSeek the LM head but not the table
# (ArchConfig.active_params; DeepSeek-V3's README_WEIGHTS: "36.6B (including 0.9B for the output Head)").
MOE_PUBLISHED = {
    "qwen3-30b-a3b": ("30.5", "3.3", "with_embeddings", "Qwen/Qwen3-30B-A3B card: 30.5B in total and 3.3B activated"),
    "qwen3-coder-30b-a3b": ("30.5", "3.3", "with_embeddings", "Qwen/Qwen3-Coder-30B-A3B-Instruct card"),
    "qwen3-235b-a22b": ("235", "22", "with_embeddings", "Qwen/Qwen3-235B-A22B card: 235B in total and 22B activated"),
    "gpt-oss-20b": ("21", "3.6", "lm_head", "openai/gpt-oss-20b card: 21B parameters with 3.6B active"),
    "gpt-oss-120b": ("117", "5.1", "lm_head", "gpt-oss card: 117B parameters with 5.1B active"),
    "mixtral-8x7b": ("46.7", "12.9", "with_embeddings", "Mistral: 46.7B total, 12.9B per token"),
    # 671B is the main model; the 685B on Hugging Face adds the 14B multi-token-prediction module (layer 61), which
    # transformers does not build and a pass does not run: not counted
    "deepseek-v3": ("671", "37", "lm_head", "DeepSeek-V3 README: 671B total parameters with 37B activated"),
}
# The counts themselves: totals as transformers 5.19 builds the models (checked below where it is installed)
EXACT = {
    "qwen3-30b-a3b": (30_532_122_624, 3_041_867_776), "qwen3-coder-30b-a3b": (30_532_122_624, 3_041_867_776),
    "qwen3-235b-a22b": (235_093_634_560, 21_568_433_664), "gpt-oss-20b": (20_914_757_184, 3_608_307_264),
    "gpt-oss-120b": (116_829_156_672, 5_132_849_472), "mixtral-8x7b": (46_702_792_704, 12_748_853_248),
    "deepseek-v3": (671_026_404_352, 36_625_603_584),
}
# Every architecture shipped before MoE configs were read: (params, KV bytes per bf16 token, weight bytes, one
# layer's params), computed before the change; reading MoE fields must leave each unchanged.
DENSE_BEFORE = {
    "deepseek-r1-distill-qwen-14b": (14770033664, 196608, 27982931968, 275268608),
    "deepseek-r1-distill-qwen-7b": (7615616512, 57344, 14141238272, 233057792),
    "llama-2-70b": (68976648192, 327680, 137429008384, 855654400),
    "llama-2-7b": (6738415616, 524288, 13214687232, 202383360),
    "llama-3-70b": (70553706496, 327680, 139006066688, 855654400),
    "llama-3-8b": (8030261248, 131072, 15009849344, 218112000),
    "llama-3.1-70b": (70553706496, 327680, 139006066688, 855654400),
    "llama-3.1-8b": (8030261248, 131072, 15009849344, 218112000),
    "mistral-7b-v0.1": (7241732096, 131072, 14221320192, 218112000),
    "qwen2-72b": (72706203648, 327680, 142920990720, 877684736),
    "qwen2-7b": (7615616512, 57344, 14141238272, 233057792),
    "qwen2.5-0.5b": (494032768, 12288, 988065536, 14912384),
    "qwen2.5-1.5b": (1777088000, 28672, 3087428608, 46797824),
    "qwen2.5-14b": (14770033664, 196608, 27982931968, 275268608),
    "qwen2.5-32b": (32763876352, 262144, 63970617344, 487605248),
    "qwen2.5-72b": (72706203648, 327680, 142920990720, 877684736),
    "qwen2.5-7b": (7615616512, 57344, 14141238272, 233057792),
    "qwen2.5-coder-0.5b": (494032768, 12288, 988065536, 14912384),
    "qwen2.5-coder-1.5b": (1543714304, 28672, 3087428608, 46797824),
    "qwen3-1.7b": (1720574976, 114688, 3441149952, 50336000),
    "qwen3-14b": (14768307200, 163840, 27980789760, 330311936),
    "qwen3-32b": (32762123264, 262144, 63968421888, 487598336),
    "qwen3-8b": (8190735360, 147456, 15136811008, 192946432),
    "tiny": (107072, 256, 214144, 37120),
}
PUBLIC_KEY = {"qwen3-coder-30b-a3b": "qwen3-coder-30b-a3b-instruct"}  # configs.json's name where it differs


def decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_total_parameters_round_to_the_published_figure(name):
    """The total, rounded as the publisher rounds it (30.5B, 235B, ...), is the published figure: a tolerance of half
    a unit in its last digit (0.05B for 30.5B, 0.5B for 671B); one routed expert too few or too many is 0.6% to
    1.7% of these totals (DeepSeek-V3: 58 x 44M = 2.6B), beyond it."""
    a = load_arch(name)
    total, _, _, source = MOE_PUBLISHED[name]
    assert round(a.params / 1e9, decimals(total)) == float(total), source
    assert a.params == EXACT[name][0] and a.is_moe


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_active_parameters_within_three_percent_of_the_published_figure(name):
    """Within 3% of the published active count, each in its publisher's convention (MOE_PUBLISHED).  3%: the figures
    carry two or three digits (22B and 3.6B are +-2.3% and +-1.4% by rounding alone; Qwen's 3.3B for 3.353B looks
    truncated); what a wrong count would miss is more: the input embedding table is 9% of Qwen3-30B-A3B's active
    count and 16% of gpt-oss-20b's, DeepSeek-V3's shared expert 7%, one routed expert per token 3.5% of
    Qwen3-30B-A3B's (48 x 4.7M) and 4.4% of Mixtral's."""
    a = load_arch(name)
    _, active, convention, source = MOE_PUBLISHED[name]
    got = a.active_params_with_embeddings if convention == "with_embeddings" else a.active_params
    assert abs(got / (float(active) * 1e9) - 1) <= 0.03, (got, source)
    assert a.active_params == EXACT[name][1]
    other = a.active_params if convention == "with_embeddings" else a.active_params_with_embeddings
    if name.startswith(("qwen3-30b", "qwen3-coder", "gpt-oss")):  # the convention matters for these
        assert abs(other / (float(active) * 1e9) - 1) > 0.05


def test_deepseek_v3_by_hand():
    """MLA attention, 3 dense layers, 58 MoE layers with one shared expert and a router; its weights README's active
    split: 36.6B including 0.9B for the LM head."""
    a = load_arch("deepseek-v3")
    h, heads = 7168, 128
    attn = (h * 1536 + 1536 + 1536 * heads * 192  # q_a_proj, q_a_layernorm, q_b_proj (192 = 128 nope + 64 rope)
            + h * (512 + 64) + 512 + 512 * heads * (128 + 128)  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
            + heads * 128 * h + 2 * h)  # o_proj, the two layer norms
    expert, dense = 3 * h * 2048, 3 * h * 18432
    router = 256 * h  # e_score_correction_bias: a buffer in transformers, not a parameter
    emb = 129280 * h
    assert (a.dense_layers, a.moe_layers, a.head_dim, a.q_dim) == ((0, 1, 2), 58, 192, heads * 192)
    assert a.params == 61 * attn + 3 * dense + 58 * (router + expert + 256 * expert) + h + 2 * emb
    assert a.active_params == 61 * attn + 3 * dense + 58 * (router + expert + 8 * expert) + h + emb
    assert round(a.active_params / 1e9, 1) == 36.6 and round(emb / 1e9, 1) == 0.9
    # the compressed KV cache: the 512-wide latent and the 64-wide shared RoPE key per layer, not 2 x heads x dim
    assert a.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70272 and a.kv_bytes_per_token(1) == 35136
    assert a.is_mla and a.kv_bytes_per_token() < 2 * 61 * heads * 192 * 2 / 60


def test_the_fields_read():
    q, g, m, d = (load_arch(n) for n in ("qwen3-30b-a3b", "gpt-oss-20b", "mixtral-8x7b", "deepseek-v3"))
    assert (q.experts, q.experts_per_token, q.expert_intermediate, q.shared_experts, q.dense_layers) == (
        128, 8, 768, 0, ())
    assert q.qk_norm and not (q.qkv_bias or q.router_bias or q.is_mla or q.sliding_layers)
    assert (m.experts, m.experts_per_token, m.expert_intermediate, m.head_dim, m.qkv_bias) == (8, 2, 14336, 128, False)
    assert (d.experts, d.experts_per_token, d.shared_experts, d.shared_intermediate) == (256, 8, 1, 2048)
    assert (d.weights_format, d.quantized_experts_only) == ("fp8", False)  # block FP8, attention and experts alike
    assert (d.q_lora_rank, d.kv_lora_rank, d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim) == (
        1536, 512, 128, 64, 128)
    # gpt-oss: biased attention and experts, a biased router, sinks, windows on every other layer, MXFP4 experts
    assert (g.experts, g.experts_per_token, g.expert_intermediate, g.head_dim, g.q_dim) == (32, 4, 2880, 64, 4096)
    assert g.qkv_bias and g.o_bias and g.expert_bias and g.router_bias and g.attn_sinks
    assert g.sliding_layers == tuple(range(0, 24, 2)) and g.sliding_window == 128
    assert (g.weights_format, g.quantized_experts_only) == ("mxfp4", True)
    assert g.kv_bytes_per_token() == 2 * 24 * 8 * 64 * 2  # sliding layers counted as full (an upper bound)
    assert load_arch("gpt-oss-120b").sliding_layers == tuple(range(0, 36, 2))
    small = load_arch("qwen3-0.6b")  # a dense draft for the Qwen3 MoE targets: 0.6B, 0.44B non-embedding
    assert not small.is_moe and small.tied and small.params == 596_049_920
    assert round(small.params / 1e9, 1) == 0.6 and round((small.params - small.embedding_params) / 1e9, 2) == 0.44


@pytest.mark.parametrize("name", sorted(DENSE_BEFORE))
def test_dense_shapes_unchanged(name):
    a = load_arch(name)
    assert (a.params, a.kv_bytes_per_token(), a.weight_bytes(), a.layer_params) == DENSE_BEFORE[name]
    assert not (a.is_moe or a.is_mla) and a.moe_layers == 0 and a.active_params == a.params - a.embedding_params * (
        not a.tied)
    a.check_priced()  # priced as before


def test_aliases_and_trace_names():
    for alias, name in (("deepseek-r1", "deepseek-v3"), ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
                        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
                        ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"), ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
                        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("Qwen/Qwen3-0.6B", "qwen3-0.6b"),
                        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-coder-30b-a3b")):
        assert load_arch(alias).name == name and ALIASES[alias.lower()] == name
    assert arch_for_model("deepseek-ai/DeepSeek-R1-0528") == "deepseek-v3"
    assert arch_for_model("/models/gpt-oss-20b") == "gpt-oss-20b"
    assert arch_for_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") == "deepseek-r1-distill-qwen-7b"  # not R1
    for not_alias in ("qwen/qwen3-235b-a22b-instruct-2507", "qwen/qwen3-30b-a3b-instruct-2507",  # 262144 positions
                      "mistralai/mixtral-8x7b-v0.1"):  # the base repo's config.json was not read
        assert not_alias not in ALIASES


@pytest.mark.skipif(not PUBLIC.is_file(), reason="no studies/data/moe_public/configs.json")
def test_shipped_files_are_the_public_copies():
    """Each shipped MoE file reads as the copy in studies/data/moe_public/configs.json (every field kept; DeepSeek-V3's
    copy had lost its quantization_config, the shipped file has R1's), DeepSeek-R1's copy exactly as the shipped
    deepseek-v3 (its alias); the published figures above are the ones recorded there."""
    models = json.loads(PUBLIC.read_text(encoding="utf-8"))["models"]

    def same(a, b, *skip):
        return {k: v for k, v in vars(a).items() if k not in ("name", "source", *skip)} == {
            k: v for k, v in vars(b).items() if k not in ("name", "source", *skip)}

    for name in [*MOE_PUBLISHED, "qwen3-0.6b"]:
        m = models[PUBLIC_KEY.get(name, name)]
        assert same(load_arch(name), from_config(name, m["config"]), *(("weights_format",) if name ==
                                                                        "deepseek-v3" else ())), name
        if name in MOE_PUBLISHED:
            total, active = MOE_PUBLISHED[name][:2]
            assert (m["published_params"]["total"], m["published_params"]["active"]) == (f"{total}B", f"{active}B")
    r1 = from_config("deepseek-r1", models["deepseek-r1"]["config"])  # its block-FP8 quantization_config too
    assert same(load_arch("deepseek-r1"), r1) and (r1.weights_format, r1.quantized_experts_only) == ("fp8", False)
    for name in MOE_PUBLISHED:
        assert "_source" in read_arch(name).config and (ARCH_DIR / f"{name}.json").is_file()


def test_moe_and_mla_are_priced_on_serving_engines_and_refused_on_hf_eager():
    from lrsim.gpu.fit import load_fit
    from lrsim.gpu.model import Setup
    from lrsim.gpu.devices import get_device

    p = synthesize("h100", "qwen3-30b-a3b")  # vLLM's fused MoE (lrsim.gpu.moe)
    assert 0 < p.time_ms("qwen3-30b-a3b", 1024, 1, 1) < p.time_ms("qwen3-30b-a3b", 1024, 16, 1)
    with pytest.raises(InputError) as e:
        synthesize("h100:hf-eager", "qwen3-30b-a3b")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("qwen3-30b-a3b: mixture-of-experts pricing is not modelled yet "
                                              "(128 routed experts, 8 per token; 30.5B parameters, 3.0B active)")
    Setup(load_arch("deepseek-r1"), get_device("h200"), load_fit()[0], 8, "vllm")  # MLA: lrsim.gpu.mla
    with pytest.raises(InputError, match="deepseek-v3: multi-head latent attention .MLA. and mixture-of-experts "
                                         "pricing is not modelled"):
        Setup(load_arch("deepseek-r1"), get_device("h200"), load_fit()[0], 8, "hf-eager")
    with pytest.raises(InputError, match="gpt-oss-20b: mixture-of-experts pricing"):
        load_arch("gpt-oss-20b").layer_params  # no one layer's count: the layers differ


def test_whole_device_profiles_price_moe_and_mla(tmp_path):
    p = profile_for_spec("h100")
    moe = [n for n in shipped() if load_arch(n).is_moe]
    assert set(p.archs) == set(shipped()) and len(moe) == len(MOE_PUBLISHED)
    for n in moe:
        a = p.archs[n]
        assert a.params == load_arch(n).params
        if a.unmeasured == len(a.context) * len(a.batch) * len(a.positions):  # too large for one H100 in bf16
            assert "does not fit" in a.missing[0], n
        else:
            assert p.time_ms(n, 1024, 1, 1) > 0, n
    assert p.time_ms("qwen3-8b", 1024, 1, 1) > 0 and p.time_ms("qwen3-0.6b", 1024, 1, 1) > 0
    write_profile(p, tmp_path / "h100.json")  # the null entries say why, so the profile writes and reads back
    q = read_profile(tmp_path / "h100.json")
    assert q.archs["gpt-oss-120b"].missing == p.archs["gpt-oss-120b"].missing


DEEPSEEK = {k: v for k, v in read_arch("deepseek-v3").config.items() if not k.startswith("_")}
QWEN_MOE = {k: v for k, v in read_arch("qwen3-30b-a3b").config.items() if not k.startswith("_")}


@pytest.mark.parametrize("cfg, msg", [
    ({k: v for k, v in DEEPSEEK.items() if k != "kv_lora_rank"}, "deepseek_v3 config needs kv_lora_rank (missing)"),
    ({k: v for k, v in DEEPSEEK.items() if k != "n_shared_experts"}, "deepseek_v3 config needs n_shared_experts"),
    ({**DEEPSEEK, "v_head_dim": 0}, "v_head_dim must be a positive integer, got 0"),
    ({k: v for k, v in QWEN_MOE.items() if k != "moe_intermediate_size"},
     "qwen3_moe config needs moe_intermediate_size (missing)"),
    ({**QWEN_MOE, "mlp_only_layers": [48]}, "mlp_only_layers must be a list of layer indices below 48"),
    ({**QWEN_MOE, "model_type": "gpt_oss", "num_local_experts": 8, "layer_types": ["full_attention"] * 3},
     "layer_types must list sliding_attention or full_attention for each of the 48 layers"),
])
def test_an_moe_config_missing_a_field_is_one_line_naming_it(tmp_path, cfg, msg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_arch(str(path))
    assert msg in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_dense_configs_windows_and_quantization_do_not_change_it():
    """What a dense config says of windows or quantization is recorded where it parses, never refused, and changes
    no count (nothing of it is priced)."""
    d = {k: v for k, v in read_arch("qwen3-8b").config.items() if not k.startswith("_")}
    plain = from_config("x", d)
    odd = from_config("x", {**d, "layer_types": ["linear_attention"] * 36, "quantization_config": {"bits": 4}})
    awq = from_config("x", {**d, "quantization_config": {"quant_method": "AWQ", "bits": 4}})
    assert odd == plain and (awq.weights_format, awq.quantized_experts_only) == ("awq", False)
    assert awq.params == plain.params == 8_190_735_360


def test_null_means_none():
    """``null`` for a count that may be zero: no q compression (DeepSeek-V2-Lite), no dense layers, no shared
    experts."""
    a = from_config("x", {**DEEPSEEK, "q_lora_rank": None, "first_k_dense_replace": None, "n_shared_experts": None})
    assert (a.q_lora_rank, a.dense_layers, a.shared_experts, a.moe_layers) == (0, (), 0, 61)


# Small configs of every MoE layout read, with the options that change the count (dense layers, shared experts,
# biases, tied embeddings, MLA without q compression), for the cross-check against transformers' own models.
SMALL = dict(num_hidden_layers=4, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=100, max_position_embeddings=128)
MLA = dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=2,
           first_k_dense_replace=1, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_group=1,
           topk_group=1)
SMALL_MOE = [
    dict(model_type="qwen3_moe", moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2, head_dim=16,
         decoder_sparse_step=2, mlp_only_layers=[3]),
    dict(model_type="qwen3_moe", moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
         attention_bias=True, tie_word_embeddings=True),
    dict(model_type="qwen2_moe", moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
         shared_expert_intermediate_size=48),
    dict(model_type="qwen2_moe", moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2,
         shared_expert_intermediate_size=48, qkv_bias=False, mlp_only_layers=[0]),
    dict(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
    dict(model_type="gpt_oss", num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8),
    dict(model_type="deepseek_v3", q_lora_rank=None, attention_bias=True, **MLA),
    dict(model_type="deepseek_v3", q_lora_rank=24, **MLA),
    dict(model_type="deepseek_v2", q_lora_rank=24, mlp_bias=True, **MLA),
]


def transformers_counts(cfg: dict) -> tuple[int, float]:
    """Total parameters of transformers' model of ``cfg`` built on the meta device, and the active ones: each
    expert tensor (``.experts.``) by experts-per-token / experts, the input embedding table left out unless tied."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg))
    c = model.config
    experts = next((getattr(c, k) for k in ("num_experts", "num_local_experts", "n_routed_experts")
                    if getattr(c, k, None)), None)
    share = c.num_experts_per_tok / experts if experts else 1  # a dense model: every parameter
    total = active = 0
    for n, p in model.named_parameters():
        total += p.numel()
        if "embed_tokens" in n and not c.tie_word_embeddings:
            continue
        active += p.numel() * (share if ".experts." in n else 1)
    return total, active


@pytest.mark.parametrize("cfg", SMALL_MOE, ids=lambda c: c["model_type"])
def test_small_configs_count_as_transformers_builds_them(cfg):
    a = from_config("x", {**SMALL, **cfg})
    total, active = transformers_counts({**SMALL, **cfg})
    assert a.params == total and a.active_params == pytest.approx(active, abs=1e-6)


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED) + ["qwen3-0.6b"])
def test_shipped_configs_count_as_transformers_builds_them(name):
    f = read_arch(name)
    total, active = transformers_counts(dict(f.config))
    assert f.arch.params == total and f.arch.active_params == pytest.approx(active, rel=1e-12)
