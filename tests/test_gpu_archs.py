"""lrsim.gpu.archs: shipped configs against published parameter counts, aliases, any config.json, what is refused.

Fast and torch-free; no model is built (tests/test_lrref_profile.py builds the measured shapes on the meta device).
The mixture-of-experts and MLA configs: tests/test_gpu_archs_moe.py.
"""

import json
import re
from pathlib import Path

import pytest

from lrsim import cli
from lrsim.errors import InputError
from lrsim.gpu.archs import ALIASES, ARCH_DIR, from_config, load_arch, shipped
from lrsim.latency.profile import read_profile

DOC = Path(__file__).resolve().parents[1] / "docs" / "gpu-model.md"

# Published parameter counts (every tensor in the checkpoint, embeddings and LM head once each unless tied): the
# Hugging Face API's safetensors.total for the repo a shipped file copies (the model card's "Model size"), else the
# count the named source publishes (KerasHub's preset metadata, Together's client), or the total of a repo with the
# same tensors (said so).  The shipped shapes must give them exactly.
PUBLISHED = {
    "llama-3.1-8b": (8_030_261_248, "meta-llama/Llama-3.1-8B, safetensors.total"),
    "llama-3.1-70b": (70_553_706_496, "meta-llama/Llama-3.1-70B, safetensors.total"),
    "qwen2.5-0.5b": (494_032_768, "Qwen/Qwen2.5-0.5B-Instruct, safetensors.total"),
    "qwen2.5-1.5b": (1_777_088_000, "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B, safetensors.total"),
    "qwen2.5-7b": (7_615_616_512, "Qwen/Qwen2.5-7B-Instruct, safetensors.total"),
    "qwen2.5-14b": (14_770_033_664, "Qwen/Qwen2.5-14B-Instruct, safetensors.total"),
    "qwen2.5-32b": (32_763_876_352, "Qwen/Qwen2.5-32B(-Instruct), safetensors.total"),
    "qwen2.5-72b": (72_706_203_648, "Qwen/Qwen2.5-72B-Instruct, safetensors.total"),
    "qwen3-1.7b": (1_720_574_976, "Qwen/Qwen3-1.7B, safetensors.total"),
    "qwen3-8b": (8_190_735_360, "Qwen/Qwen3-8B, safetensors.total"),
    "qwen3-14b": (14_768_307_200, "Qwen/Qwen3-14B, safetensors.total"),
    "qwen3-32b": (32_762_123_264, "Qwen/Qwen3-32B, safetensors.total"),
    "deepseek-r1-distill-qwen-7b": (7_615_616_512, "R1-Distill-Qwen-7B's GGUF general.parameter_count"),
    "deepseek-r1-distill-qwen-14b": (14_770_033_664, "R1-Distill-Qwen-14B's GGUF general.parameter_count"),
    "llama-2-7b": (6_738_415_616, "meta-llama/Llama-2-7b-hf: KerasHub llama2_7b_en preset params "
                   "(keras_hub/src/models/llama/llama_presets.py); Together's client lists the same for llama-2-7b"),
    "llama-2-70b": (68_976_648_192, "meta-llama/Llama-2-70b-hf: Together's client, model_param_count "
                    "'togethercomputer/llama-2-70b' (together-python, together/finetune.py)"),
    "mistral-7b-v0.1": (7_241_732_096, "mistralai/Mistral-7B-v0.1: KerasHub mistral_7b_en preset params "
                        "(keras_hub/src/models/mistral/mistral_presets.py)"),
    "llama-3-8b": (8_030_261_248, "meta-llama/Meta-Llama-3-8B: KerasHub llama3_8b_en preset params "
                   "(keras_hub/src/models/llama3/llama3_presets.py)"),
    "llama-3-70b": (70_553_706_496, "meta-llama/Meta-Llama-3-70B: the tensor shapes of Llama-3.1-70B, whose "
                    "safetensors.total this is (of the priced fields only max positions differ)"),
    "qwen2-7b": (7_615_616_512, "Qwen/Qwen2-7B: the tensor shapes of Qwen2.5-7B-Instruct, whose safetensors.total "
                 "this is (of the priced fields only max positions differ)"),
    "qwen2-72b": (72_706_203_648, "Qwen/Qwen2-72B: the tensor shapes of Qwen2.5-72B-Instruct, whose "
                  "safetensors.total this is (of the priced fields only max positions differ)"),
}

