"""Two measurements behind lrref's design, on the default Qwen pair (prepared models).

``python benchmarks/lrref_checks.py bf16 [--n 4]``
    greedy ``ar`` vs ``lr-sync+sd`` with a token-identical verifier in bfloat16
    and in float32: where (if at all) the token streams diverge.  In exact
    arithmetic they are identical; bf16 kernels give results that depend on the
    batch shape and on how many tokens one pass scores, so near-tied argmaxes flip.

``python benchmarks/lrref_checks.py prefix-cache [--n 3]``
    ``lr-sync`` with and without the KV prefix cache: wall time, prefix tokens
    re-prefilled, tokens restored from the cache.

``python benchmarks/lrref_checks.py profile-agreement [--n 4]``
    does the profiler's timing of SmolLM2-135M's architecture (random weights)
    predict a real lrref ``ar`` decode (``round_ratios`` of ``profile_agreement.py``:
    n rounds of a 16-token decode then the profiler's passes, one thread,
    float32)?  Target: the median over rounds of recorded / predicted within
    30% of 1.  A timing: run it on an idle machine (it prints the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _session(dtype: str, modes: tuple[str, ...], max_tokens: int, verifier: dict):
    """The default Qwen pair on the hf backend, two threads, gamma 3, 64-token steps (lrref.Session)."""
    from lrref import Session

    return Session(backend="hf", dtype=dtype, threads=2, modes=modes, gamma=3, max_step_tokens=64,
                   max_tokens=max_tokens, **verifier)


def _no_prefix_cache(be) -> None:
    """The hf backend's in-process KV prefix pool off, as ``HFBackend(prefix_cache=False)`` builds it (the session
    has no setting for it: its ``prefix_caching`` is llama.cpp's reuse across requests)."""
    be.prefix_cache = False
    be.pool.size = 0
    be.pool.clear()


def _problems(n: int) -> list[str]:
    from pathlib import Path

    from lrref.bench import load_dataset

    p = Path(__file__).resolve().parents[1] / "lrref" / "data" / "problems.jsonl"
    return [r["question"] for r in load_dataset(p, n)]


EXACT = {"verifier": "exact", "exact_strict": True}  # only token-identical steps pass: the lossless setting


def bf16(n: int, max_tokens: int) -> dict:
    out = {}
    for dtype in ("bfloat16", "float32"):
        rows = []
        with _session(dtype, ("ar", "lr-sync+sd"), max_tokens, EXACT) as s:
            for q in _problems(n):
                a = s.generate(q, "ar", trace=False).result
                b = s.generate(q, "lr-sync+sd", trace=False).result
                div = next((i for i, (x, y) in enumerate(zip(a.ids, b.ids)) if x != y), None)
                if div is None and len(a.ids) != len(b.ids):
                    div = min(len(a.ids), len(b.ids))
                rows.append({"ar_tokens": len(a.ids), "lr_tokens": len(b.ids), "first_divergence": div})
        out[dtype] = rows
        print(dtype, json.dumps(rows), flush=True)
    return out


def prefix_cache(n: int, max_tokens: int) -> dict:
    out = {}
    for on in (True, False):
        with _session("bfloat16", ("lr-sync",), max_tokens, {"verifier": "embedding"}) as s:
            t, d = s.target, s.draft
            if not on:
                _no_prefix_cache(t)
                _no_prefix_cache(d)
            w0 = time.perf_counter()
            toks = 0
            for q in _problems(n):
                toks += s.generate(q, trace=False).tokens
            out["on" if on else "off"] = {
                "wall_s": round(time.perf_counter() - w0, 1), "tokens": toks,
                "target_prefill_tokens": t.stats.prefill_tokens, "target_reused_tokens": t.stats.reused_tokens,
                "draft_prefill_tokens": d.stats.prefill_tokens, "draft_reused_tokens": d.stats.reused_tokens,
                "loadavg": os.getloadavg()[0]}
        print(out, flush=True)
    return out


PROFILE_TOLERANCE = 0.30  # |median recorded / predicted - 1|


def profile_agreement(n: int, max_tokens: int) -> dict:
    import statistics
    import tempfile
    from pathlib import Path

    from lrref import models
    from profile_agreement import round_ratios  # beside this script

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        ratios = round_ratios(str(models.resolve("smollm2-135m-instruct")), Path(d), rounds=n, tokens=max_tokens)
    median = statistics.median(ratios)
    return {"rounds": [round(x, 3) for x in ratios], "median": round(median, 3),
            "target": f"|median - 1| < {PROFILE_TOLERANCE}", "ok": abs(median - 1) < PROFILE_TOLERANCE,
            "loadavg_start": load, "loadavg_end": os.getloadavg()[0]}


CHECKS = {"bf16": (bf16, 3, 96), "prefix-cache": (prefix_cache, 3, 96),  # name: (check, --n, --max-tokens)
          "profile-agreement": (profile_agreement, 4, 16)}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=list(CHECKS))
    ap.add_argument("--n", type=int, default=None, help="problems (bf16, prefix-cache: 3) or rounds (4)")
    ap.add_argument("--max-tokens", type=int, default=None, help="tokens per problem (96) or per round (16)")
    a = ap.parse_args()
    check, n, max_tokens = CHECKS[a.what]
    got = check(n if a.n is None else a.n, max_tokens if a.max_tokens is None else a.max_tokens)
    print(json.dumps(got, indent=1))
