"""Print benchmark rows (measurement, target, ratio) as a table or JSON; shared by the bench_* scripts."""

import json
import os
import platform


def cpu_name() -> str:
    """The CPU's model name with its family and model numbers (``/proc/cpuinfo``: "AMD EPYC" names several
    generations), else ``platform.processor()``."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    if "model name" not in info:
        return platform.processor() or platform.machine()
    fam = f" (family {info['cpu family']} model {info['model']})" if "cpu family" in info and "model" in info else ""
    return info["model name"] + fam


def machine(load0: tuple[float, float, float], **extra) -> dict:
    """The machine a benchmark ran on: CPU model, cpus, Python, ``extra``, and the 1-minute load average when it
    started (``load0``, from ``os.getloadavg()``) and now."""
    return {"cpu": cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(), **extra,
            "load_average": f"{load0[0]:.2f} -> {os.getloadavg()[0]:.2f}"}


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
