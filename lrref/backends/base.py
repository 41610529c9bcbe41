"""The interface every backend implements (:class:`Backend`, :class:`Engine`), and its dataclasses.

A backend holds one causal LM and generates *one step* for each of a batch of
token-id prefixes, each sequence stopping at its own step boundary
(:mod:`lrref.backends.steps`) or token cap, optionally with prompt-lookup speculation
inside the step.  ``generate_steps`` does one batch to the end; ``engine``
gives a running batch that rows join and leave between forward passes
(``lr-async``); :func:`run_steps` is ``generate_steps`` on top of an engine.
:mod:`lrref.backends.hf`, :mod:`lrref.backends.vllm` and :mod:`lrref.backends.llamacpp`
implement it; the decoder, the draft worker and the verifiers are typed against it.

No torch here: the CLI imports this module to validate before any model loads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lrsim.errors import InputError
from lrsim.fields import option

from .ngram import NgramConfig

Clock = Callable[[], float]


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen (temperature 0 = greedy)."""

    temperature: float = option("0 = greedy; > 0 samples from softmax(logits / temperature)", 0.0)
    top_p: float = option("nucleus sampling mass (1 = off)", 1.0)
    top_k: int = option("keep the k most likely tokens (0 = off)", 0)

    def __post_init__(self) -> None:
        if self.temperature < 0 or not (0 < self.top_p <= 1) or self.top_k < 0:
            raise InputError(f"bad sampling temperature={self.temperature} top_p={self.top_p} top_k={self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class StepRequest:
    """One sequence to extend by one step.

    :param ids: the prefix (prompt + committed/draft steps), token ids.
    :param cap: maximum tokens of this step (the step cap, or less near the total cap).
    :param seed: seed of this sequence's sampler (ignored when greedy).
    :param request: the request it belongs to (pass records name it; None: not known).
    """

    ids: tuple[int, ...]
    cap: int
    seed: int = 0
    request: int | None = None


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
    busy_s: float = 0.0  # seconds of the forward passes it took part in (0: not measured by this backend)

    @property
    def n_tokens(self) -> int:
        return len(self.ids)


@dataclass
class BackendStats:
    """Counters of one backend (forward passes, prefix cache); a backend leaves what it does not track at 0."""

    forwards: int = 0
    prefill_tokens: int = 0  # prefix tokens fed through the model
    reused_tokens: int = 0  # prefix tokens restored from the prefix cache instead
    forward_s: float = 0.0  # wall time in model calls
    kv_copies: int = 0  # prefixes whose KV was copied from another sequence (llama.cpp's seq_cp)
    pass_rows: dict[int, int] = field(default_factory=dict)  # rows in a forward pass -> passes (engine passes)

    def count_pass(self, rows: int, seconds: float) -> None:
        """One engine forward pass over ``rows`` rows that took ``seconds``."""
        self.forwards += 1
        self.forward_s += seconds
        self.pass_rows[rows] = self.pass_rows.get(rows, 0) + 1


def chat_messages(question: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat of one request for a chat template: an optional system turn, then the user's question."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]


class Engine(Protocol):
    """A running batch of one model: rows join (:meth:`add`) and leave between forward passes."""

    @property
    def active(self) -> int:
        """Rows in the batch."""
        ...

    def add(self, reqs: Sequence[StepRequest]) -> list[int]:
        """Start one step per request; returns their handles."""
        ...

    def step(self) -> list[tuple[int, StepOut]]:
        """One forward pass over all rows; returns ``(handle, step)`` of the rows that finished."""
        ...

    def cancel(self, handles: Sequence[int]) -> list[tuple[int, StepOut]]:
        """Stop rows now; returns their partial steps (finish ``'cancelled'``)."""
        ...


class Backend(Protocol):
    """What the decoder, the draft worker and the verifiers need from a model."""

    name: str
    path: str
    eos_ids: tuple[int, ...]
    stats: BackendStats

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> text, special tokens skipped."""
        ...

    def encode(self, text: str) -> list[int]:
        """Text -> token ids, no special tokens added."""
        ...

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        """The chat template applied to (system, user question), with the generation prompt."""
        ...

    def vocab(self) -> dict[str, int]:
        """The tokenizer's vocabulary."""
        ...

    def set_threads(self, n: int) -> None:
        """Compute threads from the next forward pass on (0: leave as they are); the decoder sets them per mode."""
        ...

    def engine(self, sampling: Sampling, ngram: NgramConfig, clock: Clock | None = None) -> Engine:
        """A running batch (continuous batching) with these settings."""
        ...

    def generate_steps(self, reqs: Sequence[StepRequest], sampling: Sampling, ngram: NgramConfig = NgramConfig(),
                       clock: Clock | None = None) -> list[StepOut]:
        """One step for each request, batched; each row stops at its own boundary or cap."""
        ...


def run_steps(eng: Engine, reqs: Sequence[StepRequest]) -> list[StepOut]:
    """``generate_steps`` on an engine: add the requests, run passes until every row finished, in request order."""
    handles = eng.add(reqs)
    done: dict[int, StepOut] = {}
    while eng.active:
        done.update(eng.step())
    return [done[h] for h in handles]


class ScoringBackend(Backend, Protocol):
    """A backend that also scores prompts (the judge and score verifiers)."""

    def next_token_logits(self, prompts: Sequence[Sequence[int]]) -> Any:
        """Float32 logits ``[B, V]`` of the token after each prompt."""
        ...
