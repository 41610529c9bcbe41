"""``lrref`` command line (the reference decoder lands with issue 4; until then it says so)."""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in ([], ["-h"], ["--help"]):
        print("usage: lrref {models,generate,bench} ...\n\nReference Lookahead Reasoning decoder (not built yet).")
        return 0
    print("lrref: error: the reference decoder is not built yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