# The fields of the aliased repos' own config.json that the cost model uses (layers, hidden, intermediate, heads,
# KV heads, vocabulary, tied, max positions): an alias is right only if they equal the shipped file's.
ALIASED = {
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": (28, 1536, 8960, 12, 2, 151936, False, 131072),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": (64, 5120, 27648, 40, 8, 152064, False, 131072),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": (32, 4096, 14336, 32, 8, 128256, False, 131072),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": (80, 8192, 28672, 64, 8, 128256, False, 131072),
    "meta-llama/Llama-3.3-70B-Instruct": (80, 8192, 28672, 64, 8, 128256, False, 131072),
    "meta-llama/Llama-3.1-8B-Instruct": (32, 4096, 14336, 32, 8, 128256, False, 131072),
    "Qwen/Qwen2.5-72B-Instruct": (80, 8192, 29568, 64, 8, 152064, False, 32768),
    "Qwen/Qwen3-8B": (36, 4096, 12288, 32, 8, 151936, False, 40960),
    "meta-llama/Llama-2-7b-hf": (32, 4096, 11008, 32, 32, 32000, False, 4096),
    "meta-llama/Llama-2-7b-chat-hf": (32, 4096, 11008, 32, 32, 32000, False, 4096),
    "meta-llama/Llama-2-70b-hf": (80, 8192, 28672, 64, 8, 32000, False, 4096),
    "mistralai/Mistral-7B-v0.1": (32, 4096, 14336, 32, 8, 32000, False, 32768),
    "meta-llama/Meta-Llama-3-8B": (32, 4096, 14336, 32, 8, 128256, False, 8192),
    "meta-llama/Meta-Llama-3-8B-Instruct": (32, 4096, 14336, 32, 8, 128256, False, 8192),
    "meta-llama/Meta-Llama-3-70B": (80, 8192, 28672, 64, 8, 128256, False, 8192),
    "meta-llama/Meta-Llama-3-70B-Instruct": (80, 8192, 28672, 64, 8, 128256, False, 8192),
    "Qwen/Qwen2-7B": (28, 3584, 18944, 28, 4, 152064, False, 131072),
    "Qwen/Qwen2-7B-Instruct": (28, 3584, 18944, 28, 4, 152064, False, 32768),
    "Qwen/Qwen2-72B": (80, 8192, 29568, 64, 8, 152064, False, 131072),
    "Qwen/Qwen2-72B-Instruct": (80, 8192, 29568, 64, 8, 152064, False, 32768),
}

QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B config.json (the fields that matter here)
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
}
MISTRAL_7B = {  # mistralai/Mistral-7B-v0.1 config.json (the fields that matter here)
    "_name_or_path": "mistralai/Mistral-7B-v0.1", "architectures": ["MistralForCausalLM"], "model_type": "mistral",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
}


def write(path: Path, d) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(d if isinstance(d, str) else json.dumps(d), encoding="utf-8")
    return path


def one_line_exit_2(args, capsys, out):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lrsim: error: ") and "\n" not in err and not out.exists()
    return err


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_shapes_give_the_published_parameter_counts(name):
    assert load_arch(name).params == PUBLISHED[name][0], PUBLISHED[name][1]


