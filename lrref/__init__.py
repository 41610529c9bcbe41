"""lrref: reference Lookahead Reasoning decoder on real models (torch lives here, never in lrsim)."""

__version__ = "0.1.0"
