"""Paper check: predict every speedup the sources report, each on its source's hardware through the hardware model.

``python studies/paper_check.py [--steps 20000] [--jobs 2] [--out figures]`` (4 min on a loaded 2-core AMD EPYC)

Every row and every input is in ``studies/data/paper_check/reported.json``
(schema at its top): for each input its value, its status (``stated`` by the
row's own source, ``borrowed`` from another experiment, or ``assumed``) and
where it comes from.  Nothing here is an input; the script only applies the
file's ``model`` rules:

- **hardware**: the target on ``target_hw`` and the draft on ``draft_hw``
  (``DEVICE:tpN`` of :mod:`lrsim.gpu`; the paper's rows: the 32B target on two
  H100s at TP 2, the draft on an H100 of its own; the official README's: two
  H200s at TP 2 and an H200 of its own), on the model's ``vllm-0.10`` engine
  (the official code pins vLLM 0.10.1 and runs CUDA graphs) plus that code's
  client overhead on every pass (``studies/fit_engines.py``: its README's
  autoregressive row less the engine's step; every token streamed into its own
  Python loop), with the context growing through each request (the file's
  ``model.pricing``); a what-if column prices the same rows as the previous
  version did: transformers' kernel sums at context 0;
- **validation** rows (``forward``): :func:`lrsim.prediction.compose.predict` with the
  inputs as given (async, ``k1 = gamma + 1``; alpha2 from an n-gram-alone
  speedup, inferred on the hardware it was measured on);
- **consistency** rows (``composition``): alpha1 inferred by bisection from the
  same setup's LR-alone speedup, then LR + n-gram predicted: does ``h = f g``
  compose on this hardware?  A separate table and summary, never mixed into the
  validation summaries;
- **not predicted**: the LR-alone range over unnamed rows (shown as a range),
  the draft-model SD rows (no token acceptance stated) and the reported numbers
  used as inputs.

Summaries: every validation row; those whose inputs are all ``stated``; those
with no ``assumed`` input.  Writes ``figures/paper_check.{json,html,png}``.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from lrsim import theory
from lrsim.atomic import atomic_write
from lrsim.cost.hardware import HardwareSpec
from lrsim.dists import Constant, parse_dist
from lrsim.errors import InputError, OneLineParser, run_command
from lrsim.gpu.synthesize import Grid, parse_spec, synthesize
from lrsim.latency.profile import Profile
from lrsim.plots import save_figure
from lrsim.prediction.calibrate import solve_alpha
from lrsim.prediction.compose import Behaviour, predict
from lrsim.prediction.compose import run as simulate_outcome
from lrsim.prediction.outcome import TINY_C2
from lrsim.trace import Setting

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "studies" / "data" / "paper_check" / "reported.json"
STATUSES = ("stated", "borrowed", "assumed")
TABLES = ("validation", "consistency", "not_predicted")
NEEDS = {  # inputs each kind of row must have
    "forward": {"target_hw", "draft_hw", "target_arch", "draft_arch", "mode", "alpha1", "gamma", "verifier_s",
                "request_tokens", "step_tokens", "prompt_tokens"},
    "composition": {"target_hw", "draft_hw", "target_arch", "draft_arch", "mode", "lr_alone", "gamma", "verifier_s",
                    "request_tokens", "step_tokens", "prompt_tokens", "ngram_tokens"},
    "range": {"target_hw", "draft_hw", "pairs", "mode", "alpha1", "gamma", "verifier_s", "request_tokens",
              "step_tokens", "prompt_tokens"},
    "unpredictable": set(), "input": set(),
}
TOKEN_ALONE = ("ngram_alone", "sd_alone")  #: a token-speculation-alone speedup alpha2 is inferred from
PLATEAU_K1 = range(2, 11)
WITHIN = 0.10


# ----------------------------------------------------------------------------- the data file


def load(path: Path) -> dict:
    """The data file, validated.  :raises InputError: unreadable, not JSON, or invalid (one line)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {type(e).__name__}: {e}") from None
    validate(data, str(path))
    return data


