"""What the engine release changes for LR: c1, the planned (mode, k1, k2) and its speedup on the paper's setups,
under vLLM 0.10 (what the official code pins) and under the current vLLM line (issue 40, item 5).

    python studies/engine_lr_table.py [--engines vllm-0.10,vllm] [--budget 16] [--out figures]

Setups (the paper's and the official README's pairs, the target at TP 2, the draft on a GPU of its own of the same
kind): Qwen3-32B / Qwen3-1.7B and DeepSeek-R1-Distill-Qwen-32B / -1.5B (the shipped ``qwen2.5-32b`` /
``qwen2.5-1.5b`` shapes), each on H100 and H200.  Behaviour, the same for every row (the simulated plan of
``lrsim.plan`` with ``hardware``): step acceptance ``--alpha1`` (0.55), token acceptance ``--alpha2`` (0.6), steps
of 52 tokens and requests of 4,096 after a 150-token prompt; budget ``--budget`` (16 target positions).  ``c1`` is
the draft's decode step over the target's at 2,048 tokens of context, each on its engine.  Deterministic (seeded);
writes ``figures/engine_lr_table.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lrsim
from lrsim.atomic import atomic_write
from lrsim.errors import OneLineParser, run_command

PAIRS = {"Qwen3-32B / Qwen3-1.7B": ("qwen3-32b", "qwen3-1.7b"),
         "R1-Distill-Qwen-32B / 1.5B": ("qwen2.5-32b", "qwen2.5-1.5b")}
DEVICES = ("h100-sxm", "h200")
CONTEXT = 2048


def row(pair: str, device: str, engine: str, a: argparse.Namespace) -> dict:
    target, draft = PAIRS[pair]
    hw = lrsim.hardware(f"model:{device}:tp2:{engine}", target_arch=target, draft_arch=draft,
                        draft_hardware=f"model:{device}:tp1:{engine}", verifier_latency=0.013)
    c1 = hw.c1("async", CONTEXT)
    p = lrsim.plan(alpha1=a.alpha1, alpha2=a.alpha2, budget=a.budget, hardware=hw, step_tokens=52,
                   request_tokens=4096, prompt_tokens=150, k2_max=4)
    t_ms = 1e3 * hw.target("ar").seconds(CONTEXT, 1, 1)
    return {"pair": pair, "device": device, "engine": engine, "target_step_ms": round(t_ms, 3), "c1": round(c1, 4),
            "mode": p.mode, "k1": p.k1, "k2": p.k2, "speedup": round(p.speedup, 3),
            "pure_token": round(p.pure_token, 3), "pure_step": round(p.pure_step, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="vllm-0.10,vllm")
    ap.add_argument("--alpha1", type=float, default=0.55)
    ap.add_argument("--alpha2", type=float, default=0.6)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--out", type=Path, default=ROOT / "figures")

    def command() -> str:
        a = ap.parse_args(argv)
        engines = [e.strip() for e in a.engines.split(",") if e.strip()]
        rows = [row(p, d, e, a) for p in PAIRS for d in DEVICES for e in engines]
        meta = {"alpha1": a.alpha1, "alpha2": a.alpha2, "budget": a.budget, "context": CONTEXT,
                "command": "python studies/engine_lr_table.py " + " ".join(argv or sys.argv[1:])}
        atomic_write(a.out / "engine_lr_table.json", json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        lines = ["| pair | GPU | engine | target step at 2K (ms) | c1 | plan (mode, k1, k2) | speedup | token SD alone "
                 "| LR alone |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['pair']} | {r['device']} | `{r['engine']}` | {r['target_step_ms']:.2f} | {r['c1']:.3f} | "
                  f"{r['mode']} ({r['k1']}, {r['k2']}) | {r['speedup']:.3f}x | {r['pure_token']:.3f}x | "
                  f"{r['pure_step']:.3f}x |" for r in rows]
        return "\n".join(lines)

    return run_command("engine_lr_table", command)


if __name__ == "__main__":
    sys.exit(main())
