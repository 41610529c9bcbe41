"""Verifiers that mean what they say (issue 33): every verifier on the hand-made step pairs, and the math verifier's
rule on the answer-quality study's recorded steps.

``python studies/verifier_check.py [--pairs] [--study] [--verifiers math-numeric,math,embedding-0.85,...]
[--docs docs/verifiers.md] [--json]``

1. **Pairs** (``--pairs``): the pairs of ``tests/data/step_pairs.jsonl`` (each with its meaning, same or not, and
   why) through every verifier of :data:`VERIFIERS`: ``exact``, ``math-numeric`` (the numbers alone,
   :func:`lrref.verify.stepmath.agree`), ``math`` (the numbers, then the cosine: 0.85, or the prose threshold for
   pairs without numbers), ``embedding-0.85`` and ``-0.95`` (all-mpnet-base-v2), ``judge`` (the default target,
   Qwen2.5-Coder 1.5B on llama.cpp, logit margin > 0) and ``score`` (the same model rates the draft 0-9 without
   context, >= 7).  Per verifier: accepted pairs of equal meaning, rejected pairs of different meaning, and the table
   row by row; the table goes into ``--docs`` between its ``<!-- pairs -->`` markers.
2. **Study** (``--study``): every step pair a verifier judged in the study's ``lr-async-math-0.85`` trace
   (``studies/data/answer-quality``), judged again by the current numeric rule, with every pair's cosine computed
   afresh: how many the recorded rule and the current one accept, how many accepted pairs had no number (the
   ``prose`` pairs), their cosines against the prose threshold, and the accepted non-identical steps of the
   problems the row lost against ar (ar right, lr-async wrong), each with its recorded and its current verdict.

*Held out*: the current math rule and its prose threshold were chosen knowing the ``--study`` steps (problems
1-40 of ``gsm8k-test``); its held-out test is problems 41-80 (``studies/answer_quality.py --n 80``).

Writes ``figures/verifier_check.json``.  Needs the prepared models (``lrref models prepare``); a verifier whose
model is missing is left out with a note.  Nothing here is timed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import FIGURES

from lrsim.atomic import atomic_write
from lrsim.errors import InputError, OneLineParser, run_command
from lrsim.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "tests" / "data" / "step_pairs.jsonl"
STUDY = ROOT / "studies" / "data" / "answer-quality"
VERIFIERS = ("exact", "math-numeric", "math", "embedding-0.85", "embedding-0.95", "judge", "score")
START, END = "<!-- pairs -->", "<!-- /pairs -->"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", action="store_true", help="every verifier on the hand-made pairs")
    ap.add_argument("--study", action="store_true", help="the math rule on the study's recorded steps")
    ap.add_argument("--verifiers", default=",".join(VERIFIERS), help="which verifiers, comma-separated")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs" / "verifiers.md",
                    help="the page whose pairs table is rewritten (between <!-- pairs --> and <!-- /pairs -->)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    a.names = [v for v in a.verifiers.split(",") if v]
    bad = [v for v in a.names if v not in VERIFIERS]
    if bad:
        raise InputError(f"unknown verifier(s) {', '.join(bad)} (known: {', '.join(VERIFIERS)})")
    if not (a.pairs or a.study):
        a.pairs = a.study = True
    return a


def build(name: str):
    """The verifier of a :data:`VERIFIERS` name (models from the lrref cache)."""
    from lrref.verify.command import judging_lm
    from lrref.verify.verifiers import MathVerifier, VerifierConfig
    from lrref.verify.verifiers import build as build_verifier

    if name == "math-numeric":
        return MathVerifier(None, -1)
    if name in ("judge", "score"):
        return build_verifier(VerifierConfig(name), judging_lm(None, None))
    base, _, t = name.partition("-")
    return build_verifier(VerifierConfig(base, float(t) if t else None))


# --- 1. the hand-made pairs -------------------------------------------------------------------------------------


def pairs_table(names: list[str]) -> dict:
    """Every verifier's verdict on every pair, and its score card."""
    from lrref.verify.stepmath import agree

    rows = [json.loads(x) for x in PAIRS.read_text().splitlines() if x.strip()]
    verdicts, notes = {}, []
    for name in names:
        try:
            v = build(name)
        except Exception as e:  # noqa: BLE001 - a missing model leaves the verifier out, with the reason
            notes.append(f"{name}: left out ({str(e).splitlines()[0]})")
            continue
        got = v.verify([(r["target"], r["draft"]) for r in rows], [""] * len(rows))
        verdicts[name] = [bool(x.decision) for x in got]
    cards = {}
    for name, vs in verdicts.items():
        same = [d for d, r in zip(vs, rows) if r["same"]]
        diff = [d for d, r in zip(vs, rows) if not r["same"]]
        cards[name] = {"equal_accepted": sum(same), "equal": len(same), "different_rejected": len(diff) - sum(diff),
                       "different": len(diff), "right": sum(d == r["same"] for d, r in zip(vs, rows))}
    table = [{"id": r["id"], "target": r["target"], "draft": r["draft"], "same": r["same"], "why": r["why"],
              "numeric": agree(r["target"], r["draft"]).reason} | {n: verdicts[n][i] for n in verdicts}
             for i, r in enumerate(rows)]
    return {"pairs": len(rows), "cards": cards, "table": table, "notes": notes}


