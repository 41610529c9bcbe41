"""Fit each engine's one fitted constant, its exposed host time per step, on one public row, and the official LR
code's client overhead on its README's autoregressive row.

    python studies/fit_engines.py            # rewrite step_us in lrsim/data/gpus/engines/*.json
    python studies/fit_engines.py --check    # print the fits, write nothing; exit 1 if a shipped file differs

**The rule** (written 2026-11-28, before any row of studies/data/vllm_public/current-releases*.json was predicted):
an engine has at most one fitted constant, ``step_us``, fitted on at most one public row, named below; every other
constant comes from code, docs or release notes (each engine file's ``sources``).  The row's metric is solved for
``t_step`` exactly: ``wall = t_step + max(kernel sum, launches x t_host)`` for every pass, a TPOT the mean decode step
over the row's contexts, a tokens/s row ``O / (prefill + (O - 1) decode steps)``.

- ``vllm-v0``: the Qwen2.5 Speed Benchmark's first row (Qwen2.5-7B-Instruct bf16, one A100 80GB, vLLM 0.6.3, a
  1-token prompt, 2048 generated tokens: 84.28 tok/s);
- ``vllm-0.11``: GPUStack's Qwen3-8B on one H100 SXM, vLLM 0.11.0, max concurrency 1, mean TPOT 7.28 ms (ShareGPT:
  233 / 221 mean prompt / output tokens, from the printout's totals);
- ``vllm-0.10``: vllm-0.11's value (no public row but the LR README's, which is the client's);
- ``sglang``: GPUStack's Qwen3-8B on one H100 SXM, SGLang 0.5.3.post3, max concurrency 4, mean TPOT 7.19 ms;
- ``vllm`` (0.14 and later, async scheduling): sglang's value (no dense single-request row with its lengths);
- ``trtllm``: GPUStack's Qwen3-8B on one H100 SXM, TensorRT-LLM 1.2.0rc1, max concurrency 4, mean TPOT 7.67 ms.

**The client overhead** of the official Lookahead Reasoning code (``AsyncLLM`` on vLLM 0.10.1, every token streamed
into its own Python loop): its README's autoregressive Qwen3-32B on two H200s (TP 2), 76.38 tok/s, less the
``vllm-0.10`` engine's step at that run's mean context (a 150-token prompt, 10,000-token answers): a per-pass
time the paper check adds to every pass of its rows (``studies/paper_check.py``), never an engine constant.
Those README rows are the paper check's; no other study uses this number.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lrsim.errors import run_command
from lrsim.gpu import engines as registry
from lrsim.gpu.archs import load_arch
from lrsim.gpu.model import forward_s
from lrsim.gpu.synthesize import parse_spec

DATA = ROOT / "studies" / "data" / "vllm_public"
#: engine -> (data file, row id, prompt tokens, output tokens) of its one fitted row
FITTED = {
    "vllm-0.11": ("measurements.json", "gpustack-qwen3-8b-h100sxm-bf16-c1", 233, 221),
    "vllm-v0": ("measurements.json", "qwen25-7b-a100-bf16-tp1-in1", 1, 2048),
    "sglang": ("current-releases.json", "gpustack-qwen3-8b-h100sxm-bf16-tp1-c4-sglang-tpot", 233, 221),
    "trtllm": ("current-releases.json", "gpustack-qwen3-8b-h100sxm-bf16-tp1-c4-trtllm-tpot", 233, 221),
}
COPIED = {"vllm-0.10": "vllm-0.11", "vllm": "sglang"}  # engines that take another's fitted value
CLIENT = {"row": "official LR README, autoregressive: Qwen3-32B, 2x H200 (TP 2), AIME24, 480 traces",
          "quote": "Autoregressive 80.21% 76.38 (tokens/s)",
          "url": "https://github.com/hao-ai-lab/LookaheadReasoning/blob/544d6c21925c7cda2cb6cd3b5c1d2118fa2cc9ee/README.md",
          "spec": "h200:tp2:bf16:vllm-0.10", "arch": "qwen3-32b", "tokens_per_s": 76.38, "prompt_tokens": 150,
          "answer_tokens": 10000}
CLIENT_FILE = ROOT / "studies" / "data" / "paper_check" / "client-overhead.json"


def _row(file: str, rid: str) -> dict:
    rows = json.loads((DATA / file).read_text(encoding="utf-8"))["rows"]
    try:
        return next(r for r in rows if r["id"] == rid)
    except StopIteration:
        raise SystemExit(f"{file}: no row {rid!r}") from None


def _setup(row: dict, engine: str):
    dev = {"a100": "a100-80gb"}.get(row["device"], row["device"])
    return parse_spec(f"{dev}:tp{row['tp']}:{row['dtype']}:{engine}").setup(load_arch(row["arch"]))


def solve_step(engine: str) -> tuple[float, dict]:
    """``t_step`` (s) that makes the engine reproduce its fitted row exactly, and the record of the fit."""
    file, rid, P, O = FITTED[engine]
    row = _row(file, rid)
    s = _setup(row, engine)
    b = float(row["batch"])
    step0 = registry.get_engine(engine).step_us * 1e-6  # what wall_s adds now: taken out below
    L = P + np.arange(1, O, dtype=float)  # contexts of the O - 1 decode steps
    dec = forward_s(s, L, b, 1.0, "wall") - step0  # decode steps without t_step
    pre = float(forward_s(s, 0.0, b, float(P), "wall", prefill=True)) - step0
    if row["metric"] == "tpot_ms":
        t = row["value"] * 1e-3 - float(dec.mean())
    elif row["metric"] == "e2e_tok_s":
        t = (O / row["value"] - pre - float(dec.sum())) / O  # O passes: the prefill and O - 1 decode steps
    else:
        raise SystemExit(f"{rid}: cannot fit on metric {row['metric']}")
    if t <= 0:
        raise SystemExit(f"{engine}: the model without t_step already exceeds {rid} ({row['value']}): nothing to fit")
    return t, {"row": rid, "file": f"studies/data/vllm_public/{file}", "metric": row["metric"],
               "value": row["value"], "prompt_tokens": P, "output_tokens": O,
               "modelled_without_step_ms": round(1e3 * float(dec.mean()), 4)}


def fits() -> dict[str, dict]:
    """Every engine's ``step_us`` and where it comes from."""
    out = {}
    for e in FITTED:
        t, rec = solve_step(e)
        out[e] = {"step_us": round(t * 1e6, 1), "fit": rec}
    for e, src in COPIED.items():
        out[e] = {"step_us": out[src]["step_us"], "copied_from": src}
    out["hf-eager"] = {"step_us": 0.0}
    return out


