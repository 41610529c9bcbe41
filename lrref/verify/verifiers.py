"""Step verifiers: does a draft step mean the same as the target's step?

All verifiers take batches of ``(target_text, draft_text, context)`` and return
one :class:`Verdict` each.  The decoder accepts token-identical steps itself
without calling a verifier (recorded as ``verifier = "identical"``).

- ``judge``: LLM-as-a-judge with the paper's prompt (seed 000, appendix A),
  adapted to the judge's chat template; one prefill per pair; the score is
  ``logit("aligned") - logit("unaligned")`` at the first token where the two
  answers differ; accept when the score > threshold.
- ``embedding``: cosine similarity of sentence embeddings (default
  all-mpnet-base-v2); accept when cosine >= threshold (0.85).
- ``score``: SpecReason-style: the target model rates the draft step 0-9;
  score = most likely digit; accept when score >= threshold (7).
- ``random``: accept with probability p (threshold), seeded.
- ``exact``: whitespace-normalised text equality; with ``normalize=False``
  only token-identical steps pass (the lossless setting).
- ``math``: numbers first, then prose (:class:`MathVerifier`): the draft's results, numbers and units must be
  the target step's (:func:`lrref.verify.stepmath.agree`, no model call), then the embedding cosine must reach the
  threshold (0.85), or :data:`PROSE_THRESHOLD` for two steps without a number; a threshold of -1 skips the
  embedding model (numbers alone decide; steps without numbers are rejected).

Thresholds outside a verifier's range are refused (:data:`RANGES`): cosines in [-1, 1], score digits in
[0, 9], random probabilities in [0, 1]; the judge's logit margin is any number.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from lrsim.errors import InputError
from lrsim.fields import option

from ..backends.base import ScoringBackend
from . import stepmath

JUDGE_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
JUDGE_USER = """Evaluate whether the following two reasoning steps (s1 and s2) convey exactly the same meaning. Focus on semantic similarity rather than exact wording.
Compare the main ideas, key points, overall message, logical structure, and numerical calculations/results of both reasoning steps.
If the reasoning steps convey essentially the same meaning and generate same calculation results, respond with [aligned]. If the reasoning steps express different meanings, respond with [unaligned]. If it is too hard to determine, respond with [unaligned]
Please directly provide the final result in [aligned] or [unaligned].
Reasoning step 1 (s1):
<start_s1>
{s1}
<end_s1>
Reasoning step 2 (s2):
<start_s2>
{s2}
<end_s2>"""

SCORE_USER = """Question and reasoning so far:
{context}

Proposed next reasoning step:
<step>
{step}
</step>

