"""Predict published single-request engine measurements with the hardware model, each row on the engine model of
its release; nothing is fitted on the rows it predicts.

    python studies/vllm_public_check.py                    # every row in scope: tables, figures/vllm_public_check.*
    python studies/vllm_public_check.py --rows docs/validation/vllm-public-rows.md   # also the row-by-row page
    python studies/vllm_public_check.py --replot           # redraw from figures/vllm_public_check.json

The data: ``studies/data/vllm_public/*.json`` (every value quoted from its source, with the source's URL, its table
row and what its timer covers; the folder's README.md has the rule for the current-release files).  The model:
``lrsim.gpu`` with the engine of each row's release (``lrsim.gpu.engines.engine_for``: vLLM V0, 0.10, 0.11 and the
current line, SGLang, TensorRT-LLM), the H100 fit of the hf-eager kernels (``lrsim/data/gpus/fit-h100.json``) and
each engine's one fitted constant, its exposed host time per step, fitted on at most one row
(``studies/fit_engines.py``).  *Held out*: the rows of ``measurements.json`` were predicted before the engines were
versioned, and issue 40 cites their errors, so they are not held out from that choice; the 78 current-release rows
(``current-releases*.json``) were committed with their rule (c7850de) before this script predicted any of them.

**Scope rule** (written before any row was predicted; no error chose it; the current-release files' additions in
``studies/data/vllm_public/README.md``, committed with those rows): every row is predicted, except

1. the rows an engine's constant is fitted on, and the LR README's autoregressive row (the official code's client
   overhead is fitted on it), reported apart;
2. rows that ran with ``enforce_eager=True`` or without CUDA graphs (an engine mode the model does not price);
3. rows on a GPU without a device spec, or whose variant the source leaves open with no way to tell it (GH200:
   96 GB HBM3 or 144 GB HBM3e; an A100 of unstated memory; "SM100"), whose architecture no shipped config
   describes, or whose engine version is unstated where the engine has several models;
4. rows with neither lengths nor dataset totals to take means from;
5. rows of the current-release files that repeat a row of ``measurements.json``.

**Device variants** the sources leave unstated, decided by the rule above, not by the errors: LLM-Inference-Bench's
A100 is ``a100-40gb`` (Argonne's Polaris nodes carry A100-SXM4-40GB) and its H100 ``h100-sxm`` (its nvidia-smi
prints "H100 80GB HBM3"); the Red Hat cards' A100 and H100 are ``a100-80gb`` and ``h100-sxm`` (their cost
column implies Lambda's on-demand SXM prices, $1.79 and $3.29 an hour), their A6000 ``rtx-a6000``; the Qwen tables
state "A100 80GB" and "H20 96GB"; GPUStack's H100 is SXM (stated).  The GPU count is the TP degree.  LLM-Inference-
Bench states no vLLM version: its rows are priced as V0 (published 2024-10, before V1 was the default).

**Each metric as its source timed it**, at batch ``b`` over a prompt of ``P`` and an output of ``O`` tokens:
``e2e_latency_s = prefill(P) + sum_{i=1}^{O-1} step(P + i)`` (the prompt's prefill, whose last step gives the first
token, then ``O - 1`` decode steps at a growing context); ``e2e_tok_s`` and ``tok_s_per_user`` ``O /
e2e_latency_s``; ``output_throughput_tok_s`` ``b O / e2e_latency_s``; ``tpot_ms`` and ``itl_ms`` the mean decode step.
``step`` and ``prefill`` are the model's ``wall`` times (an engine step: ``t_step + max(kernels, launches)``); the
prefill is one pass, or the release's chunks where it chunked (``lrsim.gpu.model.prefill_s``: vLLM V0 past 32K
positions, 512 tokens a step before 0.6.5 and 2048 from it; V1 always), each chunk an engine step.  A row's
``max_model_len`` is what vLLM derives from the config (``ArchConfig.max_context``), except the Qwen speed
benchmarks' (:data:`QWEN_MAX_LEN`: their script's option, past the config's positions as its
``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` allows); any other row past its config's positions would be refused.  vLLM V0's
release picks its attention kernel (FA3 on Hopper from 0.7).  int8
w8a8 checkpoints are priced as 8-bit weights (their activation quantization is not modelled); each format's GEMMs run
at its kernel's published efficiency curve relative to the bf16 fit (``lrsim/data/gpus/kernels.json``: Marlin for
int4/int8, CUTLASS for FP8 W8A8, block FP8 for Qwen's own ``Qwen3-*-FP8`` checkpoints, whose cards state 128-blocks).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "studies"))

from lrsim.errors import InputError, run_command
from lrsim.gpu.archs import load_arch
from lrsim.gpu.model import forward_s, prefill_passes, prefill_s
from lrsim.gpu.synthesize import check_fits, parse_spec

DATA_DIR = ROOT / "studies" / "data" / "vllm_public"
DATA = DATA_DIR / "measurements.json"
CURRENT = ("current-releases.json", "current-releases-2.json")  #: issue 40's rows (their rule: DATA_DIR/README.md)
FIGURES = ROOT / "figures"
OUT_JSON = FIGURES / "vllm_public_check.json"
CLIENT_IDS = ("lr-readme-qwen3-32b-h200-tp2-ar",)  #: the official LR code's client overhead is fitted on it
DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "int4": "int4"}
# Qwen's own FP8 checkpoints (Qwen/Qwen3-*-FP8) are block-scaled: their model cards state "fine-grained fp8
# quantization with block size of 128"; priced as fp8-block (lrsim/data/gpus/kernels.json), whatever the row's error
BLOCK_FP8 = ("Qwen/Qwen3-",)
METRICS = ("e2e_latency_s", "e2e_tok_s", "tok_s_per_user", "output_throughput_tok_s", "tpot_ms", "itl_ms")
TARGET_MEAN, TARGET_WORST = 0.10, 0.20
LR_REGIME = 0.05  #: issue 40: mean |error| on decode-dominated bf16/fp8 rows of contexts up to 16K, batch 1-8
# rows that state totals instead of per-request lengths: the means of those totals (prompt, output tokens)
MEAN_LENGTHS = {"gpustack": (round(23260 / 100), round(22061 / 100))}  # ShareGPT, 100 prompts (the row's notes)
STATED = {"a100-80gb", "a100-40gb", "h100-sxm", "h100-pcie", "h200", "b200", "h20", "l40s"}
# The Qwen speed benchmarks' script (QwenLM/Qwen2.5 examples/speed-benchmark/speed_benchmark_vllm.py) runs vLLM with
# --max_model_len 32768 by default, "4096, 8192, 32768, 65536, 131072" its listed options, and sets
# VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, so a length past the config's positions runs (with or without YaRN in the config,
# unstated; YaRN costs nothing per token in vLLM): its rows take the smallest option that holds prompt and output
QWEN_SCRIPT = ("Qwen2.5 Speed Benchmark", "Speed Benchmark (Qwen2)")
QWEN_MAX_LEN = (32768, 65536, 131072)


def load_rows() -> list[dict]:
    """Every row: ``measurements.json``, then the current-release files (each row knows its file)."""
    out = []
    for name in ("measurements.json", *CURRENT):
        path = DATA_DIR / name
        if path.is_file():
            out += [r | {"file": name} for r in json.loads(path.read_text(encoding="utf-8"))["rows"]]
    return out


def fitted_ids() -> dict[str, str]:
    """Row id -> the engine whose constant is fitted on it (``studies/fit_engines.py``)."""
    from fit_engines import FITTED

    return {rid: e for e, (_, rid, _, _) in FITTED.items()}


def device_of(row: dict) -> tuple[str | None, str]:
    """The device spec a row ran on, and why (None: no spec, or the variant cannot be told)."""
    d, src = row["device"], row["source"]["title"]
    if d in STATED:
        return d, "stated"
    if d == "gh200":
        return None, "GH200 variant unstated (96 GB HBM3 or 144 GB HBM3e)"
    if "LLM-Inference-Bench" in src:
        return {"a100": "a100-40gb", "h100": "h100-sxm"}[d], "inferred: Argonne's testbeds (module docstring)"
    if d == "a6000":
        return "rtx-a6000", "stated (RTX A6000)"
    if d in ("a100", "h100") and "model card" in src:
        return {"a100": "a100-80gb", "h100": "h100-sxm"}[d], "inferred: the card's cost column (Lambda SXM prices)"
    return None, f"device {d!r}: no device spec, or its variant is unstated"


def engine_of(row: dict):
    """The engine model of the row's release (:func:`lrsim.gpu.engines.engine_for`); LLM-Inference-Bench's
    unstated vLLM is V0 (module docstring)."""
    from lrsim.gpu.engines import engine_for

    v = row.get("engine_version")
    if not v and "LLM-Inference-Bench" in row["source"]["title"]:
        v = "0.6"
    return engine_for(row["engine"], v)


def _repeats(row: dict, rows: list[dict]) -> bool:
    """A current-release row that repeats a row of ``measurements.json`` (source, model, GPU, batch, metric)."""
    if row.get("file", "measurements.json") == "measurements.json":
        return False
    key = (row["source"]["title"], row["model"], row["device"], row["batch"], row["metric"], row["value"])
    return any(r.get("file", "measurements.json") == "measurements.json" and (r["source"]["title"], r["model"], r["device"], r["batch"],
                                                     r["metric"], r["value"]) == key for r in rows)


def version_stated(v: str) -> bool:
    """An engine release number the source states (not a container's, a branch or an image tag)."""
    words = ("not stated", "unstated", "main", "latest", "nim")
    return any(c.isdigit() for c in v) and not any(w in v.lower() for w in words)


def excluded(row: dict, rows: list[dict] = ()) -> str | None:
    """Why a row is outside the scope rule (None: predicted)."""
    fit = fitted_ids()
    if row["id"] in fit:
        return f"calibration row: the {fit[row['id']]} engine's step time is fitted on it"
    if row["id"] in CLIENT_IDS:
        return "calibration row: the official LR code's client overhead is fitted on it (studies/fit_engines.py)"
    if row.get("cuda_graphs") is False:
        return "enforce_eager=True: CUDA graphs off, an engine mode the model does not price"
    v = str(row.get("engine_version") or "")
    if row.get("file", "measurements.json") != "measurements.json" and not version_stated(v):
        return f"engine version unstated ({v or 'none'})"
    dev, why = device_of(row)
    if dev is None:
        return why
    if row["metric"] not in METRICS:
        return f"metric {row['metric']!r} not priced"
    try:
        load_arch(row["arch"])
    except InputError:
        return f"architecture {row['arch']!r}: no shipped config describes it"
    try:
        lengths(row)
    except InputError:
        return "no prompt/output lengths and no dataset totals"
    if rows and _repeats(row, rows):
        return "repeats a row of measurements.json"
    return None


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
    if row["id"] in CLIENT_IDS:
        from fit_engines import CLIENT

        return CLIENT["prompt_tokens"], CLIENT["answer_tokens"]
    raise InputError(f"{row['id']}: no prompt/output lengths")


def dtype_of(row: dict) -> str:
    """The weight format the model prices a row in: its dtype, block FP8 for Qwen's own FP8 checkpoints."""
    if row["dtype"] == "fp8" and row["model"].startswith(BLOCK_FP8) and row["model"].endswith("-FP8"):
        return "fp8-block"
    return DTYPES[row["dtype"]]


def max_model_len(row: dict, arch) -> tuple[int | None, bool]:
    """The row's ``max_model_len`` and whether a length past the config's positions was allowed: the Qwen script's
    option (:data:`QWEN_MAX_LEN`, allowed), else what vLLM derives from the config (``arch.max_context``)."""
    if row["source"]["title"] in QWEN_SCRIPT:
        need = sum(lengths(row))
        return next(m for m in QWEN_MAX_LEN if m >= need), True
    return arch.max_context, False


def predict(row: dict) -> dict:
    """The model's value of the row's metric, and the parts it is made of."""
    dev, _ = device_of(row)
    spec = parse_spec(f"{dev}:tp{row['tp']}:{dtype_of(row)}:{engine_of(row).name}"
                      + (":kv-fp8" if row.get("kv_dtype") == "fp8" else ""))
    arch = load_arch(row["arch"])
    P, O = lengths(row)
    mml, allowed = max_model_len(row, arch)
    release = row.get("engine_version") or ("0.6" if "LLM-Inference-Bench" in row["source"]["title"] else None)
    release = release if version_stated(str(release or "")) else None
    s = spec.setup(arch, context=None if allowed else P + O)  # past the positions: refused unless the source allowed it
    s = replace(s, release=release or "")  # vLLM V0's release picks its attention kernel (FA3 on Hopper from 0.7)
    check_fits(s)
    b = int(row["batch"])
    steps = _steps_s(s, P, O, b)
    chunk = s.runtime.chunk_tokens(s.device, mml, release)
    prefill = prefill_s(s, max(P, 1), b, "wall", chunk=chunk or 0, check=False)  # chunks as the release ran them
    e2e = prefill + float(steps.sum())
    step = 1e3 * float(steps.mean()) if len(steps) else None
    value = {"e2e_latency_s": e2e, "e2e_tok_s": O / e2e, "tok_s_per_user": O / e2e,
             "output_throughput_tok_s": b * O / e2e, "tpot_ms": step, "itl_ms": step}[row["metric"]]
    return {"predicted": value, "prefill_share": prefill / e2e, "spec": spec.text(), "engine": spec.engine,
            "mean_step_ms": step, "prefill_passes": len(prefill_passes(max(P, 1), b, chunk)[0]),
            "prefill_chunk": chunk, "max_model_len": mml}


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
    if not v and row["engine"] == "vllm":
        out.append("vLLM version unstated (V0 era)")
    if row["metric"] == "e2e_latency_s" and row["value"] < 2 and round(row["value"], 1) == row["value"]:
        out.append(f"value rounded to 0.1 s: +-{0.05 / row['value']:.0%} from rounding alone")
    if p["prefill_share"] > 0.3:
        out.append(f"prefill {p['prefill_share']:.0%} of the predicted time")
    if row["dtype"] == "int8" and "W8A8" in (row.get("quant_method") or ""):
        out.append("w8a8 priced as 8-bit weights")
    if p.get("prefill_passes", 1) > 1:
        out.append(f"prefilled in {p['prefill_passes']} chunks of {p['prefill_chunk']} tokens")
    arch = load_arch(row["arch"])
    if arch.max_context and sum(lengths(row)) > arch.max_context:
        out.append(f"past the config's {arch.max_context} positions (max_model_len {p.get('max_model_len')}, "
                   "allowed by the source's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)")
    return out


def priced(row: dict, excluded_fn, predict_fn) -> tuple[dict | None, str | None]:
    """(prediction, None) for a row the scope rule keeps and the model prices, else (None, why)."""
    why = excluded_fn(row)
    if why is not None:
        return None, why
    try:
        return predict_fn(row), None
    except InputError as e:
        return None, f"the model refuses it: {e}"


def run_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(predicted rows, excluded rows with the reason)."""
    done, skipped = [], []
    calibrating = set(fitted_ids()) | set(CLIENT_IDS)
    for r in rows:
        p, why = priced(r, lambda r: excluded(r, rows), predict)
        if why is not None:
            skipped.append({"id": r["id"], "file": r.get("file", "measurements.json"), "why": why, "calibration": r["id"] in calibrating})
            continue
        err = p["predicted"] / r["value"] - 1
        done.append({"id": r["id"], "file": r.get("file", "measurements.json"), "source": r["source"]["title"], "url": r["source"]["url"],
                     "model": r["model"], "family": r["engine"],
                     "arch": r["arch"], "device": device_of(r)[0], "device_why": device_of(r)[1], "tp": r["tp"],
                     "dtype": r["dtype"], "quant": r.get("quant_method"), "version": r.get("engine_version"),
                     "batch": r["batch"], "prompt": lengths(r)[0], "output": lengths(r)[1],
                     "metric": r["metric"], "measured": r["value"], **p, "error": err, "tags": tags(r, p, rows)})
    return done, skipped


def calibration(rows: list[dict]) -> list[dict]:
    """The calibration rows, predicted like the others (each reproduces by construction, up to the context; the
    LR README's row without its client overhead)."""
    out = []
    fit = fitted_ids()
    for r in rows:
        if r["id"] in fit or r["id"] in CLIENT_IDS:
            p = predict(r)
            out.append({"id": r["id"], "engine": p["engine"], "metric": r["metric"], "measured": r["value"],
                        "modelled": p["predicted"], "for": fit.get(r["id"], "the LR client overhead")})
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
    "engine": lambda d: d["engine"],
    "engine family": lambda d: d["family"],
    "file": lambda d: d["file"],
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


def lr_regime(d: dict) -> bool:
    """A row of the regime LR runs in: decode-dominated, bf16/fp16/fp8, contexts up to 16K, batch 1-8."""
    return (d["prefill_share"] < 0.3 and d["dtype"] in ("bf16", "fp16", "fp8") and d["prompt"] + d["output"] <= 16384
            and d["batch"] <= 8)


def row_table(done: list[dict]) -> str:
    lines = ["| id | engine | model | device | TP | dtype | prompt / output | metric | measured | predicted | error | "
             "notes |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in done:
        lines.append(f"| `{d['id']}` | {d['engine']} | {d['model']} | {d['device']} | {d['tp']} | {d['dtype']} | "
                     f"{d['prompt']} / "
                     f"{d['output']} | {d['metric']} | {d['measured']:g} | {d['predicted']:.4g} | {d['error']:+.1%} | "
                     f"{'; '.join(d['tags'])} |")
    return "\n".join(lines)


def report(res: dict) -> str:
    done = res["rows"]
    out = [f"predicted {len(done)} rows ({len(res['skipped'])} outside the scope rule); overall:",
           table(summary(done), "set"), ""]
    for name, key in BREAKDOWNS.items():
        out += [f"by {name}:", table(summary(done, key), name), ""]
    out.append("calibration rows (" + "; ".join(f"{c['id']} on {c['engine']}, for {c['for']}: measured "
                                              f"{c['metric']} {c['measured']:g}, modelled {c['modelled']:.4g}"
                                              for c in res["calibration"]) + ")")
    lr = [d for d in done if lr_regime(d)]
    if lr:
        mean = statistics.fmean(abs(d["error"]) for d in lr)
        out.append(f"the regime LR runs in (decode-dominated: prefill < 30% of the time; bf16/fp8; contexts up to "
                   f"16K; batch 1-8): {len(lr)} rows, mean |error| {mean:.1%} (target {LR_REGIME:.0%}: "
                   f"{'met' if mean <= LR_REGIME else 'not met'})")
    groups = [g for name in ("engine family", "device", "dtype", "context") for g in summary(done, BREAKDOWNS[name])
              if g["rows"] >= 10 and (g["mean_abs"] > TARGET_MEAN or abs(g["worst"]) > TARGET_WORST)]
    out.append(f"groups of 10+ rows missing mean <= {TARGET_MEAN:.0%} or worst <= {TARGET_WORST:.0%}: "
               + (", ".join(f"{g['group']} ({g['mean_abs']:.1%}, worst {g['worst']:+.1%})" for g in groups) or "none"))
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
    colors = dict(zip(sources, qualitative.Dark24))
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
    fig.update_layout(title="lrsim.gpu's engines vs published single-request measurements, each row on its release's "
                            "engine model (dotted: +-20%)",
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
        rows = load_rows()
        done, skipped = run_rows(rows)
        res = {"data": [str((DATA_DIR / f).relative_to(ROOT)) for f in ("measurements.json", *CURRENT)],
               "rows": done, "skipped": skipped, "calibration": calibration(rows),
               "summary": {k: summary(done, f) for k, f in {"all": None, **BREAKDOWNS}.items()}}
        from lrsim.atomic import atomic_write

        FIGURES.mkdir(exist_ok=True)
        atomic_write(OUT_JSON, json.dumps(_rounded(res), separators=(",", ":")) + "\n")
    from lrsim.plots import save_figure

    save_figure(figure(res), FIGURES / "vllm_public_check")
    if a.rows:
        from lrsim.atomic import atomic_write

        head = ("# Published engine measurements, row by row\n\nGenerated by `python studies/vllm_public_check.py "
                "--rows docs/validation/vllm-public-rows.md`; the summary and the scope rule: "
                "[vLLM public measurements](vllm-public.md).\n\n")
        atomic_write(a.rows, head + row_table(res["rows"]) + "\n")
    return report(res)


if __name__ == "__main__":
    sys.exit(run_command("vllm_public_check", main))