def _cell(s: str, width: int = 60) -> str:
    s = s.replace("|", "\\|").replace("\n", " ")
    return f"`{s}`" if len(s) <= width else f"`{s[:width - 1]}…`"


def markdown(res: dict) -> str:
    names = list(res["cards"])
    lines = ["| verifier | equal meaning accepted | different meaning rejected | right |", "|---|---|---|---|"]
    for n, c in res["cards"].items():
        lines.append(f"| {n} | {c['equal_accepted']} / {c['equal']} | {c['different_rejected']} / {c['different']} | "
                     f"{c['right']} / {res['pairs']} |")
    lines += ["", "| # | target step | draft step | same meaning | why | numbers | " + " | ".join(names) + " |",
              "|---|---|---|---|---|---|" + "---|" * len(names)]
    for r in res["table"]:
        marks = " | ".join(("accept" if r[n] else "reject") + ("" if r[n] == r["same"] else " ✗") for n in names)
        lines.append(f"| {r['id']} | {_cell(r['target'])} | {_cell(r['draft'])} | {'yes' if r['same'] else 'no'} | "
                     f"{r['why']} | {r['numeric']} | {marks} |")
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines).rstrip() + "\n"


def write_docs(path: Path, table: str) -> None:
    """Replace the text between the page's markers (the page must have them)."""
    text = path.read_text()
    if START not in text or END not in text:
        raise InputError(f"{path}: no {START} ... {END} markers to write the table between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    atomic_write(path, f"{head}{START}\n{table}{END}{tail}")


# --- 2. the study's recorded steps ------------------------------------------------------------------------------


def _correct(trace) -> dict[int, bool]:
    return {r.request: bool(r.correct) for r in trace.requests if r.correct is not None}


def study(prose_threshold: float) -> dict:
    """The recorded math row's judged pairs under the current rule (module doc, part 2)."""
    from lrref.verify.stepmath import agree
    from lrref.verify.verifiers import VerifierConfig
    from lrref.verify.verifiers import build as build_verifier

    row = STUDY / "lr-async-math-0.85" / "trace-lr-async.jsonl.gz"
    ar = STUDY / "ar" / "trace-ar.jsonl.gz"
    if not row.is_file() or not ar.is_file():
        raise InputError(f"the study's traces are not in {STUDY}")
    tr, base = read_trace(row), read_trace(ar)
    lost = {i for i, ok in _correct(base).items() if ok and not _correct(tr).get(i, True)}
    judged = [s for s in tr.steps if s.verifier == "math" and s.draft_text is not None and s.target_text is not None]
    emb = build_verifier(VerifierConfig("embedding"))
    cos = emb.cosine([(s.target_text, s.draft_text) for s in judged])
    out = []
    for s, c in zip(judged, cos):
        a = agree(s.target_text, s.draft_text)
        t = prose_threshold if a.reason == "prose" else 0.85
        out.append({"request": s.request, "cycle": s.cycle, "position": s.position, "recorded": bool(s.decision),
                    "numeric": a.reason, "cosine": round(c, 4), "current": a.ok and c >= t,
                    "committed": s.committed, "lost_problem": s.request in lost,
                    "target": s.target_text.strip()[:160], "draft": s.draft_text.strip()[:160]})
    acc = [x for x in out if x["recorded"]]
    prose = [x for x in out if x["numeric"] == "prose"]
    return {"trace": str(row.relative_to(ROOT)), "judged": len(out), "recorded_accepted": len(acc),
            "current_accepted": sum(x["current"] for x in out),
            "both_accepted": sum(x["current"] and x["recorded"] for x in out),
            "recorded_accepted_prose": sum(x["recorded"] for x in prose),
            "prose_cosines_recorded_accepted": sorted(x["cosine"] for x in prose if x["recorded"]),
            "prose_threshold": prose_threshold,
            "lost_problems": sorted(lost),
            "lost_problem_accepted_steps": [x for x in acc if x["lost_problem"]],
            "newly_accepted": [x for x in out if x["current"] and not x["recorded"]]}


def main(argv: list[str] | None = None) -> int:
    def command() -> int:
        a = parse_args(argv)
        from lrref.verify.verifiers import PROSE_THRESHOLD

        res = {}
        if a.pairs:
            res["pairs"] = pairs_table(a.names)
            table = markdown(res["pairs"])
            write_docs(a.docs, table)
            if not a.json:
                print(table)
        if a.study:
            res["study"] = study(PROSE_THRESHOLD)
            if not a.json:
                s = res["study"]
                print(f"study: {s['judged']} judged pairs; accepted: recorded {s['recorded_accepted']}, current "
                      f"{s['current_accepted']}, both {s['both_accepted']}; prose pairs the recorded rule accepted: "
                      f"{s['recorded_accepted_prose']}, cosines {s['prose_cosines_recorded_accepted']}")
                for x in s["lost_problem_accepted_steps"]:
                    print(f"  lost problem {x['request']}: recorded accept, current "
                          f"{'accept' if x['current'] else 'reject'} ({x['numeric']}, cosine {x['cosine']}): "
                          f"{x['target'][:70]!r} / {x['draft'][:70]!r}")
        FIGURES.mkdir(exist_ok=True)
        atomic_write(FIGURES / "verifier_check.json", json.dumps(res, indent=1, default=str))
        if a.json:
            print(json.dumps(res, indent=1, default=str))
        return 0

    return run_command("verifier_check", command)


if __name__ == "__main__":
    sys.exit(main())