def resolve(data: dict, row: dict) -> dict:
    """The row's inputs, ``shared:NAME`` references replaced by the shared entries."""
    out = {}
    for name, v in row["inputs"].items():
        if isinstance(v, str):
            if not v.startswith("shared:") or v[7:] not in data.get("shared", {}):
                raise InputError(f"row {row['id']}: input {name} = {v!r} names no shared entry")
            v = data["shared"][v[7:]]
        out[name] = v
    return out


def by_id(data: dict) -> dict:
    return {r["id"]: r for r in data["rows"]}


def validate(data: dict, where: str = "data") -> None:
    """Every row well formed, every input tagged, provenance acyclic and never the row's own speedup.

    :raises InputError: the first problem found, in one line naming the row.
    """
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise InputError(f"{where}: expected an object with a list 'rows'")
    rows, seen = by_id(data), set()
    if len(rows) != len(data["rows"]):
        raise InputError(f"{where}: row ids are not unique")
    for r in data["rows"]:
        _check_row(data, rows, r, where)
        key = (r["table"], r["experiment"])
        if r["table"] != "not_predicted" and key in seen:
            raise InputError(f"{where}: row {r['id']}: experiment {r['experiment']!r} is already in the "
                             f"{r['table']} table (count each experiment once)")
        seen.add(key)
    for r in data["rows"]:  # no chain of from_row leads back to the row
        chain, cur = [r["id"]], r
        while True:
            nxt = [v["from_row"] for v in resolve(data, cur).values() if v.get("from_row")]
            if not nxt:
                break
            if any(n in chain for n in nxt):
                raise InputError(f"{where}: row {r['id']}: its inputs derive from its own reported speedup "
                                 f"({' -> '.join(chain + nxt[:1])})")
            chain.append(nxt[0])
            cur = rows[nxt[0]]


def _check_row(data: dict, rows: dict, r: dict, where: str) -> None:
    rid = r.get("id", "?")
    for key in ("id", "table", "group", "label", "kind", "experiment", "reported", "inputs"):
        if key not in r:
            raise InputError(f"{where}: row {rid}: no {key!r}")
    if r["table"] not in TABLES or r["kind"] not in NEEDS:
        raise InputError(f"{where}: row {rid}: table {r['table']!r} / kind {r['kind']!r} unknown")
    if not isinstance(r["reported"], dict) or "value" not in r["reported"] or not r["reported"].get("source"):
        raise InputError(f"{where}: row {rid}: 'reported' needs a value and a source")
    inp = resolve(data, r)
    missing = NEEDS[r["kind"]] - set(inp)
    if r["kind"] == "composition" and not set(TOKEN_ALONE) & set(inp):
        missing.add("ngram_alone")
    if missing:
        raise InputError(f"{where}: row {rid}: missing input(s) {', '.join(sorted(missing))}")
    for name, v in inp.items():
        if not isinstance(v, dict) or "value" not in v or v.get("status") not in STATUSES or not v.get("source"):
            raise InputError(f"{where}: row {rid}: input {name} needs a value, a status ({', '.join(STATUSES)}) "
                             "and a source")
        src = v.get("from_row")
        if src is not None:
            if src == rid:
                raise InputError(f"{where}: row {rid}: input {name} is derived from this row's own reported speedup")
            if src not in rows or rows[src]["reported"]["value"] != v["value"]:
                raise InputError(f"{where}: row {rid}: input {name} cites row {src!r}, which does not report "
                                 f"{v['value']}")
            if r["table"] == "validation" and rows[src]["kind"] != "input":
                raise InputError(f"{where}: row {rid}: a validation row may take inputs only from rows of kind "
                                 f"'input', not from {src!r}")
        if v.get("measured_in") not in (None, "same") and v["measured_in"] not in rows:
            raise InputError(f"{where}: row {rid}: input {name} measured in unknown row {v['measured_in']!r}")


def statuses(data: dict, row: dict) -> dict:
    """Input name -> status."""
    return {k: v["status"] for k, v in resolve(data, row).items()}


# ----------------------------------------------------------------------------- inputs -> lrsim objects


