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
    """A tqdm bar (``tqdm.auto``: a widget in a notebook) on stderr; unless ``enabled``, :class:`Quiet`, which
    imports nothing (tqdm and the asyncio that ``tqdm.auto`` loads are a tenth of a short command's imports)."""
    if not enabled:
        return Quiet(iterable)
    from tqdm.auto import tqdm

    class Bar(tqdm):
        monitor_interval = 0  # no monitor thread

    return Bar(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, **kw)


class Quiet:
    """A bar that shows nothing: iterates ``iterable``, counts :meth:`update` calls, closes as a tqdm bar does."""

    def __init__(self, iterable: Iterable | None = None):
        self.iterable, self.n = iterable, 0

    def __iter__(self):
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass

    def __enter__(self) -> "Quiet":
        return self

    def __exit__(self, *exc) -> None:
        pass
