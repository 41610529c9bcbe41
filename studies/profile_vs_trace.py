"""Does a latency profile predict the forward passes of recorded lrref ar traces?

    python studies/profile_vs_trace.py --profile cpu-bfloat16-t2.json --arch qwen2.5-coder-1.5b \\
        lrsim/data/default/trace-ar.jsonl.gz

Prints recorded vs predicted milliseconds per pass over the passes after each request's first step
(``lrsim.profile_check``).  The profile and the traces must come from the same machine, dtype and threads.
"""

import argparse
import sys

from lrsim.cost.check import compare
from lrsim.cost.library import load_profile
from lrsim.errors import run_command
from lrsim.trace import read_trace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", help="lr-traces of mode ar without n-gram")
    ap.add_argument("--profile", required=True, help="profile name or file")
    ap.add_argument("--arch", required=True, help="the target's architecture in the profile")
    ap.add_argument("--extrapolate", default="error", choices=("error", "clamp", "linear"))
    a = ap.parse_args()
    return run_command("profile_vs_trace", lambda: compare(load_profile(a.profile), a.arch,
                                                           [read_trace(t) for t in a.traces], a.extrapolate).format())


if __name__ == "__main__":
    sys.exit(main())
