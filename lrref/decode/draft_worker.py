"""The draft model in its own process, for ``lr-async``.

torch's intra-op thread pool is process-wide, so two models in one process
cannot compute at the same time without fighting over (and oversubscribing)
the same cores.  ``lr-async`` therefore runs the draft in a spawned process
with its own thread count (default 1) while the target runs in the main
process (default 1 thread): on this 2-core CPU each model gets a core.  The
draft process runs the target's kind of backend (:data:`DRAFT_KINDS`: ``hf``,
also for a vLLM target, or ``llamacpp`` on the draft's GGUF file).

The worker drafts a *chain*: step j from ``prefix + d_0 .. d_{j-1}``, up to
``credit`` steps ahead of what the main process has consumed; it sends each
step as soon as it is done and checks for messages between forward passes,
so a new chain (after a rejection) cancels stale work within one pass.

Messages, main -> worker: ``("chain", epoch, prefix, remaining, credit, seed, request)``,
``("credit", epoch, n)``, ``("idle",)``, ``("stats",)``, ``("quit",)``.
Worker -> main: ``("ready", name)``, ``("draft", epoch, j, StepOut)``,
``("cancelled", epoch, j, StepOut)``, ``("stats", dict)``, ``("error", text)``, and
``("passes", [record dicts])``: the draft's forward passes since the last such
message (:mod:`lrref.backends.passes`), sent just before a ``draft``, ``cancelled`` or
``stats`` message (so the main process, which reads the next message at once,
never waits on it); the main process writes them to its trace through
:attr:`DraftWorker.pass_log`.

A worker that reports an error, exits or stops answering raises
:class:`WorkerError` (a :class:`lrsim.errors.DomainError`: one line at the
CLI, with the worker's own last line as the reason).
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from lrsim.errors import DomainError, InputError
from lrsim.trace import PassRecord

from ..backends.base import Backend, Sampling, StepRequest
from ..backends.build import draft_backend
from ..backends.ngram import NgramConfig
from ..backends.passes import PassBuffer, PassLog
from ..host.cpu import resolve_dtype
from .seed import step_seed

DRAFT_KINDS = ("hf", "llamacpp")  # backends a draft process can run


class WorkerError(DomainError):
    """The draft process failed to start, crashed, exited or stopped answering (message: one line)."""


class _Chain:
    def __init__(self, epoch: int, prefix: list[int], remaining: int, credit: int, seed: int,
                 request: int | None = None):
        self.epoch, self.prefix, self.remaining, self.credit, self.seed = epoch, prefix, remaining, credit, seed
        self.request = request
        self.made: list[list[int]] = []
        self.handle: int | None = None
        self.terminal = False

    def next_request(self, max_step: int) -> StepRequest | None:
        used = sum(len(m) for m in self.made)
        cap = min(max_step, self.remaining - used)
        if self.terminal or len(self.made) >= self.credit or cap <= 0:
            return None
        ids = tuple(self.prefix + [t for m in self.made for t in m])
        return StepRequest(ids, cap, step_seed(self.seed, len(self.made)), self.request)


def worker_main(conn, path: str, dtype: str, threads: int, t0: float, max_step: int, sampling: dict,
                ngram: dict, pool_size: int, kind: str = "hf", device: str = "cpu", random: dict | None = None,
                prefix_caching: bool = True) -> None:
    """Entry point of the draft process (``kind``: one of :data:`DRAFT_KINDS`)."""
    try:
        be = draft_backend(kind, path, dtype, threads, pool_size, device, random, prefix_caching)
        samp = Sampling(**sampling)
        clock = lambda: time.perf_counter() - t0  # noqa: E731 - CLOCK_MONOTONIC is shared by processes
        eng = be.engine(samp, NgramConfig(**ngram), clock)
        be.pass_log = passes = PassBuffer("draft", t0)

        def send(*msg: Any) -> None:  # this process's passes first, then the message
            if passes.records:
                conn.send(("passes", passes.take()))
            conn.send(msg)

        send("ready", be.name, list(be.eos_ids))
        chain: _Chain | None = None
        while True:
            busy = chain is not None and (chain.handle is not None or chain.next_request(max_step) is not None)
            if not busy or conn.poll():
                chain = _serve(conn.recv(), chain, eng, be, send)
                if chain is _QUIT:
                    break
                continue
            if chain.handle is None:
                req = chain.next_request(max_step)
                chain.handle = eng.add([req])[0]
            for _, out in eng.step():
                send("draft", chain.epoch, len(chain.made), out)
                chain.made.append(out.ids)
                chain.handle = None
                chain.terminal = out.finish == "eos"
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except Exception:  # report, then die: the main process turns it into an error
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass


_QUIT = _Chain(-1, [], 0, 0, 0)  # what :func:`_serve` returns for "quit"


def _serve(msg: tuple, chain: _Chain | None, eng, be: Backend, send: Callable[..., None]) -> _Chain | None:
    """Act on one message from the main process; returns the chain to work on (:data:`_QUIT`: stop)."""
    kind = msg[0]
    if kind == "quit":
        return _QUIT
    if kind == "stats":
        send("stats", asdict(be.stats))
        return chain
    if kind in ("chain", "idle") and chain is not None and chain.handle is not None:
        for _, out in eng.cancel([chain.handle]):
            send("cancelled", chain.epoch, len(chain.made), out)
        chain.handle = None
    if kind == "chain":
        _, epoch, prefix, remaining, credit, seed, *request = msg
        return _Chain(epoch, list(prefix), remaining, credit, seed, request[0] if request else None)
    if kind == "idle":
        return None
    if kind == "credit" and chain is not None and msg[1] == chain.epoch:
        chain.credit += msg[2]
    return chain


class DraftWorker:
    """Main-process handle on the draft process (``kind``: its backend, one of :data:`DRAFT_KINDS`).

    :param dtype: the hf draft's dtype (``auto`` resolved here); a GGUF draft ignores it.
    :param device: torch device of an hf draft model ("cpu", "cuda", "cuda:N").
    :param random: random weights instead of the model at ``path``:
        :meth:`lrref.backends.random_weights.RandomWeights.model`.
    :param prefix_caching: a llama.cpp draft reuses KV across requests (passed to the process at its start).
    :raises InputError: an unknown ``kind``, or an unknown ``dtype`` for ``hf``.
    """

    def __init__(self, path: str, dtype: str, threads: int, t0: float, max_step: int, sampling: Sampling,
                 ngram: NgramConfig = NgramConfig(), pool_size: int = 8, timeout: float = 600.0, kind: str = "hf",
                 device: str = "cpu", random: dict | None = None, prefix_caching: bool = True):
        if kind not in DRAFT_KINDS:
            raise InputError(f"draft process backend must be one of {', '.join(DRAFT_KINDS)}, got {kind!r}")
        if kind == "hf":
            dtype = resolve_dtype(dtype, device)  # here, so that both processes agree
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, daemon=True,
                                args=(child, str(path), dtype, threads, t0, max_step, asdict(sampling), asdict(ngram),
                                      pool_size, kind, device, random, prefix_caching))
        self.proc.start()
        child.close()
        self._forward_seen = 0.0
        self.pass_log: PassLog | None = None  # where the draft's pass records go (the decoder attaches its trace's)
        try:
            msg = self._recv(timeout)
        except WorkerError:
            self.close()
            raise
        if msg[0] != "ready":
            self.close()
            raise WorkerError(f"draft worker failed to start: {str(msg)[:200]}")
        self.name, self.eos_ids = msg[1], tuple(msg[2])

    def _recv(self, timeout: float | None = None) -> tuple:
        """The next message; the draft's pass records on the way are written to :attr:`pass_log` (or dropped)."""
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise WorkerError(f"draft worker did not answer within {timeout:g} s")
            msg = self.conn.recv()
            while msg[0] == "passes":  # another message follows at once
                if self.pass_log is not None:
                    for rec in msg[1]:
                        self.pass_log.write(PassRecord(**rec))
                msg = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerError(f"draft worker exited (exit code {self.proc.exitcode})") from None
        if msg[0] == "error":
            raise WorkerError(f"draft worker crashed: {msg[1].strip().splitlines()[-1]}")
        return msg

    def send(self, *msg: Any) -> None:
        try:
            self.conn.send(msg)
        except OSError:  # BrokenPipeError: the process is gone
            raise WorkerError(f"draft worker exited (exit code {self.proc.exitcode})") from None

    def poll(self, timeout: float = 0.0) -> list[tuple]:
        """Messages available now (waiting up to ``timeout`` s for the first one)."""
        out = []
        if self.conn.poll(timeout):
            out.append(self._recv())
            while self.conn.poll():
                out.append(self._recv())
        return out

    def stats(self) -> dict:
        """The worker backend's counters (:class:`lrref.backends.base.BackendStats` as a dict)."""
        self.send("stats")
        while True:
            m = self._recv(60)
            if m[0] == "stats":
                return m[1]

    def new_forward_s(self) -> float:
        """Draft forward seconds since the last call (the draft time of one request)."""
        total = self.stats()["forward_s"]
        new, self._forward_seen = total - self._forward_seen, total
        return new

    def close(self) -> None:
        try:
            self.send("quit")
        except Exception:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.terminate()
