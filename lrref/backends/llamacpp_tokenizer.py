"""Text side of a GGUF model through llama.cpp: tokenize, detokenize, chat template, vocabulary.

The chat template is the GGUF's own ``tokenizer.chat_template``, rendered with
jinja2 the way transformers renders it (sandboxed, ``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``), then tokenized with special tokens
parsed and no BOS added, as the HF backend's ``encode_chat`` does.  Decoding
skips special (control) tokens, like ``skip_special_tokens=True``.

:func:`gguf_vocab` and :func:`gguf_quant` read a GGUF file without its weights
(the vocabulary check runs before any model loads).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from typing import Any

# llama_ftype values of the quantisations lrref ships (general.file_type in the GGUF)
FTYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
          12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def meta(lib: ctypes.CDLL, model: int, key: str) -> str | None:
    """One GGUF metadata value as a string (None when absent)."""
    buf = ctypes.create_string_buffer(512)
    n = lib.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


def quant_name(lib: ctypes.CDLL, model: int) -> str:
    """The model's quantisation from ``general.file_type`` (e.g. ``Q4_K_M``)."""
    ft = meta(lib, model, "general.file_type")
    return "?" if ft is None else FTYPES.get(int(ft), f"ftype {ft}")


class GGUFTokenizer:
    """Tokenizer of a loaded llama.cpp model, with the small part of the HF tokenizer API lrref uses."""

    def __init__(self, lib: ctypes.CDLL, model: int):
        self.lib, self.model = lib, model
        self.vocab_ptr = lib.llama_model_get_vocab(model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab_ptr))
        tmpl = lib.llama_model_chat_template(model, None)
        self.chat_template = tmpl.decode("utf-8") if tmpl else None
        self.eos_ids = tuple(t for t in range(self.n_vocab) if lib.llama_vocab_is_eog(self.vocab_ptr, t))
        self.bos_token = self._special("tokenizer.ggml.bos_token_id")
        self.eos_token = self._special("tokenizer.ggml.eos_token_id")
        self.eos_token_id = int(meta(lib, model, "tokenizer.ggml.eos_token_id") or self.eos_ids[0])

    def _special(self, key: str) -> str:
        v = meta(self.lib, self.model, key)
        return self.token_text(int(v)) if v is not None else ""

    def token_text(self, t: int) -> str:
        return (self.lib.llama_vocab_get_text(self.vocab_ptr, t) or b"").decode("utf-8", "replace")

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added; special-token text becomes special tokens)."""
        b = text.encode("utf-8")
        cap = len(b) + 16
        arr = (ctypes.c_int32 * cap)()
        n = self.lib.llama_tokenize(self.vocab_ptr, b, len(b), arr, cap, False, parse_special)
        if n < 0:
            raise RuntimeError(f"llama_tokenize needs {-n} tokens, had room for {cap}")
        return list(arr[:n])

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if not ids:
            return ""
        arr = (ctypes.c_int32 * len(ids))(*ids)
        cap = 32 * len(ids) + 64
        buf = ctypes.create_string_buffer(cap)
        n = self.lib.llama_detokenize(self.vocab_ptr, arr, len(ids), buf, cap, False, not skip_special_tokens)
        if n < 0:
            buf = ctypes.create_string_buffer(-n + 1)
            n = self.lib.llama_detokenize(self.vocab_ptr, arr, len(ids), buf, -n + 1, False,
                                          not skip_special_tokens)
        return buf.raw[:n].decode("utf-8", "replace")

    def apply_chat_template(self, messages: list[dict], tokenize: bool = False,
                            add_generation_prompt: bool = True) -> Any:
        """The GGUF chat template rendered like transformers does (text, or ids with ``tokenize=True``)."""
        if not self.chat_template:
            raise ValueError("this GGUF file has no chat template")
        text = _render(self.chat_template, messages, add_generation_prompt, self.bos_token, self.eos_token)
        return self.encode(text) if tokenize else text

    def get_vocab(self) -> dict[str, int]:
        return {self.token_text(t): t for t in range(self.n_vocab)}


def _render(template: str, messages: list[dict], add_generation_prompt: bool, bos: str, eos: str) -> str:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def _vocab_only(path: str | os.PathLike, fn: Callable[[ctypes.CDLL, int], Any]) -> Any:
    """``fn(lib, model)`` on a GGUF file loaded without its weights."""
    from . import llamacpp_ffi as ffi

    lib = ffi.load()
    mp = lib.llama_model_default_params()
    mp.vocab_only = True
    model = lib.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise ValueError(f"llama.cpp could not read {path}")
    try:
        return fn(lib, model)
    finally:
        lib.llama_model_free(model)


def gguf_vocab(path: str | os.PathLike) -> dict[str, int]:
    """Token text -> id of a GGUF file (its weights are not loaded)."""
    return _vocab_only(path, lambda lib, m: GGUFTokenizer(lib, m).get_vocab())


def gguf_quant(path: str | os.PathLike) -> str:
    """Quantisation of a GGUF file (``general.file_type``), e.g. ``Q4_K_M``."""
    return _vocab_only(path, quant_name)


def gguf_meta(path: str | os.PathLike, keys: Sequence[str]) -> dict[str, str | None]:
    """GGUF metadata values (strings; None when absent) of a file whose weights are not loaded; ``{arch}`` in a key
    is replaced by its ``general.architecture``."""

    def read(lib: ctypes.CDLL, model: int) -> dict[str, str | None]:
        arch = meta(lib, model, "general.architecture") or "?"
        return {k: meta(lib, model, k.replace("{arch}", arch)) for k in keys} | {"general.architecture": arch}

    return _vocab_only(path, read)
