"""Does the profiler's timing of an architecture (random weights) predict a real lrref decode of that model?

Rounds of: a real ``ar`` decode on lrref's HF backend (``lrref.Session``, trace written), then at
once the profiler's passes (:func:`lrref.profiling.timing.measure_grid`, the code
behind ``lrref profile``) at the two ends of the contexts the decode's second and later
steps used, with a model built from the same ``config.json`` and random
weights.  Per round: recorded / predicted time of those steps
(:mod:`lrsim.cost.check`).  Same process, threads and dtype for both halves,
so load from other processes mostly hits both.

    python benchmarks/profile_agreement.py --model qwen2.5-coder-1.5b-instruct --dtype bfloat16 --threads 2

A timing, so a benchmark: ``python benchmarks/lrref_checks.py profile-agreement`` runs it on SmolLM2-135M
against its target; ``tests/test_lrref_profile.py`` only checks that two rounds give finite ratios.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

QUESTION = "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"


def round_ratios(model_dir: str, out_dir: Path, dtype: str = "float32", threads: int = 1, rounds: int = 4,
                 tokens: int = 16, step_tokens: int = 8, repeats: int = 5) -> list[float]:
    """recorded / profile-predicted time of the decode's passes after its first step, one value per round."""
    import torch

    from lrref import Session
    from lrref.archs import arch_from_model
    from lrref.backends.hf_random import build_model
    from lrref.profiling import timing
    from lrsim.cost.check import ar_steps
    from lrsim.latency.profile import ArchProfile
    from lrsim.trace import read_trace

    model = build_model(arch_from_model(model_dir), dtype, torch.device("cpu"))
    ratios = []
    with Session(backend="hf", target=model_dir, dtype=dtype, threads=threads, modes=("ar",),
                 max_step_tokens=step_tokens, max_tokens=tokens) as session:
        for rnd in range(rounds):
            path = out_dir / f"ar{rnd}.jsonl"
            session.generate(QUESTION, trace=path)
            steps = ar_steps(read_trace(path))
            ctx = (min(s.context for s in steps), max(s.context + s.forwards - 1 for s in steps))
            ms = [1000 * sec for _, sec, _ in timing.measure_grid(model, sorted(set(ctx)), [1], [1], 2, repeats,
                                                                  1024, rnd, torch.device("cpu"))]
            prof = ArchProfile("m", 1, 1, 1, tuple(sorted(set(ctx))), (1,), (1,), tuple(((m,),) for m in ms))
            predicted = sum(prof.time_ms(s.context + j, 1, 1) for s in steps for j in range(s.forwards)) / 1000
            ratios.append(sum(s.seconds for s in steps) / predicted)
    return ratios


def main() -> None:
    import os
    import tempfile

    from lrref.models import resolve

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model directory or prepared registry name")
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=24, help="tokens decoded per round")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        load = os.getloadavg()[0]
        r = round_ratios(str(resolve(a.model)), Path(d), a.dtype, a.threads, a.rounds, a.tokens)
    print(f"{a.model} {a.dtype} {a.threads} thread(s): recorded / profile per round "
          f"{', '.join(f'{x:.3f}' for x in r)}; median {statistics.median(r):.3f} "
          f"(load average {load:.2f} at the start)")


if __name__ == "__main__":
    main()
