"""Predict published single-request vLLM measurements with the hardware model's vllm engine; nothing is fitted on them.

    python studies/vllm_public_check.py                    # every row in scope: tables, figures/vllm_public_check.*
    python studies/vllm_public_check.py --rows docs/validation/vllm-public-rows.md   # also the row-by-row page
    python studies/vllm_public_check.py --replot           # redraw from figures/vllm_public_check.json

The data: ``studies/data/vllm_public/measurements.json`` (every value quoted from its source, with the source's
URL, its table row and what its timer covers).  The model: ``lrsim.gpu`` with the ``vllm`` engine, the H100 fit
of the hf-eager kernels (``lrsim/data/gpus/fit-h100.json``) and one vLLM constant, the host time per engine step,
fitted on one row (``studies/fit_vllm_engine.py``).

**Scope rule** (written before any row was predicted; no error chose it): every row is predicted, except

1. the calibration row (the official LR README's autoregressive Qwen3-32B on 2x H200), reported apart;
2. rows that ran with ``enforce_eager=True`` (CUDA graphs off: an engine mode the model does not price);
3. rows on a GPU without a device spec, or whose variant the source leaves open with no way to tell it (GH200:
   96 GB HBM3 or 144 GB HBM3e).

**Device variants** the sources leave unstated, decided by the rule above, not by the errors: LLM-Inference-Bench's
A100 is ``a100-40gb`` (Argonne's Polaris nodes carry A100-SXM4-40GB) and its H100 ``h100-sxm`` (its nvidia-smi
prints "H100 80GB HBM3"); the Red Hat cards' A100 and H100 are ``a100-80gb`` and ``h100-sxm`` (their cost
column implies Lambda's on-demand SXM prices, $1.79 and $3.29 an hour), their A6000 ``rtx-a6000``; the Qwen tables
state "A100 80GB"; GPUStack's H100 is SXM (stated).  The GPU count is the TP degree.

**Each metric as its source timed it**, at batch ``b`` over a prompt of ``P`` and an output of ``O`` tokens:
``e2e_latency_s = prefill(P) + sum_{i=1}^{O-1} step(P + i)`` (one prefill pass of the prompt, whose step gives the
first token, then ``O - 1`` decode steps at a growing context); ``e2e_tok_s = O / e2e_latency_s``;
``tpot_ms`` = the mean decode step.  ``step`` and ``prefill`` are the model's ``wall`` times (an engine step:
``t_step + max(kernels, launches)``).  int8 w8a8 checkpoints are priced as 8-bit weights (their activation
quantization is not modelled); every format's efficiencies are the bf16 fit's (an assumption).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "studies"))

from lrsim.errors import InputError, run_command
from lrsim.gpu.archs import load_arch
from lrsim.gpu.model import forward_s
from lrsim.gpu.synthesize import check_fits, parse_spec

DATA = ROOT / "studies" / "data" / "vllm_public" / "measurements.json"
FIGURES = ROOT / "figures"
OUT_JSON = FIGURES / "vllm_public_check.json"
CALIBRATION_IDS = ("lr-readme-qwen3-32b-h200-tp2-ar",)
DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "int4"}
TARGET_MEAN, TARGET_WORST = 0.10, 0.20
# rows that state totals instead of per-request lengths: the means of those totals (prompt, output tokens)
MEAN_LENGTHS = {"gpustack": (round(23260 / 100), round(22061 / 100))}  # ShareGPT, 100 prompts (the row's notes)


def device_of(row: dict) -> tuple[str | None, str]:
    """The device spec a row ran on, and why (None: no spec, or the variant cannot be told)."""
    d, src = row["device"], row["source"]["title"]
    if d in ("a100-80gb", "h100-sxm", "h200"):
        return d, "stated"
    if d == "gh200":
        return None, "GH200 variant unstated (96 GB HBM3 or 144 GB HBM3e)"
    if "LLM-Inference-Bench" in src:
        return {"a100": "a100-40gb", "h100": "h100-sxm"}[d], "inferred: Argonne's testbeds (module docstring)"
    if d == "a6000":
        return "rtx-a6000", "stated (RTX A6000)"
    if d in ("a100", "h100"):
        return {"a100": "a100-80gb", "h100": "h100-sxm"}[d], "inferred: the card's cost column (Lambda SXM prices)"
    return None, f"no device spec for {d!r}"


def excluded(row: dict) -> str | None:
    """Why a row is outside the scope rule (None: predicted)."""
    if row["id"] in CALIBRATION_IDS:
        return "calibration row: the engine's step time is fitted on it"
    if row.get("cuda_graphs") is False:
        return "enforce_eager=True: CUDA graphs off, an engine mode the model does not price"
    dev, why = device_of(row)
    return None if dev is not None else why


def _steps_s(s, P: int, O: int, b: int) -> np.ndarray:
    """Seconds of the ``O - 1`` decode steps after a prompt of ``P`` tokens (contexts P+1 .. P+O-1)."""
    L = P + np.arange(1, max(O, 1), dtype=float)
    return forward_s(s, L, float(b), 1.0, "wall") if len(L) else np.zeros(0)


def lengths(row: dict) -> tuple[int, int]:
    """Prompt and output tokens: the row's, else the means of the totals its source states."""
    if row["prompt_tokens"] is not None and row["output_tokens"] is not None:
        return int(row["prompt_tokens"]), int(row["output_tokens"])
    for prefix, means in MEAN_LENGTHS.items():
        if row["id"].startswith(prefix):
            return means
    if row["id"] in CALIBRATION_IDS:
        from fit_vllm_engine import CALIBRATION

        return CALIBRATION["prompt_tokens"], CALIBRATION["answer_tokens"]
    raise InputError(f"{row['id']}: no prompt/output lengths")


