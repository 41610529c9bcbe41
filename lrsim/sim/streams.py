"""Random streams of one run, refilled in blocks: one numpy call per block instead of one per draw (~1 us each).

Each stream's values depend only on its own generator, and :meth:`take`
returns exactly what as many single draws would, so the event engine (one
draw at a time) and the renewal engine (blocks) see the same numbers.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable

import numpy as np

from ..dists import Constant, Dist


class Draws:
    """Scalar draws from a vectorised sampler, refilled in blocks."""

    __slots__ = ("fn", "n", "buf", "i")

    def __init__(self, fn: Callable[[int], np.ndarray], n: int = 4096):
        self.fn, self.n, self.buf, self.i = fn, n, [], 0

    def __call__(self):
        if self.i >= len(self.buf):
            self.buf, self.i = self.fn(self.n).tolist(), 0
        v = self.buf[self.i]
        self.i += 1
        return v

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` draws at once: the same values ``n`` calls would return."""
        parts, need = [], n
        while need > 0:
            if self.i >= len(self.buf):
                self.buf, self.i = self.fn(self.n).tolist(), 0
            k = min(need, len(self.buf) - self.i)
            parts.append(self.buf[self.i:self.i + k])
            self.i += k
            need -= k
        return np.asarray([v for part in parts for v in part])


class Fixed:
    """A constant draw (a constant step length), with the interface of :class:`Draws`."""

    def __init__(self, value: int):
        self.value = value

    def __call__(self) -> int:
        return self.value

    def take(self, n: int) -> np.ndarray:
        return np.full(n, self.value)


def lengths(dist: Dist, rng: np.random.Generator) -> Draws | Fixed:
    """Step lengths in whole tokens (>= 1)."""
    if isinstance(dist, Constant):
        return Fixed(max(1, round(dist.value)))
    return Draws(lambda n: np.maximum(1, np.rint(dist.sample(rng, n))).astype(np.int64))


class Passes:
    """Forward passes of token-level SD: pass i writes ``Y_i = min(X2, k2 - 1) + 1`` tokens.

    ``C`` is the running sum of a block-refilled stream of ``Y``; a step of
    ``L`` tokens starting at stream index ``p`` ends at the first ``q`` with
    ``C[q] >= C[p] + L`` (``truncated``: a new sequence whose extra tokens are
    dropped) or ``C[q] >= need + L`` (``carried``: one long sequence).
    """

    def __init__(self, rng: np.random.Generator, alpha2: float, k2: int, block: int = 8192):
        self.rng, self.alpha2, self.k2, self.block = rng, alpha2, k2, block
        self.C, self.p, self.need = [0], 0, 0

    def _extend(self) -> None:
        if self.alpha2 >= 1:
            y = np.full(self.block, self.k2)
        else:  # numpy's geometric counts trials to the first success: X2 + 1 with success prob 1 - alpha2
            y = np.minimum(self.rng.geometric(1 - self.alpha2, size=self.block) - 1, self.k2 - 1) + 1
        if self.p > 4 * self.block:
            del self.C[: self.p]
            self.p = 0
        self.C.extend((np.cumsum(y) + self.C[-1]).tolist())

    def _to(self, need: int) -> tuple[int, int]:
        while self.C[-1] < need:
            self._extend()
        hi = min(len(self.C), self.p + need - self.C[self.p] + 1)  # a pass writes >= 1 token
        q = bisect_left(self.C, need, self.p, hi)
        passes, tokens = q - self.p, self.C[q] - self.C[self.p]
        self.p = q
        return passes, tokens

    def truncated(self, L: int) -> tuple[int, int]:
        """(passes, tokens written including the discarded tail) for a fresh step of ``L`` tokens."""
        return self._to(self.C[self.p] + L)

    def carried(self, L: int) -> tuple[int, int]:
        """Passes that complete the next ``L`` tokens of a continuing stream."""
        self.need += L
        return self._to(self.need)

    def carried_many(self, lengths: np.ndarray) -> np.ndarray:
        """Passes of consecutive steps of one stream: the same as ``carried`` called for each length."""
        needs = self.need + np.cumsum(lengths)
        while self.C[-1] < needs[-1]:
            self._extend()
        q = np.searchsorted(np.asarray(self.C[self.p:]), needs, side="left") + self.p
        passes = np.diff(np.concatenate(([self.p], q)))
        self.p, self.need = int(q[-1]), int(needs[-1])
        return passes


class PassModel:
    """Forward passes a step of ``L`` tokens takes: the one place that decides it, for target and drafter,
    for the event schedulers (:meth:`one`) and the renewal engine (:meth:`many`).

    Without token-level SD (no stream) a pass writes one token: ``L`` passes.
    With it, the paper's mean-field model (``mean``) takes ``L / E[Y]``
    passes, ``E[Y] = mu2``; otherwise the passes of the :class:`Passes` stream.
    """

    def __init__(self, stream: Passes | None, mean: bool, mu2: float):
        self.stream, self.mean, self.mu2 = stream, mean, mu2
        self.sampled = stream is not None and not mean  #: passes and n-gram counts come from the stream

    def one(self, L: int, carried: bool = False) -> tuple[float, int]:
        """(passes, tokens written including a tail past the step boundary) of one step.

        ``carried``: the step continues one long stream (target-only decoding)
        instead of starting a fresh sequence.
        """
        if self.stream is None:
            return L, L
        if self.mean:
            return L / self.mu2, L
        return self.stream.carried(L) if carried else self.stream.truncated(L)

    def many(self, lengths: np.ndarray, carried: bool = False) -> np.ndarray:
        """Passes of every step of ``lengths`` (any shape, row-major = the order :meth:`one` would see them)."""
        if self.stream is None:
            return lengths.astype(float)
        if self.mean:
            return lengths / self.mu2
        if carried:
            return self.stream.carried_many(lengths).astype(float)
        flat = [self.stream.truncated(int(L))[0] for L in lengths.ravel()]
        return np.asarray(flat, dtype=float).reshape(lengths.shape)


class Verdicts:
    """Verdicts for the ``W`` candidates of a position: returns (first accepted branch or -1, verdict row)."""

    def __init__(self, rng: np.random.Generator, alpha: float, width: int, rho: float, n: int = 4096):
        self.rng, self.alpha, self.width, self.rho, self.n = rng, alpha, width, rho, n
        self.first: list[int] = []
        self.rows: list = []
        self.i = 0

    def _fill(self) -> None:
        r, n, w = self.rng, self.n, self.width
        shared = r.random(n) < self.rho  # the position's candidates share one verdict
        common = r.random(n) < self.alpha
        v = np.where(shared[:, None], common[:, None], r.random((n, w)) < self.alpha)  # (n, W) verdicts
        anyv = v.any(axis=1)
        self.first = np.where(anyv, v.argmax(axis=1), -1).tolist()
        self.rows = v.tolist()
        self.i = 0

    def __call__(self) -> tuple[int, list]:
        if self.i >= len(self.first):
            self._fill()
        i = self.i
        self.i += 1
        return self.first[i], self.rows[i]

    def take(self, n: int) -> np.ndarray:
        """First accepted branch (or -1) of the next ``n`` positions, as ``n`` calls would give."""
        out, need = [], n
        while need > 0:
            if self.i >= len(self.first):
                self._fill()
            k = min(need, len(self.first) - self.i)
            out += self.first[self.i:self.i + k]
            self.i += k
            need -= k
        return np.asarray(out, dtype=np.int64)
