"""Decoder architectures for the hardware model: shipped ``config.json`` copies, their aliases, any config file.

The shipped copies live in ``lrsim/data/archs/NAME.json``, the same files
``lrref`` builds its random-weight models from; here they are read as plain
JSON, without torch, by the one reader of architecture configs,
:func:`read_arch` (the config's fields, its name and source, and its shapes;
lrref takes the fields from it).  :func:`load_arch` (the shapes alone) and
:func:`read_arch` take a shipped name, an alias (:data:`ALIASES`: Hugging
Face repo ids and the DeepSeek-R1-Distill names whose every priced field
matches a shipped file) or a path to any dense decoder's ``config.json`` (or
the directory holding it); :func:`arch_for_model` finds the shipped
architecture a trace header's model names.  Only the shapes a forward pass's cost depends on are kept:
layers, hidden size, attention and KV heads, head dimension, MLP width,
vocabulary, tied embeddings, biases (QKV, O, MLP), per-head q/k norms (Qwen3)
and the maximum position.  Mixture-of-experts and multimodal configs are
refused (one line); sliding windows are not modelled (full attention).
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
    # Mistral (its sliding window is not modelled)
    "mistralai/mistral-7b-v0.1": "mistral-7b-v0.1",
    # Qwen2: the base repos say 131072 positions (files of their own); the Instruct repos say 32768, as the Qwen2.5
    # Instruct files, whose shapes they have
    "qwen/qwen2-7b": "qwen2-7b",
    "qwen/qwen2-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2-72b": "qwen2-72b",
    "qwen/qwen2-72b-instruct": "qwen2.5-72b",
    # Qwen: the Instruct repos the shipped Qwen2.5 files copy (the base repos' configs say 131072 positions), Qwen3
    "qwen/qwen2.5-0.5b-instruct": "qwen2.5-0.5b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen/qwen2.5-14b-instruct": "qwen2.5-14b",
    "qwen/qwen2.5-72b-instruct": "qwen2.5-72b",
    "qwen/qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b",
    "qwen/qwen2.5-coder-1.5b-instruct": "qwen2.5-coder-1.5b",
    "qwen/qwen3-1.7b": "qwen3-1.7b",
    "qwen/qwen3-8b": "qwen3-8b",
    "qwen/qwen3-14b": "qwen3-14b",
    "qwen/qwen3-32b": "qwen3-32b",
}


@dataclass(frozen=True)
class ArchConfig:
    """The shapes of one decoder-only transformer (a Hugging Face ``config.json``'s fields)."""

    name: str
    model_type: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool
    qk_norm: bool
    max_positions: int | None = None
    source: str = ""
    o_bias: bool = False  # O projection bias (Llama/Qwen3 with attention_bias: true; never Qwen2)
    mlp_bias: bool = False  # gate/up/down biases (Llama's mlp_bias)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (QKV and O with their biases, gated MLP, two norms, q/k norms)."""
        h, qd, kd, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        attn = h * (qd + 2 * kd) + (qd + 2 * kd) * self.qkv_bias + qd * h + h * self.o_bias
        mlp = 3 * h * i + (2 * i + h) * self.mlp_bias  # gate, up, down (+ their biases)
        return attn + mlp + 2 * h + 2 * self.head_dim * self.qk_norm  # + input/post norms (+ q/k norms)

    @property
    def params(self) -> int:
        """All parameters as transformers builds the model (tied embeddings counted once)."""
        emb = self.vocab * self.hidden
        return self.layers * self.layer_params + emb + self.hidden + emb * (not self.tied)

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of the weights a forward pass reads: everything but the embedding table (unless tied: the LM head)."""
        return (self.params - self.vocab * self.hidden * (not self.tied)) * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """``2 (K and V) x layers x kv_heads x head_dim x bytes``."""
        return 2 * self.layers * self.kv_dim * dtype_bytes


def _count(d: dict, key: str, where: str) -> int:
    """``d[key]`` as a positive integer (``4096.0`` too).  :raises InputError: anything else."""
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 1 or not float(v).is_integer():
        raise InputError(f"{where}: {key} must be a positive integer, got {v!r}")
    return int(v)


def _refuse_unsupported(d: dict, where: str) -> None:
    """:raises InputError: a mixture-of-experts or a multimodal (nested ``text_config``) config."""
    mt = str(d.get("model_type", ""))
    moe = [k for k in _MOE_KEYS if d.get(k)]
    if moe or "moe" in mt.lower():
        why = f"{moe[0]} = {d[moe[0]]}" if moe else f"model_type {mt}"
        raise InputError(f"{where}: mixture-of-experts configs are not modelled ({why}); the model prices dense "
                         "decoders only")
    if isinstance(d.get("text_config"), dict):
        raise InputError(f"{where}: a multimodal config (model_type {mt or '?'}, its decoder under text_config) is "
                         "not modelled; give a text-only decoder's config.json")


def from_config(name: str, d: dict, source: str = "") -> ArchConfig:
    """An :class:`ArchConfig` from a ``config.json``'s fields.

    Biases follow transformers: Qwen2 always has QKV bias and no O bias, Mistral none; Llama, Qwen3 and the rest
    have both exactly when ``attention_bias`` is true; ``mlp_bias`` (Llama's) adds gate/up/down biases.

    :raises InputError: a required field missing or not a positive integer, a mixture-of-experts or multimodal
        config (one line).
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
    kv_heads = _count(d, "num_key_value_heads", where) if d.get("num_key_value_heads") is not None else heads
    head_dim = _count(d, "head_dim", where) if d.get("head_dim") is not None else hidden // heads
    if head_dim < 1 or heads % kv_heads:
        raise InputError(f"{where}: {heads} attention heads with {kv_heads} KV heads and hidden size {hidden} is not "
                         "a grouped-query attention layout")
    attn_bias = bool(d.get("attention_bias", False)) and mt != "mistral"  # Mistral's projections have no bias
    max_pos = d.get("max_position_embeddings")
    return ArchConfig(
        name=name, model_type=mt, layers=_count(d, "num_hidden_layers", where), hidden=hidden,
        intermediate=_count(d, "intermediate_size", where), heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=_count(d, "vocab_size", where), tied=bool(d.get("tie_word_embeddings", False)),
        qkv_bias=True if mt == "qwen2" else attn_bias,  # Qwen2's q/k/v always have a bias
        qk_norm=mt == "qwen3", max_positions=_count(d, "max_position_embeddings", where) if max_pos else None,
        source=str(d.get("_source", source)), o_bias=attn_bias and mt != "qwen2",
        mlp_bias=bool(d.get("mlp_bias", False)) and mt not in ("qwen2", "qwen3", "mistral"))


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
    arch: ArchConfig  #: the shapes a pass's cost depends on (checked: a dense decoder with every field needed)


def read_arch(spec: str, name: str | None = None) -> ArchFile:
    """The one reader of architecture configs: a shipped name or alias (``lrsim/data/archs/NAME.json``), a
    ``config.json`` or a directory holding one; ``name`` names it instead (lrref names a model directory after
    itself).  Every config read is checked as :func:`from_config` checks it (a dense decoder, the fields it needs).

    :raises InputError: unknown name (one line listing the shipped ones), or a config that cannot be read or is not
        a dense decoder's.
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

    :raises InputError: no such file, unreadable or invalid JSON, or not a dense decoder config (one line naming
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
        a dense decoder's.
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
