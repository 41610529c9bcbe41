"""Serving metrics of a run, and their intervals over independent replications.

Names and definitions follow vLLM's serving benchmark (``vllm/benchmarks/serve.py``)
and its Prometheus metrics (``time_to_first_token``, ``time_per_output_token``,
``e2e_request_latency``):

- ``ttft``: arrival to first token (the prefill's last chunk writes it; queueing included);
- ``tpot``: ``(end - first token) / (output - 1)``, seconds per output token after the first;
- ``e2e``: arrival to last token;
- ``throughput``: output tokens per second written during the measured window
  (each request's tokens spread evenly over its first token to its end);
  ``output_throughput`` and ``request_throughput`` are vLLM's benchmark
  definitions instead: every request's tokens (or the requests) over the run's
  duration, first send to last end (what ``lrref bench`` reports too);
- ``goodput``: requests per second meeting every SLO given: the offered rate
  times the share of measured requests that meet them (``slo_attainment``).
  vLLM's benchmark divides good completions by the run's duration, which in a
  finite run also counts the drain; at a steady load the two agree.

**Warm-up and window.** The first and last ``warmup`` share of requests (in
arrival order) are dropped: the first see an empty system, the last a
draining one.  The measured window runs from the first to the last measured
arrival: the load is on throughout it.  The warm-up should last at least one
mean sojourn (``warmup x requests / rate >= mean e2e``; the share of runs
where it does is reported as ``warmup_covers_sojourn``), else the window
starts before the system is steady.  **Little's law** is checked on it:
the time-average number of requests in the system (all requests, clipped to
the window) against ``rate x mean e2e`` of the measured requests.
**Intervals** are Student-t intervals over replications (each replication one
independent run: its own arrivals, lengths and decoding streams), truncated to the
quantity's range (``SHARES`` in [0, 1], every other metric >= 0).
"""

from __future__ import annotations

import math

import numpy as np

from .config import ServeConfig
from .run import RunOutcome

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "e2e")


def measured(n: int, warmup: float) -> slice:
    """The requests kept: drop ``floor(warmup n)`` at each end (all of them if that would leave none)."""
    k = math.floor(warmup * n)
    return slice(k, n - k) if n - 2 * k > 0 else slice(0, n)


def latencies(r: dict) -> dict[str, np.ndarray]:
    """Per-request TTFT, TPOT and end-to-end latency (seconds)."""
    decoded = np.maximum(r["output"] - 1, 1)
    return {"ttft": r["first_token"] - r["arrival"], "tpot": (r["end"] - r["first_token"]) / decoded,
            "e2e": r["end"] - r["arrival"]}


def in_system(arrival: np.ndarray, end: np.ndarray, t0: float, t1: float) -> float:
    """Time-average number of requests in the system over ``[t0, t1]``: sum of clipped sojourns / (t1 - t0)."""
    if t1 <= t0:
        return float("nan")
    overlap = np.clip(np.minimum(end, t1) - np.maximum(arrival, t0), 0, None)
    return float(overlap.sum() / (t1 - t0))


def written(r: dict, t0: float, t1: float) -> float:
    """Output tokens written in ``[t0, t1]``: each request's tokens spread evenly over [first token, end]."""
    first, end = r["first_token"], r["end"]
    life = end - first
    part = np.clip(np.minimum(end, t1) - np.maximum(first, t0), 0, None) / np.where(life > 0, life, 1.0)
    part = np.where(life > 0, part, ((first >= t0) & (first <= t1)).astype(float))
    return float((r["output"] * part).sum())


def slo_met(lat: dict[str, np.ndarray], cfg: ServeConfig) -> np.ndarray | None:
    """Per request: meets every SLO given (None when no SLO is given)."""
    checks = [(lat["ttft"], cfg.slo_ttft_s), (lat["tpot"] * 1000.0, cfg.slo_tpot_ms), (lat["e2e"], cfg.slo_e2e_s)]
    checks = [(x, lim) for x, lim in checks if lim is not None]
    if not checks:
        return None
    ok = np.ones(len(lat["e2e"]), dtype=bool)
    for x, lim in checks:
        ok &= x <= lim
    return ok


