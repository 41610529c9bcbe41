"""A plan's simulations on several cores: forked workers that keep the runs they simulated.

A plan (:func:`lrsim.prediction.compose.plan`) screens hundreds of configurations, then continues the best ones
with more steps (:class:`lrsim.sim.Continuable`: exact, cheaper than a new run).  Here each job is a call of a
method of one *runner* object; :class:`Serial` calls them in this process, :class:`Forked` in ``n`` processes
forked from it, each with its own copy of the runner (and of the runs it has simulated so far).

Jobs go out longest first, each to the worker that finishes it soonest (the LPT rule): a job that continues a run
a worker holds costs that worker only the steps it lacks, and ``steps`` elsewhere.  Which worker runs a job never
changes its result (runs are deterministic given their configuration and seed, and a continued run gives what a
new one does), so results are those of :class:`Serial`, in job order.

Forking needs no other thread in this process (a thread may hold a lock at the fork that no child ever releases,
as a test runner's or a notebook's do): :func:`executor` then runs serially.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

from ..errors import InputError
from ..processes import can_fork, cores


@dataclass(frozen=True)
class Job:
    """``runner.<method>(*args)``; ``keys`` name the runs it simulates and ``steps`` how far (for affinity), ``cost``
    the work of fresh runs in arbitrary units (for balance)."""

    method: str
    args: tuple = ()
    keys: tuple[Hashable, ...] = ()
    steps: int = 0
    cost: float = 1.0


def executor(runner: Any, workers: int | None) -> "Serial | Forked":
    """:class:`Forked` with ``workers`` processes (None or 0: one per core), or :class:`Serial` where one would
    do, or where forking is unsafe (other threads) or impossible (:func:`lrsim.processes.can_fork`)."""
    n = workers or cores()
    if n <= 1 or not can_fork():
        return Serial(runner)
    return Forked(runner, n)


class Serial:
    """Every job in this process, in order."""

    def __init__(self, runner: Any):
        self.runner = runner

    def map(self, jobs: Sequence[Job], done: Callable[[int], None] | None = None) -> list:
        """The jobs' results in order; ``done(i)`` as job ``i`` finishes."""
        out = []
        for i, job in enumerate(jobs):
            out.append(getattr(self.runner, job.method)(*job.args))
            if done is not None:
                done(i)
        return out

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class _Held:
    """What the parent knows a worker holds: its runs' steps by key, and its queued work."""

    steps: dict = field(default_factory=dict)
    load: float = 0.0


class Forked(Serial):
    """``n`` worker processes forked from this one; jobs assigned by :func:`assign`."""

    def __init__(self, runner: Any, n: int):
        import multiprocessing as mp

        super().__init__(runner)
        ctx = mp.get_context("fork")
        self.conns, self.procs = [], []
        self.held = [_Held() for _ in range(n)]
        for i in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(child, runner), name=f"lrsim-plan-{i}", daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    def map(self, jobs: Sequence[Job], done: Callable[[int], None] | None = None) -> list:
        from multiprocessing.connection import wait

        where = assign(jobs, self.held)
        out: list = [None] * len(jobs)
        busy = {}
        for w, conn in enumerate(self.conns):
            mine = [i for i, x in enumerate(where) if x == w]
            if mine:
                conn.send([(i, jobs[i].method, jobs[i].args) for i in mine])
                busy[conn] = w
        failure = None
        while busy:
            for conn in wait(list(busy)):
                try:
                    msg = conn.recv()
                except EOFError:
                    raise RuntimeError(f"plan worker {busy[conn]} died (exit code "
                                       f"{self.procs[busy[conn]].exitcode})") from None
                if msg[0] == "done":
                    del busy[conn]
                elif msg[0] == "ok":
                    out[msg[1]] = msg[2]
                    if done is not None:
                        done(msg[1])
                elif failure is None:  # keep draining the others, then raise the first failure
                    failure = msg
        for held in self.held:
            held.load = 0.0
        if failure is not None:
            if failure[0] == "input":
                raise InputError(failure[1])
            raise RuntimeError(f"plan worker failed:\n{failure[1]}")
        return out

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
                conn.close()
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.conns, self.procs = [], []


def assign(jobs: Sequence[Job], held: list[_Held]) -> list[int]:
    """The worker of each job: longest first, to the worker whose queue ends first with it (LPT), where a run the
    worker holds at ``s`` steps costs ``cost x (steps - s) / steps``; ties to the lower worker.  Updates ``held``."""
    where = [0] * len(jobs)
    for i in sorted(range(len(jobs)), key=lambda i: -jobs[i].cost):
        job = jobs[i]

        def finish(w: int) -> float:
            have = min((held[w].steps.get(k, 0) for k in job.keys), default=0)
            share = max(job.steps - have, 0) / job.steps if have and job.steps else 1.0  # a held run: its missing steps
            return held[w].load + job.cost * share

        w = min(range(len(held)), key=lambda w: (finish(w), w))
        held[w].load = finish(w)
        for k in job.keys:
            held[w].steps[k] = max(held[w].steps.get(k, 0), job.steps)
        where[i] = w
    return where


def _serve(conn, runner: Any) -> None:
    """A worker: run each batch of jobs in order, answering ``("ok", i, result)`` per job, then ``("done",)``;
    an input error or a bug answers ``("input", message)`` / ``("bug", traceback)`` and skips the batch's rest.
    Ctrl-C ends it quietly (the parent reports the interrupt)."""
    try:
        _loop(conn, runner)
    except KeyboardInterrupt:
        pass


def _loop(conn, runner: Any) -> None:
    while True:
        try:
            batch = conn.recv()
        except EOFError:
            return
        if batch is None:
            return
        for i, method, args in batch:
            try:
                conn.send(("ok", i, getattr(runner, method)(*args)))
            except InputError as e:
                conn.send(("input", str(e)))
                break
            except Exception:  # an internal bug: its traceback goes to the parent
                conn.send(("bug", traceback.format_exc()))
                break
        conn.send(("done",))
