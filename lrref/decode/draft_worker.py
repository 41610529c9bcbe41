"""The draft model in its own process, for ``lr-async``: one engine drafting for every request in flight.

torch's intra-op thread pool is process-wide, so two models in one process
cannot compute at the same time without fighting over (and oversubscribing)
the same cores.  ``lr-async`` therefore runs the draft in a spawned process
with its own thread count (default 1) while the target runs in the main
process (default 1 thread): on this 2-core CPU each model gets a core.  The
draft process runs the target's kind of backend (:data:`DRAFT_KINDS`: ``hf``,
``llamacpp`` on the draft's GGUF file, or ``vllm``: an engine of its own, as the official LR code deploys its
draft, on the cores the target's engine leaves or on the GPU of ``--draft-device``, :func:`vllm_draft_env`).

The process keeps one draft *chain* per request (:class:`lrref.decode.messages.Chain`):
step j from ``prefix + d_0 .. d_{j-1}``, up to ``credit`` steps ahead of what
the main process has consumed.  One batched engine runs the next step of every
chain with credit, so the draft rows of all requests in flight share its
forward passes; each step is sent as soon as it is done, and messages are read
between passes, so a request's new chain (after a rejection) cancels that
request's stale row within one pass.  The messages are
:mod:`lrref.decode.messages`; the draft's forward passes travel to the main
process as :class:`~lrref.decode.messages.Passes`, which :class:`DraftWorker`
writes to its :attr:`DraftWorker.pass_log` and shares among their requests
(:meth:`DraftWorker.take_draft_s`).

A worker that reports an error, exits or stops answering raises
:class:`WorkerError` (a :class:`lrsim.errors.DomainError`: one line at the
CLI, with the worker's own last line as the reason).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict

from lrsim.errors import DomainError, InputError
from lrsim.trace import PassRecord

from ..backends.base import Backend, Engine, Sampling, StepRequest
from ..backends.build import draft_backend
from ..backends.ngram import NgramConfig
from ..backends.passes import PassBuffer, PassLog
from ..host.cpu import bind_cores, resolve_dtype
from .messages import (
    Cancelled,
    Chain,
    Credit,
    Draft,
    DraftMsg,
    Error,
    FromWorker,
    Passes,
    Quit,
    Ready,
    Stats,
    StatsReply,
    Stop,
    ToWorker,
)
from .seed import step_seed

DRAFT_KINDS = ("hf", "llamacpp", "vllm")  # backends a draft process can run


def vllm_draft_env(device: str, threads: int, environ: dict | None = None, cpus: int | None = None) -> dict[str, str]:
    """The environment a vLLM draft process adds to the target's, so that the two engines do not share a core or a GPU.

    On a CPU (``device`` "cpu"): ``VLLM_CPU_OMP_THREADS_BIND``, ``threads`` cores the target's bind (``environ``'s,
    default all cores) leaves free, the lowest first; the last ``threads`` cores when it leaves none (the two then
    share cores: set the target's bind, e.g. ``VLLM_CPU_OMP_THREADS_BIND=0``, to keep them apart).  On a GPU
    (``cuda:N``): ``CUDA_VISIBLE_DEVICES`` = that GPU (the N-th of the target's own ``CUDA_VISIBLE_DEVICES`` when it
    is set), so the draft's engine sees one GPU, its own.

    :raises InputError: ``cuda`` without an index: two vLLM engines on one GPU would each claim most of its memory.
    """
    env = os.environ if environ is None else environ
    if device.startswith("cuda"):
        _, _, idx = device.partition(":")
        if not idx.isdigit():
            raise InputError("lr-async on --backend vllm runs the draft's engine on a GPU of its own: give it one "
                             "with --draft-device cuda:N (N other than the target's)")
        visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        n = int(idx)
        if visible and n >= len(visible):
            raise InputError(f"--draft-device {device}: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} shows "
                             f"{len(visible)} GPU(s)")
        return {"CUDA_VISIBLE_DEVICES": visible[n] if visible else idx}
    n = cpus or os.cpu_count() or 1
    taken = set(bind_cores(env.get("VLLM_CPU_OMP_THREADS_BIND")) or range(n))
    free = [c for c in range(n) if c not in taken][:threads]
    if len(free) < threads:
        free = list(range(max(0, n - threads), n))
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, free))}


class WorkerError(DomainError):
    """The draft process failed to start, crashed, exited or stopped answering (message: one line)."""


class _Chain:
    """One request's chain in the draft process: the steps made so far, the running one's handle."""

    def __init__(self, msg: Chain):
        self.request, self.epoch, self.prefix = msg.request, msg.epoch, list(msg.prefix)
        self.remaining, self.credit, self.seed = msg.remaining, msg.credit, msg.seed
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


class Drafter:
    """The draft process's state: one chain per request, one engine for all of them.

    :param send: sends a message to the main process (the draft's pass records first).
    """

    def __init__(self, eng: Engine, be: Backend, max_step: int, send: Callable[[FromWorker], None]):
        self.eng, self.be, self.max_step, self.send = eng, be, max_step, send
        self.chains: dict[int, _Chain] = {}  # request -> its chain
        self.owner: dict[int, _Chain] = {}  # engine handle -> chain

    @property
    def busy(self) -> bool:
        """Some chain has a step running or one it may start."""
        return any(c.handle is not None or c.next_request(self.max_step) is not None for c in self.chains.values())

    def handle(self, msg: ToWorker) -> bool:
        """Act on one message from the main process; False: quit."""
        match msg:
            case Quit():
                return False
            case Stats():
                self.send(StatsReply(asdict(self.be.stats)))
            case Chain():
                self._cancel(msg.request)
                self.chains[msg.request] = _Chain(msg)
            case Stop():
                self._cancel(msg.request)
                self.chains.pop(msg.request, None)
            case Credit():
                c = self.chains.get(msg.request)
                if c is not None and c.epoch == msg.epoch:
                    c.credit += msg.n
            case _:
                raise TypeError(f"not a message to the draft process: {msg!r}")
        return True

    def _cancel(self, request: int) -> None:
        """Stop the request's running step, if any (its partial step goes back as :class:`Cancelled`)."""
        c = self.chains.get(request)
        if c is None or c.handle is None:
            return
        for h, out in self.eng.cancel([c.handle]):
            self.owner.pop(h, None)
            self.send(Cancelled(c.request, c.epoch, len(c.made), out))
        c.handle = None

    def step(self) -> None:
        """Start the next step of every idle chain with credit, then one forward pass over every chain's row."""
        new = [(c, r) for c in self.chains.values() if c.handle is None
               for r in [c.next_request(self.max_step)] if r is not None]
        if new:
            for (c, _), h in zip(new, self.eng.add([r for _, r in new])):
                c.handle = h
                self.owner[h] = c
        for h, out in self.eng.step():
            c = self.owner.pop(h)
            self.send(Draft(c.request, c.epoch, len(c.made), out))
            c.made.append(out.ids)
            c.handle = None
            c.terminal = out.finish == "eos"


def worker_main(conn, path: str, dtype: str, threads: int, t0: float, max_step: int, sampling: dict,
                ngram: dict, pool_size: int, kind: str = "hf", device: str = "cpu", random: dict | None = None,
                prefix_caching: bool = True, env: dict | None = None) -> None:
    """Entry point of the draft process (``kind``: one of :data:`DRAFT_KINDS`; ``env``: added to this process's
    environment before the model loads, :func:`vllm_draft_env`)."""
    os.environ.update(env or {})
    try:
        ng = NgramConfig(**ngram)
        be = draft_backend(kind, path, dtype, threads, pool_size, device, random, prefix_caching, ngram=ng)
        samp = Sampling(**sampling)
        clock = lambda: time.perf_counter() - t0  # noqa: E731 - CLOCK_MONOTONIC is shared by processes
        eng = be.engine(samp, ng, clock)
        be.pass_log = passes = PassBuffer("draft", t0)

        def send(msg: FromWorker) -> None:  # this process's passes first, then the message
            if passes.records:
                conn.send(Passes(tuple(passes.take())))
            conn.send(msg)

        send(Ready(be.name, tuple(be.eos_ids)))
        drafter = Drafter(eng, be, max_step, send)
        while True:
            if not drafter.busy or conn.poll():
                if not drafter.handle(conn.recv()):
                    break
                continue
            drafter.step()
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass
    except Exception:  # report, then die: the main process turns it into an error
        try:
            conn.send(Error(traceback.format_exc()))
        except Exception:
            pass


class DraftWorker:
    """Main-process handle on the draft process (``kind``: its backend, one of :data:`DRAFT_KINDS`).

    :param dtype: the hf draft's dtype (``auto`` resolved here); a GGUF draft ignores it.
    :param pool_size: the draft backend's prefix pool (finished rows kept; llama.cpp: half as many sequence
        slots): scale it with the requests in flight.
    :param device: torch device of an hf draft model ("cpu", "cuda", "cuda:N").
    :param random: random weights instead of the model at ``path``:
        :meth:`lrref.backends.random_weights.RandomWeights.model`.
    :param prefix_caching: a llama.cpp draft reuses KV across requests (passed to the process at its start).
    :raises InputError: an unknown ``kind``, an unknown ``dtype`` for ``hf``, a ``vllm`` draft on a GPU without
        an index (:func:`vllm_draft_env`).
    """

    def __init__(self, path: str, dtype: str, threads: int, t0: float, max_step: int, sampling: Sampling,
                 ngram: NgramConfig = NgramConfig(), pool_size: int = 8, timeout: float = 600.0, kind: str = "hf",
                 device: str = "cpu", random: dict | None = None, prefix_caching: bool = True):
        if kind not in DRAFT_KINDS:
            raise InputError(f"draft process backend must be one of {', '.join(DRAFT_KINDS)}, got {kind!r}")
        if kind in ("hf", "vllm"):
            dtype = resolve_dtype(dtype, device)  # here, so that both processes agree
        env = vllm_draft_env(device, threads) if kind == "vllm" else None
        self.kind = kind
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        # vLLM's engine starts a worker process of its own, which a daemonic process may not: close() ends it
        self.proc = ctx.Process(target=worker_main, daemon=kind != "vllm",
                                args=(child, str(path), dtype, threads, t0, max_step, asdict(sampling), asdict(ngram),
                                      pool_size, kind, device, random, prefix_caching, env))
        self.proc.start()
        child.close()
        self.pass_log: PassLog | None = None  # where the draft's pass records go (the decoder attaches its trace's)
        self._draft_s: dict[int, float] = {}  # request -> its share of the draft's pass seconds, not taken yet
        self._inbox: list[DraftMsg] = []  # drafts read, not yet given out by poll
        self._stats: dict | None = None  # the last stats reply, until taken
        self.name: str | None = None
        try:
            self._read(timeout)
            if self.name is None:
                raise WorkerError(f"draft worker failed to start: {str(self._inbox[:1])[:200]}")
        except WorkerError:
            self.close()
            raise

    def _read(self, timeout: float | None = None) -> None:
        """Read the next message and act on it (:meth:`_act`, the one place the main process dispatches on the
        draft process's messages): drafts go to the inbox, pass records to :attr:`pass_log` (or nowhere) and to
        their requests' draft time, an error is raised.

        :raises WorkerError: nothing within ``timeout`` s, an error, a process gone.
        """
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise WorkerError(f"draft worker did not answer within {timeout:g} s")
            while self._act(self.conn.recv()):
                pass
        except (EOFError, OSError):
            raise WorkerError(f"draft worker exited (exit code {self.proc.exitcode})") from None

    def _act(self, msg: FromWorker) -> bool:
        """Act on one message from the draft process; True: read the next one at once (pass records come just
        before another message)."""
        match msg:
            case Passes(records):
                self._passes(records)
                return True
            case Draft() | Cancelled():
                self._inbox.append(msg)
            case StatsReply(stats):
                self._stats = stats
            case Ready(name, eos_ids):
                self.name, self.eos_ids = name, tuple(eos_ids)
            case Error(text):
                raise WorkerError(f"draft worker crashed: {text.strip().splitlines()[-1]}")
            case _:
                raise WorkerError(f"draft worker sent {type(msg).__name__}, not one of its messages")
        return False

    def _passes(self, records: tuple[dict, ...]) -> None:
        """Write the draft's pass records; share each pass's seconds among the requests of its rows (one row each:
        a chain runs one step at a time)."""
        for rec in records:
            if self.pass_log is not None:
                self.pass_log.write(PassRecord(**rec))
            reqs = rec.get("requests") or ()
            for r in reqs:
                self._draft_s[r] = self._draft_s.get(r, 0.0) + rec["seconds"] / len(reqs)

    def send(self, msg: ToWorker) -> None:
        try:
            self.conn.send(msg)
        except OSError:  # BrokenPipeError: the process is gone
            raise WorkerError(f"draft worker exited (exit code {self.proc.exitcode})") from None

    def poll(self, timeout: float = 0.0) -> list[DraftMsg]:
        """Drafts and cancelled drafts of every request, available now (waiting up to ``timeout`` s for one)."""
        if not self._inbox and self.conn.poll(timeout):
            self._read()
        while self.conn.poll():
            self._read()
        out, self._inbox = self._inbox, []
        return out

    def stats(self) -> dict:
        """The worker backend's counters (:class:`lrref.backends.base.BackendStats` as a dict), once the draft
        process has acted on everything sent before (drafts read meanwhile wait for the next :meth:`poll`)."""
        self.send(Stats())
        while self._stats is None:
            self._read(60)
        out, self._stats = self._stats, None
        return out

    def settle(self, request: int) -> float:
        """After ``request`` ended (:class:`lrref.decode.messages.Stop` sent): wait until the draft process has
        acted on everything (:meth:`stats`), drop the drafts of ``request`` read so far, and return its draft
        seconds, complete now (:meth:`take_draft_s`)."""
        self.stats()
        self._inbox = [m for m in self._inbox if m.request != request]
        return self.take_draft_s(request)

    def clear(self) -> None:
        """Wait until the draft process has acted on everything sent so far and drop every draft read: a run of
        several requests ended (their late pass records are written now; a later run starts clean)."""
        self.stats()
        self._inbox = []
        self._draft_s.clear()

    def take_draft_s(self, request: int) -> float:
        """The draft's forward seconds spent on ``request`` since the last call for it (passes shared by rows)."""
        return self._draft_s.pop(request, 0.0)

    def close(self) -> None:
        try:
            self.send(Quit())
        except Exception:
            pass
        self.proc.join(30 if self.kind == "vllm" else 10)  # a vLLM draft shuts its engine's worker down first
        if self.proc.is_alive():
            self.proc.terminate()
