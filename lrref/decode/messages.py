"""What the main process and lr-async's draft process (:mod:`lrref.decode.draft_worker`) say to each other.

Frozen dataclasses, pickled through the process's pipe; each side dispatches on their type in one place
(:meth:`lrref.decode.draft_worker.Drafter.handle` in the draft process, ``DraftWorker._recv`` in the main one).

A *chain* is one request's run of draft steps from one prefix: step ``j`` continues ``prefix + d_0 .. d_{j-1}``,
at most ``credit`` steps ahead of what the main process consumed.  A request's chains are numbered by its
*epoch* (a new one after every rejection), so a draft of an older chain is recognised as stale.  The draft
process keeps one chain per request and drafts the next step of every chain with credit in one batched engine.

Main -> draft process: :class:`Chain`, :class:`Credit`, :class:`Stop`, :class:`Stats`, :class:`Quit`.
Draft process -> main: :class:`Ready`, :class:`Draft`, :class:`Cancelled`, :class:`Passes`, :class:`StatsReply`,
:class:`Error`.  :class:`Passes` (the draft's forward passes since the last one, :mod:`lrref.backends.passes`) is
sent just before a :class:`Draft`, :class:`Cancelled` or :class:`StatsReply`, so a reader never waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.base import StepOut

# --- main -> draft process ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chain:
    """Draft ``request`` from ``prefix`` (``remaining`` tokens at most, ``credit`` steps ahead); replaces the
    request's chain, whose running step is cancelled (:class:`Cancelled`)."""

    request: int
    epoch: int
    prefix: tuple[int, ...]
    remaining: int
    credit: int
    seed: int


@dataclass(frozen=True)
class Credit:
    """``n`` more steps for the request's chain ``epoch`` (ignored for an older chain)."""

    request: int
    epoch: int
    n: int


@dataclass(frozen=True)
class Stop:
    """Idle the request's chain (its running step is cancelled): the request ended."""

    request: int


@dataclass(frozen=True)
class Stats:
    """Ask for the draft backend's counters (:class:`StatsReply`, after everything sent before)."""


@dataclass(frozen=True)
class Quit:
    """End the draft process."""


ToWorker = Chain | Credit | Stop | Stats | Quit

# --- draft process -> main ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The draft model is loaded: its name and end-of-sequence ids."""

    name: str
    eos_ids: tuple[int, ...]


@dataclass(frozen=True)
class Draft:
    """Draft step ``position`` of the request's chain ``epoch``."""

    request: int
    epoch: int
    position: int
    step: StepOut

    def current(self, epoch: int) -> bool:
        """A draft of the chain ``epoch``, usable there."""
        return self.epoch == epoch


@dataclass(frozen=True)
class Cancelled:
    """Draft step ``position`` of the request's chain ``epoch``, stopped before its end (a newer chain or
    :class:`Stop` came): its partial step."""

    request: int
    epoch: int
    position: int
    step: StepOut

    def current(self, epoch: int) -> bool:
        """Never usable: a cancelled step is stale work."""
        return False


@dataclass(frozen=True)
class Passes:
    """The draft's forward passes since the last :class:`Passes` (:class:`lrsim.trace.PassRecord` as dicts)."""

    records: tuple[dict, ...]


@dataclass(frozen=True)
class StatsReply:
    """The draft backend's counters (:class:`lrref.backends.base.BackendStats` as a dict)."""

    stats: dict


@dataclass(frozen=True)
class Error:
    """The draft process failed (the traceback); it exits after sending this."""

    text: str


DraftMsg = Draft | Cancelled  #: what a request receives from the draft process
FromWorker = Ready | Draft | Cancelled | Passes | StatsReply | Error
