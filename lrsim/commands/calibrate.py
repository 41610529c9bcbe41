"""``lrsim calibrate``: behaviour and costs fitted from traces; ``--profile-out`` writes the pass costs as a
latency profile; ``--vllm-metrics`` fits token acceptance from vLLM's counters (alone, or beside the traces)."""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from . import HELP
from .common import add_vllm_args, read_traces, vllm_metrics


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help=HELP["calibrate"])
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="lr-trace JSONL file(s), optionally .gz (default: the embedded default traces)")
    p.add_argument("--profile-out", metavar="FILE.json",
                   help="also write the recorded engine's pass costs as a latency profile (one entry per model and "
                        "hardware setup; `lrsim replay --hardware FILE` prices with it)")
    p.add_argument("--profile-name", default="calibrated", help="name of the written profile (default calibrated)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_vllm_args(p, instead=False)


def run(a: argparse.Namespace) -> str:
    """The traces' calibration; with ``--vllm-metrics``, the counters' fit too (only it when no trace is given)."""
    m = vllm_metrics(a)
    if m is not None and not a.traces:
        if a.profile_out:
            raise UsageError("--profile-out writes the traces' pass costs: give TRACE files beside --vllm-metrics")
        return json.dumps(m.to_dict(), indent=2, default=float) if a.json else m.format()
    text = _traces(a)
    if m is None:
        return text
    if a.json:
        return json.dumps(json.loads(text) | {"vllm_metrics": m.to_dict()}, indent=2, default=float)
    return text + "\n" + m.format()


def _traces(a: argparse.Namespace) -> str:
    from pathlib import Path

    from ..atomic import check_writable
    from ..prediction.calibrate import calibrate, format_calibration

    if a.profile_out:
        check_writable(Path(a.profile_out))
    import shlex
    import sys

    from ..cost.fromtraces import profile_from_traces

    traces = read_traces(a.traces)
    c = calibrate(traces)
    cmd = "lrsim " + " ".join(shlex.quote(x) for x in sys.argv[1:]) if sys.argv[1:] else None
    prof = profile_from_traces(traces, a.profile_name, c.alpha2, command=cmd)
    if a.json:
        text = json.dumps(c.to_dict() | {"pass_costs": {"setups": prof.setups, "prefill": prof.prefill,
                                                        "notes": list(prof.provenance.notes)}},
                          indent=2, default=float)
    else:
        text = format_calibration(c) + "\n  pass costs per hardware setup (the profile --profile-out writes):\n" + \
            "\n".join(f"    {n}" for n in prof.provenance.notes)
    if a.profile_out:
        from ..latency.profile import write_profile

        write_profile(prof, a.profile_out)
        if not a.json:
            text += f"\nwrote {a.profile_out}: profile {prof.name}, entries {', '.join(prof.archs)}"
    return text
