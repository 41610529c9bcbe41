"""Token acceptance ``alpha2`` from vLLM's speculative-decoding counters (``--vllm-metrics``).

vLLM V1 (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``) exports four Prometheus counters on
``/metrics``, each labelled ``model_name`` and ``engine``:

- ``vllm:spec_decode_num_drafts``: draft steps (one per request and engine step that proposed tokens);
- ``vllm:spec_decode_num_draft_tokens``: tokens proposed;
- ``vllm:spec_decode_num_accepted_tokens``: proposed tokens the target accepted;
- ``vllm:spec_decode_num_accepted_tokens_per_pos``, labelled ``position="0"``, ``"1"``, ...: drafts whose
  token at that position was accepted.  vLLM adds 1 at positions ``0 .. n-1`` for a draft with ``n`` tokens
  accepted, so position ``i`` counts the drafts whose first ``i + 1`` tokens were all accepted.

The text format writes a counter with the ``_total`` suffix (``vllm:spec_decode_num_drafts_total{...} 123.0``);
``LLM.get_metrics()`` and older dumps without it: both are read.  Series that differ only in their other labels
(``engine``, a data-parallel rank) are summed; ``model_name`` is one model's (``--vllm-model``) when the dump has
several.  Two dumps ``BEFORE,AFTER`` give the counts of the window between them (AFTER - BEFORE, series by series).

What is fitted (:func:`fit`), with ``N`` drafts, ``A`` accepted tokens, ``c_i`` the per-position counts:

- ``k``, the speculative positions per draft: the largest position + 1 (vLLM creates a counter for every one of
  its ``num_speculative_tokens``); the target verifies ``k2 = k + 1`` positions per pass (``k`` drafts and the
  bonus token), this project's ``k2``;
- the acceptance at position ``i``, ``a_i = c_i / N``, the share of drafts that got that far, and the conditional
  ``a_i / a_(i-1) = c_i / c_(i-1)``, the acceptance of token ``i`` given the ones before it (both with Wilson 95%
  intervals); under the closed forms' i.i.d. model every conditional is ``alpha2`` and ``a_i = alpha2^(i+1)``;
- the mean acceptance length ``1 + A / N``, vLLM's tokens per draft step including the bonus token;
- ``alpha2``: the ``a`` whose i.i.d. model gives that mean, i.e. ``(1 - a^k2)/(1 - a) = 1 + A / N``
  (:func:`lrsim.prediction.calibrate.solve_alpha`, the equation ``calibrate`` solves on traces);
- its 95% interval: a normal (central-limit) interval on the mean accepted tokens per draft, mapped through that
  monotone equation.  The variance comes from the per-position counts, which hold the whole distribution of the
  accepted tokens ``L`` per draft.  It treats drafts as independent: acceptance that varies between requests
  makes the true interval wider.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import InputError
from ..stats import Z95
from .calibrate import Proportion, _chi2_homogeneity, solve_alpha

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)

#: ``name{labels} value [timestamp]``: one sample of the Prometheus text format (comments start with ``#``)
_SAMPLE = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')

Series = tuple[str, tuple[tuple[str, str], ...]]  #: (counter name without _total, sorted labels)


@dataclass(frozen=True)
class VllmCalibration:
    """What vLLM's counters say about token acceptance (:func:`read_vllm_metrics`)."""

    sources: tuple[str, ...]  #: the dump, or (BEFORE, AFTER): counts over the window between them
    model: str | None  #: the model_name picked (None: the dump has one model or no such label)
    series: int  #: label sets summed per counter (engines, ranks)
    drafts: int
    draft_tokens: int
    accepted: int
    k: int  #: speculative positions per draft: the largest position + 1
    k2: int  #: positions per target pass, k + 1 (this project's k2)
    mean_acceptance_length: float  #: 1 + accepted / drafts (vLLM's, with the bonus token)
    draft_acceptance_rate: float  #: accepted / draft_tokens
    drafted_per_draft: float  #: draft_tokens / drafts (< k: the proposer drafted fewer tokens, e.g. n-gram)
    by_position: tuple[Proportion, ...]  #: a_i: drafts whose first i + 1 tokens were accepted, of all drafts
    conditional: tuple[Proportion, ...]  #: a_i / a_(i-1): token i accepted given tokens 0 .. i-1 were
    alpha2: float | None  #: i.i.d. acceptance reproducing the mean acceptance length (None: none in (0, 1) does)
    alpha2_ci95: tuple[float, float] | None
    iid_p_value: float | None  #: chi-square test that every conditional acceptance is the same
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)

    def where(self) -> str:
        """The dump, or the window, in words."""
        src = self.sources[0] if len(self.sources) == 1 else f"{self.sources[1]} - {self.sources[0]}"
        return src + (f", model {self.model}" if self.model else "")

    def require_alpha2(self) -> float:
        """``alpha2`` for plan and replay; InputError when no ``a`` in (0, 1) fits the counts."""
        if self.alpha2 is None:
            raise InputError(f"vLLM metrics {self.where()}: {self.accepted} of {self.draft_tokens} draft tokens "
                             "accepted: no token acceptance in (0, 1) fits; give --alpha2")
        return self.alpha2

    def source_note(self) -> str:
        """One line saying where ``alpha2`` came from (plan's and replay's notes)."""
        return (f"alpha2 = {self.alpha2:.4f}{_ci(self.alpha2_ci95)} from vLLM's counters ({self.where()}): mean "
                f"acceptance length {self.mean_acceptance_length:.3f} over {self.drafts} drafts at k2 = {self.k2}")

    def source_dict(self) -> dict:
        return {"vllm_metrics": list(self.sources), "model": self.model, "alpha2": self.alpha2,
                "alpha2_ci95": self.alpha2_ci95, "k2": self.k2, "drafts": self.drafts,
                "mean_acceptance_length": self.mean_acceptance_length}

    def format(self) -> str:
        lines = [f"vLLM speculative decoding ({self.where()}): {self.drafts} drafts, {self.draft_tokens} draft "
                 f"tokens, {self.accepted} accepted ({self.series} label set(s) summed)",
                 f"  k = {self.k} speculative positions per draft (largest position + 1): k2 = {self.k2} positions "
                 f"per target pass; {self.drafted_per_draft:.3f} tokens drafted per draft",
                 f"  mean acceptance length: {self.mean_acceptance_length:.3f} tokens per draft step (1 + accepted / "
                 f"drafts); drafted tokens accepted: {self.draft_acceptance_rate:.3f}"]
        if self.alpha2 is not None:
            lines.append(f"  alpha2 (i.i.d. token acceptance giving that mean at k2 = {self.k2}): "
                         f"{self.alpha2:.4f}{_ci(self.alpha2_ci95)}")
        head = ("reached: share of drafts [Wilson 95%]", "given the previous [Wilson 95%]")
        lines.append(f"  position  {head[0]:39s}  {head[1]:32s}  i.i.d. alpha2^(i+1)")
        for i, (p, c) in enumerate(zip(self.by_position, self.conditional)):
            iid = f"{self.alpha2 ** (i + 1):.3f}" if self.alpha2 is not None else "n/a"
            lines.append(f"  {i:8d}  {_prop(p):39s}  {_prop(c):32s}  {iid}")
        if self.iid_p_value is not None:
            verdict = "not rejected" if self.iid_p_value >= 0.05 else "rejected at 5%"
            lines.append(f"  same acceptance at every position (chi-square on the conditionals): "
                         f"p = {self.iid_p_value:.3g}, {verdict}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _ci(ci: tuple[float, float] | None) -> str:
    return f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""


def _prop(p: Proportion) -> str:
    return "n/a" if p.n == 0 else f"{p.p:.3f} [{p.lo:.3f}, {p.hi:.3f}] ({p.k}/{p.n})"


def _show(s: Series) -> str:
    """A series as the text format writes it: ``name{label="value",...}``."""
    return s[0] + ("{" + ",".join(f'{k}="{v}"' for k, v in s[1]) + "}" if s[1] else "")


# ----------------------------------------------------------------------------- reading dumps


def parse_dump(text: str, source: str) -> dict[Series, float]:
    """The spec-decode counters' samples of one Prometheus text dump, keyed by (name without ``_total``, labels).

    Other metrics (and a counter's ``_created`` sample) are skipped.  A series given twice with different values is
    an InputError."""
    out: dict[Series, float] = {}
    for no, line in enumerate(text.splitlines(), 1):
        m = _SAMPLE.match(line)
        if line.lstrip().startswith("#") or m is None:
            continue
        name = m.group(1).removesuffix("_total")
        if name not in COUNTERS:
            continue
        key = (name, tuple(sorted(_LABEL.findall(m.group(2) or ""))))
        try:
            value = float(m.group(3))
        except ValueError:
            raise InputError(f"{source}:{no}: {m.group(1)}: not a number: {m.group(3)!r}") from None
        if key in out and out[key] != value:
            raise InputError(f"{source}:{no}: {_show(key)} appears twice, with {out[key]:g} and {value:g}")
        out[key] = value
    return out


def read_dump(path: str) -> dict[Series, float]:
    """:func:`parse_dump` of a file (an OSError for a missing one; InputError for one that is not text)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a Prometheus text dump (not UTF-8 text)") from None
    return parse_dump(text, path)


def pick_model(dumps: list[dict[Series, float]], model: str | None, where: str) -> list[dict[Series, float]]:
    """The series of one ``model_name``: ``model``, or the only one; several without ``model``: InputError."""
    models = sorted({v for d in dumps for _, labels in d for k, v in labels if k == "model_name"})
    if model is None:
        if len(models) > 1:
            raise InputError(f"{where}: counters of {len(models)} models ({', '.join(models)}): pick one with "
                             "--vllm-model NAME")
        return dumps
    if model not in models:
        raise InputError(f"--vllm-model {model}: not in {where} (its models: {', '.join(models) or 'none named'})")
    return [{s: v for s, v in d.items() if ("model_name", model) in s[1]} for d in dumps]


def check_counters(dump: dict[Series, float], source: str) -> None:
    """Every spec-decode counter present, else InputError naming the missing ones."""
    missing = [c for c in COUNTERS if not any(name == c for name, _ in dump)]
    if missing:
        raise InputError(f"{source}: no {', '.join(missing)} (vLLM exports them with speculative decoding on; "
                         "dump /metrics of that server)")


def window(before: dict[Series, float], after: dict[Series, float], names: tuple[str, str]) -> dict[Series, float]:
    """``after - before``, series by series; a counter that went down (a restarted server) is an InputError."""
    out = dict(after)
    for s, b in before.items():
        a = after.get(s, 0.0)
        if a < b:
            raise InputError(f"{names[1]}: counter {_show(s)} went down from {b:g} to {a:g} since {names[0]} "
                             "(a restarted server? take both dumps from one server run)")
        out[s] = a - b
    return out


# ----------------------------------------------------------------------------- the fit


def totals(dump: dict[Series, float]) -> tuple[int, int, int, list[int], int]:
    """(drafts, draft tokens, accepted, accepted per position 0 .. k-1, label sets) summed over label sets."""
    sums = {c: 0.0 for c in COUNTERS}
    per: dict[int, float] = {}
    for (name, labels), v in dump.items():
        if name != PER_POS:
            sums[name] += v
            continue
        pos = dict(labels).get("position", "")
        if not pos.isdigit():
            raise InputError(f"{_show((name, labels))}: expected a label position=\"0\", \"1\", ...")
        per[int(pos)] = per.get(int(pos), 0.0) + v
    k = max(per) + 1 if per else 0
    sets = len({labels for name, labels in dump if name == DRAFTS})
    return (round(sums[DRAFTS]), round(sums[DRAFT_TOKENS]), round(sums[ACCEPTED]),
            [round(per.get(i, 0.0)) for i in range(k)], sets)


def _alpha_at(tokens_per_pass: float, k2: int) -> float:
    """solve_alpha with the ends of its range: 0 at one token per pass or fewer, 1 at k2 or more."""
    if tokens_per_pass <= 1:
        return 0.0
    if tokens_per_pass >= k2:
        return 1.0
    return solve_alpha(tokens_per_pass, k2)


def alpha2_interval(drafts: int, per_pos: list[int], accepted: int) -> tuple[float, float]:
    """95% interval of ``alpha2``: a normal interval on the mean accepted tokens per draft, mapped through
    ``(1 - a^k2)/(1 - a) = 1 + mean`` (increasing in ``a``).

    The accepted tokens of a draft are ``L = sum_{i<k} 1[L > i]``, so ``E[L] = sum_i c_i / N`` and, as
    ``L^2 = sum_{i<L} (2i + 1)``, ``E[L^2] = sum_i (2i + 1) c_i / N``: the per-position counts give the variance
    ``E[L^2] - E[L]^2`` of one draft without the histogram; the mean of ``N`` drafts has ``var / N``.
    """
    n, k2 = drafts, len(per_pos) + 1
    mean = sum(per_pos) / n
    second = sum((2 * i + 1) * c for i, c in enumerate(per_pos)) / n
    half = Z95 * math.sqrt(max(second - mean * mean, 0.0) / n)
    centre = accepted / n  # vLLM's mean (sum(per_pos) == accepted in a consistent dump)
    return _alpha_at(1 + centre - half, k2), _alpha_at(1 + centre + half, k2)


def _check_positions(drafts: int, per_pos: list[int], where: str) -> None:
    """Position i is reached only by drafts that reached i - 1: the counts cannot grow with the position."""
    for i, c in enumerate(per_pos):
        prev = drafts if i == 0 else per_pos[i - 1]
        if c > prev:
            of = "the drafts" if i == 0 else f"position {i - 1}'s"
            raise InputError(f"{where}: {PER_POS} at position {i} ({c}) exceeds {of} ({prev}): not vLLM's counting")


def fit(dump: dict[Series, float], sources: tuple[str, ...], model: str | None = None) -> VllmCalibration:
    """Acceptance per position, mean acceptance length and ``alpha2`` with its interval (module docstring)."""
    n, d, acc, per, sets = totals(dump)
    where = sources[0] if len(sources) == 1 else f"the window {sources[0]} -> {sources[1]}"
    if n <= 0:
        raise InputError(f"{where}: no drafts ({DRAFTS} is {n}"
                         f"{' in the window' if len(sources) > 1 else ''}): nothing to fit")
    if not per:
        raise InputError(f"{where}: {PER_POS} has no position")
    _check_positions(n, per, where)
    k, notes = len(per), []
    k2 = k + 1
    # a_i = c_i / N; conditional a_i / a_(i-1) = c_i / c_(i-1) (c_(-1) = N): each a Wilson proportion
    by_pos = tuple(Proportion.of(c, n) for c in per)
    cond = tuple(Proportion.of(c, n if i == 0 else per[i - 1]) for i, c in enumerate(per))
    # tokens per pass 1 + A/N = E[min(X, k) + 1] = sum_{i<k2} a^i = (1 - a^k2)/(1 - a) under i.i.d. acceptance
    alpha2 = solve_alpha(1 + acc / n, k2)
    ci = alpha2_interval(n, per, acc) if alpha2 is not None else None
    if alpha2 is None:
        notes.append("no draft token accepted" if acc == 0 else "every draft token accepted" if acc >= k * n else
                     "the mean acceptance length is outside what k2 positions allow")
    if sum(per) != acc:
        notes.append(f"the per-position counts sum to {sum(per)}, {ACCEPTED} is {acc}: dumps of another moment?")
    if d < k * n:
        notes.append(f"{d / n:.3f} tokens drafted per draft, fewer than k = {k}: the proposer (n-gram?) sometimes "
                     "drafts fewer; alpha2 assumes k every time")
    return VllmCalibration(sources, model, sets, n, d, acc, k, k2, 1 + acc / n, acc / d if d else math.nan, d / n,
                           by_pos, cond, alpha2, ci, _chi2_homogeneity(cond), tuple(notes))


def read_vllm_metrics(spec: str, model: str | None = None) -> VllmCalibration:
    """Fit ``FILE`` or the window ``BEFORE,AFTER`` (comma-separated) of vLLM Prometheus text dumps."""
    paths = tuple(p.strip() for p in spec.split(","))
    if len(paths) > 2 or not all(paths):
        raise InputError(f"--vllm-metrics {spec!r}: expected FILE or BEFORE,AFTER")
    dumps = [read_dump(p) for p in paths]
    for p, dmp in zip(paths, dumps):
        check_counters(dmp, p)
    dumps = pick_model(dumps, model, " and ".join(paths))
    for p, dmp in zip(paths, dumps):
        check_counters(dmp, p + (f" (model {model})" if model else ""))
    dump = dumps[0] if len(dumps) == 1 else window(dumps[0], dumps[1], paths)
    return fit(dump, paths, model)
