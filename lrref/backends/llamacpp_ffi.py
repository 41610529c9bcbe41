"""ctypes declarations of the llama.cpp C API that :mod:`lrref.backends.llamacpp` uses.

The library is the one inside the ``xllamacpp`` wheel (prebuilt CPU wheels on
PyPI, no compiler needed): its extension module statically links llama.cpp
and exports the whole C API (``llama_decode``, ``llama_batch``, the per-sequence
memory API, ...), while xllamacpp's Python surface is only a server.  We call
those C functions directly, which gives what a step engine needs and the
server API does not: batches of token ids over several sequence ids in one
``llama_decode``, logits at several positions per row (n-gram verification),
per-sequence KV removal/copy (prefix reuse, rejected proposals) and control
between every forward pass (cancellation).

Struct layouts.  ``llama_model_params`` is declared field by field (the
fields we set are at its start).  ``llama_context_params`` is kept as the
library's own default bytes and patched at known offsets only; the offsets and
the struct sizes are those of the pinned wheel (llama.cpp build b11549) and
are checked against the defaults the library returns, so another wheel whose
layout moved is refused with a message instead of crashing.  The check sees
only what the defaults show: a changed function signature or a field moved
behind the checked ones would still be called wrongly (a crash, not an
error), which is why both extras pin the exact release (:data:`PINNED`).

Importing this module needs neither the binding nor torch; :func:`load` does
the work once per process.
"""

from __future__ import annotations

import ctypes
import os
import struct
from ctypes import POINTER, c_bool, c_char_p, c_float, c_int8, c_int32, c_size_t, c_uint64, c_void_p
from typing import Any

from lrsim.errors import DomainError, UsageError

PINNED = "2026.10.11549"  # the xllamacpp release whose layouts are below (pyproject extra `llamacpp`)
CTX_PARAMS_SIZE = 168
# offsets in llama_context_params (b11549): 9 x uint32 counts, then enums, floats, pointers, the bools at 136
CTX_FIELDS = {"n_ctx": ("<I", 0), "n_batch": ("<I", 4), "n_ubatch": ("<I", 8), "n_seq_max": ("<I", 12),
              "n_threads": ("<i", 28), "n_threads_batch": ("<i", 32), "flash_attn_type": ("<i", 52)}
CTX_BOOLS = 136  # embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified
CTX_DEFAULT_BOOLS = (0, 1, 1, 1, 1, 0)
EXTRA_HINT = "pip install -e '.[llamacpp]'"

llama_token = c_int32
llama_pos = c_int32
llama_seq_id = c_int32


class LibraryError(DomainError):
    """The binding's library lacks a symbol or its C layout is not the one this module was written for (one line:
    the CLI prints it and exits 2)."""


class ModelParams(ctypes.Structure):
    """``struct llama_model_params`` (80 bytes)."""

    _fields_ = [("devices", c_void_p), ("tensor_buft_overrides", c_void_p), ("n_gpu_layers", c_int32),
                ("split_mode", c_int32), ("load_mode", c_int32), ("lazy_mode", c_int32), ("main_gpu", c_int32),
                ("tensor_split", c_void_p), ("progress_callback", c_void_p), ("progress_callback_user_data", c_void_p),
                ("kv_overrides", c_void_p), ("vocab_only", c_bool), ("check_tensors", c_bool),
                ("use_extra_bufts", c_bool), ("no_host", c_bool), ("no_alloc", c_bool), ("load_mtp", c_bool)]


