"""``--backend auto``: llama.cpp on the CPU when it can run the models, hf when a flag or a model needs torch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lrref import models
from lrref.backends import auto as backend_auto


def args(tmp_path, **kw):
    a = dict(backend="auto", device="cpu", draft_device=None, random_weights=None, dtype="auto", target=None,
             draft=None, cache_dir=str(tmp_path))
    a.update(kw)
    return SimpleNamespace(**a)


@pytest.fixture
def binding(monkeypatch):
    monkeypatch.setattr(backend_auto, "_binding_missing", lambda: None)


def prepared(tmp_path, name, gguf=False, hf=False):
    if gguf:
        p = models.gguf_path(name, tmp_path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"GGUF")
        p.with_name(p.name + ".ok").write_text(models.REGISTRY[name].sha256)
    if hf:
        d = models.model_dir(name, tmp_path)
        d.mkdir(parents=True, exist_ok=True)
        (d / models.MANIFEST).write_text("{}")


@pytest.mark.parametrize("kw, flag", [
    (dict(device="cuda"), "--device cuda"), (dict(draft_device="cuda:1"), "--device cuda:1"),
    (dict(random_weights="tiny"), "--random-weights"), (dict(dtype="float32"), "--dtype float32"),
])
def test_a_flag_that_needs_torch_gives_hf(tmp_path, binding, kw, flag):
    assert backend_auto.choose(args(tmp_path, **kw), lr=True) == ("hf", f"{flag} needs torch")


def test_gguf_files_and_the_binding_give_llamacpp(tmp_path, binding):
    prepared(tmp_path, models.DEFAULT_TARGET, gguf=True, hf=True)
    prepared(tmp_path, models.DEFAULT_DRAFT, gguf=True)
    assert backend_auto.choose(args(tmp_path), lr=True)[0] == "llamacpp"
    assert backend_auto.choose(args(tmp_path, target=str(tmp_path / "m.gguf")), lr=False)[0] == "llamacpp"


def test_nothing_prepared_counts_for_llamacpp_so_the_error_names_the_default_prepare(tmp_path, binding):
    assert backend_auto.choose(args(tmp_path), lr=True)[0] == "llamacpp"


def test_a_model_prepared_for_transformers_only_or_a_directory_gives_hf(tmp_path, binding):
    prepared(tmp_path, models.DEFAULT_TARGET, gguf=True)
    prepared(tmp_path, models.DEFAULT_DRAFT, hf=True)
    backend, why = backend_auto.choose(args(tmp_path), lr=True)
    assert backend == "hf" and why.startswith(f"{models.DEFAULT_DRAFT} is prepared for transformers only")
    assert backend_auto.choose(args(tmp_path), lr=False)[0] == "llamacpp"  # ar needs no draft
    assert backend_auto.choose(args(tmp_path, target=str(tmp_path)), lr=False) == ("hf", f"{tmp_path} is not a .gguf file")


def test_without_the_binding_auto_is_hf_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(backend_auto, "_binding_missing", lambda: "needs the llama.cpp binding: pip install x")
    a = args(tmp_path)
    backend, line = backend_auto.resolve(a, lr=False)
    assert backend == "hf" and line == ("--backend auto: hf (llama.cpp unavailable (needs the llama.cpp binding: "
                                        "pip install x); --backend hf|llamacpp to choose)")
    assert a.backend == "auto"  # read, never changed


def test_an_explicit_backend_is_kept_silently(tmp_path):
    a = args(tmp_path, backend="hf")
    assert backend_auto.resolve(a, lr=True) == ("hf", None) and a.backend == "hf"
