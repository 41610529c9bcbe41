"""``lrsim profiles``: list the embedded latency profiles, check given ones, price one pass."""

from __future__ import annotations

import argparse

from . import HELP
from .common import choice, nonnegative, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("profiles", help=HELP["profiles"])
    p.add_argument("profiles", nargs="*", metavar="PROFILE",
                   help="profile names, files or model:DEVICE[:tpN][:DTYPE][:ENGINE]... (default: the embedded ones)")
    p.add_argument("--arch", help="price one forward pass of this architecture in each profile that has it (ms)")
    p.add_argument("--context", type=nonnegative, default=0.0, help="with --arch: tokens in the KV cache")
    p.add_argument("--batch", type=positive_int, default=1, help="with --arch: rows in the pass")
    p.add_argument("--positions", type=positive_int, default=1, help="with --arch: new positions per row")
    p.add_argument("--draft", help="with --arch: also c1 = draft / target time of a decode step (q = 1)")
    p.add_argument("--extrapolate", type=choice(("error", "clamp", "linear")), default="error",
                   help="outside the measured range: refuse (default), clamp to it, or continue linearly")
    p.add_argument("--json", action="store_true", help="print JSON")
    from .gpu_model import add_arguments as add_gpu_arguments  # --devices, --synthesize, --tp, --timed, --out

    add_gpu_arguments(p)


def run(a: argparse.Namespace) -> str:
    from ..cost.listing import profiles_report
    from .gpu_model import run as gpu_run

    if (out := gpu_run(a)) is not None:  # --devices / --synthesize (lrsim.gpu)
        return out
    return profiles_report(a.profiles, a.json, a.arch, a.context, a.batch, a.positions, a.draft, a.extrapolate)