def test_every_shipped_file_is_a_sourced_decoder():
    dense = set(PUBLISHED) | {"tiny", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "qwen3-0.6b"}
    moe = {"qwen3-30b-a3b", "qwen3-coder-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b", "gpt-oss-120b", "mixtral-8x7b",
           "deepseek-v3"}  # tests/test_gpu_archs_moe.py checks them against their published counts
    assert dense | moe == set(shipped()) and {n for n in shipped() if load_arch(n).is_moe} == moe
    for n in shipped():
        a = load_arch(n)
        assert a.name == n and json.loads((ARCH_DIR / f"{n}.json").read_text())["_source"]
        assert a.heads % a.kv_heads == 0 and a.max_positions
    llama, qwen2, qwen3 = load_arch("llama-3.1-8b"), load_arch("qwen2.5-14b"), load_arch("qwen3-8b")
    assert (llama.qkv_bias, llama.o_bias, llama.mlp_bias, llama.qk_norm, llama.head_dim) == (False,) * 4 + (128,)
    assert (qwen2.qkv_bias, qwen2.o_bias, qwen2.qk_norm) == (True, False, False)
    assert (qwen3.qkv_bias, qwen3.o_bias, qwen3.qk_norm) == (False, False, True)
    assert load_arch("llama-3.1-70b").kv_bytes_per_token() == 2 * 80 * 8 * 128 * 2


def test_biases_follow_transformers():
    """Counts checked against transformers 5.19 models built on the meta device from these dicts (by hand)."""
    base = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                intermediate_size=96, vocab_size=100, max_position_embeddings=128)
    for mt, extra, params in (("llama", dict(attention_bias=True), 74944), ("llama", dict(mlp_bias=True), 75072),
                              ("llama", dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True), 69056),
                              ("qwen3", dict(attention_bias=True, head_dim=32), 99904),
                              ("qwen2", dict(attention_bias=True), 74816), ("mistral", dict(head_dim=None), 74560),
                              ("mistral", dict(head_dim=8), 62272)):
        assert from_config("x", dict(base, model_type=mt, **extra)).params == params, (mt, extra)


