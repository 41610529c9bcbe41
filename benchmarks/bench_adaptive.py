"""Benchmark the adaptive policy's decision against its target (issue 34): under 1 ms a step boundary.

Times :meth:`lrsim.adaptive.Policy.choose` (a Thompson draw over every configuration: ar, token SD, lr-sync and
lr-async up to gamma 8, each with and without token SD), with the closed forms and with the priced simulator's
table (:class:`lrsim.adaptive.sim.SimulatedObjective`, built first on the simulator's unit costs, 50 steps a
point), :meth:`Policy.observe`, and lrref's decision at a cycle boundary (:meth:`lrref.decode.auto.Tuner.choose`:
the measured costs, the policy's draw and the choice record; its meter fed passes of 1-40 positions), best and
median per call over ``--calls``, in one run; the load average before and after and the CPU are printed.

Run: python benchmarks/bench_adaptive.py [--calls 2000] [--json]
"""

import argparse
import os
import statistics
import time
from dataclasses import replace

from report import machine, report

from lrsim.adaptive.policy import Policy
from lrsim.adaptive.sim import SimulatedObjective
from lrsim.sim import SimConfig
from lrsim.theory.costaware import Costs

TARGET_S = 1e-3


def per_call(fn, calls: int, rounds: int = 5) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls)
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load0 = os.getloadavg()
    p = Policy(Costs.affine(0.05, 0.002, 0.01, 0.02), alpha1=0.7, alpha2=0.4)
    base = SimConfig(alpha1=0.7, alpha2=0.4, c1=0.1)
    table = SimulatedObjective(lambda a, ph, n, seed: replace(base, mode=a.mode, k1=a.k1, k2=a.k2, alpha1=ph.alpha1,
                                                             alpha2=ph.alpha2, steps=n, seed=seed),
                               p.candidates, steps=50)
    q = Policy(p.costs, alpha1=0.7, alpha2=0.4, objective=table)
    rows = []
    tuner = _tuner()
    for name, fn, n in (("Policy.choose()", p.choose, len(p.candidates)),
                        ("Policy.choose() on the simulated objective", q.choose, len(q.candidates)),
                        ("Policy.observe()", lambda: p.observe(3, 1, 6, 12, [40]), len(p.candidates)),
                        ("lrref Tuner.choose()", tuner.choose, len(tuner.arms))):
        best, med = per_call(fn, args.calls)
        rows.append({"what": f"{name} (s/call)", "measured": best, "target": TARGET_S,
                     "ratio": TARGET_S / best, "note": f"median {med * 1e3:.3f} ms; {n} configurations"})
    report(machine(load0), rows, args.json)


def _tuner():
    """lrref's auto tuner (lrref.decode.auto, no model: it needs only the config) with a fed meter and a policy."""
    from lrref.config import DecodeConfig
    from lrref.decode.auto import Tuner
    from lrsim.trace import PassRecord

    t = Tuner(DecodeConfig(mode="auto"))
    for n in range(1, 41):
        t.meter.record(PassRecord(engine="target", seconds=0.03 + 0.002 * n, tokens=n))
    t.meter.record(PassRecord(engine="draft", seconds=0.01, tokens=1))
    t.meter.verified(4, 0.01)
    t.choose()  # the request's policy is made at its first choice
    return t


if __name__ == "__main__":
    main()