def predict(row: dict) -> dict:
    """The model's value of the row's metric, and the parts it is made of."""
    dev, _ = device_of(row)
    spec = parse_spec(f"{dev}:tp{row['tp']}:{DTYPES[row['dtype']]}:vllm"
                      + (":kv-fp8" if row.get("kv_dtype") == "fp8" else ""))
    s = spec.setup(load_arch(row["arch"]))
    check_fits(s)
    P, O = lengths(row)
    b = int(row["batch"])
    steps = _steps_s(s, P, O, b)
    prefill = float(forward_s(s, 0.0, float(b), float(max(P, 1)), "wall", prefill=True))
    e2e = prefill + float(steps.sum())
    value = {"e2e_latency_s": e2e, "e2e_tok_s": O / e2e,
             "tpot_ms": 1e3 * float(steps.mean()) if len(steps) else None}[row["metric"]]
    return {"predicted": value, "prefill_share": prefill / e2e, "spec": spec.text(),
            "mean_step_ms": 1e3 * float(steps.mean()) if len(steps) else None}


def twin(row: dict, rows: list[dict]) -> dict | None:
    """The same source's unquantized row for the same model, GPU, TP and lengths (None: none, or it is one)."""
    if row["dtype"] in ("bf16", "fp16"):
        return None
    key = (row["source"]["title"], row["arch"], row["device"], row["prompt_tokens"], row["output_tokens"])
    return next((r for r in rows if r["dtype"] in ("bf16", "fp16") and r["metric"] == row["metric"] and
                 (r["source"]["title"], r["arch"], r["device"], r["prompt_tokens"], r["output_tokens"]) == key),
                None)


def tags(row: dict, p: dict, rows: list[dict] = ()) -> list[str]:
    """Facts about a row that bear on its error (for the reader; nothing here changes a prediction)."""
    out = []
    if (t := twin(row, rows)) is not None and row["metric"] == "e2e_latency_s":
        out.append(f"the source's unquantized run at these lengths: {t['value']:g} s (TP {t['tp']}), "
                   f"{row['value'] / t['value']:.2f}x of it")
    v = row.get("engine_version") or ""
    if v and tuple(int(x) for x in v.split(".")[:2]) < (0, 8):
        out.append(f"vLLM {v} (V0 engine: full CUDA graphs, its own host time per step)")
    elif not v:
        out.append("vLLM version unstated (V0 era)")
    if row["metric"] == "e2e_latency_s" and row["value"] < 2 and round(row["value"], 1) == row["value"]:
        out.append(f"value rounded to 0.1 s: +-{0.05 / row['value']:.0%} from rounding alone")
    if p["prefill_share"] > 0.3:
        out.append(f"prefill {p['prefill_share']:.0%} of the predicted time")
    if row["dtype"] == "int8" and "W8A8" in (row.get("quant_method") or ""):
        out.append("w8a8 priced as 8-bit weights")
    if sum(lengths(row)) > 40000:
        out.append("long context (YaRN past 32K)")
    return out


