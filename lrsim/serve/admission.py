"""Admission: requests wait, first come first served, until the target has room for them.

A request is admitted when both fit beside the requests already running:

- one more running request within ``max_num_seqs`` (each needs a row at
  least; an LR request's further target rows then compete for the engine's
  rows iteration by iteration, :class:`lrsim.serve.engine.BatchEngine`);
- its KV footprint (:func:`lrsim.serve.config.kv_footprint`: prompt + output,
  plus LR's look-ahead) within the KV capacity.

The KV it reserves is held until it finishes, so a running request never
runs out of room: no preemption is needed, and none is modelled (vLLM admits
on the prompt's blocks and preempts, recomputing, when blocks run out).  The
queue is strict FCFS: a request that does not fit holds back the ones behind
it, as vLLM's FCFS scheduler does.
"""

from __future__ import annotations

import math
from collections import deque

import simpy


class Admission:
    """FCFS admission against running requests and KV tokens."""

    def __init__(self, env: simpy.Environment, max_requests: int, kv_tokens: float | None):
        self.env = env
        self.free = [max_requests, math.inf if kv_tokens is None else kv_tokens]
        self.queue: deque = deque()
        self.running = 0
        self.peak_running = 0
        self.peak_queue = 0

    def enter(self, need: tuple[int, int]) -> simpy.Event:
        """Ask for (1 request, KV tokens); the event fires when the request is admitted."""
        ev = self.env.event()
        self.queue.append((ev, need))
        self.peak_queue = max(self.peak_queue, len(self.queue))
        self._admit()
        return ev

    def leave(self, need: tuple[int, int]) -> None:
        """A request finished: give back what it held and admit whoever now fits."""
        for i, v in enumerate(need):
            self.free[i] += v
        self.running -= 1
        self._admit()

    def _admit(self) -> None:
        while self.queue:
            ev, need = self.queue[0]
            if any(v > f for v, f in zip(need, self.free)):
                return  # strict FCFS: the head waits, and so does everyone behind it
            self.queue.popleft()
            for i, v in enumerate(need):
                self.free[i] -= v
            self.running += 1
            self.peak_running = max(self.peak_running, self.running)
            ev.succeed()