ENGINE = "vllm-0.10"  #: the release the official LR code pins (0.10.1), for every row (the paper's too)
CLIENT_FILE = Path(__file__).resolve().parent / "data" / "paper_check" / "client-overhead.json"
PRICINGS = {"vllm": "the vllm-0.10 engine's step times plus the official code's client overhead per pass, the "
                    "context growing through each request",
            "hf-eager": "transformers' kernel sums at context 0 (the previous version's pricing)"}


@functools.lru_cache(maxsize=1)
def client_us() -> float:
    """The official LR code's client time per pass (``studies/fit_engines.py`` writes it)."""
    return float(json.loads(CLIENT_FILE.read_text(encoding="utf-8"))["client_us"])


def with_client(p: Profile, us: float) -> Profile:
    """``p`` with ``us`` added to every pass and prefill (the client's loop waits on every engine step)."""
    def add(ms):
        return tuple(add(x) for x in ms) if isinstance(ms, tuple) else (None if ms is None else ms + us / 1e3)

    archs = {n: replace(a, ms=add(a.ms), prefill=replace(a.prefill, ms=add(a.prefill.ms)) if a.prefill else None)
             for n, a in p.archs.items()}
    return replace(p, archs=archs, description=p.description + f"; plus the official LR client's {us:g} us per pass")


@functools.lru_cache(maxsize=64)
def profile(target_hw: str, target_arch: str, draft_hw: str, draft_arch: str, pricing: str = "vllm") -> Profile:
    """The target on ``target_hw`` and the draft on ``draft_hw`` (its own GPU), from the hardware model.

    ``pricing``: ``vllm`` (the engine's wall time per step over the whole context grid: the context grows through
    each request) or ``hf-eager`` (the what-if: transformers' kernel sums at context 0).
    """
    grid = Grid() if pricing == "vllm" else Grid(context=(0,))
    suffix = f":{ENGINE}:wall" if pricing == "vllm" else ":hf-eager:kernel"
    parts = [synthesize(parse_spec(hw + suffix), arch, grid=grid)
             for hw, arch in ((target_hw, target_arch), (draft_hw, draft_arch))]
    if pricing == "vllm":
        parts = [with_client(p, client_us()) for p in parts]
    t, d = parts
    if target_arch == draft_arch:
        raise InputError(f"target and draft are both {target_arch}")
    name = f"{t.name}+draft-{d.name}" + ("" if pricing == "vllm" else "-ctx0")
    return replace(t, name=name, archs={**t.archs, **d.archs},
                   description=f"target {t.description}; draft {d.description}")


def hardware(inp: dict, pricing: str = "vllm", target_arch: str | None = None, draft_arch: str | None = None):
    """The row's :class:`HardwareSpec` (the verifier's latency as a constant)."""
    t, d = target_arch or inp["target_arch"]["value"], draft_arch or inp["draft_arch"]["value"]
    prof = profile(inp["target_hw"]["value"], t, inp["draft_hw"]["value"], d, pricing)
    return HardwareSpec(prof, t, d, verifier_latency=Constant(float(inp["verifier_s"]["value"])))


def behaviour(inp: dict, alpha1: float, steps: str | None = None, alpha2: float | None = None,
              request: int | None = None) -> Behaviour:
    return Behaviour(alpha1=alpha1, alpha2=alpha2, step_tokens=parse_dist(steps or inp["step_tokens"]["value"]),
                     request_tokens=Constant(request or inp["request_tokens"]["value"]),
                     prompt_tokens=int(inp["prompt_tokens"]["value"]), source="numbers")


def step_variants(inp: dict) -> list[str]:
    """The central step-length distribution, then its band."""
    st = inp["step_tokens"]
    return [st["value"]] + list(st.get("band", []))


