"""``lrref profile``'s command boundary: its flags, the arguments turned into a validated spec
(:class:`lrref.profiling.profile.ProfileSpec` for ``--backend hf``, :class:`lrref.profiling.llamacpp.LlamaSpec`
for ``--backend llamacpp``), the run.  Below this module nothing sees a Namespace."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lrsim.errors import UsageError

from ..archs import arch_from_model, load_arch, shipped
from .profile import HF_DEFAULTS, LLAMACPP_ONLY, ProfileSpec, parse_list, run

if TYPE_CHECKING:
    from .llamacpp import LlamaSpec


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``lrref profile`` (grid defaults depend on ``--backend``: see their help)."""
    from ..host.load import REQUIRE_IDLE_HELP
    from .llamacpp import BUDGET_S, CO_CONTEXT, DEFAULTS, LOGITS

    h, ll = HF_DEFAULTS, DEFAULTS
    p.add_argument("--backend", default="hf", choices=("hf", "llamacpp"),
                   help="hf (default): transformers forwards of architectures with random weights, any torch device; "
                        "llamacpp: LlamaCppBackend.forward on prepared GGUF models (--model NAME[,NAME]), by thread "
                        "setup (--threads, --async-threads)")
    p.add_argument("--arch", help=f"hf: shipped architecture(s), comma-separated: {', '.join(shipped())}")
    p.add_argument("--model", action="append", default=[], metavar="NAME",
                   help="hf: a model directory or prepared registry name, its config.json only (repeatable); "
                        "llamacpp: TARGET[,DRAFT] registry names or .gguf files")
    p.add_argument("--out", required=True, metavar="FILE.json", help="the profile to write (atomically)")
    p.add_argument("--device", default=None, help="hf: cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--dtype", default=None, help="hf: " + ProfileSpec.__dataclass_fields__["dtype"].metadata["help"])
    for flag, what in (("--batch", "rows per pass"), ("--positions", "new positions per row (1 = decode)"),
                       ("--context", "tokens in the KV cache of each row")):
        k = flag[2:]
        p.add_argument(flag, help=f"{what}, comma-separated (default hf {h[k]}; llamacpp {ll[k]})")
    for flag, what in (("--warmup", f"untimed passes per shape (default hf {h['warmup']}, llamacpp "
                                    f"{ll['warmup']})"),
                       ("--repeats", f"timed passes per shape, median kept (default {h['repeats']}; llamacpp: at "
                                     "most, see --budget)"),
                       ("--threads", "hf: torch threads (CPU; default torch's); llamacpp: llama.cpp threads of the "
                                     "setup tN, the model alone (default 2 without --async-threads)"),
                       ("--chunk", f"hf: prefill chunk in tokens (default {h['chunk']})"),
                       ("--co-context", f"llamacpp: the co-runner's starting context (default {CO_CONTEXT})")):
        p.add_argument(flag, type=int, default=None, help=what)
    p.add_argument("--seed", type=int, default=0, help="seed of weights and tokens")
    p.add_argument("--async-threads", default=None, metavar="A,B",
                   help="llamacpp: lr-async's layout, setups tAco and tBco: the target on A threads while the draft "
                        "decodes on B in its own process, and the draft on B while the target runs on A")
    p.add_argument("--budget", type=float, default=None,
                   help=f"llamacpp: stop timing a shape once its timed passes add up to this many seconds (at least "
                        f"one; default {BUDGET_S:g})")
    p.add_argument("--logits", default=None, choices=LOGITS,
                   help="llamacpp: logits at every new position (all, default: n-gram verification) or at each "
                        "row's last (last: a step's prefill)")
    p.add_argument("--name", help="profile name (default hf DEVICE-DTYPE[-tTHREADS], llamacpp cpu-llamacpp)")
    p.add_argument("--cache-dir", default=None, help="lrref model cache, for --model NAME")
    p.add_argument("--require-idle", action="store_true", help=REQUIRE_IDLE_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def hf_spec(a: argparse.Namespace) -> ProfileSpec:
    """The validated spec of ``lrref profile --backend hf``'s arguments (torch-free)."""
    for k in LLAMACPP_ONLY:
        if getattr(a, k) is not None:
            raise UsageError(f"--{k.replace('_', '-')} is for --backend llamacpp")
    d = {k: HF_DEFAULTS[k] if getattr(a, k) is None else getattr(a, k) for k in HF_DEFAULTS}
    archs = [load_arch(n.strip()) for n in (a.arch or "").split(",") if n.strip()]
    archs += [arch_from_model(m, a.cache_dir) for m in a.model]
    return ProfileSpec(tuple(archs), d["device"], d["dtype"], parse_list(d["batch"], "--batch", 1),
                       parse_list(d["positions"], "--positions", 1), parse_list(d["context"], "--context", 0),
                       d["warmup"], d["repeats"], a.threads, d["chunk"], a.seed, a.name)


def llamacpp_spec(a: argparse.Namespace) -> LlamaSpec:
    """The validated spec of ``lrref profile --backend llamacpp``'s arguments: flags and grid first, then the
    binding, then the models (resolved and their metadata read; no weights loaded)."""
    from ..backends.llamacpp_ffi import require_binding
    from . import llamacpp as ll
    from .llamacpp import CO_CONTEXT, DEFAULTS, LlamaSpec, check_settings, read_model

    for flag, bad in (("--arch", a.arch), ("--chunk", a.chunk is not None), ("--dtype", a.dtype not in (None, "auto")),
                      ("--device", a.device not in (None, "cpu"))):
        if bad:
            raise UsageError(f"{flag} is for --backend hf; --backend llamacpp times prepared GGUF models (--model "
                             "NAME[,NAME]) on the CPU")
    names = [n.strip() for m in a.model for n in m.split(",") if n.strip()]
    if not 1 <= len(names) <= 2:
        raise UsageError(f"--backend llamacpp: give --model TARGET[,DRAFT] (one or two models), got {len(names)}")
    grid = {k: parse_list(getattr(a, k) or DEFAULTS[k], f"--{k}", 0 if k == "context" else 1)
            for k in ("context", "batch", "positions")}
    kw = dict(threads=a.threads if a.threads is not None else (None if a.async_threads else 2),
              async_threads=_pair(a.async_threads), **grid,
              warmup=DEFAULTS["warmup"] if a.warmup is None else a.warmup,
              repeats=DEFAULTS["repeats"] if a.repeats is None else a.repeats,
              budget=ll.BUDGET_S if a.budget is None else a.budget, logits=a.logits or "all",
              co_context=CO_CONTEXT if a.co_context is None else a.co_context, seed=a.seed, name=a.name)
    check_settings(**{k: kw[k] for k in ("threads", "async_threads", "batch", "warmup", "repeats", "budget",
                                         "logits", "co_context", "seed", "name")})
    require_binding()
    found = [read_model(n, a.cache_dir) for n in names]
    return LlamaSpec(found[0], found[1] if len(found) > 1 else None, **kw)


def _pair(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--async-threads must be 'TARGET,DRAFT' integers, got {text!r}") from None
    return a, b


# --- timing one backend --------------------------------------------------------------------------------


def command(a: argparse.Namespace) -> str:
    """``lrref profile``: validate, check the output and (``--require-idle``) the machine, measure, write; returns
    the one-line summary (``a.argv``: the command line)."""
    from lrsim.atomic import check_writable

    progress = not a.quiet and sys.stderr.isatty()
    spec = llamacpp_spec(a) if a.backend == "llamacpp" else hf_spec(a)
    try:
        check_writable(Path(a.out))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.require_idle:
        from ..host.load import require_idle

        require_idle()
    if a.backend == "llamacpp":
        from . import llamacpp as ll

        return ll.run(spec, Path(a.out), ["lrref", *a.argv], progress)
    return run(spec, Path(a.out), ["lrref", *a.argv], progress)
