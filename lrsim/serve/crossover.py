"""Crossover rates: the load above which a speculative mode no longer beats target-only decoding.

For a latency metric ``m`` (lower is better: mean TPOT, median end-to-end
latency), the difference ``D(rate) = m_mode(rate) - m_ar(rate)`` is negative
while speculation helps.  The crossover is the smallest rate where ``D >= 0``,
linearly interpolated between the last swept rate with ``D < 0`` and the
first with ``D >= 0``.  It is computed per replication (runs of the same
replication share arrivals, lengths and decoding streams across modes:
paired differences) and reported as the mean with a Student-t 95% interval
over the replications that cross inside the swept range; ``below`` when the
mode is not better even at the lowest rate, ``above`` when it is still better
at the highest.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .metrics import t_interval

METRICS = ("tpot_mean", "e2e_p50")


def crossing(rates: Sequence[float], diff: Sequence[float]) -> float:
    """Smallest rate with ``diff >= 0`` (linear between swept rates); ``-inf`` at the first, ``inf`` if never."""
    r, d = np.asarray(rates, float), np.asarray(diff, float)
    order = np.argsort(r)
    r, d = r[order], d[order]
    if d[0] >= 0:
        return -np.inf
    for i in range(1, len(r)):
        if d[i] >= 0:
            return float(r[i - 1] + (r[i] - r[i - 1]) * (-d[i - 1]) / (d[i] - d[i - 1]))  # D = 0 on the segment
    return np.inf


def _curve(per_run: list[dict], mode: str, metric: str, rep: int, key: str) -> dict[float, float]:
    return {m[key]: m[metric] for m in per_run if m["mode"] == mode and m["replication"] == rep}


def crossovers(per_run: list[dict], modes: Sequence[str], metrics: Sequence[str] = METRICS,
               key: str = "rate") -> list[dict]:
    """One entry per speculative mode and metric: the crossover load (``key``: 'rate' or 'concurrency'), its
    interval and how many replications cross."""
    out = []
    reps = sorted({m["replication"] for m in per_run})
    for mode in [m for m in modes if m != "ar"]:
        for metric in metrics:
            found = []
            for rep in reps:
                ar, sp = _curve(per_run, "ar", metric, rep, key), _curve(per_run, mode, metric, rep, key)
                rates = sorted(set(ar) & set(sp))
                if len(rates) >= 1:
                    found.append(crossing(rates, [sp[r] - ar[r] for r in rates]))
            out.append(_summary(mode, metric, found) | {"load": key})
    return out


def _summary(mode: str, metric: str, found: list[float]) -> dict:
    inside = [x for x in found if np.isfinite(x)]
    mean, lo, hi = t_interval(inside) if inside else (None, None, None)
    below = sum(1 for x in found if x == -np.inf)
    above = sum(1 for x in found if x == np.inf)
    if inside:
        where = "inside"
    else:
        where = "below" if below >= above else "above"
    return {"mode": mode, "metric": metric, "crossover_rate": mean, "crossover_lo": lo, "crossover_hi": hi,
            "replications": len(found), "crossing": len(inside), "below": below, "above": above, "where": where}


def describe(c: dict, loads: Sequence[float]) -> str:
    """One line: where the mode stops beating ar on the metric."""
    lo_r, hi_r = min(loads), max(loads)
    unit = " concurrent requests" if c.get("load") == "concurrency" else " req/s"
    if c["crossover_rate"] is None:
        what = (f"not better than ar even at {lo_r:g}{unit}" if c["where"] == "below"
                else f"still better than ar at {hi_r:g}{unit} (no crossover in the swept range)")
        return f"{c['mode']:>8s} {c['metric']:>9s}: {what}"
    ci = (f" (95% CI {c['crossover_lo']:.3g}-{c['crossover_hi']:.3g})" if c["crossover_lo"] is not None else "")
    note = f"; {c['crossing']} of {c['replications']} replications cross in range" if c["crossing"] < c[
        "replications"] else ""
    return f"{c['mode']:>8s} {c['metric']:>9s}: no longer beats ar above {c['crossover_rate']:.3g}{unit}{ci}{note}"
