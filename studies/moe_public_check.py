"""Predict published mixture-of-experts decode measurements with the hardware model; nothing is fitted on them.

    python studies/moe_public_check.py          # every row in scope: tables, figures/moe_public_check.json

The data and the rule: ``studies/data/moe_public/`` (``measurements.json``, each value quoted from its source;
``README.md``: the rule, committed with the rows before any prediction).  The model: ``lrsim.gpu`` with each row's
engine release (``lrsim.gpu.engines.engine_for``), the fused-MoE pricing of ``lrsim.gpu.moe`` (uniform routing,
the pessimistic bound: ``routing_overlap`` 0; each layer's fused-MoE call at its kernel path's published efficiencies,
``kernels.json`` "moe") and nothing fitted on an MoE row.  Each metric is priced as
``studies/vllm_public_check.py`` prices it; a row whose checkpoint quantizes only its experts (gpt-oss's MXFP4)
is priced in bf16 with MXFP4 experts, as vLLM and SGLang run it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "studies"))

import vllm_public_check as vc  # noqa: E402

from lrsim.atomic import atomic_write  # noqa: E402
from lrsim.errors import InputError, run_command  # noqa: E402
from lrsim.gpu.archs import load_arch  # noqa: E402

DATA = ROOT / "studies" / "data" / "moe_public" / "measurements.json"
OUT_JSON = ROOT / "figures" / "moe_public_check.json"
TARGET_MEAN = 0.15  #: issue 41


def excluded(row: dict) -> str | None:
    """Why a row is outside the rule (None: predicted)."""
    if row["device"] == "mi300x":
        return "AMD MI300X: its engines' kernels are not modelled (reported apart)"
    if not vc.version_stated(str(row.get("engine_version") or "")):
        return f"engine version unstated ({row.get('engine_version')})"
    try:
        load_arch(row["arch"])
    except InputError:
        return f"architecture {row['arch']!r}: no shipped config describes it"
    if row["prompt_tokens"] is None or row["output_tokens"] is None:
        return "no prompt/output lengths and no dataset totals"
    dev, why = vc.device_of(row | {"file": "moe"})
    return None if dev is not None else why


def predict(row: dict) -> dict:
    """The model's value of the row's metric (``vllm_public_check.predict``, MXFP4 rows in bf16 + MXFP4 experts)."""
    return vc.predict(row | {"dtype": "bf16" if row["dtype"] == "mxfp4" else row["dtype"]})


def batch_group(b: int) -> str:
    return "1" if b == 1 else "2-8" if b <= 8 else "9-16"


def run() -> dict:
    rows = json.loads(DATA.read_text(encoding="utf-8"))["rows"]
    done, skipped = [], []
    for r in rows:
        p, why = vc.priced(r, excluded, predict)
        if why is not None:
            skipped.append({"id": r["id"], "why": why})
            continue
        done.append({"id": r["id"], "model": r["model"], "arch": r["arch"], "device": r["device"], "tp": r["tp"],
                     "dtype": r["dtype"], "engine": p["engine"], "batch": r["batch"], "metric": r["metric"],
                     "prompt": r["prompt_tokens"], "output": r["output_tokens"], "measured": r["value"],
                     "predicted": p["predicted"], "error": p["predicted"] / r["value"] - 1})
    return {"data": str(DATA.relative_to(ROOT)), "rows": done, "skipped": skipped}


def summary(done: list[dict], key) -> list[str]:
    groups: dict[str, list[dict]] = {}
    for d in done:
        groups.setdefault(key(d), []).append(d)
    out = []
    for g, ds in sorted(groups.items(), key=lambda x: -len(x[1])):
        e = [abs(d["error"]) for d in ds]
        w = max(ds, key=lambda d: abs(d["error"]))
        out.append(f"| {g} | {len(ds)} | {statistics.fmean(e):.1%} | {w['error']:+.1%} (`{w['id']}`) |")
    return out


def report(res: dict) -> str:
    done = res["rows"]
    lines = ["| id | engine | GPU | TP | dtype | batch | prompt / output | metric | measured | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| `{d['id']}` | {d['engine']} | {d['device']} | {d['tp']} | {d['dtype']} | {d['batch']} | "
              f"{d['prompt']} / {d['output']} | {d['metric']} | {d['measured']:g} | {d['predicted']:.4g} | "
              f"{d['error']:+.1%} |" for d in done]
    if done:
        mean = statistics.fmean(abs(d["error"]) for d in done)
        lines += ["", f"{len(done)} rows over {len({d['arch'] for d in done})} models: mean |error| {mean:.1%} "
                  f"(target {TARGET_MEAN:.0%}: {'met' if mean <= TARGET_MEAN else 'not met'})", ""]
        for name, key in (("model", lambda d: d["arch"]), ("GPU", lambda d: d["device"]),
                          ("engine", lambda d: d["engine"]), ("batch", lambda d: batch_group(d["batch"]))):
            lines += [f"| {name} | rows | mean \\|error\\| | worst |", "|---|---|---|---|", *summary(done, key), ""]
    why: dict[str, int] = {}
    for s in res["skipped"]:
        why[s["why"]] = why.get(s["why"], 0) + 1
    lines += ["outside the rule:"] + [f"  {n} rows: {w}" for w, n in why.items()]
    return "\n".join(lines)


def main() -> str:
    res = run()
    atomic_write(OUT_JSON, json.dumps(res, indent=1, default=float) + "\n")
    return report(res)


if __name__ == "__main__":
    sys.exit(run_command("moe_public_check", main))
