"""The vocabulary check: a draft must share the target's tokenizer, read without loading either model's weights.
"""

from __future__ import annotations

from lrsim.errors import InputError


def _vocab(path: str) -> dict[str, int]:
    """A model's vocabulary without its weights: a ``.gguf`` file's (llama.cpp) or an HF directory's tokenizer."""
    if str(path).endswith(".gguf"):
        from .llamacpp_tokenizer import gguf_vocab

        return gguf_vocab(path)
    from transformers import AutoTokenizer

    from ..quiet import quiet_transformers

    with quiet_transformers():
        return AutoTokenizer.from_pretrained(str(path)).get_vocab()


def check_vocab(target_path: str, draft_path: str) -> None:
    """Refuse a draft whose vocabulary differs from the target's (prefixes are token ids).

    Loads only the two tokenizers (of HF directories, or of ``.gguf`` files through llama.cpp), so it runs
    before any weights load.

    :raises InputError: the vocabularies differ.
    """
    tv, dv = _vocab(target_path), _vocab(draft_path)
    if dv != tv:
        raise InputError(f"draft {draft_path} and target {target_path} have different vocabularies "
                         f"({len(dv)} vs {len(tv)} tokens): LR needs a shared tokenizer")
