"""Counterfactual continuations (issue 33 item 3): does an accepted draft step change the final answer?

Final-answer accuracy needs ~1,400 problems to show a 3-point loss; every accepted step can be asked directly.
For each accepted non-identical step of a recorded LR trace (text logging on), the target alone continues greedily
twice from the same committed prefix: once after the draft's step (what LR kept) and once after the target's own
step at that position (what ar would have had there); the two final answers are compared.  Per row (verifier):
accepted steps, the share whose continuation changes the final answer and the share that turns a right answer
wrong (and wrong to right), each with its Wilson 95% interval.

``python studies/counterfactual.py --record OUT ROW_DIR... [--limit N] [--dry-run]``: resumable; one line per
step into ``OUT/ROW.jsonl`` (skipped when there), the target Qwen2.5-Coder 1.5B on llama.cpp (the study's), the
run's own system prompt, step cap and token cap (the continuation gets what the run had left).  Every
continuation is up to a few hundred tokens: ``--dry-run`` prints the plan (steps, continuations) before anything
runs.  Record alone on the machine only if you time it; the answers do not depend on the load.

``python studies/counterfactual.py --report OUT [ROW_DIR...]`` prints the table and writes
``figures/counterfactual.{json,html,png}``.  A ROW_DIR recorded with the ``math`` verifier is also split by what the
current rule says of each continued step (:func:`current_math_rule`: the numbers through ``stepmath.agree``, the
cosine the row recorded against its threshold or the prose threshold), since the rule changed after the row ran.
That split is in-sample: the current rule was designed knowing these rows' problems (1-40 of ``gsm8k-test``).

A ROW_DIR is a folder of ``lrref bench`` output with one LR trace (``trace-*.jsonl[.gz]``) and its
``results.json``, e.g. ``studies/data/answer-quality/lr-async-math-0.85``.  The prefix is the committed steps'
texts in commit order, re-encoded (a token boundary can differ from the run's).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from common import FIGURES, traces_of

from lrsim.atomic import atomic_write
from lrsim.errors import InputError, OneLineParser, UsageError, run_command
from lrsim.stats import wilson
from lrsim.trace import read_trace


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, metavar="OUT", help="record the continuations of ROW_DIR's steps into OUT")
    ap.add_argument("--report", type=Path, metavar="OUT", help="report what OUT holds")
    ap.add_argument("rows", nargs="*", type=Path, metavar="ROW_DIR", help="bench folders with an LR trace")
    ap.add_argument("--limit", type=int, default=None, help="at most this many steps per row (a smoke run)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads of the target")
    ap.add_argument("--target", default=None, help="the target (GGUF file or registry name; default: lrref's)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    ap.add_argument("--figures", type=Path, default=FIGURES, help="folder of the report's figure and JSON")
    a = ap.parse_args(argv)
    if (a.record is None) == (a.report is None):
        raise UsageError("give --record OUT ROW_DIR... or --report OUT")
    if a.record is not None and not a.rows:
        raise UsageError("--record needs at least one ROW_DIR")
    return a


@dataclass(frozen=True)
class Case:
    """One accepted non-identical step and the committed text before it."""

    row: str
    request: int
    index: int  #: the step's place among the request's committed steps
    prefix: str
    draft: str
    target: str
    used: int  #: tokens committed before the step
    verifier: str
    score: float | None

    @property
    def key(self) -> str:
        return f"{self.request}:{self.index}"


def cases(folder: Path) -> tuple[list[Case], dict]:
    """The row's accepted non-identical steps, and the run's meta (results.json).

    :raises InputError: no results.json, no LR trace, or a trace without step texts.
    """
    try:
        meta = json.loads((folder / "results.json").read_text())["meta"]
    except (OSError, ValueError, KeyError):
        raise InputError(f"{folder}: no results.json") from None
    lr = [p for p in traces_of(folder) if "lr-" in p.name]
    if len(lr) != 1:
        raise InputError(f"{folder}: expected one LR trace (trace-lr-*.jsonl[.gz]), found {len(lr)}")
    tr = read_trace(lr[0])
    out: list[Case] = []
    committed: dict[int, list] = {}
    for s in tr.steps:  # rows in the order they were written: committed rows in commit order
        if s.committed:
            committed.setdefault(s.request, []).append(s)
    for req, steps in sorted(committed.items()):
        text, used = "", 0
        for i, s in enumerate(steps):
            if s.draft_text is None and s.target_text is None:
                raise InputError(f"{lr[0]}: no step texts (record with text logging)")
            kept = s.draft_text if s.committed == "draft" else s.target_text
            if s.committed == "draft" and s.verifier not in ("identical", None) and s.target_text is not None:
                out.append(Case(folder.name, req, i, text, s.draft_text, s.target_text, used, s.verifier, s.score))
            text += kept or ""
            used += (s.draft_tokens if s.committed == "draft" else s.target_tokens) or 0
    return out, meta


def _config(meta: dict) -> dict:
    cfgs = meta.get("config") or {}
    return next(iter(cfgs.values())) if cfgs else {}


class Continuer:
    """The target continuing a request's text greedily (llama.cpp, ar)."""

    def __init__(self, target: str | None, threads: int, cfg: dict):
        from lrref import models
        from lrref.backends.llamacpp import LlamaCppBackend

        self.be = LlamaCppBackend(models.resolve_gguf(target or models.DEFAULT_TARGET), threads=threads, slots=2)
        self.cfg = cfg

    def answer(self, question: str, text: str, left: int) -> tuple[str | None, str]:
        """The final answer of ``text`` continued by the target up to ``left`` more tokens, and the continuation."""
        from lrref.answers import extract_answer
        from lrref.config import DecodeConfig
        from lrref.decode.decoder import Decoder

        if left <= 0:
            return extract_answer(text), ""
        cfg = DecodeConfig(mode="ar", max_tokens=left, max_step_tokens=self.cfg.get("max_step_tokens", 96),
                           threads=self.be.threads)
        ids = self.be.encode_chat(question, self.cfg.get("system")) + self.be.encode(text)
        res = Decoder(cfg, self.be).run(0, ids)
        return extract_answer(text + res.text), res.text


