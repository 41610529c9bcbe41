"""The trace format: the one contract between the reference decoder (lrref) and lrsim.

Dependency-free (standard library only) so both sides import it.  A trace is a
JSON Lines file, UTF-8, one JSON object per line, flushed as it is written:

1. line 1, a **header** (``"type": "header"``): schema name and version, what
   made the run (``source``), the mode, the configuration, the run in the
   simulator's terms (``setting``, see :class:`Setting`; what calibration and
   replay read), models, backend and hardware.  Only the header is required; a
   run killed after it is a valid, empty trace.
2. any number of **step** records (``"type": "step"``), one per drafted
   candidate (request, cycle, position, branch) or per target-only step,
   written once its fate is known (committed, rejected or cancelled).
3. one **request** record (``"type": "request"``) per finished request.
4. one **pass** record (``"type": "pass"``) per forward pass of a model
   (lrref's llama.cpp and hf backends; not vLLM, whose passes happen inside
   the engine): the raw data of a per-pass cost model.  They are written in
   the order they reach the writer (lr-async's draft process sends its own in
   batches, ahead of the step they belong to), not sorted by ``start``, and
   without a flush of their own (the next step or request record flushes them).
5. one **choice** record (``"type": "choice"``) per cycle of an adaptive run (lrref ``--mode auto``, header
   mode ``auto``, no ``setting``): the configuration the cycle ran and the estimates and costs that chose it,
   written before the cycle's step records.

Times are seconds since the run started (one monotonic clock per run).  A
field that does not apply is ``null``.  Readers skip unknown *fields* (minor
additions keep the version) and refuse unknown *major versions*.

Step record semantics:

- ``cycle`` counts LR cycles of a request: in sync mode one Algorithm 1
  iteration; in async mode a *stage*, which ends at a rejection; in ``ar`` and
  ``sd`` modes every step is its own cycle.
- ``position`` is the step's index inside its cycle (0-based): position ``j``
  holds draft step ``s^_j`` and the target step ``s_j`` written from the
  prefix with ``s^_0 .. s^_{j-1}``.
- ``branch`` is the draft candidate (0..W-1) at that position; target-only
  rows have ``branch = null``.
- ``decision`` is what the verifier said (``null`` if it did not run);
  ``accepted`` is whether this draft was kept in the output (its decision was
  true and every earlier position of the cycle was accepted).
- exactly one row per (request, cycle, position) that reached the output has
  ``committed`` = ``"draft"`` or ``"target"``; rejected or cancelled rows have
  ``committed = null``.
"""

from __future__ import annotations

import gzip
import inspect
import itertools
import json
import os
import platform
import time
import uuid
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from .atomic import atomic_output
from .errors import InputError
from .fields import option
from .modes import COLOCATED, NGRAM_SUFFIX, REGISTRY, SIM_MODES, VERIFY_CALLS, lookahead_schedule

SCHEMA = "lr-trace"
VERSION = 1  # major version: bump on incompatible changes
SETTING_VERSION = 2  # major version of the header's ``setting`` (2 added ``concurrency``)
SETTING_VERSIONS = (1, 2)  # versions this reader knows; version 1 is a single-request run (concurrency 1)


class TraceError(InputError):
    """A trace that cannot be read at all (missing, no header, wrong schema or version)."""


