"""The mode registry (standard library only): every decoding mode's rules in one place, read by the theory, the
simulator, the trace format, the command lines and lrref: its simulator mode, the rule that turns a decoder's
look-ahead ``gamma`` into ``k1``, what it needs (a draft, a verifier, n-gram), where its draft runs and so which
thread setting its target runs on.

Two vocabularies: the **simulator's** (``ar``, ``sync``, ``async``: how the pipeline is scheduled; token
speculation is ``k2``) and the **decoding modes** users and traces name (``ar``, ``sd``, ``lr-sync``,
``lr-async``, and ``+sd`` for n-gram speculation inside the steps): lrref's modes, ``lrsim serve``'s modes and a
trace header's ``mode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

LR_MODES = ("sync", "async")  #: step-level scheduling of Lookahead Reasoning (Algorithm 1, pipelined)
SIM_MODES = ("ar",) + LR_MODES  #: what the simulator runs; 'ar' is target-only decoding
VERIFY_CALLS = ("one", "per_pair")  #: sync verifier: one call per cycle, or one per pair up to the first rejection
TRACE_MODES = {"ar": "ar", "sync": "lr-sync", "async": "lr-async"}  #: simulator mode -> trace header mode
COLOCATED = ("none", "draft", "verifier", "draft+verifier")  #: roles that share the target's device, taking turns

NGRAM_SUFFIX = "+sd"  #: appended to an LR mode: n-gram (prompt lookup) speculation inside its steps


@dataclass(frozen=True)
class DecodeMode:
    """One decoding mode's rules (:data:`REGISTRY`)."""

    name: str  #: as users, traces and lrref name it
    sim: str  #: the simulator's mode ('ar', 'sync', 'async'); auto: None (each cycle's choice has its own)
    k1_offset: int | None  #: ``k1 = gamma + k1_offset`` (sync: the drafts plus the target's own step); None: k1 = 1
    draft: bool  #: needs a draft model
    verifier: bool  #: needs a step verifier
    ngram: str  #: n-gram speculation inside its steps: 'off', 'on' (sd), 'suffix' ('+sd' turns it on), 'chosen'
    draft_runs: str  #: where the draft runs: 'none', 'main' (the target's process and threads), 'own' (a process
    #: of its own, ``draft_threads``; the target then runs on ``target_threads``)
    verify_calls: str = "one"  #: the verifier: one call per cycle, or 'per_pair' up to the first rejection
    widths: bool = False  #: W > 1 draft candidates per position are implemented

    def k1(self, gamma: int) -> int:
        """``k1`` of look-ahead ``gamma``: target-only modes 1, lr-sync ``gamma + 1``, lr-async ``gamma``."""
        return 1 if self.k1_offset is None else gamma + self.k1_offset

    @property
    def threads_field(self) -> str:
        """The DecodeConfig field the target's threads are read from (``target_threads`` when the draft runs in a
        process of its own, else ``threads``)."""
        return "target_threads" if self.draft_runs == "own" else "threads"


AUTO = "auto"  #: the adaptive mode: it chooses among the others at every step boundary
REGISTRY: dict[str, DecodeMode] = {m.name: m for m in (
    DecodeMode("ar", "ar", None, draft=False, verifier=False, ngram="off", draft_runs="none"),
    DecodeMode("sd", "ar", None, draft=False, verifier=False, ngram="on", draft_runs="none"),
    DecodeMode("lr-sync", "sync", 1, draft=True, verifier=True, ngram="suffix", draft_runs="main",
               verify_calls="per_pair", widths=True),
    DecodeMode("lr-async", "async", 0, draft=True, verifier=True, ngram="suffix", draft_runs="own"),
    DecodeMode(AUTO, None, None, draft=True, verifier=True, ngram="chosen", draft_runs="main"),
)}  #: every base decoding mode, and auto


DECODE_MODES = tuple(n for n, m in REGISTRY.items() if m.sim)  #: ar, sd, lr-sync, lr-async (not auto)
SERVE_MODES = DECODE_MODES + (AUTO,)  #: lrsim serve's: the decoding modes, and auto (chosen per request)
LR_DECODE_MODES = tuple(n for n in DECODE_MODES if REGISTRY[n].draft)  #: need a draft and a verifier
ALL_DECODE_MODES = tuple(x for n in DECODE_MODES for x in ((n, n + NGRAM_SUFFIX) if REGISTRY[n].ngram == "suffix"
                                                              else (n,)))  #: every mode, canonical names
SIM_MODE = {n: REGISTRY[n].sim for n in DECODE_MODES}  #: decoding mode -> simulator mode


def decode_mode(mode: str) -> DecodeMode:
    """The registry's entry of ``mode``, with or without the ``+sd`` suffix.

    :raises ValueError: a mode the registry does not hold.
    """
    m = REGISTRY.get(mode.removesuffix(NGRAM_SUFFIX))
    if m is None:
        raise ValueError(f"unknown decoding mode {mode!r} (known: {', '.join(DECODE_MODES)}, '+sd' after an LR mode)")
    return m


SIM_K1_OFFSET = {m.sim: m.k1_offset for m in REGISTRY.values() if m.sim in LR_MODES}  #: LR simulator mode -> offset


def k1_of_gamma(sim_mode: str, gamma: int) -> int:
    """``k1`` of an LR simulator mode ('sync', 'async') with look-ahead ``gamma``."""
    return gamma + SIM_K1_OFFSET[sim_mode]


def gamma_of_k1(sim_mode: str, k1: int) -> int:
    """The look-ahead ``gamma`` of ``k1`` in an LR simulator mode (the inverse of :func:`k1_of_gamma`)."""
    return k1 - SIM_K1_OFFSET[sim_mode]


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
    m = decode_mode(mode)
    if m.sim is None:
        raise ValueError(f"mode {mode!r} has no one schedule (each of its cycles records its own)")
    return Schedule(m.sim, m.k1(gamma), m.verify_calls)
