"""The requests of one replication: arrival times, prompt and output lengths, per-request seeds.

Common random numbers: a replication's lengths and per-request seeds are the
same at every rate and in every mode, and its arrival times are one stream of
unit-mean gaps divided by the rate, so comparisons between modes and between
neighbouring rates see the same requests.

- ``poisson``: exponential gaps, mean ``1 / rate``;
- ``gamma``: gamma gaps with shape ``k = 1 / CV^2`` and mean ``1 / rate``
  (vLLM's ``--burstiness`` is ``k``; ``k = 1`` is Poisson);
- closed loop (``concurrency = N``): N clients, each sending its next request
  when the previous one finished, as a benchmark client with N concurrent
  requests does; the request rate is then an outcome;
- a file (:func:`read_arrivals`): CSV with a header ``arrival,prompt_tokens,output_tokens``
  (seconds; extra columns ignored) or JSON Lines with those keys; given a
  rate, the times are rescaled so that the mean gap is ``1 / rate``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from ..errors import InputError
from .config import RequestSpec, ServeConfig

COLUMNS = ("arrival", "prompt_tokens", "output_tokens")


def _streams(cfg: ServeConfig, replication: int) -> tuple[np.random.Generator, np.random.Generator, np.ndarray]:
    """(arrival gaps, lengths) generators and the per-request seeds of one replication."""
    ss = np.random.SeedSequence([cfg.seed, replication])
    r_gap, r_len, r_seed = ss.spawn(3)
    seeds = r_seed.generate_state(cfg.requests, dtype=np.uint32)
    return np.random.default_rng(r_gap), np.random.default_rng(r_len), seeds


def unit_gaps(cfg: ServeConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    """Inter-arrival gaps of mean 1 (divided by the rate later)."""
    if cfg.arrival == "poisson" or cfg.arrival_cv == 1.0:
        return rng.exponential(1.0, n)
    k = 1.0 / cfg.arrival_cv**2  # gamma shape: CV = 1 / sqrt(k)
    return rng.gamma(k, 1.0 / k, n)  # mean k * (1 / k) = 1


def _lengths(cfg: ServeConfig, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    if cfg.pairs:
        idx = rng.integers(0, len(cfg.pairs), n)
        pairs = np.asarray(cfg.pairs, dtype=float)[idx]
        prompt, output = pairs[:, 0], pairs[:, 1]
    else:
        prompt, output = cfg.prompt_tokens.sample(rng, n), cfg.output_tokens.sample(rng, n)
    return np.maximum(1, np.rint(prompt)).astype(int), np.maximum(1, np.rint(output)).astype(int)


def make_requests(cfg: ServeConfig, rate: float | None, replication: int) -> list[RequestSpec]:
    """The requests of replication ``replication`` at ``rate`` requests/s (None: a file's own times)."""
    r_gap, r_len, seeds = _streams(cfg, replication)
    if cfg.trace_arrivals is not None:
        return _from_file(cfg, rate, seeds)
    if rate is None and cfg.concurrency is None:
        raise InputError("a request rate is needed (or an arrivals file, or a concurrency)")
    gaps = unit_gaps(cfg, r_gap, cfg.requests)
    times = np.zeros(cfg.requests) if rate is None else np.cumsum(gaps) / rate  # closed loop: set when sent
    prompt, output = _lengths(cfg, r_len, cfg.requests)
    return [RequestSpec(float(t), int(p), int(o), int(s)) for t, p, o, s in zip(times, prompt, output, seeds)]


def _from_file(cfg: ServeConfig, rate: float | None, seeds: np.ndarray) -> list[RequestSpec]:
    rows = sorted(cfg.trace_arrivals)[: cfg.requests]
    t0 = rows[0][0]
    times = [t - t0 for t, _, _ in rows]
    if rate is not None and len(rows) > 1:
        own = (len(rows) - 1) / times[-1] if times[-1] > 0 else math.inf  # the file's mean rate
        times = [t * own / rate for t in times] if math.isfinite(own) else times
    return [RequestSpec(t, int(p), int(o), int(s)) for t, (_, p, o), s in zip(times, rows, seeds)]


def file_rate(cfg: ServeConfig) -> float | None:
    """Mean arrival rate of an arrivals file (requests/s), None without one or with a single time."""
    if cfg.trace_arrivals is None:
        return None
    times = sorted(t for t, _, _ in cfg.trace_arrivals)[: cfg.requests]
    span = times[-1] - times[0]
    return (len(times) - 1) / span if span > 0 else None


def _record(d: dict, where: str) -> tuple[float, int, int]:
    try:
        t, p, o = (float(d[c]) for c in COLUMNS)
    except KeyError as e:
        raise InputError(f"{where}: missing column {e.args[0]!r} (need {', '.join(COLUMNS)})") from None
    except (TypeError, ValueError):
        raise InputError(f"{where}: {', '.join(COLUMNS)} must be numbers") from None
    if not (math.isfinite(t) and t >= 0):
        raise InputError(f"{where}: arrival must be a finite number >= 0 (s), got {t!r}")
    for name, v in (("prompt_tokens", p), ("output_tokens", o)):
        if not (v >= 1 and v == int(v)):
            raise InputError(f"{where}: {name} must be an integer >= 1, got {v!r}")
    return t, int(p), int(o)


def read_arrivals(path: str | Path) -> tuple[tuple[float, int, int], ...]:
    """(arrival, prompt, output) per request from a CSV or JSON Lines file; one-line InputError if malformed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"arrivals file {p}: cannot read ({e})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise InputError(f"arrivals file {p}: empty")
    if lines[0].lstrip().startswith("{"):
        rows = [_record(_json(ln, f"{p}:{i}"), f"{p}:{i}") for i, ln in enumerate(lines, 1)]
    else:
        reader = csv.DictReader(lines)
        rows = [_record(d, f"{p}:{i}") for i, d in enumerate(reader, 2)]
    if not rows:
        raise InputError(f"arrivals file {p}: no requests")
    return tuple(rows)


def _json(line: str, where: str) -> dict:
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: invalid JSON ({e.msg})") from None
    if not isinstance(d, dict):
        raise InputError(f"{where}: expected a JSON object")
    return d