def run_metrics(out: RunOutcome, cfg: ServeConfig) -> dict:
    """The scalar metrics of one run."""
    r = out.requests
    keep = measured(len(r["arrival"]), cfg.warmup)
    lat = {k: v[keep] for k, v in latencies(r).items()}
    arr = r["arrival"][keep]
    t0, t1 = float(arr.min()), float(arr.max())
    if t1 <= t0:  # one measured request (or all at once): the window is its life
        t1 = float(r["end"][keep].max())
    span = t1 - t0
    m = {f"{k}_mean": float(v.mean()) for k, v in lat.items()}
    for k, v in lat.items():
        m |= {f"{k}_p{p}": float(np.percentile(v, p)) for p in PERCENTILES}
    m["throughput"] = written(r, t0, t1) / span if span > 0 else float("nan")
    duration = float(r["end"].max() - r["arrival"].min())  # vLLM's benchmark: all requests, first send to last end
    m["output_throughput"] = float(r["output"].sum()) / duration if duration > 0 else float("nan")
    m["request_throughput"] = len(r["end"]) / duration if duration > 0 else float("nan")
    ok = slo_met(lat, cfg)
    rate = out.rate if out.rate is not None else _observed_rate(arr)
    m["slo_attainment"] = float(ok.mean()) if ok is not None else None
    m["goodput"] = float(ok.mean()) * rate if ok is not None else None
    m["queue_mean"] = float((r["admitted"] - r["arrival"])[keep].mean())
    m["requests_in_system"] = in_system(r["arrival"], r["end"], t0, t1)
    m["running_mean"] = in_system(r["admitted"], r["end"], t0, t1)  # the batch, in requests
    m["little_rate_x_e2e"] = rate * m["e2e_mean"]
    m["request_rate"] = _observed_rate(arr)  # arrivals per second in the window (closed loop: an outcome)
    m["warmup_covers_sojourn"] = float(t0 - float(r["arrival"].min()) >= m["e2e_mean"])  # steady by the window?
    k1 = r["k1"][keep]
    m["lr_share"] = float((k1 > 1).mean())  # requests that ran LR (auto: the chooser's; fixed modes: 0 or 1)
    m["k1_mean"] = float(k1.mean())
    return m | _engine_metrics(out, r, span)


def _observed_rate(arr: np.ndarray) -> float:
    return (len(arr) - 1) / float(arr.max() - arr.min()) if len(arr) > 1 and arr.max() > arr.min() else float("nan")


def _engine_metrics(out: RunOutcome, r: dict, span: float) -> dict:
    t = out.target
    horizon = float(r["end"].max() - r["arrival"].min())
    dec = float(r["decisive"].sum())
    m = {"target_utilisation": t["busy"] / horizon if horizon > 0 else float("nan"),
         "wasted_target_tokens": t["wasted_tokens"] / t["tokens"] if t["tokens"] else 0.0,
         "wasted_target_iterations": t["wasted_iters"] / t["row_iters"] if t["row_iters"] else 0.0,
         "batch_rows_mean": t["row_iters"] / t["iterations"] if t["iterations"] else 0.0,
         "batch_positions_mean": t["positions"] / t["iterations"] if t["iterations"] else 0.0,
         "iteration_ms_mean": 1000.0 * t["busy"] / t["iterations"] if t["iterations"] else 0.0,
         "acceptance_rate": float(r["accepted"].sum() / dec) if dec else None,
         "running_peak": out.admission["peak_running"], "queue_peak": out.admission["peak_queue"],
         "verifier_wait_mean": out.verifier["wait"] / out.verifier["calls"] if out.verifier["calls"] else 0.0,
         "events": out.events, "wall_seconds": out.wall,
         "events_per_second": out.events / out.wall if out.wall > 0 else 0.0}
    m["draft_utilisation"] = out.drafter["busy"] / horizon if out.drafter is not None and horizon > 0 else None
    return m


#: metrics that are shares of something, in [0, 1]; every other metric is a time, a rate or a count, >= 0
SHARES = ("slo_attainment", "warmup_covers_sojourn", "lr_share", "target_utilisation", "draft_utilisation",
          "wasted_target_tokens", "wasted_target_iterations", "acceptance_rate")


def t_interval(values: list[float], lo: float = 0.0, hi: float = math.inf) -> tuple[float, float | None, float | None]:
    """Mean and 95% Student-t interval of independent replications (no interval from fewer than two), truncated to
    the quantity's range ``[lo, hi]``: a throughput's interval never reaches below 0, a share's never above 1 (with
    two replications the t quantile is 12.7, so the symmetric interval alone would)."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if len(x) == 0:
        return float("nan"), None, None
    mean = float(x.mean())
    if len(x) < 2:
        return mean, None, None
    from ..stats import t_quantile

    half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))  # t_{.975,R-1} s / sqrt(R)
    return mean, max(lo, mean - half), min(hi, mean + half)


def combine(per_run: list[dict]) -> dict:
    """One row from the replications' metrics: each numeric metric's mean with ``_lo``/``_hi`` bounds."""
    row: dict = {}
    for key in per_run[0]:
        vals = [m[key] for m in per_run]
        bounds = (0.0, 1.0) if key in SHARES else (0.0, math.inf)
        mean, lo, hi = (None, None, None) if all(v is None for v in vals) else t_interval(vals, *bounds)
        row[key] = mean
        if key not in ("events", "wall_seconds", "events_per_second", "running_peak", "queue_peak"):
            row[f"{key}_lo"], row[f"{key}_hi"] = lo, hi
    row["events"] = int(sum(m["events"] for m in per_run))
    row["wall_seconds"] = float(sum(m["wall_seconds"] for m in per_run))
    row["events_per_second"] = row["events"] / row["wall_seconds"] if row["wall_seconds"] > 0 else 0.0
    return row