@dataclass(frozen=True)
class Setting:
    """The header's `setting`: the run in the simulator's terms (`lrsim.sim.SimConfig` fields), with its own
    `version` (1 or 2; readers refuse others).  Version 2 added `concurrency`; a run with concurrency 1 is
    written as version 1 (without the field), so readers of version 1 still read single-request traces, and a
    version-1 setting reads as concurrency 1.  Calibration and replay read a run's configuration only
    from here, so any decoder that writes it can be calibrated and replayed.  A header without it (older traces)
    is decoded from its `config`: lrsim's own fields, or lrref's (`base_mode`; sync `k1 = gamma + 1`, async
    `k1 = gamma`; `k2 = ngram_k + 1`; `per_pair` for lr-sync; `threads=` its `target_threads` in lr-async,
    `threads` otherwise; `concurrency`, else 1)."""

    mode: str = option("'ar' (target only, with or without token speculation), 'sync' or 'async'", "ar")
    k1: int = option("sync: target steps per cycle (drafted steps + 1); async: look-ahead depth; ar: 1", 1)
    k2: int = option("positions per target pass: token-speculation tokens + 1 (1 = none)", 1)
    width: int = option("W: draft candidates per position", 1)
    verify_calls: str = option("sync: 'one' verifier call per cycle, or 'per_pair' (pairs in order up to the "
                               "first rejection)", "one")
    hardware: str = option("label of the hardware share the target ran on, e.g. 'threads=2': latencies are "
                           "calibrated per label", "default")
    concurrency: int = option("requests decoded at once in a closed loop (the next starts when one ends), their "
                              "target steps sharing passes; 1 = one request at a time (version 2)", 1)
    colocated: str = option("roles that ran on the target's device, sharing its time: 'none' (devices of their own), "
                            "'draft', 'verifier' or 'draft+verifier' (lrsim.sim.SimConfig.colocated); written only "
                            "when not 'none' (older readers ignore it)", "none")

    def to_dict(self) -> dict:
        """The header's ``setting`` object, with its version (1 for a single-request run, else 2)."""
        d = asdict(self)
        if self.colocated == "none":
            del d["colocated"]
        if self.concurrency == 1:
            del d["concurrency"]
            return {"version": 1} | d
        return {"version": SETTING_VERSION} | d

    @classmethod
    def from_dict(cls, d: dict) -> "Setting":
        """Read a header's ``setting`` (unknown fields are ignored); :class:`TraceError` if it is not valid."""
        if d.get("version") not in SETTING_VERSIONS:
            raise TraceError(f"unsupported setting version {d.get('version')!r} in the trace header "
                             f"(this reader knows versions {', '.join(map(str, SETTING_VERSIONS))})")
        s = _build(cls, {k: v for k, v in d.items() if k != "concurrency"} if d["version"] == 1 else d)
        if s.mode not in SIM_MODES or s.verify_calls not in VERIFY_CALLS:
            raise TraceError(f"bad setting in the trace header: mode {s.mode!r}, verify_calls {s.verify_calls!r}")
        if s.colocated not in COLOCATED:
            raise TraceError(f"bad setting in the trace header: colocated must be one of {', '.join(COLOCATED)}, "
                             f"got {s.colocated!r}")
        for name in ("k1", "k2", "width", "concurrency"):
            v = getattr(s, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TraceError(f"bad setting in the trace header: {name} must be an integer >= 1, got {v!r}")
        return s



@dataclass
class Header:
    """First line of every trace."""

    source: str = option("what wrote the trace: 'lrref', 'lrsim.sim' (older: 'lrsim.des'), or another tool's name",
                         "unknown")
    mode: str = option("decoding mode: 'ar', 'sd', 'lr-sync' or 'lr-async' (n-gram use is in config)", "ar")
    config: dict = option("decoding configuration (depth, width, n-gram length, caps, sampling, seed, ...)", None)
    setting: dict | None = option("the run in the simulator's terms, read by calibration and replay: "
                                  "`{version, mode, k1, k2, width, verify_calls, hardware}` (see `setting` below); "
                                  "traces without it are read from their config")
    models: dict = option("model names/paths by role: draft, target, verifier", None)
    backend: str | None = option("'hf', 'vllm', 'des', ...")
    hardware: dict = option("machine facts (platform, cpus, threads, device); lrref adds `load` at the end of the "
                            "run (the header line is rewritten at close): what other processes used over the "
                            "trace's window, `other_cores`, `busy`, load averages (`lrref/host/load.py`)", None)
    run_id: str = option("unique id of the run", "")
    created: str = option("UTC start time, ISO 8601", "")
    notes: str | None = option("free text")
    summary: dict | None = option("what the run measured, from writers that write the trace after the run "
                              "(lrsim.sim: speedup, CI, acceptance, ...)")
    type: str = "header"
    schema: str = option(f"always '{SCHEMA}'", SCHEMA)
    version: int = option("major schema version", VERSION)

    def __post_init__(self) -> None:
        self.config = self.config or {}
        self.models = self.models or {}
        self.hardware = self.hardware or machine_facts()
        self.run_id = self.run_id or uuid.uuid4().hex[:12]
        self.created = self.created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class StepRecord:
    """One drafted candidate at one position, or one target-only step."""

    request: int = option("request index within the run", 0)
    cycle: int = option("LR cycle (sync) or stage (async) of the request; step index in ar/sd", 0)
    position: int = option("index of the step inside its cycle, 0-based", 0)
    branch: int | None = option("draft candidate 0..W-1; null for a target-only step")
    draft_start: float | None = option("draft step generation start (s)")
    draft_end: float | None = option("draft step generation end (s)")
    draft_tokens: int | None = option("tokens in the draft step")
    draft_batch: int | None = option("sequences in the draft call that produced it")
    draft_busy: float | None = option("seconds of the draft forward passes it took part in (less than end - start "
                                      "when other work ran between them, e.g. other requests' or models' passes)")
    target_start: float | None = option("target step generation start (s)")
    target_end: float | None = option("target step generation end (s)")
    target_tokens: int | None = option("tokens in the target step")
    target_batch: int | None = option("sequences in the target call that produced it (mean over its passes, all "
                                      "requests' rows counted)")
    target_busy: float | None = option("seconds of the target forward passes it took part in (less than end - "
                                       "start when other work ran between them)")
    target_forwards: int | None = option("target forward passes spent on this step")
    draft_forwards: int | None = option("draft forward passes spent on this step")
    ngram_drafted: int | None = option("tokens proposed by token-level speculation inside the target step")
    ngram_accepted: int | None = option("of those, tokens the target accepted")
    verify_start: float | None = option("verifier start (s)")
    verify_end: float | None = option("verifier end (s)")
    verifier: str | None = option("verifier name: judge, embedding, score, random, exact, math, identical, ...")
    score: float | None = option("verifier score (cosine, judge logit margin, 0-9 score, ...; math: the cosine, "
                                 "null when the numbers disagreed)")
    decision: bool | None = option("verifier verdict: draft equivalent to the target step")
    accepted: bool = option("this draft was kept in the output", False)
    committed: str | None = option("'draft' or 'target' on the row whose step reached the output, else null")
    cancelled: bool = option("work discarded before it finished (async rejection)", False)
    draft_text: str | None = option("draft step text (only with text logging)")
    target_text: str | None = option("target step text (only with text logging)")
    type: str = "step"


@dataclass
class RequestRecord:
    """Summary of one finished request."""

    request: int = option("request index within the run", 0)
    start: float = option("request start (s)", 0.0)
    end: float = option("request end (s)", 0.0)
    prompt_tokens: int | None = option("prompt length in tokens")
    output_tokens: int = option("generated tokens", 0)
    steps: int = option("steps in the output", 0)
    accepted_steps: int = option("output steps that came from accepted drafts", 0)
    finish: str | None = option("'eos', 'max_tokens', 'max_steps', 'error'")
    cycles: int | None = option("LR cycles (sync) or stages (async) of the request; steps in ar/sd")
    first_step: float | None = option("when the request's first step was committed (s): its time to first "
                                      "token, counted in steps")
    text: str | None = option("generated text (only with text logging)")
    answer: str | None = option("extracted final answer (lrref: the last \\boxed{}, else the last number)")
    correct: bool | None = option("answer matches the reference, if one was given (lrref bench writes it)")
    type: str = "request"


PASS_ENGINES = ("target", "draft", "verifier")


@dataclass
class PassRecord:
    """One forward pass of one model: what it fed, over what cached context, and its wall time.

    lrref writes one per pass of each engine: ``llamacpp`` one per `LlamaCppBackend.forward` (one `llama_decode`,
    split into several only beyond `n_batch` tokens), in the main process and, for lr-async, in the draft
    process (sent back to the main trace with the draft steps; its clock is the trace's, both processes reading
    the same monotonic clock); ``hf`` one per model forward (engine passes and judge/score prompts).  The judge
    and score verifiers' passes are `engine = "verifier"`.  ``vllm`` one per engine step that scheduled tokens,
    from its scheduler's output (the engine core runs in lrref's process; rows, tokens and context exact, the step's
    wall time from ``LLMEngine.step``).  Rows of one pass may feed different numbers of positions (a step's prefill
    next to a decode row): `tokens` is their sum, `positions_max` the largest; the hf backend pads every row to
    `positions_max` (and its cache to the longest row, holes included), llama.cpp computes only what is fed."""

    engine: str = option("'target', 'draft' or 'verifier' (judge/score prompts)", "target")
    start: float = option("pass start (s, trace clock)", 0.0)
    seconds: float = option("wall time of the pass (what the backend's forward measures: the model call and "
                            "reading its logits back)", 0.0)
    rows: int = option("sequences in the pass", 1)
    tokens: int = option("positions fed in the pass, all rows: pending or prefill tokens plus n-gram proposals", 1)
    outputs: int = option("positions whose logits the pass computed", 1)
    positions_max: int | None = option("most positions fed to one row")
    context: float = option("tokens already in the KV cache per row before the pass (mean over rows)", 0.0)
    context_max: int | None = option("most tokens already in one row's KV cache")
    threads: int | None = option("compute threads of the model: llama.cpp's threads, torch's intra-op threads")
    requests: list | None = option("requests with rows in the pass (null: not known, e.g. a verifier call)")
    bucket: str | None = option("the shape the pass ran at on lrref's static-cache path (--cuda-graphs; the static "
                                "cache on a CPU): 'ROWSxPOSITIONS@SLOTS', each padded up to its bucket, one CUDA "
                                "graph per bucket; null: the pass ran at its own shape", None)
    type: str = "pass"


@dataclass
class ChoiceRecord:
    """An adaptive run's choice for one cycle of one request (lrref ``--mode auto``, :mod:`lrsim.adaptive`)."""

    request: int = option("request index within the run", 0)
    cycle: int = option("the cycle it chose for (the step records' cycle)", 0)
    config: str = option("the configuration, lrref's name: 'ar', 'sd k2=5', 'lr-sync gamma=3 +sd k2=5'", "ar")
    mode: str = option("its simulator mode: 'ar' or 'sync' ('async' in the simulator)", "ar")
    k1: int = option("its target steps per cycle (sync: gamma + 1; ar: 1)", 1)
    k2: int = option("its positions per target pass (n-gram tokens + 1; 1: none)", 1)
    alpha1: float | None = option("posterior mean of step acceptance when it chose")
    alpha2: float | None = option("posterior mean of token acceptance (n-gram) when it chose")
    step_tokens: float | None = option("tokens per step as estimated when it chose")
    speedup: float | None = option("the configuration's expected speedup over ar at those means and costs "
                                   "(lrsim.adaptive.speedup)")
    best: str | None = option("the best configuration at the means, its speedup times its speed factor (a Thompson "
                              "draw may choose another)")
    target_pass_s: float | None = option("measured cost of a target pass over one position, T(1) (s)")
    target_position_s: float | None = option("measured cost of each further position of a pass, T(2) - T(1) (s)")
    draft_token_s: float | None = option("measured cost of a draft token (s; 0 before the first draft pass)")
    verify_pair_s: float | None = option("measured verifier seconds per step pair (0 before the first call)")
    speed_factors: dict[str, float] | None = option(
        "what the speed model (lrsim.adaptive.policy.SpeedModel) multiplies each mode family's speedup by, "
        "exp(-estimate) of log(realized / predicted time per kept token): {'ar': ..., 'sync': ...}; absent: "
        "no speed model (speedup is the closed form's, uncorrected)")
    type: str = "choice"


DOC_SECTIONS = {"header": Header, "setting": Setting, "step": StepRecord, "request": RequestRecord,
                "pass": PassRecord, "choice": ChoiceRecord}


def schema_doc() -> str:
    """Field-by-field documentation of the schema (Markdown), generated from the dataclasses."""
    out = [f"# {SCHEMA} version {VERSION}", ""]
    for name, cls in DOC_SECTIONS.items():
        out += [f"## `{name}`", "", inspect.cleandoc(cls.__doc__ or ""), "", "| field | type | meaning |",
                "|---|---|---|"]
        out += [f"| `{f.name}` | `{str(f.type).replace('|', 'or')}` | {f.metadata.get('help', '')} |"
                for f in fields(cls) if f.name != "type"]
        out.append("")
    return "\n".join(out)


def machine_facts() -> dict:
    return {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count()}


def _clean(obj: Any) -> dict:
    return {k: v for k, v in asdict(obj).items() if v is not None or k in ("committed", "decision")}


def _line(obj: Any) -> str:
    """One record as a JSONL line."""
    return json.dumps(_clean(obj), separators=(",", ":"), allow_nan=False) + "\n"


class TraceWriter:
    """Append records to a JSONL trace, one line each, flushed immediately.

    >>> with TraceWriter(path, Header(source="lrsim.sim", mode="sync")) as w:  # doctest: +SKIP
    ...     w.step(StepRecord(request=0, cycle=0, position=0, committed="target"))
    """

    def __init__(self, path: str | os.PathLike, header: Header, fsync: bool = False,
                 at_close: Callable[[Header], None] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = open(self.path, "w", encoding="utf-8")
        self._fsync = fsync
        self._at_close = at_close
        self.t0 = time.perf_counter()
        self.header = header
        self._write(header)

    def now(self) -> float:
        """Seconds since the writer was created (the trace's clock)."""
        return time.perf_counter() - self.t0

    def _write(self, rec: Any) -> None:
        self._fh.write(_line(rec))
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def step(self, rec: StepRecord) -> None:
        self._write(rec)

    def request(self, rec: RequestRecord) -> None:
        self._write(rec)

    def choice(self, rec: ChoiceRecord) -> None:
        self._write(rec)

    def write_pass(self, rec: PassRecord) -> None:
        """A pass record, buffered: the next step or request record (or :meth:`close`) flushes it."""
        self._fh.write(_line(rec))

    def close(self) -> None:
        """Close the file; with ``at_close``, let it update the header, then rewrite the header line atomically
        (:func:`rewrite_header`: a killed run keeps the header it started with)."""
        if self._fh.closed:
            return
        self._fh.close()
        if self._at_close is not None:
            self._at_close(self.header)
            rewrite_header(self.path, self.header)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rewrite_header(path: str | os.PathLike, header: Header) -> None:
    """Replace a plain trace file's first line by ``header``, atomically (a copy with the new first line, then a
    rename: readers see the old file or the new one, never a mix)."""
    p = Path(path)
    with open(p, encoding="utf-8") as src, atomic_output(p, text=True) as dst:
        src.readline()
        dst.write(_line(header))
        for line in src:
            dst.write(line)


@dataclass
class Trace:
    """A parsed trace: header, records, and what the reader had to skip."""

    path: str
    header: Header
    steps: list[StepRecord]
    requests: list[RequestRecord]
    warnings: list[str] = field(default_factory=list)
    passes: list[PassRecord] = field(default_factory=list)
    choices: list[ChoiceRecord] = field(default_factory=list)


def _build(cls, obj: dict):
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in obj.items() if k in known})


