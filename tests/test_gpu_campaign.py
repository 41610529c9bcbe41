"""studies/gpu_campaign.py on the CPU with the tiny config: every default part really runs (lrref profile, kernel
sums, lrref bench lr-sync/lr-async traces, the model comparison, the pack, the validation), then resumes."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lrsim.cost.profile import read_profile
from lrsim.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]


def campaign(*args):
    return subprocess.run([sys.executable, str(ROOT / "studies" / "gpu_campaign.py"), "--device", "cpu", "--tiny",
                           *args], capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)


def test_campaign_smoke_on_cpu_is_resumable(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    work, out = tmp_path / "work", tmp_path / "pack"
    r = campaign("--work", str(work), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    for part in ("env", "peaks", "profile-tiny", "kernels-tiny", "traces-tiny", "compare", "pack", "validate"):
        assert f"{part}: done in" in r.stdout, r.stdout
    prof = read_profile(out / "profile-tiny.json")
    assert prof.timed == "wall" and prof.arch("tiny").unmeasured == 0 and "--device cpu" in prof.provenance.command
    assert read_profile(out / "kernels-tiny.json").timed == "kernel_sum"
    traces = out / "traces" / "tiny+tiny"
    assert {read_trace(traces / f"trace-{m}.jsonl").header.mode for m in ("ar", "lr-sync", "lr-async")} == {
        "ar", "lr-sync", "lr-async"}
    man = json.loads((out / "manifest.json").read_text())
    assert man["format"] == "lr-gpu-campaign" and man["parts"]["profile-tiny"]["status"] == "done"
    assert man["parts"]["profile-tiny"]["wall_s"] >= 0 and "estimate_s" in man["parts"]["kernels-tiny"]
    assert json.loads((out / "compare.json").read_text())["model_vs_measured"]
    assert (out / "validation" / "gpu_model_validation.json").is_file()
    again = campaign("--work", str(work), "--out", str(out), "--parts", "env,profile-tiny,pack")
    assert again.returncode == 0 and again.stdout.count("skipped (done)") == 2, again.stdout
    assert "pack: done in" in again.stdout  # derived from the files: never left stale by its marker
    # a later session on a fresh machine: resume from the committed pack, archive after every part
    work2, out2, tgz = tmp_path / "work2", tmp_path / "pack2", tmp_path / "out" / "campaign.tar.gz"
    r = campaign("--work", str(work2), "--out", str(out2), "--resume-from", str(out), "--archive", str(tgz),
                 "--parts", "env,profile-tiny,compare,pack")
    assert r.returncode == 0 and r.stdout.count("skipped (done)") == 2, r.stdout
    assert "resumed from" in r.stdout and "profile-tiny" in r.stdout.split("resumed from")[1].splitlines()[0]
    assert read_profile(out2 / "profile-tiny.json").timed == "wall"
    man2 = json.loads((out2 / "manifest.json").read_text())
    assert man2["parts"]["profile-tiny"]["resumed_from"] == str(out) and "traces-tiny" in man2["parts"]
    with tarfile.open(tgz) as tar:
        names = set(tar.getnames())
    assert {"work/parts/compare.done.json", "pack/manifest.json", "pack/profile-tiny.json"} <= names
    assert sorted(p.name for p in tgz.parent.iterdir()) == [tgz.name]  # no temporary archive left


def test_campaign_refuses_to_resume_from_what_is_not_a_pack(tmp_path):
    r = campaign("--work", str(tmp_path / "w"), "--resume-from", str(tmp_path), "--parts", "env")
    assert r.returncode == 2 and "no manifest.json there" in r.stderr and "Traceback" not in r.stderr


def test_campaign_lists_its_parts_and_refuses_unknown_ones(tmp_path):
    r = campaign("--work", str(tmp_path), "--list")
    assert r.returncode == 0 and "profile-tiny" in r.stdout and "min" in r.stdout and "paper-check" not in r.stdout
    r = campaign("--work", str(tmp_path), "--parts", "nope")
    assert r.returncode == 2 and "unknown part(s) nope" in r.stderr