def record(a: argparse.Namespace) -> None:
    from lrref.answers import is_correct
    from lrref.bench import dataset_path, load_dataset

    plans = []
    for folder in a.rows:
        cs, meta = cases(folder)
        cs = cs[: a.limit] if a.limit is not None else cs
        out = a.record / f"{folder.name}.jsonl"
        done = {json.loads(x)["key"] for x in out.read_text().splitlines()} if out.is_file() else set()
        todo = [c for c in cs if c.key not in done]
        plans.append((folder, meta, out, todo))
        print(f"{folder.name}: {len(cs)} accepted non-identical steps, {len(todo)} to continue "
              f"({2 * len(todo)} continuations)", flush=True)
    if a.dry_run:
        return
    a.record.mkdir(parents=True, exist_ok=True)
    for folder, meta, out, todo in plans:
        if not todo:
            continue
        cfg = _config(meta)
        problems = load_dataset(dataset_path(meta.get("dataset_name") or meta.get("dataset")))
        cont = Continuer(a.target, a.threads, cfg)
        cap = cfg.get("max_tokens", 512)
        for n, c in enumerate(todo, 1):
            q, gold = problems[c.request]["question"], problems[c.request]["gold"]
            left = cap - c.used
            ans_d, _ = cont.answer(q, c.prefix + c.draft, left - len(cont.be.encode(c.draft)))
            ans_t, _ = cont.answer(q, c.prefix + c.target, left - len(cont.be.encode(c.target)))
            row = {"key": c.key, "request": c.request, "index": c.index, "verifier": c.verifier, "score": c.score,
                   "gold": gold, "answer_draft": ans_d, "answer_target": ans_t,
                   "right_draft": is_correct(ans_d, gold), "right_target": is_correct(ans_t, gold)}
            with out.open("a") as f:  # one complete line per step: an interrupted run resumes after it
                f.write(json.dumps(row) + "\n")
            print(f"[{n}/{len(todo)}] {folder.name} request {c.request} step {c.index}: draft -> {ans_d}, "
                  f"target -> {ans_t} (gold {gold})", flush=True)