class ContextParams(ctypes.Structure):
    """``struct llama_context_params`` as opaque bytes, read and patched at :data:`CTX_FIELDS`."""

    _fields_ = [("raw", c_uint64 * (CTX_PARAMS_SIZE // 8))]

    def _buf(self) -> Any:
        return (ctypes.c_char * CTX_PARAMS_SIZE).from_buffer(self)

    def get(self, name: str) -> int:
        fmt, off = CTX_FIELDS[name]
        return struct.unpack_from(fmt, self._buf(), off)[0]

    def set(self, name: str, value: int) -> None:
        fmt, off = CTX_FIELDS[name]
        struct.pack_into(fmt, self._buf(), off, value)

    def bools(self) -> tuple[int, ...]:
        return tuple(bytes(self._buf())[CTX_BOOLS:CTX_BOOLS + 6])

    def tail(self) -> tuple[int, ...]:
        """samplers, n_samplers, ctx_other (zero by default)."""
        return struct.unpack_from("<3Q", self._buf(), CTX_PARAMS_SIZE - 24)


class Batch(ctypes.Structure):
    """``struct llama_batch``."""

    _fields_ = [("n_tokens", c_int32), ("token", POINTER(llama_token)), ("embd", POINTER(c_float)),
                ("pos", POINTER(llama_pos)), ("n_seq_id", POINTER(c_int32)),
                ("seq_id", POINTER(POINTER(llama_seq_id))), ("logits", POINTER(c_int8))]


LogCallback = ctypes.CFUNCTYPE(None, c_int32, c_char_p, c_void_p)

_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [LogCallback, c_void_p]),
    "llama_model_default_params": (ModelParams, []),
    "llama_context_default_params": (ContextParams, []),
    "llama_model_load_from_file": (c_void_p, [c_char_p, ModelParams]),
    "llama_model_free": (None, [c_void_p]),
    "llama_init_from_model": (c_void_p, [c_void_p, ContextParams]),
    "llama_free": (None, [c_void_p]),
    "llama_model_get_vocab": (c_void_p, [c_void_p]),
    "llama_model_desc": (c_int32, [c_void_p, c_char_p, c_size_t]),
    "llama_model_n_params": (c_uint64, [c_void_p]),
    "llama_model_meta_val_str": (c_int32, [c_void_p, c_char_p, c_char_p, c_size_t]),
    "llama_model_chat_template": (c_char_p, [c_void_p, c_char_p]),
    "llama_vocab_n_tokens": (c_int32, [c_void_p]),
    "llama_vocab_is_eog": (c_bool, [c_void_p, llama_token]),
    "llama_vocab_get_text": (c_char_p, [c_void_p, llama_token]),
    "llama_tokenize": (c_int32, [c_void_p, c_char_p, c_int32, POINTER(llama_token), c_int32, c_bool, c_bool]),
    "llama_detokenize": (c_int32, [c_void_p, POINTER(llama_token), c_int32, c_char_p, c_int32, c_bool, c_bool]),
    "llama_decode": (c_int32, [c_void_p, Batch]),
    "llama_get_logits": (POINTER(c_float), [c_void_p]),
    "llama_get_memory": (c_void_p, [c_void_p]),
    "llama_memory_clear": (None, [c_void_p, c_bool]),
    "llama_memory_seq_rm": (c_bool, [c_void_p, llama_seq_id, llama_pos, llama_pos]),
    "llama_memory_seq_cp": (None, [c_void_p, llama_seq_id, llama_seq_id, llama_pos, llama_pos]),
    "llama_memory_seq_pos_max": (llama_pos, [c_void_p, llama_seq_id]),
    "llama_set_n_threads": (None, [c_void_p, c_int32, c_int32]),
    "llama_n_threads": (c_int32, [c_void_p]),
    "llama_n_ctx": (ctypes.c_uint32, [c_void_p]),
    "llama_n_seq_max": (ctypes.c_uint32, [c_void_p]),
    "llama_print_system_info": (c_char_p, []),
}

_LIB: ctypes.CDLL | None = None
_VERSION: str | None = None


def _silence(level: int, text: bytes, data: Any) -> None:  # llama.cpp logs to stderr otherwise
    return None


_QUIET = LogCallback(_silence)


def require_binding() -> None:
    """Check, before any model loads, that the binding imports and its layout is the pinned one.

    :raises UsageError: xllamacpp is not installed (one line naming the extra).
    :raises LibraryError: another xllamacpp release whose library differs.
    """
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        raise UsageError(f"--backend llamacpp needs the llama.cpp binding: {EXTRA_HINT}") from None
    load()


def binding_version() -> str:
    """Version of the installed ``xllamacpp`` (loads the library)."""
    load()
    return _VERSION or "?"


def load() -> ctypes.CDLL:
    """The llama.cpp library (imported once; raises :class:`ImportError` when xllamacpp is missing)."""
    global _LIB, _VERSION
    if _LIB is not None:
        return _LIB
    # OpenMP threads that spin while waiting starve the other process (lr-async runs two) and any other load on
    # the cores: 2 threads fell to ~1 tok/s on a loaded 2-core machine without this; set it in the environment
    # to override (it must be set before libgomp loads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp
    from xllamacpp import xllamacpp as ext

    lib = ctypes.CDLL(ext.__file__)
    for name, (res, args) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryError(f"xllamacpp {xllamacpp.__version__} does not export {name}; "
                               f"install xllamacpp=={PINNED}") from None
        fn.restype, fn.argtypes = res, args
    _check_layouts(lib, xllamacpp.__version__)
    lib.llama_log_set(_QUIET, None)
    lib.llama_backend_init()
    _LIB, _VERSION = lib, xllamacpp.__version__
    return lib


def _check_layouts(lib: ctypes.CDLL, version: str) -> None:
    """Refuse a library whose default parameters do not sit where this module expects them."""
    mp = lib.llama_model_default_params()
    cp = lib.llama_context_default_params()
    got = [cp.get(k) for k in CTX_FIELDS] + list(cp.bools()) + list(cp.tail())
    want = [512, 2048, 512, 1, 4, 4, -1, *CTX_DEFAULT_BOOLS, 0, 0, 0]
    if got != want or mp.n_gpu_layers != -1 or not mp.use_extra_bufts or mp.vocab_only:
        raise LibraryError(f"xllamacpp {version}: llama.cpp parameter layout differs from the one lrref was "
                           f"written for; install xllamacpp=={PINNED}")


def context_params(n_ctx: int, n_batch: int, n_seq_max: int, threads: int, kv_unified: bool,
                   flash_attn: int = -1) -> ContextParams:
    """Default context parameters with the fields lrref sets (flash_attn: -1 auto, 0 off, 1 on)."""
    cp = load().llama_context_default_params()
    for k, v in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_ubatch", n_batch), ("n_seq_max", n_seq_max),
                 ("n_threads", threads), ("n_threads_batch", threads), ("flash_attn_type", flash_attn)):
        cp.set(k, v)
    ctypes.memmove(ctypes.addressof(cp) + CTX_BOOLS + 5, bytes([int(kv_unified)]), 1)
    return cp