def run_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(predicted rows, excluded rows with the reason)."""
    done, skipped = [], []
    for r in rows:
        why = excluded(r)
        if why is None:
            try:
                p = predict(r)
            except InputError as e:
                why = f"the model refuses it: {e}"
        if why is not None:
            skipped.append({"id": r["id"], "why": why, "calibration": r["id"] in CALIBRATION_IDS})
            continue
        err = p["predicted"] / r["value"] - 1
        done.append({"id": r["id"], "source": r["source"]["title"], "url": r["source"]["url"], "model": r["model"],
                     "arch": r["arch"], "device": device_of(r)[0], "device_why": device_of(r)[1], "tp": r["tp"],
                     "dtype": r["dtype"], "quant": r.get("quant_method"), "version": r.get("engine_version"),
                     "batch": r["batch"], "prompt": lengths(r)[0], "output": lengths(r)[1],
                     "metric": r["metric"], "measured": r["value"], **p, "error": err, "tags": tags(r, p, rows)})
    return done, skipped


def calibration(rows: list[dict]) -> list[dict]:
    """The calibration row(s), predicted like the others (they reproduce by construction, up to the context)."""
    out = []
    for r in rows:
        if r["id"] in CALIBRATION_IDS:
            p = predict(r | {"metric": "tpot_ms"})
            out.append({"id": r["id"], "measured_tok_s": r["value"], "modelled_step_ms": p["mean_step_ms"]})
    return out


def summary(done: list[dict], key=None) -> list[dict]:
    """Mean / worst |error| and counts, overall or per ``key(row)``."""
    groups: dict[str, list[dict]] = {}
    for d in done:
        groups.setdefault("all" if key is None else key(d), []).append(d)
    out = []
    for g, ds in groups.items():
        e = [abs(d["error"]) for d in ds]
        worst = max(ds, key=lambda d: abs(d["error"]))
        out.append({"group": g, "rows": len(ds), "mean_abs": statistics.fmean(e), "median_signed":
                    statistics.median(d["error"] for d in ds), "worst": worst["error"], "worst_id": worst["id"],
                    "within_10": sum(x <= 0.10 for x in e), "within_20": sum(x <= 0.20 for x in e)})
    return sorted(out, key=lambda x: (-x["rows"], x["group"]))


BREAKDOWNS = {
    "source": lambda d: d["source"],
    "device": lambda d: d["device"],
    "dtype": lambda d: d["dtype"] + (" (w8a8)" if d["quant"] and "W8A8" in d["quant"] and d["dtype"] == "int8" else ""),
    "tp": lambda d: f"TP {d['tp']}",
    "vLLM": lambda d: d["version"] or "unstated",
    "context": lambda d: "long (> 8K tokens)" if d["prompt"] + d["output"] > 8192 else "short (<= 8K tokens)",
    "metric": lambda d: d["metric"],
}


def table(stats: list[dict], head: str) -> str:
    lines = [f"| {head} | rows | mean \\|error\\| | median (signed) | worst | within 10% | within 20% |",
             "|---|---|---|---|---|---|---|"]
    for s in stats:
        lines.append(f"| {s['group']} | {s['rows']} | {s['mean_abs']:.1%} | {s['median_signed']:+.1%} | "
                     f"{s['worst']:+.1%} (`{s['worst_id']}`) | {s['within_10']} | {s['within_20']} |")
    return "\n".join(lines)


def row_table(done: list[dict]) -> str:
    lines = ["| id | model | device | TP | dtype | prompt / output | metric | measured | predicted | error | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in done:
        lines.append(f"| `{d['id']}` | {d['model']} | {d['device']} | {d['tp']} | {d['dtype']} | {d['prompt']} / "
                     f"{d['output']} | {d['metric']} | {d['measured']:g} | {d['predicted']:.4g} | {d['error']:+.1%} | "
                     f"{'; '.join(d['tags'])} |")
    return "\n".join(lines)


def report(res: dict) -> str:
    done = res["rows"]
    out = [f"predicted {len(done)} rows ({len(res['skipped'])} outside the scope rule); overall:",
           table(summary(done), "set"), ""]
    for name, key in BREAKDOWNS.items():
        out += [f"by {name}:", table(summary(done, key), name), ""]
    out.append("calibration: " + "; ".join(f"{c['id']}: measured {c['measured_tok_s']} tok/s, modelled step "
                                            f"{c['modelled_step_ms']:.2f} ms" for c in res["calibration"]))
    skipped: dict[str, int] = {}
    for s in res["skipped"]:
        skipped[s["why"]] = skipped.get(s["why"], 0) + 1
    out += ["outside the scope rule:"] + [f"  {n} rows: {w}" for w, n in skipped.items()]
    return "\n".join(out)


def short(source: str) -> str:
    """A legend-sized name for a source title."""
    if "model card" in source:
        return "Red Hat card, " + source.split(" model card")[0].removeprefix("DeepSeek-").split("-FP8")[0].split(
            "-quantized")[0]
    for key in ("LLM-Inference-Bench", "Qwen2.5 Speed Benchmark", "GPUStack"):
        if key in source:
            return key
    return "Qwen2 Speed Benchmark" if "Qwen2" in source else source[:30]


def figure(res: dict):
    """Predicted against measured, one point per row, coloured by source (log axes, one panel per metric)."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    metrics = sorted({d["metric"] for d in res["rows"]})
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=metrics)
    sources = sorted({d["source"] for d in res["rows"]})
    colors = dict(zip(sources, qualitative.D3))
    shown: set[str] = set()
    for i, m in enumerate(metrics, 1):
        ds = [d for d in res["rows"] if d["metric"] == m]
        for src in sources:
            mine = [d for d in ds if d["source"] == src]
            if mine:
                fig.add_trace(go.Scatter(
                    x=[d["measured"] for d in mine], y=[d["predicted"] for d in mine], mode="markers",
                    marker={"size": 5, "color": colors[src]}, name=short(src), legendgroup=src,
                    showlegend=src not in shown,
                    text=[f"{d['id']}: {d['error']:+.1%}" for d in mine], hoverinfo="text"), row=1, col=i)
                shown.add(src)
        lo = min(min(d["measured"], d["predicted"]) for d in ds) * 0.8
        hi = max(max(d["measured"], d["predicted"]) for d in ds) * 1.25
        for f, dash in ((1.0, "solid"), (1.2, "dot"), (1 / 1.2, "dot")):
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo * f, hi * f], mode="lines", showlegend=False,
                                     line={"color": "black", "width": 1, "dash": dash}, hoverinfo="skip"),
                          row=1, col=i)
        fig.update_xaxes(type="log", title_text=f"measured {m}", row=1, col=i)
        fig.update_yaxes(type="log", title_text=f"predicted {m}", row=1, col=i)
    fig.update_layout(title="lrsim.gpu's vllm engine vs published single-request vLLM measurements (dotted: +-20%)",
                      template="plotly_white", width=1200, height=640, margin={"b": 170},
                      legend={"orientation": "h", "y": -0.22, "font": {"size": 10}})
    return fig


