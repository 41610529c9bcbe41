"""Fit the hardware model's efficiencies on the embedded H100 profiles of the small shapes (lrsim/data/gpus/fit-h100.json).

    python studies/fit_gpu_model.py [--archs qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b] [--out FILE]

Least squares on log(predicted / measured) over every measured point of ``h100-ctx0-kernel`` and
``h100-context-kernel`` (the nine device-side parameters), then ``h100-ctx0-eager`` / ``h100-context-eager``
(host time per kernel launch) for the given architectures; prints the parameters and the residuals per profile
and architecture and writes the record the synthesizer reads.  Deterministic (no timing involved); ~2 s.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lrsim.gpu.fit import FIT_ARCHS, FIT_FILE, fit, write_fit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default=",".join(FIT_ARCHS), help="architectures to fit on (comma-separated)")
    ap.add_argument("--out", type=Path, default=FIT_FILE, help="where to write the fit record")
    a = ap.parse_args()
    rec = fit(tuple(x.strip() for x in a.archs.split(",") if x.strip()))
    for kind in ("kernel_sum", "wall"):
        print(f"{kind}: " + ", ".join(f"{k} = {v:g}" for k, v in rec[kind]["params"].items()))
        for key, r in rec[kind]["residuals"].items():
            print(f"  {key:<34} {r['points']:>3} points  mean |err| {100 * r['mean_abs']:5.1f}%  worst "
                  f"{100 * r['worst_abs']:5.1f}%  median {100 * r['median']:+5.1f}%")
    write_fit(rec, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
