"""Model architectures without weights: the shipped configs (``lrsim/data/archs/NAME.json``) and model directories.

A forward pass costs the same whatever the weights hold, so a latency profile
(``lrref profile``) needs only the architecture's ``config.json``.  Shipped:
the paper's shapes (``qwen2.5-0.5b``, ``qwen2.5-1.5b`` = R1-Distill-Qwen-1.5B,
``qwen2.5-7b``, ``qwen2.5-32b`` = R1-Distill-Qwen-32B (QwQ-32B: same shapes),
``qwen3-1.7b``, ``qwen3-32b``), more Llama, Mistral, Qwen2/2.5/3 and
R1-Distill-Qwen shapes up to 72B (docs/gpu-model.md, "Architectures", lists
them all; building a 70B model with random weights needs its memory), lrref's
default CPU pair (``qwen2.5-coder-0.5b``, ``qwen2.5-coder-1.5b``) and ``tiny``
for tests; each file's ``_source`` says which public ``config.json`` its
values are from.  Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import lrsim
from lrsim.errors import UsageError
from lrsim.fields import option


ARCH_DIR = Path(lrsim.__file__).resolve().parent / "data" / "archs"  # shared with lrsim.gpu (torch-free JSON)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Arch:
    """A model architecture: a name and the fields of its Hugging Face ``config.json``."""

    name: str = option("name in the profile, e.g. 'qwen2.5-32b'", "")
    config: dict = option("config.json fields (keys starting with '_' removed)", None)
    source: str = option("where the config came from (a shipped arch file or DIR/config.json)", "")

    @property
    def layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads") or self.config["num_attention_heads"])

    @property
    def head_dim(self) -> int:
        c = self.config
        return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])

    @property
    def max_positions(self) -> int | None:
        v = self.config.get("max_position_embeddings")
        return int(v) if v else None

    def kv_bytes_per_token(self, dtype: str) -> int:
        """KV-cache bytes per token: ``2 (K and V) x layers x kv_heads x head_dim x bytes per element``."""
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[dtype]


def source_label(a: Arch) -> str:
    """Where ``a``'s config came from, for a record: ``lrsim/data/archs/NAME.json`` for a shipped one, else its path."""
    p = Path(a.source)
    return f"lrsim/data/archs/{p.name}" if p.parent == ARCH_DIR else a.source


def shipped() -> list[str]:
    """Names of the shipped architecture configs (:func:`lrsim.gpu.archs.shipped`)."""
    from lrsim.gpu.archs import shipped as names

    return names()


def _read(spec: str, name: str | None = None) -> Arch:
    """An :class:`Arch` through lrsim's one reader of architecture configs (:func:`lrsim.gpu.archs.read_arch`: the
    same checks for a shipped config and a model directory's)."""
    from lrsim.errors import InputError
    from lrsim.gpu.archs import read_arch

    try:
        f = read_arch(spec, name=name)
    except InputError as e:
        raise UsageError(str(e)) from None
    return Arch(f.name, {k: v for k, v in f.config.items() if not k.startswith("_")}, str(f.path))


def load_arch(name: str) -> Arch:
    """A shipped architecture by name, or by an alias of ``lrsim.gpu.archs.ALIASES`` (named as the shipped one).

    :raises UsageError: unknown name (one line listing the shipped ones).
    """
    from lrsim.gpu.archs import canonical

    if not name or canonical(name) is None:
        raise UsageError(f"unknown architecture {name!r}: shipped are {', '.join(shipped())} "
                         "(or give --model DIR)")
    return _read(name)


def arch_from_model(spec: str, cache: str | os.PathLike | None = None) -> Arch:
    """The architecture of a model directory, or of a prepared registry model (its weights are not read).

    Named after the directory (its parent for lrref's ``NAME/model`` layout).
    """
    from . import models

    try:
        d = models.resolve(spec, cache)
    except models.ModelError as e:
        raise UsageError(str(e)) from None
    if not (d / "config.json").is_file():
        raise UsageError(f"{d} has no config.json")
    return _read(str(d / "config.json"), name=d.parent.name if d.name == "model" else d.name)
