"""Load-aware planning: the best (mode, k1, k2) at each request rate, and a policy table by batch size.

Every candidate (``ar``; ``sd`` with ``k2 >= 2``; LR modes with ``k1 >= 2``;
``k1 x k2 <= M``) is served at every rate with the same requests and
decoding streams (common random numbers: the same seeds for every
candidate), with fewer requests than a full ``lrsim serve`` to stay fast.
The objective is goodput (requests/s meeting every SLO given; ties broken by
mean TPOT) when an SLO is given, else mean time per output token.

The policy table follows vLLM's ``num_speculative_tokens_per_batch_size``
(``vllm/config/speculative.py``: a list of ``[lo, hi, k]`` batch-size ranges,
``k = 0`` switching speculation off): each rate's best configuration applies
from the mean number of running requests it produced (its batch, in
requests) up to the midpoint towards the next rate's; LR's ``(k1, k2)`` and
token SD's ``k2 - 1`` speculative tokens are both listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..errors import InputError
from ..modes import LR_DECODE_MODES
from .config import ServeConfig
from .grid import preflight, run_task
from .metrics import combine

LR = LR_DECODE_MODES


@dataclass(frozen=True)
class Candidate:
    mode: str
    k1: int
    k2: int

    @property
    def label(self) -> str:
        return self.mode if self.mode == "ar" else f"{self.mode} k1={self.k1} k2={self.k2}"


def candidates(modes: Sequence[str], k1_max: int, k2_max: int, budget: int | None) -> list[Candidate]:
    """Every configuration of ``modes`` with ``k1 <= k1_max``, ``k2 <= k2_max`` and ``k1 x k2 <= budget``."""
    out = [Candidate("ar", 1, 1)]
    fits = (lambda k1, k2: budget is None or k1 * k2 <= budget)
    if "sd" in modes:
        out += [Candidate("sd", 1, k2) for k2 in range(2, k2_max + 1) if fits(1, k2)]
    for mode in [m for m in modes if m in LR]:
        out += [Candidate(mode, k1, k2) for k1 in range(2, k1_max + 1) for k2 in range(1, k2_max + 1) if fits(k1, k2)]
    return out


@dataclass
class LoadPlan:
    rates: list[float]
    objective: str  #: 'goodput' or 'tpot_mean'
    rows: list[dict]  #: one per candidate and rate
    best: list[dict]  #: one per rate: the best row, and ar's at that rate
    policy: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"rates": self.rates, "objective": self.objective, "best": self.best, "policy": self.policy,
                "num_speculative_tokens_per_batch_size": vllm_table(self.policy), "rows": self.rows}


def _config(cfg: ServeConfig, c: Candidate) -> ServeConfig:
    return replace(cfg, decode=replace(cfg.decode, k1=max(c.k1, 1), k2=c.k2))


def _better(objective: str, a: dict, b: dict) -> bool:
    """``a`` beats ``b``."""
    if objective == "goodput":
        return (a["goodput"], -a["tpot_mean"]) > (b["goodput"], -b["tpot_mean"])
    return a["tpot_mean"] < b["tpot_mean"]


def load_plan(cfg: ServeConfig, rates: Sequence[float], modes: Sequence[str], k1_max: int, k2_max: int,
              budget: int | None, workers: int | None = None, scheduler: Any = None, progress: bool = False) -> LoadPlan:
    """Serve every candidate at every rate; the best per rate and the policy table."""
    from ..sweep import map_tasks

    cands = candidates(modes, k1_max, k2_max, budget)
    if len(cands) < 2:
        raise InputError("nothing to compare: no speculative candidate within k1/k2 limits and the budget")
    for c in {c.mode: c for c in cands}.values():
        preflight(_config(cfg, c), [c.mode], list(rates))
    tasks = [(_config(cfg, c), c.mode, r, k) for c in cands for r in rates for k in range(cfg.replications)]
    runs = map_tasks(run_task, tasks, workers, scheduler, progress, desc="lrsim plan --rate", unit="run",
                     per_worker=2)
    rows, i, n = [], 0, cfg.replications
    for c in cands:
        for r in rates:
            rows.append({"mode": c.mode, "k1": c.k1, "k2": c.k2, "rate": r} | combine(runs[i:i + n]))
            i += n
    objective = "goodput" if any(x is not None for x in (cfg.slo_ttft_s, cfg.slo_tpot_ms, cfg.slo_e2e_s)) \
        else "tpot_mean"
    best = [_best(rows, r, objective) for r in rates]
    return LoadPlan(list(rates), objective, rows, best, policy_table(best, cfg.max_num_seqs))


def _best(rows: list[dict], rate: float, objective: str) -> dict:
    here = [r for r in rows if r["rate"] == rate]
    top = here[0]
    for r in here[1:]:
        if _better(objective, r, top):
            top = r
    ar = next(r for r in here if r["mode"] == "ar")
    return {"rate": rate, "best": top, "ar": ar}


def policy_table(best: list[dict], max_batch: int) -> list[dict]:
    """Batch-size ranges ``[lo, hi]`` (running requests, inclusive) -> configuration, adjacent equal ones merged."""
    levels, run = [], 0.0
    for b in sorted(best, key=lambda x: x["rate"]):
        run = max(run, b["best"]["running_mean"])  # the batch grows with the load
        levels.append((run, b["best"]))
    table: list[dict] = []
    for i, (level, row) in enumerate(levels):
        lo = 1 if i == 0 else table[-1]["hi"] + 1
        hi = max_batch if i == len(levels) - 1 else max(lo, int((level + levels[i + 1][0]) / 2))
        entry = {"lo": lo, "hi": hi, "mode": row["mode"], "k1": row["k1"], "k2": row["k2"]}
        if table and all(table[-1][k] == entry[k] for k in ("mode", "k1", "k2")):
            table[-1]["hi"] = hi
        elif lo <= hi:
            table.append(entry)
    return table


def vllm_table(policy: list[dict]) -> list[list[int]]:
    """``[[lo, hi, num_speculative_tokens]]``: token speculation ``k2 - 1`` per range (0: off; LR rows keep theirs)."""
    return [[p["lo"], p["hi"], p["k2"] - 1] for p in policy]


def format_plan(p: LoadPlan) -> str:
    obj = "goodput (requests/s meeting the SLO)" if p.objective == "goodput" else "mean time per output token"
    lines = [f"Load-aware plan (objective: {obj}; every candidate on the same requests)",
             f"{'rate':>8s}  {'best':>26s}  {'TPOT ms':>8s}  {'e2e p50 s':>9s}  {'goodput':>8s}  {'batch':>6s}  "
             f"{'ar TPOT ms':>10s}  {'ar goodput':>10s}"]
    for b in p.best:
        t, a = b["best"], b["ar"]
        g = (lambda r: "-" if r.get("goodput") is None else f"{r['goodput']:.3g}")
        label = "ar" if t["mode"] == "ar" else f"{t['mode']} k1={t['k1']} k2={t['k2']}"
        lines.append(f"{b['rate']:>8.3g}  {label:>26s}  {1000 * t['tpot_mean']:>8.2f}  {t['e2e_p50']:>9.3g}  "
                     f"{g(t):>8s}  {t['running_mean']:>6.1f}  {1000 * a['tpot_mean']:>10.2f}  {g(a):>10s}")
    lines += ["", "Policy by batch size (running requests), vLLM style (0 = speculation off):"]
    for e in p.policy:
        what = "0 (ar: speculation off)" if e["mode"] == "ar" else (
            f"sd: k2 = {e['k2']}" if e["mode"] == "sd" else f"{e['mode']}: k1 = {e['k1']}, k2 = {e['k2']}")
        lines.append(f"  batch [{e['lo']}, {e['hi']}]: {what}")
    lines.append(f"  num_speculative_tokens_per_batch_size = {vllm_table(p.policy)}  (token level: k2 - 1)")
    return "\n".join(lines)
