"""Replay my traces: what would another configuration give on the workload I recorded?

Run: python examples/replay_traces.py [TRACE ...]   (default: the embedded lrref traces; a few seconds)
"""

import sys

import lrsim

traces = lrsim.load_traces(sys.argv[1:] or None)  # lr-trace files, or the five embedded default traces
print(f"{len(traces)} traces: {', '.join(t.header.mode for t in traces)}")

for mode, k1, k2 in (("sync", 3, 1), ("async", 3, 1), ("async", 3, 5)):
    p = lrsim.predict(mode, k1, k2, traces=traces, steps=4000, bootstrap=0)
    print(f"  {mode:5s} k1 = {k1}, k2 = {k2}: predicted {p.speedup:.3f}x over target-only decoding "
          f"(closed form {p.closed_form:.3f}x)")

# the same traces' acceptance with an H100's timing: what LR would give there
hw = lrsim.hardware("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b", verifier_latency=0.013)
p = lrsim.predict("async", 4, traces=traces, hardware=hw, steps=4000, bootstrap=0)
print(p)
