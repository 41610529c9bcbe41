"""Decoder architectures for the hardware model: the shipped ``config.json`` copies in ``lrsim/data/archs``.

The same files ``lrref`` builds its random-weight models from (``lrref/archs.py``
points there); here they are read as plain JSON, without torch.  Only the
shapes a forward pass's cost depends on are kept: layers, hidden size,
attention and KV heads, head dimension, MLP width, vocabulary, tied
embeddings, QKV bias (Qwen2) and per-head q/k norms (Qwen3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

ARCH_DIR = Path(__file__).resolve().parents[1] / "data" / "archs"
_NEEDED = ("model_type", "num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")


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

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (QKV with bias, O, gated MLP, two norms, q/k norms)."""
        h, qd, kd = self.hidden, self.q_dim, self.kv_dim
        attn = h * (qd + 2 * kd) + (qd + 2 * kd) * self.qkv_bias + qd * h  # QKV (+ bias), O
        mlp = 3 * h * self.intermediate  # gate, up, down
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


def from_config(name: str, d: dict, source: str = "") -> ArchConfig:
    """An :class:`ArchConfig` from a ``config.json``'s fields.

    :raises InputError: a required field is missing (one line).
    """
    missing = [k for k in _NEEDED if k not in d]
    if missing:
        raise InputError(f"{source or name}: not a decoder config (missing {', '.join(missing)})")
    heads = int(d["num_attention_heads"])
    mt = str(d["model_type"])
    return ArchConfig(
        name=name, model_type=mt, layers=int(d["num_hidden_layers"]), hidden=int(d["hidden_size"]),
        intermediate=int(d["intermediate_size"]), heads=heads, kv_heads=int(d.get("num_key_value_heads") or heads),
        head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads), vocab=int(d["vocab_size"]),
        tied=bool(d.get("tie_word_embeddings", False)),
        qkv_bias=bool(d.get("attention_bias", mt == "qwen2")),  # Qwen2 always has QKV bias
        qk_norm=mt == "qwen3", max_positions=int(d["max_position_embeddings"]) if d.get("max_position_embeddings")
        else None, source=str(d.get("_source", source)))


def shipped() -> list[str]:
    """Names of the shipped architectures (``lrsim/data/archs/NAME.json``)."""
    return sorted(p.stem for p in ARCH_DIR.glob("*.json"))


def load_arch(name: str) -> ArchConfig:
    """A shipped architecture by name.

    :raises InputError: unknown name (one line listing the shipped ones).
    """
    path = ARCH_DIR / f"{name}.json"
    if not name or "/" in name or not path.is_file():
        raise InputError(f"unknown architecture {name!r}: shipped are {', '.join(shipped())}")
    return from_config(name, json.loads(path.read_text(encoding="utf-8")), f"lrsim/data/archs/{name}.json")