def _check_ints(rec: Any, bounds: Iterable[tuple[str, int]]) -> str | None:
    """The first of ``(field, lowest)`` whose value is not an integer at least that low, as a problem."""
    for name, lo in bounds:
        v = getattr(rec, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            return f"field {name!r} must be an integer >= {lo}"
    return None


def _check_step(rec: StepRecord) -> str | None:
    problem = _check_ints(rec, (("request", 0), ("cycle", 0), ("position", 0)))
    if problem:
        return problem
    for a, b in (("draft_start", "draft_end"), ("target_start", "target_end"), ("verify_start", "verify_end")):
        s, e = getattr(rec, a), getattr(rec, b)
        if s is not None and e is not None and e < s:
            return f"{b} < {a}"
    if rec.committed not in (None, "draft", "target"):
        return f"committed must be 'draft', 'target' or null, got {rec.committed!r}"
    return None


def _check_pass(rec: PassRecord) -> str | None:
    if not isinstance(rec.engine, str) or not rec.engine:
        return "field 'engine' must be a name"
    problem = _check_ints(rec, (("rows", 1), ("tokens", 1), ("outputs", 0)))
    if problem:
        return problem
    for name in ("start", "seconds", "context"):
        v = getattr(rec, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            return f"field {name!r} must be a number >= 0"
    return None


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _check_choice(rec: ChoiceRecord) -> str | None:
    problem = _check_ints(rec, (("request", 0), ("cycle", 0), ("k1", 1), ("k2", 1)))
    if problem:
        return problem
    if rec.mode not in SIM_MODES:
        return f"mode must be one of {', '.join(SIM_MODES)}, got {rec.mode!r}"
    f = rec.speed_factors
    if f is not None and not (isinstance(f, dict) and all(k in SIM_MODES and _positive(v) for k, v in f.items())):
        return "field 'speed_factors' must map modes to numbers > 0"
    return None


#: record type -> (class, check returning a problem or None, list of :class:`Trace` it goes to)
_RECORDS = {"step": (StepRecord, _check_step, "steps"), "request": (RequestRecord, lambda rec: None, "requests"),
            "pass": (PassRecord, _check_pass, "passes"), "choice": (ChoiceRecord, _check_choice, "choices")}


def iter_lines(path: Path, warnings: list[str] | None = None) -> Iterator[tuple[int, str]]:
    """Numbered lines of a trace; ``*.gz`` files are read through gzip.

    Corrupt or truncated compressed data ends the file: with a list given, a
    warning naming the file and line is appended to it (else TraceError).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    i = 0
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        try:
            for i, line in enumerate(fh, 1):
                yield i, line
        except (EOFError, OSError, zlib.error) as e:
            msg = f"{path}:{i + 1}: corrupt compressed data, rest of the file skipped ({e})"
            if warnings is None:
                raise TraceError(msg) from None
            warnings.append(msg)


def read_trace(path: str | os.PathLike) -> Trace:
    """Read a trace, keeping every valid record.

    Raises :class:`TraceError` (one-line message naming the file and line) when
    the file is missing or empty, its first line is not a header of this
    schema, or its major version is unknown.  Corrupt or invalid later lines
    (e.g. the half-written last line of a killed run) are skipped with a
    warning naming the file and line.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    header: Header | None = None
    lists: dict[str, list] = {into: [] for _, _, into in _RECORDS.values()}  # Trace field -> its records
    warnings: list[str] = []
    for n, line in iter_lines(p, warnings):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            if header is None:
                raise TraceError(f"{p}:{n}: first line is not a JSON header ({e})") from None
            warnings.append(f"{p}:{n}: skipped corrupt line ({str(e).splitlines()[0][:80]})")
            continue
        kind = obj.get("type")
        if header is None:
            if kind != "header" or obj.get("schema") != SCHEMA:
                raise TraceError(f"{p}:{n}: not an {SCHEMA} trace (first line must be its header)")
            if obj.get("version") != VERSION:
                raise TraceError(f"{p}:{n}: unsupported {SCHEMA} version {obj.get('version')!r} "
                                 f"(this reader knows version {VERSION})")
            header = _build(Header, obj)
            continue
        if kind not in _RECORDS:
            warnings.append(f"{p}:{n}: skipped record of unknown type {kind!r}")
            continue
        cls, check, into = _RECORDS[kind]
        try:
            rec = _build(cls, obj)
        except TypeError as e:
            warnings.append(f"{p}:{n}: skipped {kind} record ({e})")
            continue
        problem = check(rec)
        if problem:
            warnings.append(f"{p}:{n}: skipped {kind} record ({problem})")
        else:
            lists[into].append(rec)
    if header is None:
        raise TraceError(warnings[-1] if warnings else f"{p}: empty trace (no header)")
    return Trace(str(p), header, warnings=warnings, **lists)


def write_trace(path: str | os.PathLike, header: Header, steps: Iterable[StepRecord],
                requests: Iterable[RequestRecord] = (), passes: Iterable[PassRecord] = ()) -> None:
    """Write a whole trace atomically (temporary file, then rename; nothing is left behind on failure)."""
    with atomic_output(path, text=True) as fh:
        for rec in itertools.chain([header], steps, requests, passes):
            fh.write(_line(rec))


def to_chrome_trace(trace: Trace) -> dict:
    """Chrome trace / Perfetto JSON: one complete ("X") event per draft, target and verify span.

    Rows: process = request, thread = draft / target / verifier lane.
    """
    events = []
    lanes = {"draft": 1, "target": 2, "verify": 3}
    for r in {s.request for s in trace.steps}:
        events.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"request {r}"}})
        for lane, tid in lanes.items():
            events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": tid, "args": {"name": lane}})
    for s in trace.steps:
        for lane, tid in lanes.items():
            start, end = getattr(s, f"{lane}_start"), getattr(s, f"{lane}_end")
            if start is None or end is None:
                continue
            events.append({
                "ph": "X", "name": f"c{s.cycle} p{s.position}" + (f" b{s.branch}" if s.branch else ""),
                "cat": lane, "pid": s.request, "tid": tid, "ts": start * 1e6, "dur": (end - start) * 1e6,
                "args": {"accepted": s.accepted, "decision": s.decision, "committed": s.committed,
                         "cancelled": s.cancelled, "tokens": getattr(s, f"{lane}_tokens", None)},
            })
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _clean(trace.header)}


