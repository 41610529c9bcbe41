"""Random streams of one run, refilled in blocks: one numpy call per block instead of one per draw (~1 us each).

Each stream's values depend only on its own generator, and :meth:`take`
returns exactly what as many single draws would, so the event engine (one
draw at a time) and the renewal engine (blocks) see the same numbers.
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left
from contextlib import contextmanager
from typing import Callable, Hashable, Iterator

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


#: numpy's ``Generator.geometric`` (``numpy/random/src/distributions``): at ``p >= 1/3`` a search over one uniform
#: double per draw, below it an inversion of one standard exponential per draw
_GEOMETRIC_SEARCH = 0.333333333333333333333333
_CAPPED: dict[tuple[float, int], Callable | None] = {}


def _capped_search(p: float, cap: int) -> Callable:
    """``min(geometric(p), cap)`` from the same uniform doubles numpy's search draws: the count of the partial sums
    ``p + p q + ... `` (accumulated as numpy does) below each one, stopped at ``cap``."""
    sums, prod, total, q = [p], p, p, 1.0 - p
    for _ in range(cap - 2):
        prod *= q
        total += prod
        sums.append(total)
    sums = sums[:max(cap - 1, 0)]

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        u = rng.random(n)
        y = np.ones(n, dtype=np.int64)
        for s in sums:
            y += u > s
        return y

    return draw


def _capped_inversion(p: float, cap: int) -> Callable:
    """``min(geometric(p), cap)`` from the same standard exponentials numpy's inversion draws."""
    scale = math.log1p(-p)

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        z = np.ceil(-rng.standard_exponential(n) / scale)
        return np.minimum(z, cap).astype(np.int64)

    return draw


