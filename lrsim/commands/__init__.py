"""The ``lrsim`` subcommands, one module each (:mod:`lrsim.cli` builds the parser and dispatches).

Every module has ``add_parser(sub)`` (its flags) and ``run(args) -> str`` (the text to print); bad input
raises :class:`lrsim.errors.InputError`/:class:`~lrsim.errors.UsageError`, which the CLI boundary prints as
one line with exit code 2.  :mod:`.common` holds the argument parsers and option groups several share: the
one ``--hardware`` group of replay, plan, serve and plan --rate among them.
"""
