"""A transformers model with random weights from an architecture config: :func:`build_model` (also what
``lrref profile`` times), and :class:`RandomBackend` on it (torch).

The decoding machinery is :class:`lrref.backends.hf.HFBackend`'s (batched rows, KV holes,
prefix cache, n-gram, any torch device); what differs is that there is no
tokenizer.  Prompts are random token ids (seeded by the question's text, so
every process and every run gets the same prompt for the same question),
text is a placeholder, nothing but the step cap (and the token cap) ends a
step or a request, and generated tokens stay below ``token_limit`` so that a
draft with a smaller vocabulary can read the target's tokens.  See
:mod:`lrref.backends.random_weights`.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence

import torch

from ..archs import Arch
from ..host.cpu import resolve_dtype
from .hf import HFBackend

PLACEHOLDER = "\u00b7"  # the text of one random token: no digits, no separator


def build_model(arch: Arch, dtype: str, device: torch.device, seed: int = 0):
    """The causal LM of ``arch.config`` with random weights (transformers' own init), in eval mode on ``device``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(arch.config)
    cfg = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    with device:
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    return model.eval()


class RandomBackend(HFBackend):
    """An :class:`~lrref.backends.hf.HFBackend` whose model is ``arch`` with random weights (seeded), tokenizer-free.

    :param arch: the architecture (an :class:`lrref.archs.Arch` or its fields as a dict, from another process).
    :param token_limit: token ids below it are generated and prompted (default: the vocabulary).
    :param prompt_tokens: length of :meth:`encode_chat`'s random prompts.
    :param static_cache: see :class:`~lrref.backends.hf.HFBackend` (and ``cuda_graphs``).
    """

    separator = None  # random text has no "\n\n": steps end at the cap

    def __init__(self, arch: Arch | dict, seed: int = 0, token_limit: int | None = None, prompt_tokens: int = 128,
                 dtype: str = "auto", threads: int | None = None, prefix_cache: bool = True, pool_size: int = 8,
                 device: str = "cpu", static_cache=None, cuda_graphs: bool = False):
        arch = Arch(**arch) if isinstance(arch, dict) else arch
        if threads:
            torch.set_num_threads(threads)
        self.path = self.name = f"random:{arch.name}"
        self.device, self.dtype = torch.device(device), resolve_dtype(dtype, device)
        self.tok = None
        self._setup(build_model(arch, self.dtype, self.device, seed), prefix_cache, pool_size)
        vocab = int(arch.config["vocab_size"])
        self.token_limit, self.prompt_tokens = min(token_limit or vocab, vocab), prompt_tokens
        self.eos_ids, self.pad_id = (), 0
        self.set_static_cache(static_cache, cuda_graphs)

    def decode(self, ids: Sequence[int]) -> str:
        return PLACEHOLDER * len(ids)

    def encode(self, text: str) -> list[int]:
        """``prompt_tokens`` random token ids, the same for the same text in every process."""
        rng = random.Random(zlib.crc32(text.encode("utf-8")))
        return [rng.randrange(self.token_limit) for _ in range(self.prompt_tokens)]

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        return self.encode(question)

    def vocab(self) -> dict[str, int]:
        return {}

    @torch.inference_mode()
    def lm_head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits of the tokens below ``token_limit`` only."""
        return super().lm_head(h)[..., :self.token_limit]