def capped_geometric(p: float, cap: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    """``draw(rng, n)``: ``np.minimum(rng.geometric(p, size=n), cap)``, the same numbers from the same generator state.

    numpy's search loop (``p >= 1/3``) costs ~4x a uniform draw; drawing the uniforms and comparing them with the
    partial sums gives the same values in a fraction of it.  Each ``(p, cap)`` is checked once per process against
    ``rng.geometric`` on a probe stream; if the two ever disagree (another numpy algorithm), ``rng.geometric`` is used.
    """
    key = (p, cap)
    if key not in _CAPPED:
        fast = (_capped_search if p >= _GEOMETRIC_SEARCH else _capped_inversion)(p, cap)
        probe = np.minimum(np.random.default_rng(20261127).geometric(p, size=4096), cap)
        _CAPPED[key] = fast if np.array_equal(fast(np.random.default_rng(20261127), 4096), probe) else None
    fast = _CAPPED[key]
    if fast is not None:
        return fast
    return lambda rng, n: np.minimum(rng.geometric(p, size=n), cap)


_SHARED: dict | None = None  # while sharing() is active: key -> _Chain


@contextmanager
def sharing() -> Iterator[None]:
    """Runs started in this block share the passes of their fresh steps on the renewal engine.

    Runs with the same seed, token acceptance, ``k2`` and step-length
    distribution draw the same step lengths and the same tokens per pass, so
    the passes of their ``i``-th target (draft) step are the same whatever
    ``k1``: the first run computes them (:meth:`Passes.truncated_many`) and the
    others read them (the lengths are compared; a run whose lengths differ
    goes on with its own stream, from the start).  Exact: the same numbers as
    without sharing; the planner screens dozens of sync depths this way.
    """
    global _SHARED
    prev, _SHARED = _SHARED, {}
    try:
        yield
    finally:
        _SHARED = prev


class _Chain:
    """The passes of consecutive fresh steps of one stream of tokens per pass, for every run that reads them."""

    def __init__(self, stream: "Passes"):
        self.stream = stream  # its own copy of the generator
        self.L: list[int] = []  # the step lengths so far
        self.P: list[int] = []  # their passes

    def read(self, i: int, lengths: list[int]) -> list[int] | None:
        """Passes of steps ``i, i + 1, ...`` of ``lengths``; None if the chain holds other lengths there."""
        have, n = len(self.L), len(lengths)
        if have > i and self.L[i:i + n] != lengths[:have - i]:
            return None
        if have < i + n:
            new = lengths[have - i:]
            self.P += self.stream.truncated_many(new)
            self.L += new
        return self.P[i:i + n]


class Passes:
    """Forward passes of token-level SD: pass i writes ``Y_i = min(X2, k2 - 1) + 1`` tokens.

    ``C`` is the running sum of a block-refilled stream of ``Y``; a step of
    ``L`` tokens starting at stream index ``p`` ends at the first ``q`` with
    ``C[q] >= C[p] + L`` (``truncated``: a new sequence whose extra tokens are
    dropped) or ``C[q] >= need + L`` (``carried``: one long sequence).  ``C``
    holds the part of the stream from ``p`` on (a refill drops what is behind
    ``p``), as a memoryview of an int64 array: ``bisect`` reads it as fast as a
    list, without building one.
    """

    def __init__(self, rng: np.random.Generator, alpha2: float, k2: int, block: int = 8192,
                 share: Hashable | None = None):
        self.rng, self.alpha2, self.k2, self.block = rng, alpha2, k2, block
        self._arr = np.zeros(1, dtype=np.int64)
        self.C, self.p, self.need = memoryview(self._arr), 0, 0
        # numpy's geometric counts trials to the first success: X2 + 1 with success prob 1 - alpha2
        self._draw = (lambda rng, n: np.full(n, k2, dtype=np.int64)) if alpha2 >= 1 else \
            capped_geometric(1 - alpha2, k2)
        self.share = share  #: what else identifies the stream and its step lengths (the seed, ...): see sharing()
        self.chain: _Chain | None = None
        self.read = 0  # steps read from the chain

    def _join(self) -> None:
        """Read fresh steps from the shared chain of this stream (sharing() is active; nothing drawn yet)."""
        try:  # the generator's state too: two streams of one key are one stream
            key = (self.share, str(self.rng.bit_generator.state), self.alpha2, self.k2, self.block)
            chain = _SHARED.get(key)
            if chain is None:
                chain = _SHARED[key] = _Chain(Passes(copy.deepcopy(self.rng), self.alpha2, self.k2, self.block))
        except TypeError:  # an unhashable step-length distribution: no sharing
            self.share = None
            return
        self.chain = chain
        for name in ("_to", "truncated", "carried", "carried_many"):  # anything else: on its own stream first
            setattr(self, name, self._alone(getattr(Passes, name)))

    def _alone(self, method: Callable) -> Callable:
        def call(*a, **kw):
            self._leave()
            return method(self, *a, **kw)
        return call

    def _leave(self) -> None:
        """Go on with this run's own stream: replay the steps read from the chain on it (the same passes)."""
        chain, n = self.chain, self.read
        if chain is None:
            return
        self.chain = self.share = None
        for name in ("_to", "truncated", "carried", "carried_many"):
            del self.__dict__[name]
        if n:
            self.truncated_many(chain.L[:n])

    def _extend(self) -> None:
        y = self._draw(self.rng, self.block)
        y[0] += self.C[-1]  # the running sum goes on (integers: exact)
        arr = np.concatenate((self._arr[self.p:], np.cumsum(y)))
        self._arr, self.C, self.p = arr, memoryview(arr), 0

    def _to(self, need: int) -> tuple[int, int]:
        while self.C[-1] < need:
            self._extend()
        C, p = self.C, self.p
        q = bisect_left(C, need, p, min(len(C), p + need - C[p] + 1))  # a pass writes >= 1 token
        self.p = q
        return q - p, C[q] - C[p]

    def truncated(self, L: int) -> tuple[int, int]:
        """(passes, tokens written including the discarded tail) for a fresh step of ``L`` tokens."""
        C, p = self.C, self.p  # _to inlined: one call per target step on the event engine
        need = C[p] + L
        if C[-1] < need:
            return self._to(need)
        q = bisect_left(C, need, p, min(len(C), p + L + 1))  # a pass writes >= 1 token
        self.p = q
        return q - p, C[q] - C[p]

    def truncated_many(self, lengths: list[int]) -> list[int]:
        """Passes of fresh steps of ``lengths`` tokens, one after another: ``truncated(L)[0]`` for each, in one loop."""
        if self.share is not None and _SHARED is not None and self.chain is None and self.p == 0 \
                and len(self._arr) == 1 and self.need == 0:
            self._join()
        if self.chain is not None:
            got = self.chain.read(self.read, lengths)
            if got is not None:
                self.read += len(lengths)
                return got
            self._leave()
        C, p, out = self.C, self.p, []
        append = out.append
        for L in lengths:
            need = C[p] + L
            if C[-1] < need:
                self.p = p
                while self.C[-1] < need:  # a refill moves the stream (C and p), not the token counts
                    self._extend()
                C, p = self.C, self.p
            q = bisect_left(C, need, p, min(len(C), p + L + 1))
            append(q - p)
            p = q
        self.p = p
        return out

    def carried(self, L: int) -> tuple[int, int]:
        """Passes that complete the next ``L`` tokens of a continuing stream."""
        self.need += L
        return self._to(self.need)

    def carried_many(self, lengths: np.ndarray) -> np.ndarray:
        """Passes of consecutive steps of one stream: the same as ``carried`` called for each length."""
        needs = self.need + np.cumsum(lengths)
        while self.C[-1] < needs[-1]:
            self._extend()
        q = np.searchsorted(self._arr[self.p:], needs, side="left") + self.p
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
        if self.sampled:  # the event engine calls one() once per step: bind the stream's own method
            self.one = self._one_sampled

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

    def _one_sampled(self, L: int, carried: bool = False) -> tuple[float, int]:
        return self.stream.carried(L) if carried else self.stream.truncated(L)

    def many(self, lengths: np.ndarray, carried: bool = False) -> np.ndarray:
        """Passes of every step of ``lengths`` (any shape, row-major = the order :meth:`one` would see them)."""
        if self.stream is None:
            return lengths.astype(float)
        if self.mean:
            return lengths / self.mu2
        if carried:
            return self.stream.carried_many(lengths).astype(float)
        flat = self.stream.truncated_many(lengths.ravel().astype(np.int64).tolist())
        return np.asarray(flat, dtype=float).reshape(lengths.shape)


class Verdicts:
    """Verdicts for the ``W`` candidates of a position: returns (first accepted branch or -1, verdict row).

    A block is kept as arrays; the lists the one-at-a-time calls return are built on the first such call of a
    block (the renewal engine's :meth:`take` never needs them).
    """

    def __init__(self, rng: np.random.Generator, alpha: float, width: int, rho: float, n: int = 4096):
        self.rng, self.alpha, self.width, self.rho, self.n = rng, alpha, width, rho, n
        self._first = np.zeros(0, dtype=np.int64)
        self._v = None
        self.first: list[int] | None = []
        self.rows: list | None = []
        self.i = 0

    def _fill(self) -> None:
        r, n, w = self.rng, self.n, self.width
        shared = r.random(n) < self.rho  # the position's candidates share one verdict
        common = r.random(n) < self.alpha
        v = np.where(shared[:, None], common[:, None], r.random((n, w)) < self.alpha)  # (n, W) verdicts
        anyv = v.any(axis=1)
        self._first, self._v = np.where(anyv, v.argmax(axis=1), -1), v
        self.first = self.rows = None
        self.i = 0

    def __call__(self) -> tuple[int, list]:
        if self.i >= len(self._first):
            self._fill()
        if self.rows is None:
            self.rows = self._v.tolist()
            if self.first is None:
                self.first = self._first.tolist()
        i = self.i
        self.i += 1
        return self.first[i], self.rows[i]

    def first_only(self) -> int:
        """The next position's first accepted branch (or -1): ``self()[0]``, without building the verdict rows."""
        if self.i >= len(self._first):
            self._fill()
        if self.first is None:
            self.first = self._first.tolist()
        i = self.i
        self.i += 1
        return self.first[i]

    def take(self, n: int) -> np.ndarray:
        """First accepted branch (or -1) of the next ``n`` positions, as ``n`` calls would give."""
        out, need = [], n
        while need > 0:
            if self.i >= len(self._first):
                self._fill()
            k = min(need, len(self._first) - self.i)
            out.append(self._first[self.i:self.i + k])
            self.i += k
            need -= k
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)
