"""The verifier as a shared service: at most ``slots`` calls at once, first come first served.

A call holds a slot for its latency (drawn by the requesting run from its own
stream); with every slot taken it waits.  ``slots = 0``: unlimited (calls
overlap freely, as in :mod:`lrsim.sim`).  A sync cycle's per-pair calls are
one call holding a slot for their summed latency (they run back to back).
"""

from __future__ import annotations

from collections import deque

import simpy
from simpy import Timeout


class Verifier:
    """Verifier calls on shared slots; :meth:`call` returns an event whose ``t`` is the call's end."""

    def __init__(self, env: simpy.Environment, slots: int = 0):
        self.env, self.slots = env, slots
        self.busy = 0
        self.queue: deque = deque()
        self.calls = 0
        self.busy_time = 0.0  #: slot-seconds in use
        self.wait_time = 0.0  #: seconds calls waited for a slot, summed

    def call(self, seconds: float) -> simpy.Event:
        """A call of ``seconds``; the event fires at its end with ``event.t`` set to that time."""
        self.calls += 1
        self.busy_time += seconds
        if self.slots == 0:  # unlimited: the call is its own timeout, as on a private verifier
            t = Timeout(self.env, seconds)
            t.t = self.env.now + seconds
            return t
        ev = self.env.event()
        if self.busy < self.slots:
            self._start(ev, seconds, self.env.now)
        else:
            self.queue.append((ev, seconds, self.env.now))
        return ev

    def _start(self, ev: simpy.Event, seconds: float, asked: float) -> None:
        now = self.env.now
        self.busy += 1
        self.wait_time += now - asked
        t = Timeout(self.env, seconds)
        t.callbacks.append(lambda _t: self._end(ev, now + seconds))

    def _end(self, ev: simpy.Event, t: float) -> None:
        self.busy -= 1
        ev.t = t
        ev.succeed(t)
        if self.queue:
            self._start(*self.queue.popleft())
