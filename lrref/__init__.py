"""lrref: reference Lookahead Reasoning decoder on real models (torch lives here, never in lrsim).

Packages by concept: :mod:`lrref.backends` (one model each: hf, llama.cpp, vLLM, random weights),
:mod:`lrref.decode` (the modes: ar/sd, lr-sync, lr-async, the closed loop, the draft process),
:mod:`lrref.verify` (step verifiers), :mod:`lrref.profiling` (``lrref profile``), :mod:`lrref.host` (the CPU,
the machine's load); at the top: the command (:mod:`lrref.cli`), :mod:`lrref.config`, :mod:`lrref.models`,
:mod:`lrref.archs`, :mod:`lrref.bench`, :mod:`lrref.answers`.  Importing this package imports none of them.
"""

__version__ = "0.1.0"
