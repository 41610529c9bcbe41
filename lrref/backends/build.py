"""A backend built by kind: ``hf`` (transformers), ``llamacpp`` (a GGUF file), ``vllm`` (an engine of its own) or
random weights of an architecture; lr-async's draft process builds its model with it (:mod:`lrref.decode.draft_worker`).
"""

from __future__ import annotations

from .base import Backend
from .ngram import NgramConfig


def draft_backend(kind: str, path: str, dtype: str, threads: int, pool_size: int, device: str = "cpu",
                  random: dict | None = None, prefix_caching: bool = True, ngram: NgramConfig = NgramConfig()
                  ) -> Backend:
    """The draft model of a draft process: ``hf`` (transformers, ``dtype`` on ``device``), ``llamacpp`` (a GGUF
    file, whose quantised weights ignore ``dtype``; ``pool_size`` finished rows -> half as many KV sequence
    slots; ``prefix_caching``: KV reuse across requests), ``vllm`` (an engine of the draft process's own, n-gram
    ``ngram`` built in; its cores or GPU come from the process's environment,
    :func:`lrref.decode.draft_worker.vllm_draft_env`), or random weights of a shipped architecture
    (``random``: :mod:`lrref.backends.random_weights`)."""
    if random is not None:
        from .hf_random import RandomBackend

        return RandomBackend(**random, dtype=dtype, threads=threads, pool_size=pool_size, device=device)
    if kind == "llamacpp":
        from .llamacpp import LlamaCppBackend

        return LlamaCppBackend(path, threads=threads, slots=max(2, pool_size // 2), prefix_caching=prefix_caching)
    if kind == "vllm":
        from .vllm import VLLMBackend

        return VLLMBackend(path, dtype=dtype, ngram=ngram)
    from .hf import HFBackend

    return HFBackend(path, dtype=dtype, threads=threads, pool_size=pool_size, device=device)
