"""Convert the measured H100 profiles (shared/gpu/h100/*.json) into embedded lrsim latency profiles.

    python studies/convert_gpu_profiles.py --src ../shared/gpu/h100 [--out lrsim/data/profiles]

Writes four profiles (``docs/latency-profile.md`` says what each one is and is not):

- ``h100-ctx0-kernel`` / ``h100-ctx0-eager``: latency-small.json + latency-32b.json, six architectures.
  Their ``L1024`` keys are **not** cache lengths (the cache was cropped to ~q tokens between passes; the
  source's ``note``), so they are stored at context 0.  The same passes under keys ``L8192`` are a second
  context-~0 run: not embedded; their difference from the embedded one goes into the notes.
- ``h100-context-kernel`` / ``h100-context-eager``: latency-context.json (checked cache lengths 1024, 8192,
  16384; qwen2.5-1.5b and qwen2.5-32b); shapes that did not fit 80 GB are ``null`` with the source's reason.

``kernel_ms`` becomes timing kind ``kernel_sum``, ``eager_ms`` becomes ``wall``; prefill (judge) times are
eager wall times in both.  Layers come from the shipped configs in ``lrsim/data/archs`` (plain JSON).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from dataclasses import replace
from pathlib import Path

from lrsim.latency.profile import ArchProfile, Prefill, Profile, Provenance, write_profile

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ROOT / "lrsim" / "data" / "archs"
KEY = re.compile(r"^L(\d+)/b(\d+)/q(\d+)$")
TIMING = {"kernel": ("kernel_ms", "kernel_sum"), "eager": ("eager_ms", "wall")}
COMMON_NOTES = (
    "Random weights of the real architectures: a forward pass costs the same whatever the weights hold.",
    "One run each on a shared, virtualised machine: read small differences (< 3%) as noise.",
    "qwen2.5-32b and qwen3-32b ran on ONE H100 here; the paper ran its 32B targets with tensor parallel 2.",
)
KIND_NOTES = {
    "kernel": ("kernel_sum: the sum of the GPU kernels of one forward (torch.profiler, 5 profiled passes): what an "
               "engine that removes launch overhead (CUDA graphs, as vLLM does) approaches with these kernels.",
               "These are transformers' SDPA attention kernels, not vLLM's paged attention: at long context their "
               "growth with b and especially with q > 1 (L = 8192: q = 4 costs 2.5x q = 1 on 1.5B) is far steeper "
               "than the bytes of KV read would explain, so treat the long-context q > 1 rows as this backend's "
               "cost, not the hardware's."),
    "eager": ("wall: transformers' eager forward timed with CUDA events (3 warm-up, median of 10): launch-bound "
              "(20-90 ms whatever the model) and noisy; it is what an HF-backend decoder pays per pass on this GPU.",),
}
PREFILL_NOTE = ("Prefill times (a prompt of n tokens, no cache: a judge call) are eager wall times, whatever "
                "'timed' says.")


def layers(arch: str) -> int:
    return int(json.loads((ARCHS / f"{arch}.json").read_text())["num_hidden_layers"])


def parse_keys(times: dict) -> dict[tuple[int, int, int], float]:
    """``{"L1024/b1/q1": ms}`` -> ``{(1024, 1, 1): ms}``."""
    out = {}
    for k, v in times.items():
        m = KEY.match(k)
        if not m:
            raise ValueError(f"unexpected key {k!r}")
        out[tuple(int(x) for x in m.groups())] = float(v)
    return out


def grid(points: dict[tuple[int, int, int], float], contexts: list[int]) -> tuple:
    """Axes and nested times (None where the source has no point) over the given source contexts."""
    bs = sorted({b for L, b, _ in points if L in contexts})
    qs = sorted({q for L, _, q in points if L in contexts})
    ms = tuple(tuple(tuple(points.get((L, b, q)) for q in qs) for b in bs) for L in contexts)
    return tuple(bs), tuple(qs), ms


def prefill(src: dict) -> Prefill | None:
    """``{"b1/n512": ms}`` -> a (batch, prompt) table, None where not measured."""
    pts = {tuple(int(x) for x in re.match(r"^b(\d+)/n(\d+)$", k).groups()): float(v) for k, v in src.items()}
    if not pts:
        return None
    bs, ns = sorted({b for b, _ in pts}), sorted({n for _, n in pts})
    return Prefill("wall", tuple(bs), tuple(ns), tuple(tuple(pts.get((b, n)) for n in ns) for b in bs))


def repeat_note(models: dict, field: str) -> str:
    """How far the unembedded context-~0 repeat (keys L8192) is from the embedded one (keys L1024)."""
    rel = []
    for m in models.values():
        pts = parse_keys(m[field])
        rel += [abs(pts[(8192, b, q)] / v - 1) for (L, b, q), v in pts.items() if L == 1024 and (8192, b, q) in pts]
    return (f"Context ~0: the source's keys say L1024, but its note says the cache was cropped to ~q tokens between "
            f"passes, so every pass saw only its own positions; stored as context 0. The source's second set of the "
            f"same passes (keys L8192, also context ~0) is not embedded; it differs from this one by "
            f"{100 * statistics.median(rel):.1f}% at the median and {100 * max(rel):.1f}% at most "
            f"({len(rel)} shapes).")


def provenance(meta: dict, sources: list[str], kind: str, extra_notes: tuple) -> Provenance:
    eng = "forward" if kind == "kernel" else "eager forward"
    return Provenance(
        device=meta["device"], dtype="bfloat16", date="2026-11-22",
        engine=f"transformers {meta['transformers']} {eng}, SDPA attention, DynamicCache, one GPU",
        command="python studies/convert_gpu_profiles.py --src ../shared/gpu/h100",
        source=", ".join(f"shared/gpu/h100/{s}" for s in sources), torch=meta["torch"],
        transformers=meta["transformers"], warmup=3, repeats=10 if kind == "eager" else 5,
        statistic="median of 10 timed passes" if kind == "eager" else "kernel sum of a pass under torch.profiler "
                  "(5 passes profiled; how they were combined is not recorded)",
        notes=COMMON_NOTES + KIND_NOTES[kind] + extra_notes)


def arch_entry(name: str, m: dict, field: str, contexts: list[int], store_as: list[int]) -> ArchProfile:
    bs, qs, ms = grid(parse_keys(m[field]), contexts)
    a = ArchProfile(name, int(m["params"]), layers(name), int(m["kv_bytes_per_token"]), tuple(store_as), bs, qs,
                    ms, (), prefill(m.get("prefill_ms", {})))
    if not a.unmeasured:
        return a
    why = tuple(f"not measured: {s}" for s in m.get("skipped", []) if any(f"L={L} " in s for L in contexts))
    return replace(a, missing=why)


def convert(src: Path) -> list[Profile]:
    small, big = (json.loads((src / f).read_text()) for f in ("latency-small.json", "latency-32b.json"))
    ctx = json.loads((src / "latency-context.json").read_text())
    out = []
    for kind, (field, timed) in TIMING.items():
        models = small["models"] | big["models"]
        archs = {n: arch_entry(n, m, field, [1024], [0]) for n, m in models.items()}
        out.append(Profile(
            f"h100-ctx0-{kind}", timed,
            provenance(small, ["latency-small.json", "latency-32b.json"], kind,
                       (repeat_note(models, field), PREFILL_NOTE)), archs,
            f"One H100, bf16, transformers: one forward pass at context ~0 ({timed}), the paper's six "
            "architectures, b 1-16, q 1-64; prefill by prompt length."))
        archs = {n: arch_entry(n, m, field, [1024, 8192, 16384], [1024, 8192, 16384])
                 for n, m in ctx["models"].items()}
        out.append(Profile(
            f"h100-context-{kind}", timed, provenance(ctx, ["latency-context.json"], kind, ()), archs,
            f"One H100, bf16, transformers: one forward pass over a checked KV cache of 1K-16K tokens ({timed}), "
            "the paper's draft (1.5B) and target (32B)."))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = next((p / "shared" / "gpu" / "h100" for p in ROOT.parents if (p / "shared" / "gpu" / "h100").is_dir()),
                   None)
    ap.add_argument("--src", type=Path, default=default, required=default is None, help="the shared JSON files")
    ap.add_argument("--out", type=Path, default=ROOT / "lrsim" / "data" / "profiles", help="where to write")
    a = ap.parse_args()
    for p in convert(a.src):
        path = a.out / f"{p.name}.json"
        write_profile(p, path)
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
