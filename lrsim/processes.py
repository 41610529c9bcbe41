"""What this process may do with the machine: the cores it may run on, and whether it may fork.

One rule for both of lrsim's parallel paths, :mod:`lrsim.prediction.workers` (a plan's forked workers; serial
where forking is unsafe) and :func:`lrsim.sweep.map_tasks` (a process pool; its workers from a forkserver then).
"""

from __future__ import annotations

import os
import threading


def cores() -> int:
    """CPUs this process may run on (its affinity: fewer than the machine's under ``taskset`` or a cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether this process may fork: the platform can, and no other thread runs here (a thread may hold a lock at
    the fork that no child ever releases: a test runner's, a notebook's, a progress bar's monitor)."""
    import multiprocessing as mp

    return threading.active_count() == 1 and "fork" in mp.get_all_start_methods()
