"""``--backend auto``: the backend a run gets when it names none.

On a CPU the default pair decodes several times faster through llama.cpp on
its GGUF files than through transformers (the side-by-side ``lrref bench`` in
docs/how-to/record-traces.md, "Choosing the backend"), so ``auto`` is llamacpp whenever it can be:

- the run asks for nothing only torch does (``--device``/``--draft-device``
  other than the CPU, ``--random-weights``, an explicit ``--dtype``);
- the binding imports and is the release :mod:`lrref.backends.llamacpp_ffi` is written
  against;
- no language model the run needs is a model directory, or a registry
  model prepared for transformers only.

Otherwise hf.  The CLI prints the reason, one line on stderr, once the run's
input has passed its checks, so a log says which engine timed a run (the
trace header records it too).  ``auto`` never picks vllm.
"""

from __future__ import annotations

from pathlib import Path

from .. import models


def _torch_only(a) -> str | None:
    """The flag that needs torch, or None."""
    if a.device != "cpu" or a.draft_device:
        return f"--device {a.draft_device or a.device}"
    if a.random_weights:
        return "--random-weights"
    if a.dtype != "auto":
        return f"--dtype {a.dtype}"
    return None


def _binding_missing() -> str | None:
    """Why the llama.cpp binding cannot run here, or None."""
    from lrsim.errors import DomainError

    from .llamacpp_ffi import require_binding

    try:
        require_binding()
    except DomainError as e:
        return str(e)
    return None


def _hf_only(a, lr: bool) -> str | None:
    """Why a language model of the run can only load in hf, or None.

    That is a model directory, or a registry model whose HF directory is prepared but not its GGUF; a registry
    model prepared in neither format counts for llama.cpp, so the error then names the default prepare command.
    """
    cache = models.cache_dir(a.cache_dir)
    names = [a.target or models.DEFAULT_TARGET] + ([a.draft or models.DEFAULT_DRAFT] if lr else [])
    for name in names:
        if name in models.REGISTRY:
            if not models.gguf_ready(name, cache) and models.is_ready(name, cache):
                return f"{name} is prepared for transformers only (`lrref models prepare --format gguf` adds its GGUF)"
        elif Path(name).suffix != ".gguf":
            return f"{name} is not a .gguf file"
    return None


def choose(a, lr: bool) -> tuple[str, str]:
    """(backend, reason) for ``--backend auto``; ``lr``: the run has a draft model."""
    flag = _torch_only(a)
    if flag:
        return "hf", f"{flag} needs torch"
    why = _hf_only(a, lr)
    if why:
        return "hf", why
    why = _binding_missing()
    if why:
        return "hf", f"llama.cpp unavailable ({why})"
    return "llamacpp", "GGUF files through llama.cpp, the faster engine on CPUs"


def resolve(a, lr: bool) -> tuple[str, str | None]:
    """(backend, the line that says why) with ``a.backend == 'auto'`` resolved, for the caller to say once the run's
    input has passed its checks; (``a.backend``, None) when the backend was named.  ``a`` (a
    :class:`lrref.session.SessionConfig`, or anything with its fields) is only read."""
    if a.backend != "auto":
        return a.backend, None
    backend, reason = choose(a, lr)
    return backend, f"--backend auto: {backend} ({reason}; --backend hf|llamacpp to choose)"
