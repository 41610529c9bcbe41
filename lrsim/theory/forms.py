"""Closed-form speedups of token-level SD and Lookahead Reasoning (LR).

Every function broadcasts over numpy arrays and returns ``float`` arrays
(a numpy scalar for scalar input).  The symbols follow the paper
(arXiv 2506.19830, Sec. 3.2-3.3 and App. B):

``alpha``
    acceptance probability of one drafted unit (token or step), i.i.d.
``c``
    draft cost of one unit divided by the target's cost of one unit.
``k``
    parallel dimension of the target: the number of positions (tokens or
    steps) it computes in one call.  For sync LR and token SD this is the
    number of drafted units plus one; for async LR it is the look-ahead depth.

Each formula is derived from its definition in :mod:`lrsim.theory.symbolic`; the
tests hold this module against those derivations.  Common assumptions: the
verifier is free, every unit costs the same, one draft branch (``W = 1``) and
a batch of ``k`` target units costs as much as one.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from ..modes import LR_MODES

Mode = Literal["sync", "async"]
MODES: tuple[str, ...] = LR_MODES


def _alpha(alpha: ArrayLike) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if not np.all((a > 0) & (a < 1)):
        raise InputError("alpha must lie in the open interval (0, 1)")
    return a


def _cost(c: ArrayLike) -> np.ndarray:
    c = np.asarray(c, dtype=float)
    if not np.all((c > 0) & np.isfinite(c)):
        raise InputError("c must be a finite number > 0")
    return c


def _depth(k: ArrayLike) -> np.ndarray:
    k = np.asarray(k, dtype=float)
    if not np.all((k >= 1) & (k == np.floor(k))):
        raise InputError("k must be an integer >= 1")
    return k


def draft_limit(c: ArrayLike) -> np.ndarray:
    """``ceil(1/c)``: drafts the draft model writes while the target writes one.

    A relative tolerance of 1e-9 keeps e.g. ``c = 0.2`` at 5 even when
    ``1/c`` rounds to 5.000000000000001.
    """
    c = _cost(c)
    return np.ceil(1.0 / c * (1 - 1e-9))


def expected_kept(a: ArrayLike, k: ArrayLike) -> np.ndarray:
    """``(1 - a^k) / (1 - a)``: what ``k`` chances keep in expectation, ``1 + a + ... + a^(k-1)``
    (``E[min(X, k-1) + 1]`` with ``X`` the geometric number of accepted drafts); ``a < 1``."""
    return (1 - a**k) / (1 - a)  # floats or numpy arrays (the policy calls it per configuration: no array here)


def g(alpha: ArrayLike, c: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Token-level SD speedup with ``k`` parallel positions (``k - 1`` drafts).

    .. math:: g(k) = \\frac{1-\\alpha^k}{(1-\\alpha)(1-c+ck)}

    Numerator: ``E[min(X, k-1) + 1] = sum_{i<k} alpha^i`` tokens per cycle,
    X the geometric number of accepted drafts.  Denominator: one cycle costs
    ``k-1`` draft calls (``c`` each) plus one target call (1).  Assumes
    i.i.d. acceptance (Leviathan et al. 2023, Thm 3.8 with gamma = k - 1).
    """
    a, c, k = _alpha(alpha), _cost(c), _depth(k)
    return expected_kept(a, k) / (1 - c + c * k)