def summarise(rows: list[dict]) -> dict:
    """Accepted steps, answers changed and right -> wrong / wrong -> right, with Wilson 95% intervals."""
    n = len(rows)
    changed = sum(r["answer_draft"] != r["answer_target"] for r in rows)
    worse = sum(bool(r["right_target"]) and not r["right_draft"] for r in rows)
    better = sum(bool(r["right_draft"]) and not r["right_target"] for r in rows)
    return {"steps": n, "changed": changed, "changed_ci95": list(wilson(changed, n)), "right_to_wrong": worse,
            "right_to_wrong_ci95": list(wilson(worse, n)), "wrong_to_right": better,
            "wrong_to_right_ci95": list(wilson(better, n))}


def current_math_rule(folders: list[Path]) -> dict[str, dict[str, bool]]:
    """For rows recorded with the ``math`` verifier: ``{row: {step key: accepted}}`` under the current rule
    (:class:`lrref.verify.verifiers.MathVerifier`: the numbers through :func:`lrref.verify.stepmath.agree`, then
    the cosine the row recorded against the row's threshold, or the prose threshold for pairs without numbers)."""
    from lrref.verify.verifiers import MathVerifier

    out: dict[str, dict[str, bool]] = {}
    for folder in folders:
        cs, meta = cases(folder)
        if not cs or any(c.verifier != "math" for c in cs):
            continue
        rule = MathVerifier(None, float(_config(meta).get("threshold") or 0.85))
        agreed = rule.agreements([(c.target, c.draft) for c in cs])
        out[folder.name] = {c.key: a.ok and c.score is not None and c.score >= rule.cosine_threshold(a.reason)
                            for c, a in zip(cs, agreed)}
    return out


def report(a: argparse.Namespace) -> None:
    files = sorted(a.report.glob("*.jsonl"))
    if not files:
        raise InputError(f"{a.report}: no recorded rows (*.jsonl)")
    recorded = {f.stem: [json.loads(x) for x in f.read_text().splitlines() if x.strip()] for f in files}
    table = {name: summarise(rows) for name, rows in recorded.items()}
    for name, verdicts in current_math_rule([Path(r) for r in a.rows]).items():  # the rule changed after it ran
        rows = recorded.get(name, [])
        if rows:
            table[f"{name}: kept by the current rule"] = summarise([r for r in rows if verdicts.get(r["key"])])
            table[f"{name}: rejected by the current rule"] = summarise(
                [r for r in rows if not verdicts.get(r["key"], True)])
    print("| row | accepted steps | answer changed [95% CI] | right -> wrong [95% CI] | wrong -> right |")
    print("|---|---|---|---|---|")
    for name, s in table.items():
        pct = lambda k, ci: f"{k} ({100 * k / max(1, s['steps']):.1f}%) [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"  # noqa: E731
        print(f"| {name} | {s['steps']} | {pct(s['changed'], s['changed_ci95'])} | "
              f"{pct(s['right_to_wrong'], s['right_to_wrong_ci95'])} | {s['wrong_to_right']} |")
    a.figures.mkdir(parents=True, exist_ok=True)
    atomic_write(a.figures / "counterfactual.json", json.dumps({"rows": table}, indent=1))
    figure(table, a.figures)


def figure(table: dict, folder: Path) -> None:
    import plotly.graph_objects as go

    from lrsim.plots import save_figure

    names = list(table)
    fig = go.Figure()
    for key, label in (("changed", "answer changed"), ("right_to_wrong", "right -> wrong")):
        y = [100 * table[n][key] / max(1, table[n]["steps"]) for n in names]
        lo = [100 * table[n][f"{key}_ci95"][0] for n in names]
        hi = [100 * table[n][f"{key}_ci95"][1] for n in names]
        fig.add_bar(x=names, y=y, name=label, error_y={"type": "data", "symmetric": False,
                                                        "array": [h - v for h, v in zip(hi, y)],
                                                        "arrayminus": [v - low for v, low in zip(y, lo)]})
    fig.update_layout(title="Accepted draft steps whose counterfactual continuation changes the answer",
                      yaxis_title="% of accepted non-identical steps (Wilson 95%)", template="plotly_white",
                      barmode="group", legend={"orientation": "h", "y": -0.2})
    for p in save_figure(fig, folder / "counterfactual"):
        print(p)


def main(argv: list[str] | None = None) -> int:
    def command() -> int:
        a = parse_args(argv)
        if a.record is not None:
            record(a)
        else:
            report(a)
        return 0

    return run_command("counterfactual", command)


if __name__ == "__main__":
    sys.exit(main())
