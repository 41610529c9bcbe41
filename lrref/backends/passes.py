"""Pass records: every forward pass a backend runs, as a trace record (:class:`lrsim.trace.PassRecord`).

A backend that can see its passes (:mod:`lrref.backends.llamacpp`, :mod:`lrref.backends.hf`)
reports each one to its ``pass_log`` attribute when one is attached (None: no
record, no cost).  The decoder attaches a :class:`PassLog` of its trace to
its target and draft for the time of a run (:func:`attached`), so several
decoders may share a backend (``lrref bench`` runs every mode on one target).
lr-async's draft process attaches a :class:`PassBuffer` instead: its records
travel to the main process with the draft steps (:mod:`lrref.decode.draft_worker`) and are
written to the main trace there.  Both processes stamp ``start`` on the trace
clock: ``time.perf_counter() - t0`` with the main process's ``t0``
(``CLOCK_MONOTONIC`` is one clock for every process of the machine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict

from lrsim.trace import PassRecord

__all__ = ["PassBuffer", "PassLog", "attached", "pass_record"]


def pass_record(engine: str, t0: float, started: float, seconds: float, fed: Sequence[int],
                context: Sequence[int], outputs: int, threads: int | None,
                requests: Iterable[int | None] = (), bucket: str | None = None) -> PassRecord:
    """The record of one pass that started at ``started`` (``perf_counter``) and fed ``fed[i]`` positions to row
    ``i``, whose KV cache held ``context[i]`` tokens before it; ``bucket``: the padded shape it ran at
    (:meth:`lrref.backends.static_cache.Bucket.label`), None at its own."""
    rows = len(fed)
    reqs = sorted({r for r in requests if r is not None})
    return PassRecord(engine=engine, start=round(started - t0, 6), seconds=round(seconds, 6), rows=rows,
                      tokens=int(sum(fed)), outputs=int(outputs), positions_max=int(max(fed, default=0)),
                      context=round(sum(context) / rows, 2) if rows else 0.0, context_max=int(max(context, default=0)),
                      threads=threads, requests=reqs or None, bucket=bucket)


class PassLog:
    """Writes one engine's passes into a trace (``write``: e.g. :meth:`lrsim.trace.TraceWriter.write_pass`).

    :param engine: what the passes are: ``'target'``, ``'draft'`` (:data:`lrsim.trace.PASS_ENGINES`); passes a
        backend reports as ``'verifier'`` (judge/score prompts) keep that name.
    :param t0: ``perf_counter`` at the trace clock's zero.
    """

    def __init__(self, write: Callable[[PassRecord], None], engine: str, t0: float):
        self.write, self.engine, self.t0 = write, engine, t0

    def __call__(self, started: float, seconds: float, fed: Sequence[int], context: Sequence[int], outputs: int,
                 threads: int | None, requests: Iterable[int | None] = (), engine: str | None = None,
                 bucket: str | None = None) -> None:
        """One pass (see :func:`pass_record`); ``engine`` overrides the log's (``'verifier'``)."""
        self.write(pass_record(engine or self.engine, self.t0, started, seconds, fed, context, outputs, threads,
                               requests, bucket))


class PassBuffer(PassLog):
    """A :class:`PassLog` that keeps its records (as dicts) until :meth:`take` (lr-async's draft process)."""

    def __init__(self, engine: str, t0: float):
        self.records: list[dict] = []
        super().__init__(lambda rec: self.records.append(asdict(rec)), engine, t0)

    def take(self) -> list[dict]:
        """The records so far, removed from the buffer."""
        out, self.records = self.records, []
        return out


@contextmanager
def attached(logs: dict[object, PassLog | None]) -> Iterator[None]:
    """Attach each backend's log (``{backend: log}``; None keys are skipped) for the block, then restore what was
    there before."""
    before = {}
    for be, log in logs.items():
        if be is not None:
            before[id(be)] = (be, getattr(be, "pass_log", None))
            be.pass_log = log
    try:
        yield
    finally:
        for be, old in before.values():
            be.pass_log = old