def f_sync(alpha: ArrayLike, c: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Synchronous LR speedup (Theorem 1), ``k`` target steps per cycle.

    .. math:: f_{sync}(k) = \\frac{1-\\alpha^k}{(1-\\alpha)(1-c+ck)}

    Same renewal argument as :func:`g` one level up: a cycle drafts ``k-1``
    steps (time ``(k-1) c T``), then the target writes ``k`` steps in one
    batched call (time ``T``) and ``min(X, k-1) + 1`` steps are kept.
    """
    return g(alpha, c, k)


def s1(alpha: ArrayLike, c: ArrayLike) -> np.ndarray:
    """Async LR speedup when the draft limits the pipeline (``k >= ceil(1/c)``).

    .. math:: S_1 = \\frac{1+E[X]}{1+c\\,E[X]} = \\frac{1}{1-\\alpha+c\\alpha}

    App. B stage model: a stage keeps ``X + 1`` steps and lasts
    ``T + c T X``; ``E[X] = alpha / (1 - alpha)``.
    """
    a, c = _alpha(alpha), _cost(c)
    return 1.0 / (1 - a + c * a)


def s2(alpha: ArrayLike, c: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Async LR speedup when the depth limits the pipeline (``k < ceil(1/c)``).

    .. math::
        S_2 = \\frac{1+E[X]}{E[\\lceil (X+1)/k \\rceil + c\\,(X \\bmod k)]}
            = \\frac{1-\\alpha^k}
                    {(1-\\alpha) + c\\,(\\alpha - \\alpha^{k+1}
                     - k(1-\\alpha)\\alpha^k)}

    Derived in :func:`lrsim.theory.symbolic.derive_s2` from
    ``E[ceil((X+1)/k)] = 1/(1-alpha^k)`` and
    ``E[X mod k] = (alpha - k alpha^k + (k-1) alpha^(k+1)) / ((1-alpha)(1-alpha^k))``.
    The seeds print the denominator as ``(1-a) + c a - a^(k+1) - k(1-a) a^k``,
    i.e. without ``c`` on the last two terms; that form is wrong (see
    ``lrsim symbolic``).
    """
    a, c, k = _alpha(alpha), _cost(c), _depth(k)
    return (1 - a**k) / ((1 - a) + c * (a - a ** (k + 1) - k * (1 - a) * a**k))


def f_async(alpha: ArrayLike, c: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Asynchronous LR speedup (Theorem 2): ``S1`` if ``k >= ceil(1/c)`` else ``S2``.

    ``k = 1`` is target-only decoding (the paper: "k1 = 1 is pure token-level
    SD"), so ``f_async(1) = 1``.  For ``c < 1`` that is ``S2(1)``; for
    ``c >= 1`` the case split alone would give ``S1 = 1/(1-a+ca)``, which is
    below 1 when ``c > 1``.
    """
    a, c, k = _alpha(alpha), _cost(c), _depth(k)
    return np.where(k == 1, 1.0, np.where(k >= draft_limit(c), s1(a, c), s2(a, c, k)))


def f_step(alpha: ArrayLike, c: ArrayLike, k: ArrayLike, mode: Mode) -> np.ndarray:
    """Step-level speedup ``f(k)`` of the given mode (``sync`` or ``async``)."""
    if mode == "sync":
        return f_sync(alpha, c, k)
    if mode == "async":
        return f_async(alpha, c, k)
    raise InputError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def parallel_dim(c1: ArrayLike, k1: ArrayLike, mode: Mode) -> np.ndarray:
    """Target sequences LR keeps in flight: ``k1`` (sync), ``min(ceil(1/c1), k1)`` (async)."""
    k1 = _depth(k1)
    if mode == "sync":
        return k1 * np.ones_like(np.asarray(c1, dtype=float))
    if mode == "async":
        return np.minimum(draft_limit(c1), k1)
    raise InputError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def h(
    alpha1: ArrayLike,
    c1: ArrayLike,
    k1: ArrayLike,
    alpha2: ArrayLike,
    c2: ArrayLike,
    k2: ArrayLike,
    mode: Mode,
) -> np.ndarray:
    """Hybrid speedup ``h(k1, k2) = f(k1) * g(k2)`` (step-level times token-level).

    Assumes the two levels are independent, so the speedups multiply; it
    uses ``parallel_dim(c1, k1, mode) * k2`` target positions at once.
    """
    return f_step(alpha1, c1, k1, mode) * g(alpha2, c2, k2)


def sd_ceiling(alpha: ArrayLike) -> np.ndarray:
    """``1/(1-alpha)``: the bound on :func:`g` for every ``k >= 1`` and ``c >= 0``."""
    return 1.0 / (1 - _alpha(alpha))
