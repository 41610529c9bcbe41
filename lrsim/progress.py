"""Progress bars on stderr (tqdm) that start no monitor thread.

tqdm starts a monitor thread with its first bar in a process, even a disabled one, and keeps it; a process with
another thread must not fork (:mod:`lrsim.prediction.workers`, :func:`lrsim.sweep.map_tasks`), so lrsim's bars
do without it (the monitor only shortens a stalled bar's refresh).
"""

from __future__ import annotations

import sys
from typing import Any, Iterable


def bar(iterable: Iterable | None = None, total: int | None = None, desc: str = "", enabled: bool = True,
        unit: str = "it", **kw: Any):
    """A tqdm bar (``tqdm.auto``: a widget in a notebook) on stderr, ``disable`` unless ``enabled`` (then plain
    tqdm: ``tqdm.auto`` imports asyncio, a fifth of a short command's imports)."""
    if enabled:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm

    class Bar(tqdm):
        monitor_interval = 0  # no monitor thread

    return Bar(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, **kw)