def test_aliases_resolve_to_shipped_names_whatever_the_case():
    assert not set(ALIASES) & {n.lower() for n in shipped()} and set(ALIASES.values()) <= set(shipped())
    assert all(k == k.lower() for k in ALIASES)
    for alias, name in ALIASES.items():
        assert load_arch(alias).name == name and load_arch(alias.upper()).name == name
    assert load_arch("Qwen/Qwen2.5-72B-Instruct").name == "qwen2.5-72b"
    assert load_arch("meta-llama/Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    assert load_arch("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B").name == "qwen2.5-32b"
    assert load_arch("DeepSeek-R1-Distill-Qwen-1.5B").name == "qwen2.5-1.5b"
    assert load_arch("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B").name == "deepseek-r1-distill-qwen-7b"
    assert load_arch("QWEN3-8B").name == "qwen3-8b"  # shipped names too


@pytest.mark.parametrize("repo", sorted(ALIASED))
def test_an_alias_has_every_priced_field_of_the_config_it_names(repo):
    a = load_arch(repo)
    got = (a.layers, a.hidden, a.intermediate, a.heads, a.kv_heads, a.vocab, a.tied, a.max_positions)
    assert got == ALIASED[repo]


def test_distills_that_differ_from_their_bases_are_not_aliases():
    """R1-Distill-Qwen-7B/14B have 131072 positions, Qwen2.5-7B/14B-Instruct 32768: files of their own."""
    for size in ("7b", "14b"):
        d, q = load_arch(f"deepseek-r1-distill-qwen-{size}"), load_arch(f"qwen2.5-{size}")
        assert (d.max_positions, q.max_positions) == (131072, 32768) and d.params == q.params
    for name in ("qwen/qwq-32b", "qwen/qwen2.5-math-7b", "qwen/qwen2.5-math-1.5b", "qwen/qwen3-8b-base"):
        assert name not in ALIASES


def test_same_tensors_other_positions_are_files_of_their_own():
    """Meta-Llama-3 says 8192 positions (3.1: 131072), the Qwen2 base repos 131072 (their Instruct repos and the
    Qwen2.5 Instruct files: 32768): the same parameters, another maximum position, so not aliases."""
    for own, like, positions in (("llama-3-8b", "llama-3.1-8b", (8192, 131072)),
                                 ("llama-3-70b", "llama-3.1-70b", (8192, 131072)),
                                 ("qwen2-7b", "qwen2.5-7b", (131072, 32768)),
                                 ("qwen2-72b", "qwen2.5-72b", (131072, 32768))):
        a, b = load_arch(own), load_arch(like)
        assert (a.max_positions, b.max_positions) == positions and a.params == b.params, own
        assert a.kv_bytes_per_token() == b.kv_bytes_per_token() and a.weight_bytes() == b.weight_bytes()
    assert load_arch("Qwen/Qwen2-7B-Instruct").name == "qwen2.5-7b" and load_arch("Qwen/Qwen2-7B").name == "qwen2-7b"
    assert load_arch("meta-llama/Meta-Llama-3-70B-Instruct").name == "llama-3-70b"
    llama2 = load_arch("meta-llama/Llama-2-7b-chat-hf")
    assert (llama2.name, llama2.kv_heads, llama2.head_dim) == ("llama-2-7b", 32, 128)  # multi-head attention


def test_the_shipped_mistral_is_its_config_json_and_its_window_is_not_modelled():
    shipped_m, given = load_arch("mistralai/Mistral-7B-v0.1"), from_config("Mistral-7B-v0.1", MISTRAL_7B)
    assert shipped_m.name == "mistral-7b-v0.1" and json.loads((ARCH_DIR / "mistral-7b-v0.1.json").read_text())[
        "sliding_window"] == 4096
    assert {**vars(shipped_m), "name": "", "source": ""} == {**vars(given), "name": "", "source": ""}
    assert "not modelled" in shipped_m.source


def test_every_public_vllm_measurement_names_an_architecture_that_resolves():
    path = Path(__file__).resolve().parents[1] / "studies" / "data" / "vllm_public" / "measurements.json"
    if not path.is_file():
        pytest.skip("no studies/data/vllm_public/measurements.json")
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    for r in rows:
        load_arch(r["arch"])  # raises InputError naming the arch otherwise
    llama3 = {r["model"]: r["arch"] for r in rows if "Meta-Llama-3-" in r["model"]}
    assert llama3 and all(a == load_arch(m).name for m, a in llama3.items()), llama3


def test_lrref_random_weights_take_aliases_and_refuse_unknown_names_in_one_line():
    from lrref.backends.random_weights import parse
    from lrsim.errors import UsageError

    rw = parse("Qwen/Qwen2.5-Coder-1.5B-Instruct,DeepSeek-R1-Distill-Qwen-1.5B", 12, 24)
    assert (rw.target.name, rw.draft.name) == ("qwen2.5-coder-1.5b", "qwen2.5-1.5b")
    assert parse("TINY", 12, 24).target.name == "tiny"
    with pytest.raises(UsageError) as e:
        parse("Qwen/Qwen3-Next-80B-A3B-Instruct", 12, 24)
    msg = str(e.value)
    assert "unknown architecture 'Qwen/Qwen3-Next-80B-A3B-Instruct'" in msg and "llama-2-7b" in msg and "\n" not in msg


def test_a_config_file_or_directory_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = json.loads((ARCH_DIR / "qwen3-8b.json").read_text())
    d.pop("_source")
    a = load_arch(str(write(tmp_path / "m" / "config.json", dict(d, _name_or_path="Qwen/Qwen3-8B"))))
    assert a.name == "Qwen3-8B" and a.params == 8_190_735_360 and a.source.endswith("config.json")
    assert load_arch(str(tmp_path / "m")).name == "Qwen3-8B"  # the directory
    write(tmp_path / "plain" / "config.json", d)
    assert load_arch(str(tmp_path / "plain")).name == "plain"  # no _name_or_path: the directory's name
    assert load_arch(str(write(tmp_path / "mine.json", d))).name == "mine"
    local = write(tmp_path / "l" / "config.json", dict(d, _name_or_path="/data/models/my-qwen3/"))
    assert load_arch(str(local)).name == "my-qwen3"
    assert load_arch(str(write(tmp_path / "odd name" / "config.json", d))).name == "odd-name"  # profile-safe
    write(tmp_path / "Qwen" / "Qwen3-8B" / "config.json", dict(d, num_hidden_layers=2))
    assert load_arch("Qwen/Qwen3-8B").layers == 36  # a name wins over a directory (in the working directory) ...
    assert load_arch(str(tmp_path / "Qwen" / "Qwen3-8B")).layers == 2  # ... unless given as a path
    m = load_arch(str(write(tmp_path / "mistral.json", MISTRAL_7B)))  # sliding_window: not modelled, ignored
    assert m.name == "Mistral-7B-v0.1" and m.params == 7_241_732_096 and m.head_dim == 128


@pytest.mark.parametrize("content, msg", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a JSON object expected"),
    ({"model_type": "llama", "hidden_size": 64}, "missing num_hidden_layers"),
    ({**MISTRAL_7B, "hidden_size": "big"}, "hidden_size must be a positive integer"),
    ({**MISTRAL_7B, "num_key_value_heads": 5}, "grouped-query"),
    ({k: v for k, v in QWEN3_30B_A3B.items() if k != "num_experts_per_tok"},
     "qwen3_moe config needs num_experts_per_tok (missing)"),
    ({**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 8}, "mixtral config needs num_experts_per_tok"),
    ({**MISTRAL_7B, "model_type": "deepseek_v3", "n_routed_experts": 256, "num_experts_per_tok": 8},
     "deepseek_v3 config needs moe_intermediate_size (missing)"),
    ({**MISTRAL_7B, "model_type": "qwen2_moe"}, "qwen2_moe config needs num_experts (missing)"),
    ({**QWEN3_30B_A3B, "num_experts_per_tok": 129}, "num_experts_per_tok 129 is more than the 128 experts"),
    ({**MISTRAL_7B, "model_type": "olmoe", "num_experts": 64}, "mixture-of-experts and MLA configs are read for "
     "model_type deepseek_v2, deepseek_v3, gpt_oss, mixtral, qwen2_moe, qwen3_moe only, not olmoe (num_experts = 64)"),
    ({**MISTRAL_7B, "model_type": "granitemoe"}, "not granitemoe (model_type granitemoe)"),
    ({"model_type": "llava", "text_config": {"model_type": "llama"}}, "multimodal config"),
])
def test_bad_configs_are_one_line_naming_the_file(tmp_path, content, msg):
    path = write(tmp_path / "cfg.json", content)
    with pytest.raises(InputError) as e:
        load_arch(str(path))
    assert msg in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_missing_files_and_unknown_names(tmp_path):
    for spec, msg in ((str(tmp_path / "none.json"), "cannot read a model config"),
                      (str(tmp_path), "no config.json in this directory"),
                      ("nope", "unknown architecture 'nope': shipped are deepseek-r1-distill-qwen-14b, "),
                      ("", "unknown architecture ''")):
        with pytest.raises(InputError, match=re.escape(msg)):
            load_arch(spec)


