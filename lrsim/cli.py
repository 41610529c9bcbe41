"""``lrsim`` command line: the parser of every subcommand (:mod:`lrsim.commands`, one module each) and the
one boundary where bad input becomes one line on stderr and exit code 2 (:func:`lrsim.errors.run_command`);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import __version__
from .commands import HELP, calibrate, plan, profiles, replay, serve, simulate, theory
from .commands.common import DEFAULTS, cost, nonnegative, nonnegative_int, positive_int, probability, unit  # noqa: F401 (re-exported)
from .errors import OneLineParser, run_command

#: the modules that build the subcommands' flags, each with the commands it adds, in ``HELP``'s order
BUILDERS = ((plan.add_parser, ("plan",)), (replay.add_parser, ("replay",)),
            (theory.add_parsers, ("theorems", "symbolic", "report")), (simulate.add_parsers, ("simulate", "sweep")),
            (calibrate.add_parser, ("calibrate",)), (serve.add_parser, ("serve",)),
            (profiles.add_parser, ("profiles",)))


def build_parser(argv: Sequence[str] | None = None) -> OneLineParser:
    """The ``lrsim`` parser.  With ``argv``, only the flags of the command it names are built (the others are
    their one-line help: what ``lrsim --help`` lists), so a command's parser imports what it needs and
    ``lrsim --help`` nothing heavy; without, every command's."""
    parser = OneLineParser(prog="lrsim", description="Lookahead Reasoning speedup theory, checks and planning.")
    parser.add_argument("--version", action="version", version=f"lrsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    wanted = None if argv is None else next((x for x in argv if not x.startswith("-")), "")
    for build, names in BUILDERS:
        if wanted is None or wanted in names:
            build(sub)
        else:
            for name in names:
                sub.add_parser(name, help=HELP[name])
    return parser


COMMANDS = {"plan": plan.run, "replay": replay.run, "theorems": theory.run_theorems, "symbolic": theory.run_symbolic,
            "report": theory.run_report, "simulate": simulate.run_simulate, "sweep": simulate.run_sweep,
            "calibrate": calibrate.run, "serve": serve.run, "profiles": profiles.run}


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lrsim`` command: parse, run one command at the shared error boundary, return the exit code."""
    def command() -> str:
        args = list(sys.argv[1:] if argv is None else argv)
        a: argparse.Namespace = build_parser(args).parse_args(args)
        return COMMANDS[a.command](a)

    return run_command("lrsim", command)


if __name__ == "__main__":
    sys.exit(main())
