"""Mode names shared by the theory, the simulator, the trace format, the command lines and lrref (standard library
only): the one home of every mode tuple and of the rule that turns a decoder's look-ahead ``gamma`` into ``k1``.

Two vocabularies: the **simulator's** (``ar``, ``sync``, ``async``: how the pipeline is scheduled; token
speculation is ``k2``) and the **decoding modes** users and traces name (``ar``, ``sd``, ``lr-sync``,
``lr-async``, and ``+sd`` for n-gram speculation inside the steps): lrref's modes, ``lrsim serve``'s modes and a
trace header's ``mode``.
"""

from __future__ import annotations

from typing import NamedTuple

LR_MODES = ("sync", "async")  #: step-level scheduling of Lookahead Reasoning (Algorithm 1, pipelined)
SIM_MODES = ("ar",) + LR_MODES  #: what the simulator runs; 'ar' is target-only decoding
VERIFY_CALLS = ("one", "per_pair")  #: sync verifier: one call per cycle, or one per pair up to the first rejection
TRACE_MODES = {"ar": "ar", "sync": "lr-sync", "async": "lr-async"}  #: simulator mode -> trace header mode
COLOCATED = ("none", "draft", "verifier", "draft+verifier")  #: roles that share the target's device, taking turns

DECODE_MODES = ("ar", "sd", "lr-sync", "lr-async")  #: target only, token SD, LR Algorithm 1, pipelined LR
SERVE_MODES = DECODE_MODES + ("auto",)  #: lrsim serve's: the decoding modes, and auto (chosen per request)
LR_DECODE_MODES = ("lr-sync", "lr-async")  #: decoding modes that need a draft and a verifier
NGRAM_SUFFIX = "+sd"  #: appended to an LR mode: n-gram (prompt lookup) speculation inside its steps
ALL_DECODE_MODES = ("ar", "sd", "lr-sync", "lr-sync+sd", "lr-async", "lr-async+sd")  #: every mode, canonical names
SIM_MODE = {"ar": "ar", "sd": "ar", "lr-sync": "sync", "lr-async": "async"}  #: decoding mode -> simulator mode


class Schedule(NamedTuple):
    """A decoder's run in the simulator's terms (the fields of :class:`lrsim.trace.Setting` that ``gamma`` sets)."""

    mode: str  #: simulator mode: 'ar', 'sync' or 'async'
    k1: int  #: sync: target steps per cycle; async: look-ahead depth; ar: 1
    verify_calls: str  #: how the verifier is called: 'per_pair' (lrref's sync decoder) or 'one'


def lookahead_schedule(mode: str, gamma: int) -> Schedule:
    """The gamma -> k1 rule: a decoding mode with look-ahead ``gamma`` (drafted steps) in the simulator's terms.

    ``lr-sync`` drafts ``gamma`` steps and the target writes ``gamma + 1`` per cycle (``k1 = gamma + 1``), its
    verifier called pair by pair; ``lr-async`` runs ``gamma`` steps ahead (``k1 = gamma``); ``ar`` and ``sd``
    are target-only (``k1 = 1``).  An n-gram suffix (``+sd``) does not change the schedule.

    :raises ValueError: a mode none of :data:`DECODE_MODES` (with or without the suffix).
    """
    base = mode.removesuffix(NGRAM_SUFFIX)
    if base == "lr-sync":
        return Schedule("sync", gamma + 1, "per_pair")
    if base == "lr-async":
        return Schedule("async", gamma, "one")
    if base in ("ar", "sd"):
        return Schedule("ar", 1, "one")
    raise ValueError(f"unknown decoding mode {mode!r} (known: {', '.join(DECODE_MODES)}, '+sd' after an LR mode)")
