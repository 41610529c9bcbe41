"""``lrsim profiles --devices``, ``--engines`` and ``--synthesize SPEC``: the hardware model's flags (parsed args ->
text; the command layer's, so :mod:`lrsim.gpu` never sees a Namespace).

:mod:`lrsim.commands.profiles` adds the flags to its ``profiles`` subcommand and calls :func:`run`; it returns the
text to print, or ``None`` when neither flag was given (the usual ``profiles`` listing then runs).
"""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from ..gpu.devices import devices
from ..gpu.synthesize import SPEC_SYNTAX, TIMED, parse_spec, synthesize, whole_device


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The hardware-model flags of ``lrsim profiles`` (kept here so the CLI's edit stays a few lines)."""
    g = p.add_argument_group("hardware model (modelled profiles for GPUs nobody profiled: docs/gpu-model.md)")
    g.add_argument("--devices", action="store_true", help="list the device specs the model knows (datasheet peaks)")
    g.add_argument("--engines", action="store_true", help="list the engine releases the model prices (vllm, "
                   "vllm-0.11, vllm-0.10, vllm-v0, sglang, trtllm, hf-eager), each constant with its source")
    g.add_argument("--synthesize", metavar="SPEC", help=f"write a modelled profile for {SPEC_SYNTAX} (DEVICE: a name "
                   "from --devices or a device JSON file; default TP 1, bf16, the vllm engine, wall time); with "
                   "--arch one architecture (a name, an alias or a config.json), else every shipped one")
    g.add_argument("--tp", type=int, default=None, metavar="N", help="with --synthesize: tensor-parallel degree, "
                   "if the spec has no :tpN")
    g.add_argument("--timed", default=None, metavar="KIND",
                   help="with --synthesize: wall or kernel (kernel_sum), if the spec has no timing suffix")
    g.add_argument("--out", metavar="FILE", help="with --synthesize: the profile file to write (atomically)")


def devices_report(as_json: bool = False) -> str:
    """The embedded device specs: one row each, with the datasheet they come from."""
    ds = devices()
    if as_json:
        return json.dumps([d.to_dict() for d in ds], indent=1)
    head = (f"{'device':<10} {'bf16 TFLOP/s':>12} {'fp8 TFLOP/s':>11} {'mem GiB':>8} {'mem TB/s':>9} {'link GB/s':>10} "
            f"{'fabric':>7}  label")
    rows = [f"{d.name:<10} {d.bf16_dense_tflops:>12g} {d.fp8_dense_tflops or '-':>11} {d.memory_gib:>8g} "
            f"{d.hbm_tb_s:>9g} {d.link_gb_s:>10g} {d.fabric_gb_s:>7g}  {d.label}" for d in ds]
    srcs = [f"  {d.name}: {d.source}" for d in ds]
    tail = (f"a device JSON file of your own: docs/gpu-model.md (schema); model:{SPEC_SYNTAX} names a modelled "
            "profile wherever --hardware is taken")
    return "\n".join([head, *rows, "bandwidths per direction; dense tensor-core peaks (no sparsity; '-': no FP8 "
                      "tensor cores); sources:", *srcs, tail])


def synthesize_command(a: argparse.Namespace) -> str:
    """Write the modelled profile ``--synthesize`` asks for; one line saying what was written."""
    if not a.out:
        raise UsageError("--synthesize needs --out FILE")
    if a.timed is not None and a.timed not in TIMED:
        raise UsageError(f"--timed must be wall or kernel (kernel_sum), got {a.timed!r}")
    if a.tp is not None and a.tp < 1:
        raise UsageError(f"--tp must be >= 1, got {a.tp}")
    from dataclasses import replace

    from ..latency.profile import write_profile

    m = parse_spec(a.synthesize)
    spec = a.synthesize.lower().split(":")[1:]
    if a.tp is not None and any(p.startswith("tp") for p in spec):
        raise UsageError(f"--tp {a.tp} and the spec's TP degree both given: TP lives in the spec ({a.synthesize})")
    if a.timed is not None and any(p in TIMED or p == "eager" for p in spec):
        raise UsageError(f"--timed {a.timed} and the spec's timing both given ({a.synthesize})")
    m = replace(m, tp=a.tp or m.tp, timed=TIMED[a.timed] if a.timed else m.timed)
    cmd = f"lrsim profiles --synthesize {m.text()}" + (f" --arch {a.arch}" if a.arch else "") + f" --out {a.out}"
    prof = synthesize(m, a.arch, command=cmd) if a.arch else whole_device(m, command=cmd)
    write_profile(prof, a.out)
    n = sum(len(x.context) * len(x.batch) * len(x.positions) for x in prof.archs.values())
    null = sum(x.unmeasured for x in prof.archs.values())
    return (f"wrote {a.out}: profile {prof.name} (modelled, {prof.timed}), {len(prof.archs)} architecture(s), "
            f"{n} points ({null} null: do not fit, too long, or not runnable at TP {m.tp})")


def run(a: argparse.Namespace) -> str | None:
    """Dispatch ``profiles --devices`` / ``--synthesize``; ``None`` when neither was given."""
    if getattr(a, "devices", False):
        return devices_report(a.json)
    if getattr(a, "engines", False):
        from ..gpu.engines import listing

        return listing(a.json)
    if getattr(a, "synthesize", None):
        return synthesize_command(a)
    for flag, default in (("out", None), ("tp", None), ("timed", None)):
        if getattr(a, flag, default) != default:
            raise UsageError(f"--{flag} goes with --synthesize")
    return None
