"""lrref: reference Lookahead Reasoning decoder (torch lives here, never in lrsim).

Decode from Python with :class:`lrref.Session` (:mod:`lrref.session`)::

    from lrref import Session

    with Session(backend="hf", random_weights="tiny", max_tokens=32) as s:
        print(s.generate("a question", trace=False).tokens)             # 32

Packages by concept: :mod:`lrref.backends` (one model each: hf, llama.cpp, vLLM, random weights),
:mod:`lrref.decode` (the modes: ar/sd, lr-sync, lr-async, the closed loop, the draft process),
:mod:`lrref.verify` (step verifiers), :mod:`lrref.profiling` (``lrref profile``), :mod:`lrref.host` (the CPU,
the machine's load); at the top: the Python API (:mod:`lrref.session`), the command (:mod:`lrref.cli`),
:mod:`lrref.config`, :mod:`lrref.models`, :mod:`lrref.archs`, :mod:`lrref.bench`, :mod:`lrref.answers`.
Importing this package imports none of them: ``lrref.Session`` and the other names below load
:mod:`lrref.session` on first use.
"""

__version__ = "0.1.0"

#: names loaded from :mod:`lrref.session` on first use (``import lrref`` stays instant)
_LAZY = ("Session", "SessionConfig", "GenerateResult", "BenchResult")
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        from . import session

        return getattr(session, name)
    raise AttributeError(f"module 'lrref' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
