"""``lrsim profiles --devices`` and ``lrsim profiles --synthesize DEVICE``: the command logic (parsed args -> text).

``lrsim/cli.py`` adds the flags to its ``profiles`` subcommand and calls
:func:`run`; it returns the text to print, or ``None`` when neither flag was
given (the usual ``profiles`` listing then runs).
"""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from .devices import devices, get_device
from .synthesize import TIMED, synthesize, whole_device


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The hardware-model flags of ``lrsim profiles`` (kept here so the CLI's edit stays a few lines)."""
    g = p.add_argument_group("hardware model (modelled profiles for GPUs nobody profiled: docs/gpu-model.md)")
    g.add_argument("--devices", action="store_true", help="list the device specs the model knows (datasheet peaks)")
    g.add_argument("--synthesize", metavar="DEVICE", help="write a modelled profile for DEVICE (a name from --devices "
                   "or a device JSON file); with --arch one architecture, else every shipped one")
    g.add_argument("--tp", type=int, default=1, metavar="N", help="with --synthesize: tensor-parallel degree (1)")
    g.add_argument("--timed", default="kernel_sum", metavar="KIND",
                   help="with --synthesize: kernel_sum (default; what CUDA graphs approach) or wall (eager, "
                        "launch-bound); also kernel / eager")
    g.add_argument("--out", metavar="FILE", help="with --synthesize: the profile file to write (atomically)")


def devices_report(as_json: bool = False) -> str:
    """The embedded device specs: one row each, with the datasheet they come from."""
    ds = devices()
    if as_json:
        return json.dumps([d.to_dict() for d in ds], indent=1)
    head = f"{'device':<10} {'bf16 TFLOP/s':>12} {'mem GiB':>8} {'mem TB/s':>9} {'link GB/s':>10} {'fabric':>7}  label"
    rows = [f"{d.name:<10} {d.bf16_dense_tflops:>12g} {d.memory_gib:>8g} {d.hbm_tb_s:>9g} {d.link_gb_s:>10g} "
            f"{d.fabric_gb_s:>7g}  {d.label}" for d in ds]
    srcs = [f"  {d.name}: {d.source}" for d in ds]
    tail = ("a device JSON file of your own: docs/gpu-model.md (schema); model:DEVICE[:tpN][:eager] names a "
            "modelled profile wherever --hardware is taken")
    return "\n".join([head, *rows, "bandwidths per direction; dense bf16 (no sparsity); sources:", *srcs, tail])


def synthesize_command(a: argparse.Namespace) -> str:
    """Write the modelled profile ``--synthesize`` asks for; one line saying what was written."""
    if not a.out:
        raise UsageError("--synthesize needs --out FILE")
    if a.timed not in TIMED:
        raise UsageError(f"--timed must be kernel_sum, wall, kernel or eager, got {a.timed!r}")
    if a.tp < 1:
        raise UsageError(f"--tp must be >= 1, got {a.tp}")
    from ..cost.profile import write_profile

    timed = TIMED[a.timed]
    cmd = f"lrsim profiles --synthesize {a.synthesize}" + (f" --arch {a.arch}" if a.arch else "") + \
        f" --tp {a.tp} --timed {timed} --out {a.out}"
    prof = synthesize(a.synthesize, a.arch, a.tp, timed, command=cmd) if a.arch else \
        whole_device(get_device(a.synthesize), a.tp, timed, command=cmd)
    write_profile(prof, a.out)
    n = sum(len(x.context) * len(x.batch) * len(x.positions) for x in prof.archs.values())
    null = sum(x.unmeasured for x in prof.archs.values())
    return (f"wrote {a.out}: profile {prof.name} (modelled, {prof.timed}), {len(prof.archs)} architecture(s), "
            f"{n} points ({null} null: do not fit or not runnable at TP {a.tp})")


def run(a: argparse.Namespace) -> str | None:
    """Dispatch ``profiles --devices`` / ``--synthesize``; ``None`` when neither was given."""
    if getattr(a, "devices", False):
        return devices_report(a.json)
    if getattr(a, "synthesize", None):
        return synthesize_command(a)
    for flag, default in (("out", None), ("tp", 1), ("timed", "kernel_sum")):
        if getattr(a, flag, default) != default:
            raise UsageError(f"--{flag} goes with --synthesize")
    return None
