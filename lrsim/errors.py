"""Errors a user can act on, and the one boundary where both command lines report them.

Standard library only, so ``lrsim`` and ``lrref`` share it.  The rule:

- a :class:`DomainError` (bad flags or values, a model that is not prepared, an
  unreadable trace, a worker process that reported why it stopped) and an
  ``OSError`` on the user's files (an unwritable ``--out``, a missing input)
  become **one line on stderr and exit code 2**;
- anything else is a bug in this code and keeps its traceback.

Library code raises :class:`InputError` for bad values; it is a ``ValueError``
too, so callers that catch ``ValueError`` keep working.  Internal
``ValueError``\\ s are *not* caught by the boundary.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn


class DomainError(Exception):
    """An error the user can act on: reported as one line, exit code 2."""


class InputError(DomainError, ValueError):
    """A bad input value (a flag, a configuration field, a file's content)."""


class UsageError(InputError):
    """Bad command-line usage (argparse errors, flags that do not go together)."""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage dump), raised as :class:`UsageError`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def one_line(e: BaseException) -> str:
    """The first line of an error's message (its class name when it has none)."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    text = str(e)
    return text.splitlines()[0] if text.strip() else type(e).__name__


def run_command(prog: str, fn: Callable[[], str | int | None]) -> int:
    """Run one command at the boundary: print what it returns, map domain errors to exit 2.

    ``fn`` returns the text to print (or an exit code, or None for 0).  A
    :class:`DomainError` or ``OSError`` prints ``PROG: error: <one line>`` on
    stderr and returns 2; Ctrl-C returns 130; any other exception propagates.
    """
    try:
        out = fn()
    except (DomainError, OSError) as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    if isinstance(out, int):
        return out
    if out is not None:
        try:
            print(out)
            sys.stdout.flush()
        except BrokenPipeError:
            pass
    return 0
