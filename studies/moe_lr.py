"""Does LR pay on MoE?  The batch cost of MoE targets against a dense one, and the planned speedup (issue 41, item 5:
one request at a time; under load and what ``--mode auto`` chooses: ``studies/moe_load.py``, which reads this
study's ``figures/moe_lr.json``).

    python studies/moe_lr.py [--engine vllm] [--out figures]

Targets: Qwen3-30B-A3B (one GPU) and Qwen3-235B-A22B (TP 4, FP8, as the Qwen docs deploy it on H20s) against the
dense Qwen3-32B (TP 2), each on H100 and H200; the draft Qwen3-1.7B on a GPU of its own.  ``beta(n)``: a decode
pass of ``n`` rows over one row's, at 2,048 tokens of context (the batch-cost curve LR's verification rides on),
and one row of 64 positions (a step's prefill) over a decode.  The plan: ``lrsim.plan`` simulated on the
modelled profile (alpha2 0.6, steps of 52 tokens, requests of 4,096 after 150 tokens of prompt, budget 16,
verifier 13 ms), at alpha1 0.3, 0.6 and 0.9, with uniform routing (the bound) and with routing overlap 0.5.
Caveat, from ``studies/moe_public_check.py``: the model prices published MoE decode steps within 12% on H100 and
H200 (vLLM 0.15, SGLang 0.5.7) and 7-28% too fast on B200 (SGLang 0.5.6), the target's and the draft's passes
alike.  Writes ``figures/moe_lr.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lrsim  # noqa: E402
from lrsim.atomic import atomic_write  # noqa: E402
from lrsim.errors import run_command  # noqa: E402
from lrsim.gpu.archs import load_arch  # noqa: E402
from lrsim.gpu.model import forward_s  # noqa: E402
from lrsim.gpu.synthesize import parse_spec  # noqa: E402

TARGETS = {"qwen3-30b-a3b": "tp1", "qwen3-235b-a22b": "tp4:fp8", "qwen3-32b": "tp2"}
DEVICES = ("h100-sxm", "h200")
ROWS = (1, 2, 4, 8, 16)
ALPHAS = (0.3, 0.6, 0.9)


def beta(spec: str, arch: str) -> dict:
    s = parse_spec(spec).setup(load_arch(arch))
    one = float(forward_s(s, 2048, 1, 1, "wall"))
    return {"decode_ms": round(1e3 * one, 3),
            "beta": {n: round(float(forward_s(s, 2048, n, 1, "wall")) / one, 3) for n in ROWS},
            "prefill64_over_decode": round(float(forward_s(s, 2048, 1, 64, "wall")) / one, 3)}


def plan(spec: str, draft_spec: str, arch: str, alpha1: float) -> dict:
    hw = lrsim.hardware(f"model:{spec}", target_arch=arch, draft_arch="qwen3-1.7b",
                        draft_hardware=f"model:{draft_spec}", verifier_latency=0.013)
    p = lrsim.plan(alpha1=alpha1, alpha2=0.6, budget=16, hardware=hw, step_tokens=52, request_tokens=4096,
                   prompt_tokens=150, k2_max=4)
    return {"mode": p.mode, "k1": p.k1, "k2": p.k2, "speedup": round(p.speedup, 3),
            "lr_alone": round(p.pure_step, 3), "token_sd_alone": round(p.pure_token, 3),
            "c1": round(hw.c1("async", 2048), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")

    def command() -> str:
        a = ap.parse_args(argv)
        rows, lines = [], ["| target | GPU | routing overlap | decode (ms) | beta(2, 4, 8, 16) | 64 positions / decode "
                           "| alpha1 0.3 | 0.6 | 0.9 |", "|---|---|---|---|---|---|---|---|---|"]
        for dev in DEVICES:
            for arch, par in TARGETS.items():
                for ro in ((0.0, 0.5) if load_arch(arch).is_moe else (0.0,)):
                    spec = f"{dev}:{par}:{a.engine}" + (f":ro{ro:g}" if ro else "")
                    b = beta(spec, arch)
                    plans = {al: plan(spec, f"{dev}:tp1:{a.engine}", arch, al) for al in ALPHAS}
                    rows.append({"target": arch, "device": dev, "spec": spec, "routing_overlap": ro, **b,
                                 "plans": plans})
                    cell = [f"{p['speedup']:.2f}x {p['mode']} ({p['k1']}, {p['k2']}); LR alone {p['lr_alone']:.2f}x"
                            for p in plans.values()]
                    betas = ", ".join(f"{b['beta'][n]:.2f}" for n in ROWS[1:])
                    lines.append(f"| {arch} ({par}) | {dev} | {ro:g} | {b['decode_ms']:.2f} | {betas} | "
                                 f"{b['prefill64_over_decode']:.2f} | " + " | ".join(cell) + " |")
        atomic_write(a.out / "moe_lr.json", json.dumps({"command": "python studies/moe_lr.py "
                                                        + " ".join(argv or sys.argv[1:]), "rows": rows},
                                                       indent=1) + "\n")
        return "\n".join(lines)

    return run_command("moe_lr", command)


if __name__ == "__main__":
    sys.exit(main())
