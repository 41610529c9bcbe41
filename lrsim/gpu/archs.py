"""Decoder architectures for the hardware model: shipped ``config.json`` copies, their aliases, any config file.

The shipped copies live in ``lrsim/data/archs/NAME.json``, the same files
``lrref`` builds its random-weight models from; here they are read as plain
JSON, without torch, by the one reader of architecture configs,
:func:`read_arch` (the config's fields, its name and source, and its shapes;
lrref takes the fields from it).  :func:`load_arch` (the shapes alone) and
:func:`read_arch` take a shipped name, an alias (:data:`ALIASES`: Hugging
Face repo ids and the DeepSeek-R1-Distill names whose every priced field
matches a shipped file) or a path to any decoder's ``config.json`` (or the
directory holding it); :func:`arch_for_model` finds the shipped architecture
a trace header's model names.  Only the shapes a forward pass's cost depends
on are kept: layers, hidden size, attention and KV heads, head dimension, MLP
width, vocabulary, tied embeddings, biases (QKV, O, MLP), per-head q/k norms
(Qwen3) and the maximum position.

Mixture-of-experts configs are read too (``model_type`` qwen3_moe, qwen2_moe,
mixtral, gpt_oss, deepseek_v3, deepseek_v2; shipped: Qwen3-30B-A3B,
Qwen3-Coder-30B-A3B, Qwen3-235B-A22B, gpt-oss-20b/120b, Mixtral-8x7B,
DeepSeek-V3/R1): the routed experts, experts per token, shared experts, each
expert's FFN width, which layers keep a dense MLP, the router (and its bias),
multi-head latent attention (MLA: its low-rank projections and its compressed
KV cache), gpt-oss's attention sinks, its alternating sliding-window layers
and its MXFP4 experts.  Their total and active parameters and KV bytes are
exact (:attr:`ArchConfig.params`, :attr:`ArchConfig.active_params`,
:meth:`ArchConfig.kv_bytes_per_token`).  Their passes are priced on the
serving engines (:mod:`lrsim.gpu.engine_vllm`: the fused MoE, and MLA's
absorbed decode and expanded prefill paths); on ``hf-eager``
:meth:`ArchConfig.check_priced` (called by :class:`lrsim.gpu.setup.Setup`)
refuses them in one line, so a whole-device profile lists them all-null with
the reason.  Another ``model_type`` with expert fields, and multimodal configs,
are refused (one line); a sliding window is read only from ``layer_types``
(gpt-oss), so Mistral-7B-v0.1's uniform window is not modelled (full
attention).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

ARCH_DIR = Path(__file__).resolve().parents[1] / "data" / "archs"
_NEEDED = ("model_type", "num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank")
_QWEN_MOE = ("qwen2_moe", "qwen3_moe")
_MLA = ("deepseek_v2", "deepseek_v3")
MOE_TYPES = (*_MLA, "gpt_oss", "mixtral", *_QWEN_MOE)  #: the mixture-of-experts model_types read (transformers' layout)
_NO_MLP_BIAS = ("qwen2", "qwen3", "mistral", "deepseek_v3", "gpt_oss", "mixtral", *_QWEN_MOE)  # no mlp_bias field

# Names that resolve to a shipped architecture (lower case; looked up case-insensitively).  An entry is here only
# where every field ArchConfig keeps (shapes, vocabulary, tied embeddings, biases, q/k norms, max positions) of that
# repo's config.json equals the shipped file's; tests/test_gpu_archs.py checks each against the fields it names.
ALIASES: dict[str, str] = {
    # DeepSeek-R1 distills: the 1.5B and 32B shipped files are the distills' own configs; the Llama distills keep
    # their bases' shapes (Llama-3.1-8B; Llama-3.3-70B-Instruct = Llama-3.1-70B's).  The 7B and 14B Qwen distills
    # have files of their own (131072 positions; Qwen2.5-7B/14B-Instruct have 32768).
    "deepseek-r1-distill-qwen-1.5b": "qwen2.5-1.5b",
    "deepseek-ai/deepseek-r1-distill-qwen-1.5b": "qwen2.5-1.5b",
    "deepseek-ai/deepseek-r1-distill-qwen-7b": "deepseek-r1-distill-qwen-7b",
    "deepseek-ai/deepseek-r1-distill-qwen-14b": "deepseek-r1-distill-qwen-14b",
    "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
    "deepseek-ai/deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
    "deepseek-r1-distill-llama-8b": "llama-3.1-8b",
    "deepseek-ai/deepseek-r1-distill-llama-8b": "llama-3.1-8b",
    "deepseek-r1-distill-llama-70b": "llama-3.1-70b",
    "deepseek-ai/deepseek-r1-distill-llama-70b": "llama-3.1-70b",
    # DeepSeek-R1 itself: DeepSeek-V3's shapes (every field read is equal in the two config.json copies read, the
    # shipped file taking R1's block-FP8 quantization_config, which the V3 copy's author had removed)
    "deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",  # the model tt-metal's R1 reference config.json is of
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    # Meta (the Meta-Llama-3.1 names are the repos' former names, still redirected)
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b",
    "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b",
    "meta-llama/meta-llama-3.1-70b": "llama-3.1-70b",
    "meta-llama/meta-llama-3.1-70b-instruct": "llama-3.1-70b",
    "llama-3.3-70b": "llama-3.1-70b",
    "meta-llama/llama-3.3-70b-instruct": "llama-3.1-70b",
    # Llama 3 (8192 positions, not 3.1's 131072: files of their own) and Llama 2
    "meta-llama/meta-llama-3-8b": "llama-3-8b",
    "meta-llama/meta-llama-3-8b-instruct": "llama-3-8b",
    "meta-llama/meta-llama-3-70b": "llama-3-70b",
    "meta-llama/meta-llama-3-70b-instruct": "llama-3-70b",
    "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "meta-llama/llama-2-7b-chat-hf": "llama-2-7b",
    "meta-llama/llama-2-70b-hf": "llama-2-70b",
    # Mistral (its sliding window is not modelled); Mixtral: the Instruct repo's config.json (the base repo's was
    # not read)
    "mistralai/mistral-7b-v0.1": "mistral-7b-v0.1",
    "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
    # OpenAI
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    # Qwen2: the base repos say 131072 positions (files of their own); the Instruct repos say 32768, as the Qwen2.5
    # Instruct files, whose shapes they have
    "qwen/qwen2-7b": "qwen2-7b",
    "qwen/qwen2-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2-72b": "qwen2-72b",
    "qwen/qwen2-72b-instruct": "qwen2.5-72b",
    # Qwen: the Instruct repos the shipped Qwen2.5 files copy (the base repos' configs say 131072 positions), Qwen3
    # (the MoE repos' 2507 re-releases say 262144 positions: not aliases)
    "qwen/qwen2.5-0.5b-instruct": "qwen2.5-0.5b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2.5-14b-instruct": "qwen2.5-14b",
    "qwen/qwen2.5-72b-instruct": "qwen2.5-72b",
    "qwen/qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b",
    "qwen/qwen2.5-coder-1.5b-instruct": "qwen2.5-coder-1.5b",
    "qwen/qwen3-0.6b": "qwen3-0.6b",
    "qwen/qwen3-1.7b": "qwen3-1.7b",
    "qwen/qwen3-8b": "qwen3-8b",
    "qwen/qwen3-14b": "qwen3-14b",
    "qwen/qwen3-32b": "qwen3-32b",
    "qwen/qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen/qwen3-coder-30b-a3b-instruct": "qwen3-coder-30b-a3b",
    "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
}


@dataclass(frozen=True)
class ArchConfig:
    """The shapes of one decoder-only transformer (a Hugging Face ``config.json``'s fields).

    The fields after ``mlp_bias`` describe mixture-of-experts and multi-head latent attention (MLA) models; their
    defaults are a dense decoder with grouped-query attention, so a dense config reads as before.
    """

    name: str
    model_type: str
    layers: int
    hidden: int
    intermediate: int  #: the dense MLP's width (an MoE model's dense layers; Mixtral and gpt-oss: each expert's)
    heads: int
    kv_heads: int
    head_dim: int  #: per query/key head (MLA: qk_nope_head_dim + qk_rope_head_dim)
    vocab: int
    tied: bool
    qkv_bias: bool  #: Q, K and V biases (MLA: q_a_proj and kv_a_proj_with_mqa)
    qk_norm: bool
    max_positions: int | None = None
    source: str = ""
    o_bias: bool = False  # O projection bias (Llama/Qwen3 with attention_bias: true; never Qwen2)
    mlp_bias: bool = False  # gate/up/down biases (Llama's mlp_bias)
    # mixture of experts (experts == 0: a dense model)
    experts: int = 0  #: routed experts per MoE layer (num_experts, num_local_experts, n_routed_experts)
    experts_per_token: int = 0  #: routed experts each token goes through (num_experts_per_tok)
    expert_intermediate: int = 0  #: each routed expert's gated-MLP width (moe_intermediate_size; Mixtral, gpt-oss:
    #: intermediate_size)
    shared_experts: int = 0  #: shared experts every token goes through (DeepSeek's n_shared_experts; Qwen2-MoE: 1)
    shared_intermediate: int = 0  #: their gated MLP's width, all together (DeepSeek: n_shared_experts x
    #: moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size)
    shared_gate: bool = False  #: Qwen2-MoE's sigmoid gate on the shared expert (a hidden x 1 linear)
    expert_bias: bool = False  #: biases on the experts' gate/up and down projections (gpt-oss)
    router_bias: bool = False  #: the router's bias (gpt-oss); the router is a hidden x experts linear per MoE layer
    dense_layers: tuple[int, ...] = ()  #: an MoE model's layers with a dense MLP instead (DeepSeek's
    #: first_k_dense_replace and moe_layer_freq; Qwen's mlp_only_layers and decoder_sparse_step)
    # multi-head latent attention (kv_lora_rank == 0: not MLA)
    q_lora_rank: int = 0  #: the queries' low-rank width (0: a full q_proj, DeepSeek-V2-Lite)
    kv_lora_rank: int = 0  #: the compressed KV latent each token caches per layer
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0  #: the decoupled RoPE key, cached with the latent (shared by the heads)
    v_head_dim: int = 0
    # gpt-oss
    attn_sinks: bool = False  #: one learned sink logit per head per layer
    sliding_window: int = 0  #: tokens a sliding-window layer attends to (0: none)
    sliding_layers: tuple[int, ...] = ()  #: layers with sliding-window attention (layer_types)
    weights_format: str = ""  #: the checkpoint's quantized format (quantization_config.quant_method: "mxfp4",
    #: "fp8"); "" for none.  MXFP4 is 4.25 bits per weight (4-bit values, one 8-bit scale per 32)
    quantized_experts_only: bool = False  #: True where only the routed experts are in weights_format (gpt-oss:
    #: attention, router, embeddings and LM head are in modules_to_not_convert, so bf16)
    # RoPE scaling (config.json's rope_scaling; "" : none)
    rope_type: str = ""  #: rope_scaling's rope_type (or type): yarn, linear, dynamic, llama3, longrope, ...
    rope_factor: float = 1.0  #: rope_scaling's factor
    rope_original: int = 0  #: rope_scaling's original_max_position_embeddings (0: not given)

    @property
    def max_context(self) -> int | None:
        """The positions a request may reach, as vLLM derives ``max_model_len`` from the config
        (``_get_and_verify_max_len``): ``max_position_embeddings``; with a ``rope_scaling`` that stretches the
        positions (any type but ``su``, ``longrope``, ``llama3``, whose configs already state the stretched length)
        that times its factor, YaRN's counted from ``original_max_position_embeddings``.  RoPE scaling costs
        nothing per token in vLLM (its cos/sin cache is precomputed; the rotary kernel is the same), so this is
        the only thing it changes here.  None: the config states no maximum."""
        if not self.max_positions:
            return None
        if self.rope_type in ("", "default", "su", "longrope", "llama3"):
            return self.max_positions
        base = self.rope_original if self.rope_type == "yarn" and self.rope_original else self.max_positions
        return int(base * self.rope_factor)  # L_max = base x factor

    @property
    def is_moe(self) -> bool:
        """A mixture-of-experts model (routed experts in some layer's MLP)."""
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3): a compressed KV latent per token and layer."""
        return self.kv_lora_rank > 0

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return (self.layers - len(self.dense_layers)) if self.is_moe else 0

    @property
    def attn_params(self) -> int:
        """One layer's attention and norms: the projections with their biases (MLA: the q and KV low-rank
        projections with their norms), q/k norms, sinks, and the layer's two RMSNorms."""
        h, hd = self.hidden, self.head_dim
        if self.is_mla:
            ql, kl, r = self.q_lora_rank, self.kv_lora_rank, self.qk_rope_head_dim
            q = (h * ql + ql * self.qkv_bias + ql + ql * self.q_dim) if ql else h * self.q_dim  # q_a, norm, q_b
            kv_b = kl * self.heads * (self.qk_nope_head_dim + self.v_head_dim)  # the latent up to per-head K and V
            kv = h * (kl + r) + (kl + r) * self.qkv_bias + kl + kv_b  # kv_a_proj_with_mqa, kv_a_layernorm, kv_b
            attn = q + kv + self.heads * self.v_head_dim * h + h * self.o_bias
        else:
            qd, kd = self.q_dim, self.kv_dim
            attn = h * (qd + 2 * kd) + (qd + 2 * kd) * self.qkv_bias + qd * h + h * self.o_bias
        return attn + 2 * h + 2 * hd * self.qk_norm + self.heads * self.attn_sinks  # + input/post norms

    @property
    def mlp_params(self) -> int:
        """One dense gated MLP (gate, up, down and their biases)."""
        h, i = self.hidden, self.intermediate
        return 3 * h * i + (2 * i + h) * self.mlp_bias

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down; gpt-oss: and their biases)."""
        h, i = self.hidden, self.expert_intermediate
        return 3 * h * i + (2 * i + h) * self.expert_bias

    def moe_params(self, routed: int | None = None) -> int:
        """One MoE layer's MLP with ``routed`` of its experts (all of them by default): the router, the shared
        experts (and Qwen2-MoE's gate on them), the routed experts.  DeepSeek-V3's router keeps an
        ``e_score_correction_bias`` (one value per expert) that transformers holds as a buffer: not counted."""
        h, s = self.hidden, self.shared_intermediate
        shared = 3 * h * s + (2 * s + h) * self.mlp_bias * bool(s) + h * self.shared_gate
        n = self.experts if routed is None else routed
        return self.experts * (h + self.router_bias) + shared + n * self.expert_params

    @property
    def layer_params(self) -> int:
        """Parameters of one dense decoder layer (QKV and O with their biases, gated MLP, two norms, q/k norms).

        :raises InputError: an MoE model, whose layers differ (:meth:`check_priced`'s line): use ``params``.
        """
        if self.is_moe:
            self.check_priced()
        return self.attn_params + self.mlp_params

    def _body(self, routed: int | None) -> int:
        return (self.layers * self.attn_params + (self.layers - self.moe_layers) * self.mlp_params
                + self.moe_layers * self.moe_params(routed))

    @property
    def embedding_params(self) -> int:
        """The input embedding table (``vocab x hidden``); an untied LM head is as large again."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters as transformers builds the model (tied embeddings counted once; every expert)."""
        emb = self.embedding_params
        return self._body(None) + emb + self.hidden + emb * (not self.tied)

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass uses: every layer's attention and norms, the dense MLPs, and in each
        MoE layer the router, the shared experts and ``experts_per_token`` routed experts; the final norm and the
        LM head.  The input embedding table is not counted (a token reads one row of it), as OpenAI's gpt-oss card
        (3.6B / 5.1B) and DeepSeek-V3's weights README ("36.6B including 0.9B for the output Head") count; Qwen's
        and Mistral's cards (3.3B, 22B, 12.9B) count the table too: :attr:`active_params_with_embeddings`.
        A dense model's: ``params`` less an untied embedding table."""
        return self._body(self.experts_per_token) + self.hidden + self.embedding_params

    @property
    def active_params_with_embeddings(self) -> int:
        """:attr:`active_params` plus the input embedding table (when untied: a tied one is the LM head already)."""
        return self.active_params + self.embedding_params * (not self.tied)

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of the weights a forward pass reads: everything but the embedding table (unless tied: the LM head).
        An MoE model's are all its experts' (what the device holds), at ``dtype_bytes`` each."""
        return (self.params - self.vocab * self.hidden * (not self.tied)) * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """``2 (K and V) x layers x kv_heads x head_dim x bytes``; MLA: ``layers x (kv_lora_rank +
        qk_rope_head_dim) x bytes`` (the compressed latent and the shared RoPE key, what vLLM and SGLang cache).
        Sliding-window layers are counted as full ones here (each holds at most ``sliding_window`` tokens)."""
        if self.is_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def check_priced(self, fused: bool = False) -> None:
        """:raises InputError: an architecture whose passes the hardware model does not price, in one line: a
        mixture of experts or multi-head latent attention (MLA) unless ``fused`` (the serving engines' fused MoE
        and MLA kernels are priced, :mod:`lrsim.gpu.engine_vllm`; transformers' eager ones are not).
        :class:`lrsim.gpu.setup.Setup` calls it, so every priced pass goes through it."""
        if (self.is_moe or self.is_mla) and not fused:
            what = ("multi-head latent attention (MLA) and mixture-of-experts" if self.is_mla and self.is_moe else
                    "multi-head latent attention (MLA)" if self.is_mla else "mixture-of-experts")
            shape = f"{self.experts} routed experts, {self.experts_per_token} per token; " if self.is_moe else ""
            kinds = "MoE and MLA are" if self.is_mla else "MoE is"
            raise InputError(f"{self.name}: {what} pricing is not modelled yet ({shape}{self.params / 1e9:.1f}B "
                             f"parameters, {self.active_params / 1e9:.1f}B active): the serving engines' fused "
                             f"{kinds} priced (vllm, sglang, trtllm), transformers' eager "
                             f"{'ones are' if self.is_mla else 'one is'} not")


def _count(d: dict, key: str, where: str) -> int:
    """``d[key]`` as a positive integer (``4096.0`` too).  :raises InputError: anything else (missing too)."""
    if key not in d:
        raise InputError(f"{where}: {d.get('model_type', 'this')} config needs {key} (missing)")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 1 or not float(v).is_integer():
        raise InputError(f"{where}: {key} must be a positive integer, got {v!r}")
    return int(v)


def _count0(d: dict, key: str, where: str) -> int:
    """``d[key]`` as an integer >= 0, ``null`` as 0.  :raises InputError: missing, or anything else."""
    if key not in d:
        raise InputError(f"{where}: {d.get('model_type', 'this')} config needs {key} (missing)")
    return 0 if d[key] in (None, 0) else _count(d, key, where)


def _refuse_unsupported(d: dict, where: str) -> None:
    """:raises InputError: a mixture-of-experts or MLA config of a ``model_type`` not read, or a multimodal (nested
    ``text_config``) config."""
    mt = str(d.get("model_type", ""))
    if isinstance(d.get("text_config"), dict):
        raise InputError(f"{where}: a multimodal config (model_type {mt or '?'}, its decoder under text_config) is "
                         "not modelled; give a text-only decoder's config.json")
    if mt in MOE_TYPES:
        return
    moe = [k for k in (*_MOE_KEYS, *_MLA_KEYS) if d.get(k)]
    if moe or "moe" in mt.lower():
        why = f"{moe[0]} = {d[moe[0]]}" if moe else f"model_type {mt}"
        raise InputError(f"{where}: mixture-of-experts and MLA configs are read for model_type "
                         f"{', '.join(MOE_TYPES)} only, not {mt or '?'} ({why})")


def _layer_list(d: dict, key: str, layers: int, where: str) -> tuple[int, ...]:
    """``d[key]``: a list of layer indices (``[]`` if absent).  :raises InputError: anything else."""
    v = d.get(key) or []
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                      for i in v):
        raise InputError(f"{where}: {key} must be a list of layer indices below {layers}, got {v!r}")
    return tuple(v)


def _moe_fields(d: dict, mt: str, layers: int, where: str) -> dict:
    """The :class:`ArchConfig` fields of a mixture-of-experts config of a ``model_type`` in :data:`MOE_TYPES`, read
    as transformers builds that model.  :raises InputError: a field it needs missing or invalid (one line)."""
    k = "n_routed_experts" if mt in _MLA else "num_experts" if mt in _QWEN_MOE else "num_local_experts"
    f: dict = {"experts": _count(d, k, where)}
    top = "experts_per_token" if mt == "gpt_oss" and "num_experts_per_tok" not in d else "num_experts_per_tok"
    f["experts_per_token"] = _count(d, top, where)
    if f["experts_per_token"] > f["experts"]:
        raise InputError(f"{where}: {top} {f['experts_per_token']} is more than the {f['experts']} experts ({k})")
    f["expert_intermediate"] = _count(d, "intermediate_size" if mt in ("mixtral", "gpt_oss") else
                                      "moe_intermediate_size", where)
    if mt in _QWEN_MOE:
        step = _count(d, "decoder_sparse_step", where) if d.get("decoder_sparse_step") is not None else 1
        only = set(_layer_list(d, "mlp_only_layers", layers, where))
        f["dense_layers"] = tuple(i for i in range(layers) if i in only or (i + 1) % step)
        if mt == "qwen2_moe":  # one shared expert behind a sigmoid gate
            f["shared_intermediate"] = _count0(d, "shared_expert_intermediate_size", where)
            f["shared_experts"], f["shared_gate"] = int(f["shared_intermediate"] > 0), f["shared_intermediate"] > 0
    elif mt in _MLA:
        first = _count0(d, "first_k_dense_replace", where)
        freq = _count(d, "moe_layer_freq", where) if d.get("moe_layer_freq") is not None else 1
        f["dense_layers"] = tuple(i for i in range(layers) if i < first or i % freq)  # DeepSeek's and vLLM's rule
        f["shared_experts"] = _count0(d, "n_shared_experts", where)
        f["shared_intermediate"] = f["shared_experts"] * f["expert_intermediate"]
        f["q_lora_rank"] = _count0(d, "q_lora_rank", where)
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            f[key] = _count(d, key, where)
    elif mt == "gpt_oss":
        f.update(expert_bias=True, router_bias=True, attn_sinks=True)
    return f


def _windows(d: dict, mt: str, layers: int, where: str) -> dict:
    """Sliding-window layers from ``layer_types`` (gpt-oss without it: transformers' alternation, even layers).
    Checked for the mixture-of-experts types; a dense config's are recorded only where they parse (as before,
    nothing of a dense config's windows is priced)."""
    types, strict = d.get("layer_types"), mt in MOE_TYPES
    if types is None and mt == "gpt_oss":
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if types is None:
        return {}
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"sliding_attention",
                                                                                  "full_attention"}:
        if not strict:
            return {}
        raise InputError(f"{where}: layer_types must list sliding_attention or full_attention for each of the "
                         f"{layers} layers")
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if sliding and not strict and not d.get("sliding_window"):
        return {}
    return {"sliding_layers": sliding, "sliding_window": _count(d, "sliding_window", where)} if sliding else {}


def _quantization(d: dict) -> dict:
    """The checkpoint's weight format (``quantization_config``): its method, and whether only the experts use it."""
    q = d.get("quantization_config")
    if not isinstance(q, dict) or not isinstance(q.get("quant_method"), str):
        return {}  # none, or not one this reads (a dense config's is not priced either way)
    kept = [str(m) for m in q.get("modules_to_not_convert") or []]
    return {"weights_format": q["quant_method"].lower(),
            "quantized_experts_only": any("self_attn" in m for m in kept)}


def _rope(d: dict, where: str) -> dict:
    """``rope_scaling`` as the fields :attr:`ArchConfig.max_context` reads.  :raises InputError: one that is not
    an object, has no type, a factor that is not a positive number, or YaRN without its original length."""
    rs = d.get("rope_scaling")
    if rs is None:
        return {}
    kind = rs.get("rope_type", rs.get("type")) if isinstance(rs, dict) else None
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{where}: rope_scaling must be an object with a rope_type (or type), got {rs!r}")
    factor = rs.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise InputError(f"{where}: rope_scaling factor must be a positive number, got {factor!r}")
    orig = rs.get("original_max_position_embeddings")
    if kind == "yarn" and orig is None:
        raise InputError(f"{where}: rope_scaling yarn needs original_max_position_embeddings")
    return {"rope_type": kind, "rope_factor": float(factor),
            "rope_original": _count(rs, "original_max_position_embeddings", where) if orig is not None else 0}


def check_context(arch: ArchConfig, tokens: int, max_model_len: int | None = None) -> None:
    """:raises InputError: ``tokens`` (a request's prompt and output) beyond the positions the architecture
    reaches (:attr:`ArchConfig.max_context`, or a smaller ``max_model_len``), in one line saying how to price more."""
    limit = arch.max_context if max_model_len is None else min(max_model_len, arch.max_context or max_model_len)
    if limit and tokens > limit:
        why = (f"max_model_len {max_model_len}" if max_model_len is not None and limit == max_model_len else
               f"max_position_embeddings {arch.max_positions}" + (
                   f" with {arch.rope_type} rope scaling x{arch.rope_factor:g}" if limit != arch.max_positions else
                   " and no rope_scaling in its config"))
        more = ("a larger rope_scaling factor prices longer ones" if arch.max_context != arch.max_positions else
                "give a config.json with rope_scaling (e.g. YaRN) to price longer contexts")
        raise InputError(f"{arch.name}: {int(tokens)} tokens exceed the {limit} positions it reaches ({why}); {more}")


def from_config(name: str, d: dict, source: str = "") -> ArchConfig:
    """An :class:`ArchConfig` from a ``config.json``'s fields.

    Biases follow transformers: Qwen2 always has QKV bias and no O bias, Mistral and Mixtral none; Llama, Qwen3 and
    the rest have both exactly when ``attention_bias`` is true; ``mlp_bias`` (Llama's) adds gate/up/down biases.
    Mixture-of-experts configs of the ``model_type``s in :data:`MOE_TYPES` add their experts, routers, MLA and
    gpt-oss's sinks, windows and MXFP4 experts (:class:`ArchConfig`'s fields after ``mlp_bias``).

    :raises InputError: a required field missing or not a positive integer, a mixture-of-experts or MLA config of
        another ``model_type``, a multimodal config (one line).
    """
    where = source or name
    if not isinstance(d, dict):
        raise InputError(f"{where}: not a decoder config (a JSON object expected)")
    _refuse_unsupported(d, where)
    missing = [k for k in _NEEDED if k not in d]
    if missing:
        raise InputError(f"{where}: not a decoder config (missing {', '.join(missing)})")
    mt = str(d["model_type"])
    heads, hidden = _count(d, "num_attention_heads", where), _count(d, "hidden_size", where)
    layers = _count(d, "num_hidden_layers", where)
    kv_heads = _count(d, "num_key_value_heads", where) if d.get("num_key_value_heads") is not None else heads
    head_dim = _count(d, "head_dim", where) if d.get("head_dim") is not None else hidden // heads
    if head_dim < 1 or heads % kv_heads:
        raise InputError(f"{where}: {heads} attention heads with {kv_heads} KV heads and hidden size {hidden} is not "
                         "a grouped-query attention layout")
    moe = _moe_fields(d, mt, layers, where) if mt in MOE_TYPES else {}
    if moe.get("kv_lora_rank"):
        head_dim = moe["qk_nope_head_dim"] + moe["qk_rope_head_dim"]  # the query/key heads (V: v_head_dim)
    default_bias = mt == "gpt_oss"  # transformers' GptOssConfig: attention_bias true unless said
    attn_bias = bool(d.get("attention_bias", default_bias)) and mt not in ("mistral", "mixtral")
    qkv_bias = bool(d.get("qkv_bias", True)) if mt == "qwen2_moe" else True if mt == "qwen2" else attn_bias
    max_pos = d.get("max_position_embeddings")
    return ArchConfig(
        name=name, model_type=mt, layers=layers, hidden=hidden,
        intermediate=_count(d, "intermediate_size", where), heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=_count(d, "vocab_size", where), tied=bool(d.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias,  # Qwen2's q/k/v always have a bias (Qwen2-MoE's: its qkv_bias, true unless said)
        qk_norm=mt in ("qwen3", "qwen3_moe"),
        max_positions=_count(d, "max_position_embeddings", where) if max_pos else None,
        source=str(d.get("_source", source)), o_bias=attn_bias and mt not in ("qwen2", "qwen2_moe"),
        mlp_bias=bool(d.get("mlp_bias", False)) and mt not in _NO_MLP_BIAS,
        **moe, **_windows(d, mt, layers, where), **_quantization(d), **_rope(d, where))


def shipped() -> list[str]:
    """Names of the shipped architectures (``lrsim/data/archs/NAME.json``), canonical names only."""
    return sorted(p.stem for p in ARCH_DIR.glob("*.json"))


def canonical(name: str) -> str | None:
    """The shipped name ``name`` is or stands for (an alias, any case), else ``None``."""
    key = str(name).strip().lower()
    names = {n.lower(): n for n in shipped()}
    return names.get(key) or ALIASES.get(key)


def is_config_path(spec: str) -> bool:
    """Whether ``spec`` names a config file (``*.json``) or a directory (holding ``config.json``)."""
    p = Path(spec).expanduser()
    return str(spec).lower().endswith(".json") or p.is_dir()


def _config_name(d: dict, file: Path) -> str:
    """The last part of ``_name_or_path`` (``mistralai/Mistral-7B-v0.1`` -> ``Mistral-7B-v0.1``), else the file's
    stem (its directory's name for ``config.json``); characters a profile's entry names do not take become ``-``."""
    n = d.get("_name_or_path")
    n = n.strip().replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] if isinstance(n, str) else ""
    if not n:
        n = file.resolve().parent.name if file.name == "config.json" else file.stem
    return re.sub(r"[^A-Za-z0-9._-]", "-", n).strip("-.") or "config"


@dataclass(frozen=True)
class ArchFile:
    """An architecture config as read: its name, the ``config.json`` fields, where they came from, its shapes."""

    name: str  #: the shipped name (an alias resolved), the name given, else the config's own (:func:`load_config`)
    config: dict  #: the file's fields as read (``_source`` and any other ``_`` keys included)
    path: Path  #: the file read
    source: str  #: ``lrsim/data/archs/NAME.json`` for a shipped config, else the file's path
    arch: ArchConfig  #: the shapes a pass's cost depends on (checked: a decoder with every field it needs)


def read_arch(spec: str, name: str | None = None) -> ArchFile:
    """The one reader of architecture configs: a shipped name or alias (``lrsim/data/archs/NAME.json``), a
    ``config.json`` or a directory holding one; ``name`` names it instead (lrref names a model directory after
    itself).  Every config read is checked as :func:`from_config` checks it (a decoder it reads, the fields it needs).

    :raises InputError: unknown name (one line listing the shipped ones), or a config that cannot be read or is not
        a decoder config it reads.
    """
    spec = str(spec or "").strip()
    n = canonical(spec) if spec else None
    if spec and (spec.lower().endswith(".json") or n is None and is_config_path(spec)):
        file, d = _read_config(spec)  # a shipped name or alias wins over a directory of that name (./NAME does not)
        name, source = name or _config_name(d, file), str(file)
    elif n is None:
        raise InputError(f"unknown architecture {spec!r}: shipped are {', '.join(shipped())} (aliases: Hugging Face "
                         "repo ids such as Qwen/Qwen3-8B, DeepSeek-R1-Distill names; or a config.json path)")
    else:
        file, source = ARCH_DIR / f"{n}.json", f"lrsim/data/archs/{n}.json"
        d, name = json.loads(file.read_text(encoding="utf-8")), name or n
    return ArchFile(name, d, file, source, from_config(name, d, source))


def load_config(spec: str) -> ArchConfig:
    """The architecture of a ``config.json`` file, or of a directory holding one.

    :raises InputError: no such file, unreadable or invalid JSON, or not a decoder config it reads (one line naming
        the file).
    """
    file, d = _read_config(spec)
    return from_config(_config_name(d, file), d, str(file))


def _read_config(spec: str) -> tuple[Path, dict]:
    """The file a config spec names (a ``config.json``, or a directory holding one) and its JSON object."""
    p = Path(spec).expanduser()
    file = p / "config.json" if p.is_dir() else p
    if p.is_dir() and not file.is_file():
        raise InputError(f"{p}: no config.json in this directory")
    try:
        d = json.loads(file.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{file}: cannot read a model config ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{file}: not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise InputError(f"{file}: not a decoder config (a JSON object expected)")
    return file, d


def load_arch(name: str) -> ArchConfig:
    """A shipped architecture by name or alias (the returned name is the shipped one), or a config file/directory
    (:func:`read_arch`'s shapes).

    :raises InputError: unknown name (one line listing the shipped ones), or a config that cannot be read or is not
        a decoder config it reads.
    """
    return read_arch(name).arch


_QUANT = re.compile(r"[-.](i?q\d\w*|f16|bf16|f32|fp16|fp8|int[48]|awq|gptq)$", re.IGNORECASE)  # GGUF/quant suffixes


def _repo_names() -> dict[str, str]:
    """The repository part of each alias that is a Hugging Face repo id (``qwen2.5-coder-1.5b-instruct``) -> the
    shipped name, where every alias with that repository part agrees."""
    out: dict[str, str | None] = {}
    for alias, n in ALIASES.items():
        if "/" in alias:
            repo = alias.rsplit("/", 1)[1]
            out[repo] = n if out.get(repo, n) == n else None
    return {k: v for k, v in out.items() if v is not None}


def arch_for_model(model: str | None) -> str | None:
    """The architecture a model name or path stands for: a shipped name, an alias or Hugging Face repo id, a
    repository's name (lrref's registry names, e.g. ``qwen2.5-coder-1.5b-instruct``) found in the text or in its
    last two path parts (``~/.cache/lrref/NAME/model``, ``NAME-q4_k_m.gguf``); else a ``config.json`` (or a
    directory holding one) that exists here, as given; else None.  What a trace header's ``models`` name."""
    text = str(model or "").strip().replace("\\", "/").rstrip("/")
    if not text:
        return None
    parts = [p for p in text.split("/") if p]
    repos = _repo_names()
    for c in [text, "/".join(parts[-2:])] + parts[::-1][:2]:
        c = re.sub(r"\.gguf$", "", c, flags=re.IGNORECASE)
        for x in (c, _QUANT.sub("", c)):
            n = canonical(x) or repos.get(x.lower())
            if n:
                return n
    p = Path(text).expanduser()
    return text if (p / "config.json").is_file() or (p.suffix.lower() == ".json" and p.is_file()) else None
