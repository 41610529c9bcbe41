"""Atomic file writes: a temporary file in the target's directory, then ``os.replace`` (never half a file).

Every output lrsim and lrref write whole (traces, tables, Chrome traces,
benchmark results) goes through :func:`atomic_output`; on any failure the
temporary file is removed and the old file, if any, is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from .errors import InputError


@contextmanager
def atomic_output(path: str | os.PathLike, text: bool = False) -> Iterator[IO]:
    """An open temporary file beside ``path`` that replaces ``path`` when the block ends without error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically."""
    with atomic_output(path, text=isinstance(data, str)) as f:
        f.write(data)


def check_writable(p: str | os.PathLike) -> None:
    """Raise :class:`InputError` if no file can be created beside ``p`` (its directory is created if missing).

    Commands call this before long work, so a bad output path fails at once.
    """
    p = Path(p)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=p.parent):
            pass
    except OSError as e:
        raise InputError(f"cannot write {p}: {e.strerror or e}") from None