Rate how correct and useful the proposed next step is, from 0 (wrong or useless) to 9 (certainly correct and useful). Answer with a single digit."""

DEFAULT_THRESHOLDS = {"judge": 0.0, "embedding": 0.85, "score": 7.0, "random": 0.5, "exact": 1.0, "math": 0.85}
VERIFIERS = tuple(DEFAULT_THRESHOLDS)  # judge, embedding, score, random, exact, math
#: lrref's default verifier, from the answer-quality study (docs/validation/answer-quality.md; issue 19's rule: the
#: fastest lr-async row whose loss against ar is not significant and at most 3 points, each row at its latest
#: recording).  Re-recorded on 80 GSM8K test problems (2026-11-27, AMD EPYC Zen 4, llama.cpp), the current math
#: rule at 0.85 lost 11 and gained 3 against ar (-10.0 points, 95% interval -18.5 to -1.1; McNemar p = 0.057):
#: it no longer passes.  Of the rows that pass (40 problems each), exact-strict (token-identical steps only: lost 0,
#: gained 1, 0.233x) is faster than the target as judge (lost 1, gained 1, 0.179x).  So the default is exact with
#: ``normalize=False`` (:data:`DEFAULT_STRICT`): LR commits only steps the target would have written, and a semantic
#: verifier is the user's choice, with its measured loss.
DEFAULT_VERIFIER = "exact"
DEFAULT_STRICT = True  #: the default exact verifier passes token-identical steps only (``--exact-strict``)
INSPECT_VERIFIER = "math"  #: ``lrref verify``'s default: the verifier whose reasons are worth reading
#: the thresholds each verifier takes (inclusive); exact takes none (its --threshold is ignored)
RANGES = {"embedding": (-1.0, 1.0), "math": (-1.0, 1.0), "score": (0.0, 9.0), "random": (0.0, 1.0)}
THRESHOLD_HELP = ("judge: logit margin > t (default 0); embedding: cosine >= t, in [-1, 1] (0.85); score: digit >= t, "
                  "in [0, 9] (7); random: accept probability, in [0, 1] (0.5); math: cosine >= t after the numbers "
                  "agree, in [-1, 1] (0.85; -1: numbers alone, no embedding model)")


@dataclass(frozen=True)
class VerifierConfig:
    """Which verifier and how strict."""

    name: str = option("judge, embedding, score, random, exact or math", DEFAULT_VERIFIER)
    threshold: float | None = option(THRESHOLD_HELP, None)
    model: str | None = option("embedding model of embedding and math (name or dir; default all-mpnet-base-v2) or "
                               "judge model dir (default: the target)", None)
    normalize: bool = option("exact: compare whitespace-normalised text (False: only token-identical steps pass)",
                             True)
    seed: int = option("random verifier seed", 0)

    def __post_init__(self) -> None:
        """:raises InputError: an unknown verifier or a threshold outside its range (:data:`RANGES`)."""
        if self.name not in VERIFIERS:
            raise InputError(f"unknown verifier {self.name!r} ({', '.join(VERIFIERS)})")
        check_threshold(self.name, self.t)

    @property
    def t(self) -> float:
        return DEFAULT_THRESHOLDS[self.name] if self.threshold is None else self.threshold


def check_threshold(name: str, t: float) -> None:
    """:raises InputError: ``t`` outside the range of verifier ``name`` (:data:`RANGES`)."""
    lo, hi = RANGES.get(name, (-math.inf, math.inf))
    if not lo <= t <= hi:
        what = "probability" if name == "random" else "threshold"
        raise InputError(f"{name} verifier {what} must be in [{lo:g}, {hi:g}], got {t:g}")


@dataclass
class Verdict:
    decision: bool
    score: float | None
    seconds: float = 0.0  # share of the batch's wall time
    reason: str = ""  # why, where the verifier says (math: stepmath.Agreement.reason, and the cosine rule)
    detail: str = ""  # the reason in words (math: stepmath.Agreement.detail)


class Verifier(Protocol):
    name: str

    def verify(self, pairs: Sequence[tuple[str, str]], contexts: Sequence[str]) -> list[Verdict]: ...


def normalize_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _timed(fn, pairs, *a) -> list[Verdict]:
    t = time.perf_counter()
    out = fn(pairs, *a)
    dt = (time.perf_counter() - t) / max(1, len(out))
    for v in out:
        v.seconds = dt
    return out


class ExactVerifier:
    name = "exact"

    def __init__(self, normalize: bool = True):
        self.normalize = normalize

    def verify(self, pairs, contexts=()):
        if not self.normalize:  # identical token streams never reach a verifier
            return [Verdict(False, 0.0) for _ in pairs]
        return [Verdict(normalize_ws(a) == normalize_ws(b), float(normalize_ws(a) == normalize_ws(b)))
                for a, b in pairs]


class RandomVerifier:
    name = "random"

    def __init__(self, p: float, seed: int = 0):
        check_threshold("random", p)
        self.p, self.rng = p, random.Random(seed)

    def verify(self, pairs, contexts=()):
        out = []
        for _ in pairs:
            u = self.rng.random()
            out.append(Verdict(u < self.p, u))
        return out


class EmbeddingVerifier:
    name = "embedding"

    def __init__(self, path: str, threshold: float = 0.85):
        from sentence_transformers import SentenceTransformer

        from ..quiet import quiet_transformers

        with quiet_transformers():
            self.model = SentenceTransformer(str(path), device="cpu")
        self.threshold = threshold

    def cosine(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        texts = [t for p in pairs for t in p]
        e = self.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        return [float(e[2 * i] @ e[2 * i + 1]) for i in range(len(pairs))]

    def verify(self, pairs, contexts=()):
        return _timed(lambda ps: [Verdict(c >= self.threshold, c) for c in self.cosine(ps)], pairs)


#: the math verifier's cosine for two steps without a number, which no numeric claim can check: the official code's
#: embedding threshold (docs/verifiers.md: on the answer-quality study's math row it rejects the two prose steps
#: behind lost answers, at 0.864 and 0.930, and keeps 6 of the 23 prose pairs the first rule accepted)
PROSE_THRESHOLD = 0.95


class MathVerifier:
    """Numbers first, then prose: accept a draft step only when its numeric claims agree with the target's step
    at the same position (:func:`lrref.verify.stepmath.agree`: every result computed by both, every number
    derivable in both, the same units) and, for the pairs that agree, the embedding cosine is >= ``threshold``;
    two steps without any number (``prose``) need ``max(threshold, prose_threshold)``.  Pairs whose numbers
    disagree never reach the embedding model (their score is None); with ``embedding=None`` (threshold -1) the
    numbers alone decide (score 1) and prose pairs are rejected (nothing checks them).  The context is not used.
    Each verdict's ``reason`` is the agreement's (``equations``, ``numbers``, ``units``; ``same`` or ``prose`` when
    the claims agree).
    """

    name = "math"

    def __init__(self, embedding: EmbeddingVerifier | None, threshold: float = 0.85,
                 prose_threshold: float = PROSE_THRESHOLD):
        check_threshold("math", threshold)
        check_threshold("math", prose_threshold)
        self.embedding, self.threshold, self.prose_threshold = embedding, threshold, prose_threshold

    def agreements(self, pairs) -> list[stepmath.Agreement]:
        """The numeric agreement of every pair (no model)."""
        return [stepmath.agree(t, d) for t, d in pairs]

    def cosine_threshold(self, reason: str) -> float:
        """The cosine a pair whose numbers agree for ``reason`` (``same`` or ``prose``) must reach."""
        return max(self.threshold, self.prose_threshold) if reason == "prose" else self.threshold

    def _verdicts(self, pairs) -> list[Verdict]:
        agreed = self.agreements(pairs)
        out = [Verdict(False, None, reason=a.reason, detail=a.detail) for a in agreed]
        todo = [i for i, a in enumerate(agreed) if a.ok]
        if self.embedding is None:
            for i in todo:
                same = agreed[i].reason == "same"
                out[i] = Verdict(same, 1.0 if same else None, reason=agreed[i].reason, detail=agreed[i].detail)
            return out
        cos = self.embedding.cosine([pairs[i] for i in todo]) if todo else []
        for c, i in zip(cos, todo):
            out[i] = Verdict(c >= self.cosine_threshold(agreed[i].reason), c, reason=agreed[i].reason,
                             detail=agreed[i].detail)
        return out

    def verify(self, pairs, contexts=()):
        return _timed(self._verdicts, pairs)


class JudgeVerifier:
    """LLM-as-a-judge in one prefill: compare the next-token logits of "[aligned]" and "[unaligned]"."""

    name = "judge"

    def __init__(self, lm: ScoringBackend, threshold: float = 0.0):
        self.lm, self.threshold = lm, threshold
        a, u = lm.encode("[aligned]"), lm.encode("[unaligned]")
        k = 0
        while k < min(len(a), len(u)) and a[k] == u[k]:
            k += 1
        if k >= min(len(a), len(u)):
            raise InputError("judge tokenizer cannot tell [aligned] from [unaligned]")
        self.common, self.tok_a, self.tok_u = a[:k], a[k], u[k]

    def prompt(self, s1: str, s2: str) -> list[int]:
        """The judge's chat prompt for (s1, s2), up to the tokens [aligned] and [unaligned] share."""
        return self.lm.encode_chat(JUDGE_USER.format(s1=s1.strip(), s2=s2.strip()), JUDGE_SYSTEM) + self.common

    def margins(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        lg = self.lm.next_token_logits([self.prompt(t, d) for t, d in pairs])
        return (lg[:, self.tok_a] - lg[:, self.tok_u]).tolist()

    def verify(self, pairs, contexts=()):
        return _timed(lambda ps: [Verdict(m > self.threshold, m) for m in self.margins(ps)], pairs)


class ScoreVerifier:
    """The target rates the draft step 0-9 (SpecReason); the score is the most likely digit."""

    name = "score"

    def __init__(self, lm: ScoringBackend, threshold: float = 7.0):
        self.lm, self.threshold = lm, threshold
        self.digits = []
        for d in "0123456789":
            ids = lm.encode(d)
            if len(ids) != 1:
                raise InputError(f"score verifier needs single-token digits; {d!r} -> {ids}")
            self.digits.append(ids[0])

    def prompt(self, step: str, context: str) -> list[int]:
        """The rating prompt (user turn only) for a step after its context."""
        return self.lm.encode_chat(SCORE_USER.format(context=context.strip()[-4000:], step=step.strip()), None)

    def scores(self, pairs, contexts) -> list[int]:
        lg = self.lm.next_token_logits([self.prompt(d, c) for (_, d), c in zip(pairs, contexts)])
        return lg[:, self.digits].argmax(-1).tolist()

    def verify(self, pairs, contexts=()):
        contexts = list(contexts) or [""] * len(pairs)
        return _timed(lambda ps, cs: [Verdict(s >= self.threshold, float(s)) for s in self.scores(ps, cs)],
                      pairs, contexts)


def uses_embedding(name: str, t: float) -> bool:
    """Whether verifier ``name`` at threshold ``t`` needs the embedding model (math at -1 does not)."""
    return name == "embedding" or (name == "math" and t > -1)


def build(cfg: VerifierConfig, target_lm: ScoringBackend | None = None, cache: str | None = None) -> Verifier:
    """Construct the configured verifier (judge/score default to the target model).

    :raises InputError: judge/score without a model that scores prompts.
    :raises lrref.models.ModelError: a model that is not prepared.
    """
    from .. import models

    if cfg.name == "exact":
        return ExactVerifier(cfg.normalize)
    if cfg.name == "random":
        return RandomVerifier(cfg.t, cfg.seed)
    if cfg.name == "embedding":
        return EmbeddingVerifier(str(models.resolve(cfg.model or models.DEFAULT_EMBEDDING, cache)), cfg.t)
    if cfg.name == "math":
        emb = None
        if uses_embedding(cfg.name, cfg.t):
            emb = EmbeddingVerifier(str(models.resolve(cfg.model or models.DEFAULT_EMBEDDING, cache)), cfg.t)
        return MathVerifier(emb, cfg.t)
    if cfg.name in ("judge", "score"):
        lm = target_lm
        if cfg.model:
            from ..backends.hf import HFBackend

            lm = HFBackend(models.resolve(cfg.model, cache))
        if lm is None or not hasattr(lm, "next_token_logits"):
            raise InputError(f"the {cfg.name} verifier needs a transformers model: pass its directory (--judge PATH; "
                             "lrref verify: --model PATH)")
        return JudgeVerifier(lm, cfg.t) if cfg.name == "judge" else ScoreVerifier(lm, cfg.t)
    raise InputError(f"unknown verifier {cfg.name!r} ({', '.join(VERIFIERS)})")
