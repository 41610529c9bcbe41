"""hf (float32) against llamacpp on the default pair: the same problems, modes and flags, side by side.

Runs ``lrref bench`` once per configuration (one process each, one after the
other) and writes ``comparison.md`` / ``comparison.json`` in ``--out``:

- ``hf``: transformers in float32 (bf16 is ~14x slower than fp32 on an AVX2-only CPU);
- ``llamacpp``: the GGUF files through llama.cpp, the same thread split;
- ``llamacpp-async21`` (lr-async modes only): 2 target threads + 1 draft thread
  instead of 1 + 1, to see whether oversubscribing two cores pays.

Needs the default pair both converted and as GGUF (``lrref models prepare
--format both``) and the binding (in ``.[ref]``).  Usage (on a quiet machine: every mode runs
once per configuration, one after the other)::

    python benchmarks/backends.py --n 10 --out runs/backends
    python benchmarks/backends.py --n 3 --modes ar,lr+sd --out runs/backends-smoke -- --max-tokens 96

Arguments after ``--`` go to every ``lrref bench`` call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

COMMON = ["--max-tokens", "144", "--max-step-tokens", "64", "--gamma", "3", "--verifier", "embedding",
          "--threads", "2", "--async-threads", "1,1", "--system",
          "Solve the problem in a few short steps separated by blank lines. Be concise. "
          "Put the final answer within \\boxed{}."]


def configs(modes: list[str]) -> list[tuple[str, list[str], list[str]]]:
    """(name, modes, backend flags) of every run."""
    asyncs = [m for m in modes if m in ("lr-async", "lr+sd", "lr-async+sd")]
    out = [("hf", modes, ["--backend", "hf", "--dtype", "float32"]),
           ("llamacpp", modes, ["--backend", "llamacpp"])]
    if asyncs:
        out.append(("llamacpp-async21", asyncs, ["--backend", "llamacpp", "--async-threads", "2,1"]))
    return out


def run(name: str, modes: list[str], flags: list[str], a, extra: list[str]) -> dict:
    out = Path(a.out) / name
    cmd = [sys.executable, "-m", "lrref.cli", "bench", "--n", str(a.n), "--modes", ",".join(modes), "--out",
           str(out), "--json"] + COMMON + flags + extra
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0, load0 = time.time(), os.getloadavg()[0]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: lrref bench exited {r.returncode}")
    res = json.loads((out / "results.json").read_text())
    return {"name": name, "wall_s": round(time.time() - t0, 1), "load_start": load0,
            "load_end": os.getloadavg()[0], "modes": {m["mode"]: m for m in res["modes"]}, "command": cmd}


def table(runs: list[dict]) -> str:
    """Markdown: tok/s and speedup vs the run's own ar per mode and configuration, and llamacpp vs hf."""
    names = [r["name"] for r in runs]
    modes = list(dict.fromkeys(m for r in runs for m in r["modes"]))
    head = "| mode | " + " | ".join(f"{n} tok/s (x own ar)" for n in names) + " | llamacpp / hf |"
    lines = [head, "|---" * (len(names) + 2) + "|"]
    for m in modes:
        cells = []
        for r in runs:
            row = r["modes"].get(m)
            cells.append("-" if row is None else f"{row['tokens_per_s']:.2f} ({row['speedup_vs_ar'] or '-'})")
        h, ll = runs[0]["modes"].get(m), runs[1]["modes"].get(m) if len(runs) > 1 else None
        ratio = f"{ll['tokens_per_s'] / h['tokens_per_s']:.2f}x" if h and ll and h["tokens_per_s"] else "-"
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {ratio} |")
    loads = ", ".join(f"{r['name']} {r['load_start']:.2f}->{r['load_end']:.2f}" for r in runs)
    return "\n".join(lines) + f"\n\nload average (start->end): {loads}\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10, help="bundled problems per run")
    p.add_argument("--modes", default="ar,sd,lr-sync,lr-async,lr+sd")
    p.add_argument("--out", default=f"runs/backends-{time.strftime('%Y%m%d-%H%M%S')}")
    a = p.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    runs = [run(name, ms, flags, a, extra) for name, ms, flags in configs(modes)]
    md = table(runs)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "comparison.md").write_text(md)
    (Path(a.out) / "comparison.json").write_text(json.dumps(runs, indent=1) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
