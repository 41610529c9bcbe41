"""Keep transformers quiet while it loads or converts a model.

A run's output should read well in a terminal and in a log: transformers'
per-tensor progress bars ("Loading weights", "Converting and de-quantizing GGUF
tensors") and its load-time warnings (e.g. the GGUF dtype advice) are turned
off for the duration of a load; the caller prints one line or one bar per stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial


@contextmanager
def quiet_transformers(gguf_progress: bool = False) -> Iterator[None]:
    """transformers at error verbosity and without progress bars inside the block.

    :param gguf_progress: keep the GGUF de-quantisation bar (one bar, cleared when done; for a TTY).
    """
    from transformers.utils import logging as tl

    level, bars = tl.get_verbosity(), tl.is_progress_bar_enabled()
    tl.set_verbosity_error()
    tl.disable_progress_bar()
    gguf_mod, gguf_tqdm = _gguf_tqdm(gguf_progress)
    try:
        yield
    finally:
        tl.set_verbosity(level)
        if bars:
            tl.enable_progress_bar()
        if gguf_mod is not None:
            gguf_mod.tqdm = gguf_tqdm


def _gguf_tqdm(show: bool):
    """The GGUF loader uses ``tqdm.auto`` directly (not transformers' switch): wrap its ``tqdm``."""
    try:
        from transformers import modeling_gguf_pytorch_utils as mod
    except ImportError:
        return None, None
    orig = getattr(mod, "tqdm", None)
    if orig is None:
        return None, None
    mod.tqdm = partial(orig, disable=not show, leave=False)
    return mod, orig
