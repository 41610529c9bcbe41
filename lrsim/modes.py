"""Mode names shared by the theory, the simulator, the trace format and the command lines (standard library only)."""

LR_MODES = ("sync", "async")  #: step-level scheduling of Lookahead Reasoning (Algorithm 1, pipelined)
SIM_MODES = ("ar",) + LR_MODES  #: what the simulator runs; 'ar' is target-only decoding
VERIFY_CALLS = ("one", "per_pair")  #: sync verifier: one call per cycle, or one per pair up to the first rejection
TRACE_MODES = {"ar": "ar", "sync": "lr-sync", "async": "lr-async"}  #: simulator mode -> trace header mode