def default_traces() -> list[Path]:
    """The embedded default: real lrref traces shipped inside the package (``lrsim/data/default/``).

    One benchmark run of the reference decoder on the default CPU pair (see
    ``lrsim/data/default/README.md`` for the command and machine); what
    ``lrsim calibrate``, ``lrsim replay`` and ``lrsim plan --trace`` read when
    given no trace.
    """
    folder = Path(__file__).resolve().parent / "data" / "default"
    paths = sorted(folder.glob("*.jsonl.gz"))
    if not paths:
        raise TraceError(f"{folder}: the embedded default traces are missing from this installation")
    return paths


def recorded_setting(header: Header) -> Setting:
    """The run a trace recorded, in the simulator's terms: the header's ``setting``, else decoded from its config.

    Calibration and replay read a trace's configuration only through this
    function.  :class:`TraceError` for a setting of another version or an
    unknown mode.
    """
    if header.setting is not None:
        if not isinstance(header.setting, dict):
            raise TraceError("bad setting in the trace header: not a JSON object")
        return Setting.from_dict(header.setting)
    return _legacy_setting(header)


def _legacy_setting(header: Header) -> Setting:
    """The setting of a header without one: the config of lrsim's event simulator, or of lrref.

    lrref writes ``gamma`` (drafted steps per sync cycle / async look-ahead),
    ``base_mode``, ``ngram_k`` and its thread counts: ``k1`` and the verifier's
    calls follow :func:`lrsim.modes.lookahead_schedule` (sync ``k1 = gamma +
    1``, pair by pair; async ``k1 = gamma``), ``k2`` = n-gram tokens + 1; the
    target ran on ``target_threads`` threads in lr-async (the draft has the
    others), on ``threads`` otherwise.
    """
    cfg = header.config or {}
    if header.mode == "auto":
        raise TraceError("an adaptive trace (lrref --mode auto) ran a configuration per cycle, no one setting: "
                         "its choice records name them")
    if header.source == "lrsim.des" or "k1" in cfg:
        return Setting(str(cfg.get("mode", "ar")), int(cfg.get("k1", 1)), int(cfg.get("k2", 1)),
                       int(cfg.get("width", 1)), str(cfg.get("verify_calls", "one")), "default")
    mode = str(cfg.get("base_mode") or header.mode).removesuffix(NGRAM_SUFFIX)
    k2 = int(cfg.get("k2") or (cfg.get("ngram_k") or cfg.get("ngram") or 0) + 1)
    gamma = int(cfg.get("gamma") or 1)
    width = int(cfg.get("width") or 1)
    spec = REGISTRY.get(mode)
    threads = cfg.get(spec.threads_field if spec else "threads")  # lr-async's target: target_threads
    hardware = f"threads={threads}" if threads else "default"
    n = int(cfg.get("concurrency") or 1)
    try:
        s = lookahead_schedule(mode, gamma)
    except ValueError:
        raise TraceError(f"unknown mode {header.mode!r} in the trace header") from None
    return Setting(s.mode, s.k1, k2, width if s.mode != "ar" else 1, s.verify_calls, hardware, n)


def mode_name(header: Header) -> str:
    """The writer's own name for the run's mode (its config's ``mode``, e.g. lrref's 'lr+sd'), else the header's."""
    return str((header.config or {}).get("mode", header.mode))
