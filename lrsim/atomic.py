"""Atomic file writes: a temporary file in the target's directory, then ``os.replace`` (never half a file)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace``: never half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_writable(p: Path) -> None:
    """Raise ``ValueError`` if no file can be created beside ``p`` (its directory is created if missing).

    Commands call this before long work, so a bad output path fails at once.
    """
    p = Path(p)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=p.parent):
            pass
    except OSError as e:
        raise ValueError(f"cannot write {p}: {e.strerror or e}") from None
