"""The ``lrsim`` subcommands, one module each (:mod:`lrsim.cli` builds the parser and dispatches).

Every module has ``add_parser(sub)`` (its flags) and ``run(args) -> str`` (the text to print); bad input
raises :class:`lrsim.errors.InputError`/:class:`~lrsim.errors.UsageError`, which the CLI boundary prints as
one line with exit code 2.  :mod:`.common` holds the argument parsers and option groups several share: the
one ``--hardware`` group of replay, plan, serve and plan --rate among them.
"""

#: every subcommand's one-line help, in the order ``lrsim --help`` lists them: read by each module's parser and by
#: :func:`lrsim.cli.build_parser`, which builds the flags of the command asked for only (``lrsim --help`` none)
HELP = {
    "plan": "best split of the budget M between step level (k1) and token level (k2)",
    "replay": "predict the speedup of a configuration on a recorded workload",
    "theorems": "check Theorems 1-4 and the SD ceiling",
    "symbolic": "derive the closed forms with sympy and compare with the seeds",
    "report": "the main job: a plan on the given/default numbers plus the theorem report",
    "simulate": "event simulation of one request: speedup, acceptance, utilisation, trace",
    "sweep": "simulate every point of a grid, in parallel, into a CSV or Parquet file",
    "calibrate": "fit acceptance, costs, latency curves and step lengths from traces",
    "serve": "event simulation of an LR serving deployment under load: TTFT, TPOT, e2e, goodput, and the rate above "
             "which speculation stops paying",
    "profiles": "list the embedded latency profiles, or check and price given ones",
}
