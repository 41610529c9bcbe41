"""``lrref verify``: one step pair (or a file of them) through a verifier, with its verdict and why.

``lrref verify [--verifier V] [--threshold T] TARGET_STEP DRAFT_STEP`` prints ``accepted`` or ``rejected``, the
verifier's reason and score, and for ``math`` the numeric claims it compared (:class:`lrref.verify.stepmath.Claims`);
``--pairs FILE.jsonl`` reads ``{"target": ..., "draft": ...[, "context": ...]}`` lines; ``--json`` prints one JSON
object per pair (``accepted``, ``reason``, ``detail``, ``score``, ``claims``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lrsim.errors import InputError, UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .verifiers import INSPECT_VERIFIER, THRESHOLD_HELP, VERIFIERS

    p.add_argument("target_step", nargs="?", metavar="TARGET_STEP", help="the target's step")
    p.add_argument("draft_step", nargs="?", metavar="DRAFT_STEP", help="the draft's step at the same position")
    p.add_argument("--pairs", type=Path, metavar="FILE.jsonl",
                   help='pairs to verify, one JSON object a line: {"target": ..., "draft": ...[, "context": ...]}')
    p.add_argument("--verifier", default=INSPECT_VERIFIER, choices=VERIFIERS,
                   help=f"which verifier (default {INSPECT_VERIFIER})")
    p.add_argument("--threshold", type=float, default=None, help=THRESHOLD_HELP)
    p.add_argument("--model", default=None, help="embedding model (embedding, math; default all-mpnet-base-v2) or "
                   "the judging model (judge, score: a GGUF file or registry name run by llama.cpp, or a transformers "
                   "model dir; default: the default target, qwen2.5-coder-1.5b-instruct)")
    p.add_argument("--cache-dir", default=None, help="model cache (default ~/.cache/lrref)")
    p.add_argument("--json", action="store_true", help="one JSON object per pair")


def read_pairs(path: Path) -> list[dict]:
    """The pairs of a JSONL file.

    :raises InputError: an unreadable file, a line that is not an object with string ``target`` and ``draft``.
    """
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{n}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("target", "draft")):
            raise InputError(f"{path}:{n}: expected an object with string fields 'target' and 'draft'")
        if not isinstance(row.get("context", ""), str):
            raise InputError(f"{path}:{n}: 'context' must be a string")
        out.append({"line": n} | row)
    if not out:
        raise InputError(f"{path}: no pairs")
    return out


def _pairs(a: argparse.Namespace) -> list[dict]:
    if a.pairs is not None:
        if a.target_step is not None:
            raise UsageError("give TARGET_STEP DRAFT_STEP or --pairs, not both")
        return read_pairs(a.pairs)
    if a.target_step is None or a.draft_step is None:
        raise UsageError("give TARGET_STEP and DRAFT_STEP, or --pairs FILE.jsonl")
    return [{"target": a.target_step, "draft": a.draft_step}]


def verdicts(verifier, rows: list[dict]) -> list[dict]:
    """Every pair's verdict as a JSON-ready dict (math: with its numeric agreement and claims)."""
    from . import stepmath

    pairs = [(r["target"], r["draft"]) for r in rows]
    got = verifier.verify(pairs, [r.get("context", "") for r in rows])
    out = []
    for r, v in zip(rows, got):
        d = {"accepted": bool(v.decision), "verifier": verifier.name, "reason": v.reason or None,
             "score": v.score, "target": r["target"], "draft": r["draft"]}
        if "line" in r:
            d = {"line": r["line"]} | d
        if verifier.name == "math":
            d["detail"] = v.detail
            d["claims"] = {"target": stepmath.claims(r["target"]).as_dict(),
                           "draft": stepmath.claims(r["draft"]).as_dict()}
        out.append(d)
    return out


def _threshold(verifier, v: dict) -> str:
    """The score against the rule that decided it, in words."""
    if v["score"] is None:
        return ""
    if verifier.name == "math":
        if verifier.embedding is None:
            return ""
        t = verifier.cosine_threshold(v["reason"])
        return f"cosine {v['score']:.3f} {'>=' if v['accepted'] else '<'} {t:g}"
    t = getattr(verifier, "threshold", getattr(verifier, "p", None))
    return f"score {v['score']:.3f}" + (f" (threshold {t:g})" if t is not None else "")


def _claims_line(c: dict) -> str:
    parts = [f"numbers {', '.join(c['numbers']) or '-'}", f"results {', '.join(c['results']) or '-'}"]
    if c["units"]:
        parts.append(f"units {', '.join(c['units'])}")
    if c["bindings"]:
        parts.append(f"bound {', '.join(c['bindings'])}")
    return "; ".join(parts)


def render(verifier, v: dict) -> str:
    """A verdict as text: the decision, the reason, the score's rule and (math) the claims compared."""
    head = f"{'accepted' if v['accepted'] else 'rejected'}  {v['verifier']}"
    if v["reason"]:
        head += f" ({v['reason']})"
    why = "; ".join(x for x in (v.get("detail", ""), _threshold(verifier, v)) if x)
    lines = [head + (f": {why}" if why else "")]
    if "claims" in v:
        lines += [f"  target: {_claims_line(v['claims']['target'])}", f"  draft:  {_claims_line(v['claims']['draft'])}"]
    if "line" in v:
        lines[0] = f"line {v['line']}: {lines[0]}"
    return "\n".join(lines)


def judging_lm(model: str | None, cache: str | None):
    """The judge / score verifier's model when it runs on llama.cpp: a ``.gguf`` file or a GGUF registry name
    (default: the default target); None for a transformers model directory (:func:`verifiers.build` loads it).

    :raises lrref.models.ModelError: the GGUF file is not prepared.
    """
    import os

    from .. import models

    name = model or models.DEFAULT_TARGET
    spec = models.REGISTRY.get(name)
    if not name.endswith(".gguf") and (spec is None or spec.kind != "gguf"):
        return None
    from ..backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(models.resolve_gguf(name, cache), threads=len(os.sched_getaffinity(0)), slots=2)


def command(a: argparse.Namespace) -> int:
    from .verifiers import VerifierConfig, build

    rows = _pairs(a)
    lm = judging_lm(a.model, a.cache_dir) if a.verifier in ("judge", "score") else None
    model = None if lm is not None else a.model
    verifier = build(VerifierConfig(a.verifier, a.threshold, model), lm, a.cache_dir)
    for v in verdicts(verifier, rows):
        print(json.dumps(v) if a.json else render(verifier, v))
    sys.stdout.flush()
    return 0
