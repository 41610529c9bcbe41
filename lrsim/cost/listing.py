"""``lrsim profiles``: one line per profile, its JSON summary, or one pass priced in each profile that has it."""

from __future__ import annotations

import json
from typing import Sequence

from ..errors import InputError
from ..latency.profile import Profile
from .library import embedded, load_profile
from .passcost import ProfileCost, cost_ratio


def _axes(a) -> str:
    pre = " +prefill" if a.prefill is not None else ""
    miss = f" ({a.unmeasured} points not measured)" if a.unmeasured else ""
    return (f"L {','.join(map(str, a.context))}; b {','.join(map(str, a.batch))}; "
            f"q {','.join(map(str, a.positions))}{pre}{miss}")


def describe(p: Profile) -> str:
    """One line: name first, then device, engine, timing kind, dtype, date, and architectures with their axes."""
    groups: dict[str, list[str]] = {}
    for name, a in p.archs.items():
        groups.setdefault(_axes(a), []).append(name)
    archs = " | ".join(f"{', '.join(names)}: {axes}" for axes, names in groups.items())
    v = p.provenance
    return f"{p.name}  {v.device} | {v.engine} | {p.timed} | {v.dtype} | {v.date} | {archs}"


def summary(p: Profile) -> dict:
    """JSON-ready summary of a profile (``lrsim profiles --json``)."""
    v = p.provenance
    return {"name": p.name, "path": p.path, "description": p.description, "timed": p.timed, "device": v.device,
            "engine": v.engine, "dtype": v.dtype, "date": v.date, "setups": p.setups,
            "archs": {n: {"context": list(a.context), "batch": list(a.batch), "positions": list(a.positions),
                          "prefill": a.prefill is not None, "missing": list(a.missing)} for n, a in p.archs.items()}}


def price_rows(profs: Sequence[Profile], arch: str, context: float, batch: float, positions: float,
               draft: str | None, extrapolate: str) -> tuple[list[dict], list[str]]:
    """One pass of ``arch`` priced in every profile that can (and ``c1`` with ``draft``); why the others cannot."""
    rows, skipped = [], []
    for p in profs:
        try:
            row = {"profile": p.name, "arch": arch, "context": context, "batch": batch, "positions": positions,
                   "ms": p.time_ms(arch, context, batch, positions, extrapolate), "timed": p.timed}
            if draft:
                t, d = (ProfileCost.of(p, a, extrapolate) for a in (arch, draft))
                row |= {"draft": draft, "c1": cost_ratio(d, t, context, batch)}
        except InputError as e:
            skipped.append(f"{p.name}: {e}")
            continue
        rows.append(row)
    return rows, skipped


def profiles_report(specs: Sequence[str], as_json: bool = False, arch: str | None = None, context: float = 0,
                    batch: float = 1, positions: float = 1, draft: str | None = None,
                    extrapolate: str = "error") -> str:
    """``lrsim profiles``: list profiles (default: the embedded ones), or with ``arch`` price one pass in each.

    Without profile names, a pass is priced in every embedded profile that can price it and the others are
    named with the reason; with names, every named profile must price it.
    """
    profs = [load_profile(s) for s in (specs or embedded())]
    if arch is None:
        return json.dumps([summary(p) for p in profs], indent=1) if as_json else "\n".join(map(describe, profs))
    rows, skipped = price_rows(profs, arch, context, batch, positions, draft, extrapolate)
    if specs and skipped:
        raise InputError(skipped[0])
    if not rows:
        raise InputError(f"no embedded profile prices {arch} at context {context:g}, batch {batch:g}, positions "
                         f"{positions:g}: " + "; ".join(skipped))
    if as_json:  # a profile that cannot price the pass: "ms": null and the reason
        return json.dumps(rows + [{"profile": s.split(":", 1)[0], "arch": arch, "ms": None, "reason": s}
                                  for s in skipped], indent=1)
    lines = [f"{r['profile']}  {arch} context {context:g} batch {batch:g} positions {positions:g}: "
             f"{r['ms']:.3f} ms ({r['timed']})" + (f"; c1 ({draft}/{arch}, q = 1) = {r['c1']:.4f}" if draft else "")
             for r in rows]
    return "\n".join(lines + [f"  (cannot price: {s})" for s in skipped])
