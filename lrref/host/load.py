"""What else ran on the machine during a timing run: the CPU time of other processes, and the load average.

llama.cpp's threads wait for each other after every operation of a pass, so a
thread that loses its core to another process holds the whole pass up: on the
2-core development machine a nice-19 background job turned 64 ms passes into
0.8-2.3 s.  Timings taken beside other work are not measurements of the
engine, and a trace or profile must say whether there was any.

What is measured, over a *window* (a run, or a short sample before one):

- ``other_cores``: the CPU time every process of the machine used
  (``/proc/stat``, the ``cpu`` line: user, nice, system, irq, softirq and
  steal ticks; ``steal`` is time a hypervisor gave to other guests) minus the
  CPU time of this process tree (``/proc/<pid>/stat`` utime + stime + cutime +
  cstime of this process and of every live descendant, e.g. lr-async's draft
  process or the profiler's co-runner), divided by the window: how many cores'
  worth of other work ran beside the run (0.25 = a quarter of one core);
- ``own_cores``: the same for this process tree;
- the 1, 5 and 15 minute load averages at the start and the end (recorded, not
  judged: they count this run's own threads and trail by a minute).

**Busy** means ``other_cores`` > :data:`BUSY_CORES` (0.10: other processes
used more than 10% of one core on average).  ``--require-idle`` samples
:data:`IDLE_SAMPLE_S` seconds before any model loads and refuses a busy
machine (one line, exit 2); every timing run records its window in its
outputs and prints one warning line on stderr when it was busy.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lrsim.errors import DomainError

PROC = Path("/proc")
BUSY_CORES = 0.10  #: other processes' mean use above this (in cores) = busy
IDLE_SAMPLE_S = 1.5  #: seconds ``--require-idle`` samples before a run
REQUIRE_IDLE_HELP = (f"refuse to start (exit 2) when other processes use more than {BUSY_CORES:g} of one core over a "
                     f"{IDLE_SAMPLE_S:g} s sample (timings beside other work are not the engine's)")
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, (idle, iowait), irq, softirq, steal of the cpu line


class BusyError(DomainError):
    """``--require-idle`` found the machine busy (one line, exit 2)."""


@dataclass(frozen=True)
class Sample:
    """One reading: clock, the machine's busy ticks, this process tree's ticks, the load averages."""

    t: float  # time.monotonic()
    busy: int  # ticks of every CPU not idle (/proc/stat)
    own: int  # ticks of this process and its live descendants, their reaped children included
    loadavg: tuple[float, float, float]


@dataclass(frozen=True)
class Load:
    """The load over a window (see the module's docstring)."""

    window_s: float
    other_cores: float
    own_cores: float
    loadavg_start: tuple[float, float, float]
    loadavg_end: tuple[float, float, float]
    cpus: int | None
    threshold: float = BUSY_CORES

    @property
    def busy(self) -> bool:
        return self.other_cores > self.threshold

    def to_dict(self) -> dict:
        """What outputs record (trace header ``hardware.load``, ``results.json``, profile provenance)."""
        return {"window_s": round(self.window_s, 2), "other_cores": round(self.other_cores, 3),
                "own_cores": round(self.own_cores, 3), "busy": self.busy, "busy_above_cores": self.threshold,
                "loadavg_start": [round(x, 2) for x in self.loadavg_start],
                "loadavg_end": [round(x, 2) for x in self.loadavg_end], "cpus": self.cpus,
                "source": "/proc/stat minus this process tree (/proc/<pid>/stat)"}

    def describe(self) -> str:
        """One phrase: what the other processes used, and the load average."""
        return (f"other processes used {self.other_cores:.2f} of one core on average over {self.window_s:.1f} s "
                f"(busy above {self.threshold:g}); load average {self.loadavg_start[0]:.2f} -> "
                f"{self.loadavg_end[0]:.2f}")


def _ticks_per_s() -> int:
    return os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_ticks(proc: Path = PROC) -> int:
    """Non-idle ticks of all CPUs since boot (``/proc/stat``'s first line)."""
    with open(proc / "stat", encoding="ascii") as f:
        first = f.readline().split()
    if not first or first[0] != "cpu":
        raise OSError(f"{proc / 'stat'}: no 'cpu' line")
    values = [int(x) for x in first[1:]]
    return sum(values[i] for i in _BUSY_FIELDS if i < len(values))


def _stat(proc: Path, pid: str) -> tuple[int, int] | None:
    """``(ppid, utime + stime + cutime + cstime)`` of a process, None if it is gone."""
    try:
        text = (proc / pid / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def tree_ticks(proc: Path = PROC, pid: int | None = None) -> int:
    """CPU ticks of process ``pid`` (default: this one) and of every live descendant, reaped children included."""
    root = str(pid or os.getpid())
    stats = {p.name: s for p in proc.iterdir() if p.name.isdigit() and (s := _stat(proc, p.name)) is not None}
    children: dict[str, list[str]] = {}
    for p, (ppid, _) in stats.items():
        children.setdefault(str(ppid), []).append(p)
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        if p in stats:
            total += stats[p][1]
            todo += children.get(p, [])
    return total


def take(proc: Path = PROC, pid: int | None = None) -> Sample:
    """A reading now (``/proc`` or a directory laid out like it)."""
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return Sample(time.monotonic(), machine_busy_ticks(proc), tree_ticks(proc, pid), tuple(load))


def between(a: Sample, b: Sample, ticks_per_s: int | None = None, cpus: int | None = None) -> Load:
    """The load over the window from ``a`` to ``b``."""
    hz = ticks_per_s or _ticks_per_s()
    dt = max(b.t - a.t, 1e-9)
    own = max(0, b.own - a.own) / hz
    other = max(0.0, (b.busy - a.busy) / hz - own)
    return Load(dt, other / dt, own / dt, a.loadavg, b.loadavg, cpus or os.cpu_count())


class Monitor:
    """A window from its creation on: :meth:`now` is the load so far (None where ``/proc`` cannot be read)."""

    def __init__(self, proc: Path | None = None):
        self.proc = proc or PROC
        proc = self.proc
        self.start = _try(lambda: take(proc))

    def now(self) -> Load | None:
        end = _try(lambda: take(self.proc))
        return None if self.start is None or end is None else between(self.start, end)

    def record(self) -> dict | None:
        """:meth:`now` as a dict (None without ``/proc``)."""
        load = self.now()
        return None if load is None else load.to_dict()


def _try(fn):
    try:
        return fn()
    except (OSError, ValueError, IndexError):  # no /proc (macOS) or an unreadable one: nothing to record
        return None


def require_idle(seconds: float | None = None, proc: Path | None = None, sleep=time.sleep) -> Load:
    """Sample ``seconds`` (default :data:`IDLE_SAMPLE_S`) of ``proc`` (default :data:`PROC`); the load if the
    machine is idle.

    :raises BusyError: other processes used more than :data:`BUSY_CORES` (one line naming the figures).
    """
    seconds = IDLE_SAMPLE_S if seconds is None else seconds
    proc = proc or PROC
    a = _try(lambda: take(proc))
    sleep(seconds)
    b = _try(lambda: take(proc))
    if a is None or b is None:
        raise BusyError(f"--require-idle: cannot read {proc / 'stat'} on this system, so idleness cannot be checked")
    load = between(a, b)
    if load.busy:
        raise BusyError(f"--require-idle: the machine is busy: {load.describe()}")
    return load


def warn_if_busy(load: Load | None, what: str = "the run") -> bool:
    """Print one warning line on stderr if the window was busy; returns whether it was."""
    if load is None or not load.busy:
        return False
    print(f"lrref: warning: the machine was busy during {what}: {load.describe()}; its timings are not the "
          "engine's alone", file=sys.stderr, flush=True)
    return True