def client_overhead(step_us: float) -> dict:
    """The official LR code's client time per pass: its README's AR row less the vllm-0.10 engine's step."""
    c = CLIENT
    s = parse_spec(c["spec"]).setup(load_arch(c["arch"]))
    L = c["prompt_tokens"] + c["answer_tokens"] / 2  # the mean context of a pass over one answer (cost linear in L)
    base = float(forward_s(s, L, 1, 1, "wall")) - registry.get_engine("vllm-0.10").step_us * 1e-6 + step_us * 1e-6
    measured = 1.0 / c["tokens_per_s"]
    return c | {"mean_context": L, "engine_step_ms": round(base * 1e3, 4), "measured_ms": round(measured * 1e3, 4),
                "client_us": round((measured - base) * 1e6, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="print the fits and compare them with the shipped files")
    a = ap.parse_args()
    fitted = fits()
    client = client_overhead(fitted["vllm-0.10"]["step_us"])
    differ = []
    for name, f in fitted.items():
        path = registry.ENGINE_DIR / f"{name}.json"
        rec = json.loads(path.read_text(encoding="utf-8"))
        print(f"{name:<10} step_us = {f['step_us']:8.1f}"
              + (f"  fitted on {f['fit']['row']} ({f['fit']['metric']} {f['fit']['value']})" if "fit" in f else "")
              + (f"  = {f['copied_from']}'s" if "copied_from" in f else ""))
        if rec["step_us"] != f["step_us"]:
            differ.append(name)
            rec["step_us"] = f["step_us"]
            if not a.check:
                from lrsim.atomic import atomic_write

                atomic_write(path, json.dumps(rec, indent=1) + "\n")
    print(f"client overhead of the official LR code: {client['client_us']:.1f} us per pass ({client['measured_ms']} ms "
          f"measured per token, {client['engine_step_ms']} ms the vllm-0.10 engine's step)")
    text = json.dumps(client, indent=1) + "\n"
    same_client = CLIENT_FILE.is_file() and CLIENT_FILE.read_text(encoding="utf-8") == text
    if a.check:
        print("shipped files " + ("match" if not differ and same_client else
                                  f"DIFFER ({', '.join(differ + ([] if same_client else ['client-overhead']))})"))
        return 0 if not differ and same_client else 1
    from lrsim.atomic import atomic_write

    atomic_write(CLIENT_FILE, text)
    registry._registry.cache_clear()
    return 0


if __name__ == "__main__":
    sys.exit(run_command("fit_engines", main))
