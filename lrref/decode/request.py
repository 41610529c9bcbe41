"""One request being decoded: what the mode units share (config, models, clock, rows) and its :class:`Result`."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.base import Backend, Clock, StepOut
from ..config import DecodeConfig
from ..verify.verifiers import Verdict, Verifier
from .rows import Rows

CONTEXT_TOKENS = 2048  # prefix tokens decoded as the verifier's context


@dataclass
class Committed:
    ids: list[int]
    text: str
    source: str  # "draft" or "target"


@dataclass
class Result:
    """One decoded request."""

    ids: list[int]
    text: str
    steps: list[Committed]
    finish: str
    wall_s: float
    prompt_tokens: int
    target_s: float = 0.0  # target forward passes (main process)
    draft_s: float = 0.0  # draft forward passes (in its own process for lr-async)
    verify_s: float = 0.0  # verifier calls
    verify_target_s: float = 0.0  # target passes run inside verifier calls (the target judging): in verify_s only
    wait_s: float = 0.0  # lr-async: main process idle, waiting for a draft
    draft_overlapped: bool = False  # lr-async: draft time is spent in another process
    draft_own_s: float = 0.0  # auto: the part of draft_s spent in the draft process (its lr-async stages: overlapped)
    verified: int = 0  # drafts checked (identical or verifier)
    accepted: int = 0
    target_forwards: int = 0
    ngram_drafted: int = 0
    ngram_accepted: int = 0
    start: float = 0.0  # trace clock: the request started (arrived, in a closed loop)
    end: float = 0.0  # trace clock: its last step was committed and its text decoded
    first_step: float | None = None  # trace clock: its first step was committed
    answer: str | None = None  # the text's final answer (lrref.answers.extract_answer)
    correct: bool | None = None  # the answer matches the reference given to the decoder (None: no reference)

    @property
    def latency_s(self) -> float:
        """Start to end (trace clock)."""
        return self.end - self.start

    @property
    def ttft_s(self) -> float | None:
        """Time to the first committed step: a step decoder's time to first token."""
        return None if self.first_step is None else self.first_step - self.start

    @property
    def accepted_steps(self) -> int:
        return sum(s.source == "draft" for s in self.steps)

    @property
    def overhead_s(self) -> float:
        """Wall time not spent in model forwards, verifier calls or waiting for the overlapped draft."""
        draft_inline = 0.0 if self.draft_overlapped else self.draft_s - self.draft_own_s
        return self.wall_s - self.target_s - self.verify_s - self.wait_s - draft_inline


class Request:
    """One request's decoding state shared by the ar/sd step, the sync cycle and the async pipeline.

    :param index: request index (trace rows, seeds).
    :param prompt: prompt token ids.
    """

    def __init__(self, cfg: DecodeConfig, target: Backend, verifier: Verifier | None, clock: Clock, rows: Rows,
                 index: int, prompt: list[int]):
        self.cfg, self.target, self.verifier, self.clock, self.rows = cfg, target, verifier, clock, rows
        self.index, self.prompt = index, prompt
        self.res = Result([], "", [], "max_tokens", 0.0, len(prompt))

    @property
    def left(self) -> int:
        """Tokens the request may still generate."""
        return self.cfg.max_tokens - len(self.res.ids)

    def prefix(self) -> list[int]:
        """Prompt + committed tokens."""
        return self.prompt + self.res.ids

    def context(self, ids: list[int]) -> str:
        """The verifier's context: the text of the prefix's last :data:`CONTEXT_TOKENS` tokens."""
        return self.target.decode(ids[-CONTEXT_TOKENS:])

    def commit(self, out: StepOut, source: str) -> bool:
        """Append a step to the output; True when it ends the request (EOS)."""
        if self.res.first_step is None:
            self.res.first_step = self.clock()
        self.res.ids += out.ids
        self.res.steps.append(Committed(list(out.ids), out.text, source))
        return out.finish == "eos"

    def count_target(self, t: StepOut) -> None:
        """Add a target step's forward passes and n-gram counts to the result."""
        self.res.target_forwards += t.forwards
        self.res.ngram_drafted += t.ngram_drafted
        self.res.ngram_accepted += t.ngram_accepted

    def verify(self, pairs: list[tuple[StepOut, StepOut]], context: str
               ) -> tuple[list[Verdict], list[str], tuple[float, float]]:
        """Verdicts for (target, draft) pairs (identical token streams pass without the verifier, unless
        ``cfg.verify_identical``), the verifier name per pair and the call's (start, end) on the trace clock;
        counted in the result."""
        t0, f0 = self.clock(), self.target.stats.forward_s
        same = (lambda t, d: False) if self.cfg.verify_identical else (lambda t, d: t.ids == d.ids)
        verdicts: list[Verdict | None] = [Verdict(True, None) if same(t, d) else None for t, d in pairs]
        names = ["identical" if v else self.verifier.name for v in verdicts]
        todo = [i for i, v in enumerate(verdicts) if v is None]
        if todo:
            got = self.verifier.verify([(pairs[i][0].text, pairs[i][1].text) for i in todo], [context] * len(todo))
            for i, v in zip(todo, got):
                verdicts[i] = v
        t1 = self.clock()
        self.res.verify_s += t1 - t0
        self.res.verify_target_s += self.target.stats.forward_s - f0  # a judge or scorer that is the target
        self.res.verified += len(verdicts)
        return verdicts, names, (t0, t1)
