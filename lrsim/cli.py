"""``lrsim`` command line: the parser of every subcommand (:mod:`lrsim.commands`, one module each) and the
one boundary where bad input becomes one line on stderr and exit code 2 (:func:`lrsim.errors.run_command`);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import __version__
from .commands import calibrate, plan, profiles, replay, serve, simulate, theory
from .commands.common import DEFAULTS, cost, nonnegative, nonnegative_int, positive_int, probability, unit  # noqa: F401 (re-exported)
from .errors import OneLineParser, run_command


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="lrsim", description="Lookahead Reasoning speedup theory, checks and planning.")
    parser.add_argument("--version", action="version", version=f"lrsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    plan.add_parser(sub)
    replay.add_parser(sub)
    theory.add_parsers(sub)
    simulate.add_parsers(sub)
    calibrate.add_parser(sub)
    serve.add_parser(sub)
    profiles.add_parser(sub)
    return parser


COMMANDS = {"plan": plan.run, "replay": replay.run, "theorems": theory.run_theorems, "symbolic": theory.run_symbolic,
            "report": theory.run_report, "simulate": simulate.run_simulate, "sweep": simulate.run_sweep,
            "calibrate": calibrate.run, "serve": serve.run, "profiles": profiles.run}


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lrsim`` command: parse, run one command at the shared error boundary, return the exit code."""
    def command() -> str:
        args: argparse.Namespace = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return run_command("lrsim", command)


if __name__ == "__main__":
    sys.exit(main())