def token_alpha(data: dict, row: dict, inp: dict, pricing: str = "vllm") -> tuple[float | None, float | None, int]:
    """(alpha2 on the hardware model, the closed form's alpha2, k2) from the row's token-speculation-alone speedup.

    ``S = E T(1,1) / T(1,k2)`` with ``E = (1 - a^k2)/(1 - a)``, on the target, hardware, n-gram tokens and request
    of the row it was measured in (``T`` averaged over the request's contexts when the context grows); the closed
    form's alpha2 solves ``E = S`` (n-gram passes free).  No such input: (None, None, 1).
    """
    name = next((n for n in TOKEN_ALONE if n in inp), None)
    if name is None:
        return None, None, 1
    x = inp[name]
    src = inp if x.get("measured_in", "same") == "same" else resolve(data, by_id(data)[x["measured_in"]])
    k2 = int(src["ngram_tokens"]["value"]) + 1
    arch = src["target_arch"]["value"]
    prof = profile(src["target_hw"]["value"], arch, src["draft_hw"]["value"], src["draft_arch"]["value"], pricing)
    p0, req = int(src["prompt_tokens"]["value"]), int(src["request_tokens"]["value"])
    ctx = np.linspace(p0, p0 + req, 33) if pricing == "vllm" else [0.0]
    r = (sum(prof.time_ms(arch, L, 1, k2, "linear") for L in ctx) / sum(prof.time_ms(arch, L, 1, 1, "linear")
                                                                         for L in ctx))
    a, acf = solve_alpha(x["value"] * r, k2), solve_alpha(x["value"], k2)
    if a is None or acf is None:
        raise InputError(f"row {row['id']}: {name} {x['value']}x is out of reach with {k2 - 1} tokens on "
                         f"{prof.name} (cost ratio {r:.3f})")
    return a, acf, int(inp["ngram_tokens"]["value"]) + 1


def k1_of(inp: dict) -> int:
    return int(inp["gamma"]["value"]) + 1  # async: gamma drafts and gamma + 1 target steps ahead (model.k1)


def closed_form(a1: float, c1: float, k1: int, a2: float | None, k2: int) -> float:
    g = float(theory.g(a2, TINY_C2, k2)) if a2 is not None and k2 > 1 else 1.0
    return float(theory.f_async(a1, c1, k1)) * g


def infer_alpha1(hw: HardwareSpec, inp: dict, steps_dist: str, k1: int, lr_alone: float, steps: int) -> float | None:
    """alpha1 at which LR alone (``k1``, no n-gram) simulates ``lr_alone`` on ``hw`` (bisection, 12 halvings)."""
    mode = inp["mode"]["value"]

    def f(a: float) -> float:
        return simulate_outcome(behaviour(inp, a, steps_dist), hw, Setting(mode, k1, 1), steps, 0).speedup
    lo, hi = 0.0, 1.0
    if not f(lo) <= lr_alone <= f(hi):
        return None
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < lr_alone else (lo, mid)
    return (lo + hi) / 2


# ----------------------------------------------------------------------------- the row logic


