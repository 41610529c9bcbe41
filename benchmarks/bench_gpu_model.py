"""Benchmark the hardware model against its target (issue 17): synthesizing one device x architecture x TP profile
in under 1 s.

Measures, in this process (wall and CPU seconds, best of 3 after a warm-up that loads the fit and the specs):
- ``lrsim.gpu.synthesize(device, arch, tp)`` for every embedded device, the 32B target and the 1.5B draft, TP 1 and 2
  (where the heads divide and the weights fit), on the default grid (7 contexts x 12 batches x 13 positions and a
  prefill table): the target is < 1 s each;
- ``profile_for_spec`` (every shipped architecture on one device: what ``--hardware model:DEVICE`` costs once; it
  is cached after that) and ``lrsim profiles --synthesize h200 --tp 2 --out FILE`` through the CLI (with the write).
The load average before and after is printed: other processes on the machine slow every number here.

Run: python benchmarks/bench_gpu_model.py
"""

import os
import platform
import tempfile
import time

from lrsim.cli import main as lrsim
from lrsim.errors import InputError
from lrsim.gpu import devices, synthesize
from lrsim.gpu.synthesize import profile_for_spec

TARGET_S = 1.0


def best(fn, reps: int = 3) -> tuple[float, float]:
    """Best wall and CPU seconds of ``reps`` calls."""
    out = []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        fn()
        out.append((time.perf_counter() - w, time.process_time() - c))
    return min(out)


def main() -> None:
    load0 = os.getloadavg()
    synthesize("h100-sxm", "qwen2.5-32b")  # warm-up: the fit, the specs, numpy
    rows = []
    for d in devices():
        for arch in ("qwen2.5-32b", "qwen2.5-1.5b"):
            for tp in (1, 2):
                try:
                    w, c = best(lambda d=d, arch=arch, tp=tp: synthesize(d.name, arch, tp))
                except InputError as e:
                    rows.append((f"synthesize {d.name} {arch} tp{tp}", None, None, str(e)))
                    continue
                rows.append((f"synthesize {d.name} {arch} tp{tp}", w, c, ""))
    profile_for_spec.cache_clear()
    rows.append(("profile_for_spec('h200:tp2'), 9 architectures", *best(lambda: (profile_for_spec.cache_clear(),
                                                                                 profile_for_spec("h200:tp2"))), ""))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.json")
        rows.append(("lrsim profiles --synthesize h200 --tp 2 --out FILE (9 archs, written)",
                     *best(lambda: lrsim(["profiles", "--synthesize", "h200", "--tp", "2", "--out", out])), ""))
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")
    print("| what | wall | CPU | target | met by |\n|---|---|---|---|---|")
    for what, w, c, note in rows:
        if w is None:
            print(f"| {what} | - | - | refused: {note} | |")
        else:
            print(f"| {what} | {1e3 * w:.1f} ms | {1e3 * c:.1f} ms | < {TARGET_S:g} s | {TARGET_S / w:.0f}x |")
    done = [w for _, w, _, _ in rows if w is not None]
    print(f"slowest: {1e3 * max(done):.1f} ms (target < {TARGET_S:g} s per device x arch x TP)")


if __name__ == "__main__":
    main()
