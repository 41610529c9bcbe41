"""Step splitting on token streams.

A *step* ends at the first token after which the decoded step text contains
``"\\n\\n"`` (that token is part of the step, so one ``".\\n\\n"`` token ends a
step just like ``"\\n\\n"`` or two ``"\\n"`` tokens), at an end-of-sequence
token (kept as the step's last token), or when the step reaches its token cap.
The separator is a parameter: ``None`` ends steps only at EOS and the cap (random
weights write no text, :mod:`lrref.backends.random_weights`).

The rule is a function of the token ids only, so the concatenation of the
steps that Lookahead Reasoning commits is a token stream that autoregressive
decoding with the same rule reproduces token for token.
"""

from __future__ import annotations

from typing import Callable, Sequence

SEPARATOR = "\n\n"

Decode = Callable[[Sequence[int]], str]


class StepSplitter:
    """Incremental step-boundary detector for one step.

    :param decode: token ids -> text (special tokens skipped).
    :param eos_ids: ids that end the request.
    :param cap: maximum tokens in the step (> 0).
    :param separator: the text that ends a step (None: only EOS and the cap end steps; nothing is decoded).
    """

    def __init__(self, decode: Decode, eos_ids: Sequence[int], cap: int, separator: str | None = SEPARATOR):
        if cap < 1:
            raise ValueError("step token cap must be >= 1")
        self.decode = decode
        self.eos = frozenset(eos_ids)
        self.cap = cap
        self.separator = separator
        self.ids: list[int] = []
        self.finish: str | None = None  # "step" (separator), "eos", "cap"

    def push(self, tok: int) -> bool:
        """Append one token; return True when the step is complete (then ``finish`` says why)."""
        if self.finish is not None:
            raise RuntimeError("step already finished")
        self.ids.append(tok)
        if tok in self.eos:
            self.finish = "eos"
        elif self.separator is not None and self.separator in self.decode(self.ids):
            self.finish = "step"
        elif len(self.ids) >= self.cap:
            self.finish = "cap"
        return self.finish is not None

    def extend(self, toks: Sequence[int]) -> int:
        """Append tokens until the step completes; return how many were consumed."""
        for i, t in enumerate(toks):
            if self.push(t):
                return i + 1
        return len(toks)


def split_steps(ids: Sequence[int], decode: Decode, eos_ids: Sequence[int], cap: int,
                separator: str | None = SEPARATOR) -> list[list[int]]:
    """Split a whole token stream into steps with the same rule (the last step may be unfinished)."""
    out: list[list[int]] = []
    i = 0
    while i < len(ids):
        s = StepSplitter(decode, eos_ids, cap, separator)
        n = s.extend(ids[i:])
        out.append(list(ids[i:i + n]))
        i += n
    return out