def forward(data: dict, row: dict, steps: int) -> dict:
    """Central prediction, its interval over the input bands, the closed form and the previous pricing's what-if."""
    inp = resolve(data, row)
    hw, mode = hardware(inp), inp["mode"]["value"]
    a2, a2cf, k2 = token_alpha(data, row, inp)
    a1 = float(inp["alpha1"]["value"])
    if inp["gamma"]["value"] == "plateau":  # the best look-ahead of LR alone
        k1 = max(PLATEAU_K1, key=lambda k: predict(behaviour(inp, a1), hw, Setting(mode, k, k2),
                                                   steps=steps // 2, bootstrap=0).speedup)
    else:
        k1 = k1_of(inp)
    p = predict(behaviour(inp, a1, alpha2=a2), hw, Setting(mode, k1, k2), steps=steps, bootstrap=0)
    lows, highs = [p.speedup_ci95[0]], [p.speedup_ci95[1]]
    alphas = sorted({a1, *inp["alpha1"].get("band", [])})
    for a, s in itertools.product(alphas, step_variants(inp)):
        if (a, s) != (a1, inp["step_tokens"]["value"]):
            q = predict(behaviour(inp, a, s, a2), hw, Setting(mode, k1, k2), steps=steps // 2, bootstrap=0)
            lows.append(q.speedup_ci95[0])
            highs.append(q.speedup_ci95[1])
    c2a, _, _ = token_alpha(data, row, inp, "hf-eager")
    growing = predict(behaviour(inp, a1, alpha2=c2a), hardware(inp, "hf-eager"), Setting(mode, k1, k2),
                      steps=steps // 2, bootstrap=0)
    cf = (max(closed_form(a1, p.c1, k, a2cf, k2) for k in PLATEAU_K1) if inp["gamma"]["value"] == "plateau"
          else closed_form(a1, p.c1, k1, a2cf, k2))
    return {"predicted": p.speedup, "lo": min(lows), "hi": max(highs), "closed_form": cf,
            "previous": growing.speedup,
            "extra": {"c1": p.c1, "k1": k1, "k2": k2, "alpha2": a2, "alpha2_hf_eager_ctx0": c2a}}


def composition(data: dict, row: dict, steps: int) -> dict:
    """LR + n-gram from the same setup's LR-alone speedup (alpha1 by bisection) and a token-alone speedup."""
    inp = resolve(data, row)
    hw, mode, k1 = hardware(inp), inp["mode"]["value"], k1_of(inp)
    a2, a2cf, k2 = token_alpha(data, row, inp)
    lr = float(inp["lr_alone"]["value"])
    preds, alphas = [], []
    for i, s in enumerate(step_variants(inp)):
        a1 = infer_alpha1(hw, inp, s, k1, lr, max(steps // 5, 200))
        if a1 is None:
            return {"note": f"LR alone {lr}x is out of the simulator's reach at k1 = {k1} on {hw.name}"}
        alphas.append(a1)
        preds.append(predict(behaviour(inp, a1, s, a2), hw, Setting(mode, k1, k2), bootstrap=0,
                             steps=steps if i == 0 else steps // 2))
    g = float(theory.g(a2cf, TINY_C2, k2))
    return {"predicted": preds[0].speedup, "lo": min(p.speedup_ci95[0] for p in preds),
            "hi": max(p.speedup_ci95[1] for p in preds), "closed_form": lr * g,
            "extra": {"alpha1": alphas[0], "alpha1_band": [min(alphas), max(alphas)], "alpha2": a2, "k1": k1,
                      "k2": k2, "c1": preds[0].c1}}


def range_row(data: dict, row: dict, steps: int) -> dict:
    """A range over unnamed rows: min and max over every pair, acceptance and request length given."""
    inp = resolve(data, row)
    mode, k1, preds, cfs = inp["mode"]["value"], k1_of(inp), [], []
    for (t, d), a1, req in itertools.product(inp["pairs"]["value"], inp["alpha1"]["value"],
                                             inp["request_tokens"]["value"]):
        p = predict(behaviour(inp, a1, request=req), hardware(inp, target_arch=t, draft_arch=d),
                    Setting(mode, k1, 1), steps=steps // 2, bootstrap=0)
        preds.append(p.speedup)
        cfs.append(closed_form(a1, p.c1, k1, None, 1))
    return {"extra": {"predicted_range": [min(preds), max(preds)], "closed_form_range": [min(cfs), max(cfs)]}}


ROW_LOGIC = {"forward": forward, "composition": composition, "range": range_row}


def predict_row(data: dict, row_id: str, steps: int) -> dict:
    """The prediction of one row (what its kind computes); {} for rows that are not predicted."""
    row = by_id(data)[row_id]
    fn = ROW_LOGIC.get(row["kind"])
    return fn(data, row, steps) if fn else {}


# ----------------------------------------------------------------------------- results


@dataclass
class Result:
    """One row of a table."""

    id: str
    table: str
    group: str
    label: str
    kind: str
    reported: float | list
    hardware: str
    statuses: dict  #: input name -> stated | borrowed | assumed
    inputs: list  #: "name = value (status: source)"
    predicted: float | None = None
    lo: float | None = None
    hi: float | None = None
    closed_form: float | None = None
    previous: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)

    def error(self, value: float | None) -> float | None:
        if value is None or not isinstance(self.reported, (int, float)):
            return None
        return value / self.reported - 1

    workload: list = field(default_factory=list)  #: inputs every row assumes alike (model.workload_assumptions)

    @property
    def tier(self) -> str:
        """The weakest status among the inputs: stated < borrowed < assumed."""
        return weakest(self.statuses.values())

    @property
    def core_tier(self) -> str:
        """The weakest status among the inputs apart from the workload assumptions every row shares."""
        return weakest(s for k, s in self.statuses.items() if k not in self.workload)


def weakest(found) -> str:
    return max(found, key=STATUSES.index, default="stated")


def result(data: dict, row: dict, out: dict) -> Result:
    inp = resolve(data, row)
    hw = (f"target {inp['target_hw']['value']}, draft {inp['draft_hw']['value']}" if "target_hw" in inp else "-")
    text = [f"{k} = {v['value']}" + (f" [{', '.join(map(str, v['band']))}]" if "band" in v else "")
            + f" ({v['status']}: {v['source']})" for k, v in inp.items()]
    r = Result(row["id"], row["table"], row["group"], row["label"], row["kind"], row["reported"]["value"], hw,
               statuses(data, row), text, note=out.get("note") or row.get("note", ""), extra=out.get("extra", {}),
               workload=list(data.get("model", {}).get("workload_assumptions", [])))
    for key in ("predicted", "lo", "hi", "closed_form", "previous"):
        setattr(r, key, out.get(key))
    return r


def run_all(data: dict, steps: int, jobs: int) -> list[Result]:
    """Every row's prediction (rows in parallel over ``jobs`` processes; seeded, so ``jobs`` changes no number)."""
    ids = [r["id"] for r in data["rows"]]
    order = sorted(ids, key=lambda i: by_id(data)[i]["kind"] != "composition")  # the slow ones first
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            outs = dict(zip(order, ex.map(predict_row, itertools.repeat(data), order, itertools.repeat(steps))))
    else:
        outs = {i: predict_row(data, i, steps) for i in order}
    return [result(data, r, outs[r["id"]]) for r in data["rows"]]


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.1f}%" if pct else f"{x:.2f}"


def _counts(r: Result) -> str:
    n = [sum(s == k for s in r.statuses.values()) for k in STATUSES]
    return "/".join(map(str, n))


def markdown(results: list[Result], table: str) -> str:
    rows = [r for r in results if r.table == table]
    if table == "not_predicted":
        lines = ["| row | kind | reported | predicted | why |", "|---|---|---|---|---|"]
        for r in rows:
            pr = r.extra.get("predicted_range")
            pred = (f"{pr[0]:.2f}-{pr[1]:.2f} (closed form {r.extra['closed_form_range'][0]:.2f}-"
                    f"{r.extra['closed_form_range'][1]:.2f})" if pr else "-")
            rep = (f"{r.reported[0]:.2f}-{r.reported[1]:.2f}" if isinstance(r.reported, list)
                   else f"{r.reported:.2f}")
            lines.append(f"| {r.label} | {r.kind} | {rep} | {pred} | {r.note} |")
        return "\n".join(lines)
    head = ("| row | hardware | inputs stated/borrowed/assumed (weakest apart from the workload lengths) | "
            "predicted [interval] | reported | error | closed form | error | previous pricing (what-if) | error |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = f"{fmt(r.predicted)} [{fmt(r.lo)}, {fmt(r.hi)}]" if r.predicted is not None else (r.note or "-")
        lines.append(f"| {r.label} | {r.hardware} | {_counts(r)} ({r.core_tier}) | {pred} | {fmt(r.reported)} | "
                     f"{fmt(r.error(r.predicted), True)} | {fmt(r.closed_form)} | {fmt(r.error(r.closed_form), True)} "
                     f"| {fmt(r.previous)} | {fmt(r.error(r.previous), True)} |")
    return "\n".join(lines)


def summary_line(name: str, rows: list[Result]) -> str:
    """Mean |error|, worst, within 10%: the simulator, the closed form and the previous pricing's what-if."""
    rows = [r for r in rows if r.predicted is not None]
    if not rows:
        return f"- {name}: none"
    e = [abs(r.error(r.predicted)) for r in rows]
    worst = max(rows, key=lambda r: abs(r.error(r.predicted)))
    c = [abs(r.error(r.closed_form)) for r in rows]
    out = (f"- {name} ({len(rows)}): mean |error| {100 * np.mean(e):.1f}%, worst "
           f"{fmt(worst.error(worst.predicted), True)} ({worst.label}), {sum(x <= WITHIN for x in e)} of {len(rows)} "
           "within 10%; closed form mean |error| "
           f"{100 * np.mean(c):.1f}%, {sum(x <= WITHIN for x in c)} within 10%")
    w = [abs(r.error(r.previous)) for r in rows if r.previous is not None]
    if w:
        out += (f"; priced as before (hf-eager kernel sums, context 0) {100 * np.mean(w):.1f}%, "
                f"{sum(x <= WITHIN for x in w)} within 10%")
    return out


def setups(rows: list[Result]) -> set[tuple]:
    """The distinct (group, target, hardware, acceptance) setups behind ``rows``: what is really independent."""
    def key(r: Result) -> tuple:
        v = {s.split(" = ", 1)[0]: s.split(" = ", 1)[1].split(" (", 1)[0] for s in r.inputs if " = " in s}
        return (r.group, v.get("target_arch"), v.get("target_hw"), v.get("alpha1"))
    return {key(r) for r in rows}


def summaries(results: list[Result]) -> list[str]:
    """All validation rows; those with every input stated; the same apart from the shared workload assumptions
    (subsets by input status only: a rule about the inputs, never about the errors)."""
    val = [r for r in results if r.table == "validation"]
    shared = ", ".join(val[0].workload) if val and val[0].workload else "none"
    stated = [r for r in val if r.tier == "stated"]
    lines = [summary_line("validation rows, all", val),
             summary_line("validation rows whose inputs are all stated", stated)]
    if not stated:
        blocking = sorted({k for r in val for k, s in r.statuses.items() if s != "stated"})
        lines[-1] += f" (every row has a borrowed or assumed input among: {', '.join(blocking)})"
    lines += [summary_line(f"validation rows whose inputs are all stated apart from the workload assumptions every "
                           f"row shares ({shared})", [r for r in val if r.core_tier == "stated"]),
              summary_line(f"validation rows with no assumed input apart from those ({shared})",
                           [r for r in val if r.core_tier != "assumed"]),
              f"- setups behind the validation rows (rows sharing a target, hardware and acceptance are not "
              f"independent): {len(setups(val))}",
              summary_line("consistency checks (composition; not validation)",
                           [r for r in results if r.table == "consistency"])]
    return lines


def row_by_row(results: list[Result]) -> str:
    """Every row with each input's value, status and source (printed before the tables)."""
    out = []
    for r in results:
        pred = (f"predicted {fmt(r.predicted)} [{fmt(r.lo)}, {fmt(r.hi)}], error {fmt(r.error(r.predicted), True)}"
                if r.predicted is not None else (r.note or "not predicted"))
        out.append(f"[{r.id}] ({r.table}) {r.label}: reported {r.reported}; {pred}")
        out += [f"    {s}" for s in r.inputs]
        if r.extra:
            out.append("    derived: " + ", ".join(f"{k} = {_num(v)}" for k, v in r.extra.items() if v is not None))
    return "\n".join(out)


def _num(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_num(x) for x in v) + "]"
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def figure(results: list[Result]) -> go.Figure:
    fig = go.Figure()
    marks = {"stated": "circle", "borrowed": "circle-open", "assumed": "circle-x-open"}
    for table, tier in itertools.product(("validation", "consistency"), STATUSES):
        sel = [r for r in results if r.table == table and r.core_tier == tier and r.predicted is not None]
        if not sel:
            continue
        sym = marks[tier] if table == "validation" else marks[tier].replace("circle", "diamond")
        fig.add_scatter(x=[r.reported for r in sel], y=[r.predicted for r in sel], mode="markers",
                        marker={"symbol": sym, "size": 9},
                        error_y={"type": "data", "symmetric": False, "array": [r.hi - r.predicted for r in sel],
                                 "arrayminus": [r.predicted - r.lo for r in sel], "thickness": 1},
                        text=[r.label for r in sel], name=f"{table}: weakest input {tier} (apart from the workload "
                                                          "lengths)")
    val = [r for r in results if r.table == "validation" and r.predicted is not None]
    fig.add_scatter(x=[r.reported for r in val], y=[r.closed_form for r in val], mode="markers",
                    marker={"symbol": "x", "size": 6, "color": "grey"}, text=[r.label for r in val],
                    name="validation rows: the paper's closed form")
    lim = [0.6, 3.6]
    fig.add_scatter(x=lim, y=lim, mode="lines", line={"color": "black", "width": 1}, name="predicted = reported")
    for f in (1.1, 0.9):
        fig.add_scatter(x=lim, y=[v * f for v in lim], mode="lines", line={"color": "grey", "dash": "dot", "width": 1},
                        showlegend=f == 1.1, name="+-10%")
    fig.update_layout(xaxis_title="reported speedup", yaxis_title="predicted speedup", template="plotly_white",
                      title="Paper check: each row on its source's hardware (vllm-0.10 engine + the LR client, context "
                            "growing)",
                      legend={"orientation": "h", "y": -0.2}, width=1100, height=650, xaxis_range=[0.6, 2.4])
    return fig


def hardware_check(data: dict) -> str:
    """The model's autoregressive speed of the README's target against the README's measured one (its calibration)."""
    readme = next((r for r in data["rows"] if r["id"] == "readme-lr"), None)
    if readme is None:
        return ""
    inp = resolve(data, readme)
    t, p0 = inp["target_arch"]["value"], int(inp["prompt_tokens"]["value"])
    L = p0 + int(inp["request_tokens"]["value"]) / 2
    prof = profile(inp["target_hw"]["value"], t, inp["draft_hw"]["value"], inp["draft_arch"]["value"])
    ms = prof.time_ms(t, L, 1, 1)
    return (f"- hardware check: the model's {t} decode step on {inp['target_hw']['value']} ({ENGINE} engine, plus "
            f"the official client's {client_us():g} us per pass) at the AIME rows' mean context ({L:.0f} tokens) is "
            f"{ms:.1f} ms ({1000 / ms:.1f} tok/s); the official README measured 76.38 tok/s (13.1 ms) for "
            "autoregressive decoding on that hardware (README line 144). Not a check: the client overhead is fitted "
            "on that number (studies/fit_engines.py)")


def report(data: dict | None, results: list[Result]) -> str:
    parts = [row_by_row(results), "", "Validation rows:", "", markdown(results, "validation"), "",
             "Consistency checks (composition; alpha1 from the same setup's LR-alone speedup):", "",
             markdown(results, "consistency"), "", "Not predicted:", "", markdown(results, "not_predicted"), "",
             *summaries(results)]
    if data is not None:
        parts.append(hardware_check(data))
    return "\n".join(parts)


def cpu_model() -> str:
    try:
        return next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> str:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    ap.add_argument("--steps", type=int, default=20_000, help="simulated output steps per central prediction")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="rows simulated in parallel")
    ap.add_argument("--replot", action="store_true", help="print and draw the results of the last run (its JSON)")
    a = ap.parse_args(argv)
    if a.steps < 100 or a.jobs < 1:
        raise InputError("--steps must be >= 100 and --jobs >= 1")
    t0 = time.perf_counter()
    if a.replot:
        try:
            results = [Result(**r) for r in json.loads((a.out / "paper_check.json").read_text())["rows"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{a.out / 'paper_check.json'}: cannot replot ({type(e).__name__}: {e})") from None
        data = None
    else:
        data = load(a.data)
        results = run_all(data, a.steps, a.jobs)
        meta = {"steps": a.steps, "jobs": a.jobs, "wall_s": round(time.perf_counter() - t0, 1),
                "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"}
        atomic_write(a.out / "paper_check.json", json.dumps({"meta": meta, "rows": [asdict(r) for r in results]},
                                                            indent=1, default=float).encode())
    text = report(data, results)
    written = save_figure(figure(results), a.out / "paper_check")
    return text + "\n" + "\n".join(map(str, written)) + f"\n- wall time {time.perf_counter() - t0:.0f} s"


if __name__ == "__main__":
    raise SystemExit(run_command("paper_check", main))
