"""Fit the vllm engine's one constant, its host time per engine step, on one published vLLM measurement.

    python studies/fit_vllm_engine.py            # rewrite lrsim/data/gpus/engine-vllm.json
    python studies/fit_vllm_engine.py --check    # print the fit, write nothing; exit 1 if the file differs

The rule (written before any public vLLM measurement was predicted): ``t_step`` is the official Lookahead
Reasoning README's autoregressive row, Qwen3-32B on two H200s (TP 2, vLLM 0.10.1 as its requirements pin),
76.38 tokens/s, less the model's modelled step without host time (``max(kernel sum, host launches)``) at that
run's mean context.  The mean context is the paper check's assumptions for AIME rows: a 150-token prompt and
10,000-token answers, so 150 + 10,000 / 2 tokens on average (a pass's cost is linear in the context).  That row
is the calibration: ``studies/vllm_public_check.py`` reports it apart and predicts every other row with nothing
fitted on it.  Everything else in the engine comes from vLLM's code or the H100 fit of the hf-eager kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lrsim.errors import run_command
from lrsim.gpu import engine_vllm
from lrsim.gpu.archs import load_arch
from lrsim.gpu.model import forward_s
from lrsim.gpu.synthesize import parse_spec

CALIBRATION = {
    "row": "official LR README, autoregressive: Qwen3-32B, 2x H200 (TP 2), AIME24, 480 traces",
    "quote": "Autoregressive 80.21% 76.38 (tokens/s)",
    "url": "https://github.com/hao-ai-lab/LookaheadReasoning (README; shared/SPEC.md line 76)",
    "spec": "h200:tp2:bf16:vllm",
    "arch": "qwen3-32b",
    "tokens_per_s": 76.38,
    "prompt_tokens": 150,
    "answer_tokens": 10000,
}


def fit() -> dict:
    """The engine record with ``step_us`` fitted on :data:`CALIBRATION`."""
    c = CALIBRATION
    m = parse_spec(c["spec"])
    s = m.setup(load_arch(c["arch"]))
    L = c["prompt_tokens"] + c["answer_tokens"] / 2  # mean context of a pass over one answer
    rec = dict(engine_vllm.constants())
    no_step = float(forward_s(s, L, 1, 1, "wall")) - rec["step_us"] * 1e-6  # wall = t_step + max(kernels, host)
    measured = 1.0 / c["tokens_per_s"]
    step = measured - no_step
    if step <= 0:
        raise SystemExit(f"the model's step without host time ({no_step * 1e3:.2f} ms) already exceeds the "
                         f"measured {measured * 1e3:.2f} ms: nothing to fit")
    rec["step_us"] = round(step * 1e6, 1)
    rec["step_source"] = (f"fitted by studies/fit_vllm_engine.py on one row, the official LR README's "
                          f"autoregressive Qwen3-32B on 2x H200 (TP 2): {c['tokens_per_s']} tok/s = "
                          f"{measured * 1e3:.2f} ms per token, less the modelled {no_step * 1e3:.2f} ms at its mean "
                          f"context of {L:.0f} tokens")
    rec["calibrated_on"] = c | {"mean_context": L, "modelled_without_step_ms": round(no_step * 1e3, 4),
                                "measured_ms": round(measured * 1e3, 4)}
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="print the fit and compare it with the shipped file")
    a = ap.parse_args()
    rec = fit()
    text = json.dumps(rec, indent=1) + "\n"
    print(f"step_us = {rec['step_us']:g} ({rec['step_source']})")
    if a.check:
        same = engine_vllm.ENGINE_FILE.read_text(encoding="utf-8") == text
        print("shipped file " + ("matches" if same else "DIFFERS"))
        return 0 if same else 1
    from lrsim.atomic import atomic_write

    atomic_write(engine_vllm.ENGINE_FILE, text)
    engine_vllm.constants.cache_clear()
    print(f"wrote {engine_vllm.ENGINE_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_command("fit_vllm_engine", main))
