"""Print benchmark rows (measurement, target, ratio) as a table or JSON; shared by the bench_* scripts."""

import json


def report(machine: dict, rows: list[dict], as_json: bool, width: int = 40) -> None:
    """Rows have ``what``, ``measured``, ``target``, ``ratio`` (> 1: target met) and optionally ``note``."""
    if as_json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    print(f"machine: {machine}")
    print(f"{'what':{width}s} {'measured':>12s} {'target':>10s} {'target met by':>14s}")
    for r in rows:
        print(f"{r['what']:{width}s} {r['measured']:12.4g} {r['target']:10.4g} {r['ratio']:13.2f}x")
        if r.get("note"):
            print(f"    ({r['note']})")
