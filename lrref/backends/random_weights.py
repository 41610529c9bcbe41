"""``--random-weights``: time the decoder on model shapes whose weights are not at hand (torch-free).

A forward pass costs the same whatever the weights hold, so the target (and
the draft) can be built from an architecture's ``config.json`` alone (a
shipped one, :mod:`lrref.archs`, or a model directory) with random weights
(:class:`lrref.backends.hf_random.RandomBackend`).  Such a model writes no text: the
run is tokenizer-free (prompts are random token ids of ``prompt_tokens``,
steps end at the step cap since there is no ``"\\n\\n"`` to end them, text is
a placeholder) and acceptance means nothing, so the verifier must be the
random one (accept with probability ``p``).  The trace header says so
(``models``: ``random:ARCH``; ``config.random_weights``; ``notes``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from lrsim.errors import UsageError
from lrsim.fields import option

from ..archs import Arch, arch_from_model, load_arch, shipped, source_label

TARGET_SEED, DRAFT_SEED = 0, 1  # distinct weights even when draft and target share an architecture
NOTE = ("random weights ({target} target, {draft} draft): timings only; steps end at the step cap and acceptance "
        "is the random verifier's p = {p}, not a measurement")


@dataclass(frozen=True)
class RandomWeights:
    """Target and draft built with random weights from their architectures."""

    target: Arch = option("target architecture", None)
    draft: Arch = option("draft architecture (default: the target's, other weights)", None)
    prompt_tokens: int = option("prompt length: random token ids", 128)

    @property
    def token_limit(self) -> int:
        """Token ids both models can read: prompts and generated tokens stay below it."""
        return min(int(self.target.config["vocab_size"]), int(self.draft.config["vocab_size"]))

    def model(self, role: str) -> dict:
        """What a process needs to build the ``role`` model ('target' or 'draft'): picklable keywords of
        :class:`lrref.backends.hf_random.RandomBackend`."""
        arch, seed = (self.target, TARGET_SEED) if role == "target" else (self.draft, DRAFT_SEED)
        return {"arch": asdict(arch), "seed": seed, "token_limit": self.token_limit,
                "prompt_tokens": self.prompt_tokens}

    def header(self, p: float) -> dict:
        """The trace header's ``config.random_weights``."""
        return {"target": self.target.name, "draft": self.draft.name, "target_config": source_label(self.target),
                "draft_config": source_label(self.draft), "seeds": {"target": TARGET_SEED, "draft": DRAFT_SEED},
                "prompt_tokens": self.prompt_tokens, "token_limit": self.token_limit, "acceptance_p": p}

    def note(self, p: float) -> str:
        return NOTE.format(target=self.target.name, draft=self.draft.name, p=p)


def resolve_arch(spec: str, cache: str | os.PathLike | None = None) -> Arch:
    """A shipped architecture by name or alias (``lrsim.gpu.archs.ALIASES``, any case; named as the shipped one), else
    a model directory's (or prepared registry model's) ``config.json``.

    :raises UsageError: neither (one line listing the shipped names).
    """
    from lrsim.gpu.archs import canonical

    from .. import models

    spec = spec.strip()
    if canonical(spec) is not None:  # a shipped name or alias wins over a directory of that name (./NAME does not)
        return load_arch(spec)
    if spec not in models.REGISTRY and not os.path.isdir(os.path.expanduser(spec)):
        raise UsageError(f"--random-weights: unknown architecture {spec!r}: shipped are {', '.join(shipped())} "
                         "(aliases: Hugging Face repo ids such as Qwen/Qwen3-8B; or give a model directory)")
    return arch_from_model(spec, cache)


def parse(text: str, prompt_tokens: int, max_tokens: int, cache: str | os.PathLike | None = None) -> RandomWeights:
    """``--random-weights TARGET[,DRAFT]`` and ``--prompt-tokens``, checked against the architectures.

    :raises UsageError: an unknown architecture, a bad count, or prompts + output longer than a model's positions.
    """
    parts = text.split(",")
    if not 1 <= len(parts) <= 2 or not all(p.strip() for p in parts):
        raise UsageError(f"--random-weights takes TARGET_ARCH[,DRAFT_ARCH], got {text!r}")
    if prompt_tokens < 1:
        raise UsageError(f"--prompt-tokens must be >= 1, got {prompt_tokens}")
    target = resolve_arch(parts[0], cache)
    draft = resolve_arch(parts[1], cache) if len(parts) == 2 else target
    for a in (target, draft):
        if a.max_positions is not None and prompt_tokens + max_tokens > a.max_positions:
            raise UsageError(f"--prompt-tokens {prompt_tokens} + --max-tokens {max_tokens} is longer than "
                             f"{a.name}'s max_position_embeddings {a.max_positions}")
    return RandomWeights(target, draft, prompt_tokens)