def test_cli_synthesizes_a_config_path_and_an_alias(tmp_path, capsys):
    cfg = write(tmp_path / "m" / "config.json", MISTRAL_7B)
    out = tmp_path / "p.json"
    assert cli.main(["profiles", "--synthesize", "h100", "--arch", str(cfg), "--out", str(out)]) == 0
    p = read_profile(out)
    assert list(p.archs) == ["Mistral-7B-v0.1"] and p.arch("Mistral-7B-v0.1").params == 7241732096
    assert cli.main(["profiles", "--synthesize", "h200", "--arch", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
                     "--tp", "2", "--out", str(out)]) == 0
    assert list(read_profile(out).archs) == ["llama-3.1-70b"]
    capsys.readouterr()


def test_cli_refuses_moe_pricing_and_unknown_names_in_one_line_exit_2(tmp_path, capsys):
    out = tmp_path / "p.json"
    moe = write(tmp_path / "Qwen3-30B-A3B" / "config.json", QWEN3_30B_A3B)  # read; priced on serving engines only
    err = one_line_exit_2(["profiles", "--synthesize", "h100:hf-eager", "--arch", str(moe.parent), "--out",
                           str(out)], capsys, out)
    assert "Qwen3-30B-A3B: mixture-of-experts pricing is not modelled yet (128 routed experts, 8 per token" in err
    err = one_line_exit_2(["profiles", "--synthesize", "h200:tp8", "--arch", "deepseek-ai/DeepSeek-R1", "--out",
                           str(out)], capsys, out)
    assert "deepseek-v3 (bf16) does not fit h200 at TP 8" in err  # MLA is priced (lrsim.gpu.mla); bf16 is too big
    err = one_line_exit_2(["profiles", "--synthesize", "h100", "--arch", "Qwen/Qwen3-Next-80B-A3B", "--out",
                           str(out)], capsys, out)
    assert "unknown architecture 'Qwen/Qwen3-Next-80B-A3B': shipped are " in err and "llama-3.1-8b" in err


