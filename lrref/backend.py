"""The small interface every backend implements, and its dataclasses.

A backend holds one causal LM and generates *one step* for each of a batch of
token-id prefixes, each sequence stopping at its own step boundary
(:mod:`lrref.steps`) or token cap, optionally with prompt-lookup speculation
inside the step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Protocol, Sequence

from lrsim.fields import option

from .ngram import NgramConfig



@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen (temperature 0 = greedy)."""

    temperature: float = option("0 = greedy; > 0 samples from softmax(logits / temperature)", 0.0)
    top_p: float = option("nucleus sampling mass (1 = off)", 1.0)
    top_k: int = option("keep the k most likely tokens (0 = off)", 0)

    def __post_init__(self) -> None:
        if self.temperature < 0 or not (0 < self.top_p <= 1) or self.top_k < 0:
            raise ValueError(f"bad sampling temperature={self.temperature} top_p={self.top_p} top_k={self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class StepRequest:
    """One sequence to extend by one step.

    :param ids: the prefix (prompt + committed/draft steps), token ids.
    :param cap: maximum tokens of this step (the step cap, or less near the total cap).
    :param seed: seed of this sequence's sampler (ignored when greedy).
    """

    ids: tuple[int, ...]
    cap: int
    seed: int = 0


@dataclass
class StepOut:
    """One generated step and what it cost."""

    ids: list[int]  # the step's tokens (EOS included when it ended the step)
    text: str  # decoded, special tokens skipped
    finish: str  # "step" (separator), "eos", "cap", "cancelled"
    forwards: int = 0  # forward passes this sequence took part in
    ngram_drafted: int = 0  # prompt-lookup tokens proposed
    ngram_accepted: int = 0  # of those, accepted and kept in the step
    start: float = 0.0  # trace clock
    end: float = 0.0
    batch: int = 1  # mean number of sequences in the forward passes that produced it (rounded)
    cached_tokens: int = 0  # prefix tokens whose KV came from the prefix cache (not re-prefilled)

    @property
    def n_tokens(self) -> int:
        return len(self.ids)


class Backend(Protocol):
    """What the decoder needs from a model."""

    name: str
    eos_ids: tuple[int, ...]

    def generate_steps(self, reqs: Sequence[StepRequest], sampling: Sampling, ngram: NgramConfig,
                       clock: Callable[[], float] | None = None) -> list[StepOut]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def encode_chat(self, question: str, system: str | None) -> list[int]: ...


def config_dict(obj) -> dict:
    """A dataclass config as ``{field: value}`` plus ``{field + '__help': help}`` for the trace header."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = config_dict(v) if hasattr(v, "__dataclass_fields__") else v
    return out