def _rounded(x):
    """Floats to 6 significant digits (the figure's JSON stays small and diffs stay readable)."""
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items() if k != "url"}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", metavar="FILE.md", help="also write the row-by-row table as a markdown page")
    ap.add_argument("--replot", action="store_true", help="redraw the figure from figures/vllm_public_check.json")
    a = ap.parse_args()
    if a.replot:
        res = json.loads(OUT_JSON.read_text(encoding="utf-8"))
    else:
        data = json.loads(DATA.read_text(encoding="utf-8"))
        done, skipped = run_rows(data["rows"])
        res = {"data": str(DATA.relative_to(ROOT)), "rows": done, "skipped": skipped,
               "calibration": calibration(data["rows"]),
               "summary": {k: summary(done, f) for k, f in {"all": None, **BREAKDOWNS}.items()}}
        from lrsim.atomic import atomic_write

        FIGURES.mkdir(exist_ok=True)
        atomic_write(OUT_JSON, json.dumps(_rounded(res), separators=(",", ":")) + "\n")
    from lrsim.plots import save_figure

    save_figure(figure(res), FIGURES / "vllm_public_check")
    if a.rows:
        from lrsim.atomic import atomic_write

        head = ("# Published vLLM measurements, row by row\n\nGenerated by `python studies/vllm_public_check.py "
                "--rows docs/validation/vllm-public-rows.md`; the summary and the scope rule: "
                "[vLLM public measurements](vllm-public.md).\n\n")
        atomic_write(a.rows, head + row_table(res["rows"]) + "\n")
    return report(res)


if __name__ == "__main__":
    sys.exit(run_command("vllm_public_check", main))