def test_lrref_resolves_the_same_aliases():
    from lrref.archs import load_arch as lrref_load_arch, shipped as lrref_shipped

    assert lrref_shipped() == shipped()
    a = lrref_load_arch("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")
    assert a.name == "qwen2.5-32b" and a.source.endswith("qwen2.5-32b.json") and "_source" not in a.config


def test_the_docs_list_every_shipped_architecture_and_alias():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Architectures", 1)[1].split("\n## ", 1)[0].lower()
    for name in shipped():
        assert f"`{name}`" in section, name
    for alias in ALIASES:
        assert f"`{alias}`" in section, alias


def test_read_arch_is_the_one_reader_of_the_shipped_configs(tmp_path):
    """lrsim.gpu.archs.read_arch: the fields, name, file and shapes of a config (what lrref builds models from)."""
    from lrsim.gpu.archs import read_arch

    f = read_arch("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")
    assert (f.name, f.source, f.path) == ("qwen2.5-32b", "lrsim/data/archs/qwen2.5-32b.json",
                                          ARCH_DIR / "qwen2.5-32b.json")
    assert f.config == json.loads(f.path.read_text()) and f.arch == load_arch("qwen2.5-32b")
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(json.loads((ARCH_DIR / "tiny.json").read_text())))
    g = read_arch(str(d), name="my-model")
    assert g.name == g.arch.name == "my-model" and g.path == d / "config.json" and g.source == str(d / "config.json")
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64}))
    with pytest.raises(InputError, match="not a decoder config"):
        read_arch(str(d))
    with pytest.raises(InputError, match="unknown architecture 'nope'"):
        read_arch("nope")


@pytest.mark.parametrize("model, arch", [
    ("/root/.cache/lrref/qwen2.5-coder-1.5b-instruct/model", "qwen2.5-coder-1.5b"),  # lrref's hf layout
    ("/root/.cache/lrref/qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"), ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("qwen2.5-1.5b", "qwen2.5-1.5b"), ("/models/Qwen2.5-7B-Instruct-Q8_0.gguf", "qwen2.5-7b"),
    ("smollm2-135m-instruct", None), ("target", None), ("", None), (None, None),
])
def test_a_trace_headers_model_names_its_architecture(model, arch):
    from lrsim.gpu.archs import arch_for_model

    assert arch_for_model(model) == arch
