"""The README's validation tables, one row per configuration, from the studies' JSON outputs.

``python studies/validation_summary.py [--figures figures]`` reads

- ``replay_validation_llamacpp.json`` (timing from the traces' own calibrated profile) and
  ``replay_validation_llamacpp_profile.json`` (timing from the profile ``lrref profile`` measured), both written by
  ``python studies/replay_validation.py --data studies/data/validation-llamacpp [--profile FILE --suffix _profile]``;
- ``concurrency_check.json`` and ``concurrency_check_profile.json`` (copies of ``comparison[_profile].json``
  written by ``python studies/concurrency_check.py --compare-only [--profile FILE]``),

and prints two markdown tables: held-out replay errors by protocol and timing source, and the concurrency errors.
Nothing is computed here beyond picking and formatting the rows (and the summary over them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lrsim.errors import InputError, run_command

FIGURES = Path(__file__).resolve().parents[1] / "figures"
PROTOCOLS = ("fixed", "leave-one-out", "cross-layout")
SOURCES = (("", "traces' profile"), ("_profile", "measured profile"))


def load(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())
    except OSError:
        raise InputError(f"{path}: missing (run the study named in this script's docstring)") from None
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e})") from None


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def replay_table(figures: Path) -> str:
    """One row per configuration: measured speedup, then the error of each protocol under each timing source."""
    data = {suffix: load(figures / f"replay_validation_llamacpp{suffix}.json") for suffix, _ in SOURCES}
    keys = list(dict.fromkeys((r["run"], r["mode"]) for r in data[""]))
    head = ["run", "mode", "measured [95% CI]"] + [f"{p} ({name})" for _s, name in SOURCES for p in PROTOCOLS]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    errors: dict[tuple[str, str], list[float]] = {}
    for run, mode in keys:
        first = next(r for r in data[""] if (r["run"], r["mode"]) == (run, mode))
        lo, hi = first["measured_ci95"]
        cells = [run, mode, f"{first['measured']:.3f} [{lo:.2f}, {hi:.2f}]"]
        for suffix, name in SOURCES:
            for p in PROTOCOLS:
                r = next((r for r in data[suffix] if (r["run"], r["mode"], r["protocol"]) == (run, mode, p)), None)
                if r is None:
                    cells.append("-")
                    continue
                fit = " (fit)" if r["role"] == "fit" else ""
                cells.append(pct(r["error"]) + fit)
                if r["role"] == "held-out":
                    errors.setdefault((name, p), []).append(abs(r["error"]))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    order = [name for _s, name in SOURCES]
    for (name, p), e in sorted(errors.items(), key=lambda kv: (PROTOCOLS.index(kv[0][1]), order.index(kv[0][0]))):
        out.append(f"- {p}, {name}: held-out mean |error| {100 * sum(e) / len(e):.1f}%, worst {100 * max(e):.1f}%, "
                   f"{sum(x <= 0.10 for x in e)} of {len(e)} within 10%")
    return "\n".join(out)


def concurrency_table(figures: Path) -> str:
    """One row per (N, mode): measured and predicted throughput and latency, errors under both timing sources."""
    data = {suffix: load(figures / f"concurrency_check{suffix}.json") for suffix, _ in SOURCES}
    head = ["N", "mode", "tok/s measured", "latency measured (s)"] + [
        f"{what} error ({name})" for _s, name in SOURCES for what in ("tok/s", "latency")]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    hits = {name: 0 for _s, name in SOURCES}
    for r in data[""]:
        cells = [str(r["concurrency"]), r["mode"], f"{r['measured_tps']:.2f}", f"{r['measured_latency_s']:.1f}"]
        for suffix, name in SOURCES:
            q = next((q for q in data[suffix] if (q["concurrency"], q["mode"]) == (r["concurrency"], r["mode"])),
                     None)
            cells += [pct(q and q["tps_error"]), pct(q and q["latency_error"])]
            hits[name] += bool(q and abs(q["tps_error"]) <= 0.10 and abs(q["latency_error"]) <= 0.10)
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out += [f"- {name}: {n} of {len(data[''])} rows within 10% on both" for name, n in hits.items()]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    def command() -> int:
        ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        ap.add_argument("--figures", type=Path, default=FIGURES)
        a = ap.parse_args(argv)
        print(replay_table(a.figures) + "\n\n" + concurrency_table(a.figures))
        return 0

    return run_command("validation_summary", command)


if __name__ == "__main__":
    sys.exit(main())
