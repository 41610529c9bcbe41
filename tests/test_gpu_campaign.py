"""studies/gpu_campaign.py on the CPU with the tiny config: every default part really runs in the campaign's order
(lrref bench ar/lr-sync/lr-async traces first, the profile points that price them, their prediction by lrsim, then
lrref profile, kernel sums, the model comparison, the pack, the validation), then resumes.  The real plan (--list
for a CUDA device nobody has here) states the paper pair's traces first, within 4 minutes on an H100."""

import json
import math
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lrsim.latency.profile import read_profile
from lrsim.trace import read_trace

ROOT = Path(__file__).resolve().parents[1]


def campaign(*args, device=("--device", "cpu", "--tiny")):
    return subprocess.run([sys.executable, str(ROOT / "studies" / "gpu_campaign.py"), *device, *args],
                          capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)


def listed(stdout: str) -> list[tuple[str, float]]:
    """(part, stated minutes) of a --list, in order."""
    return [(m[1], float(m[2])) for m in re.finditer(r"^  (\S+) +~ *([\d.]+) min", stdout, re.MULTILINE)]


def check_compare_traces(path: Path) -> None:
    """One row per mode and profile (the modelled device, the measured trace points): measured, predicted, error."""
    rows = json.loads(path.read_text())["rows"]
    assert sorted((r["mode"], r["profile"]) for r in rows) == sorted(
        (m, p) for m in ("ar", "lr-sync", "lr-async") for p in ("model", "points")), rows
    for r in rows:
        assert r["measured_tps"] > 0 and r["predicted_tps"] > 0, r
        assert math.isclose(r["error"], r["predicted_tps"] / r["measured_tps"] - 1), r
    assert {r["hardware"] for r in rows if r["profile"] == "points"} == {"trace-points.json"}
    for r in rows:  # one request per mode in the smoke test: nothing is left once the first is set aside
        assert len(r["request_tps"]) == 1 and r["measured_tps_after_first"] is None and r["error_after_first"] is None


def test_committed_h200_pack_re_derives_without_the_device(tmp_path):
    """The lent H200's pack (studies/data/gpu-h200) re-derived here, where torch sees no CUDA device: the derived
    parts read its files only; each mode's rate without its first request is the second request's own rate."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this checks the path taken without a CUDA device")
    pack = ROOT / "studies" / "data" / "gpu-h200"
    r = campaign("--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--resume-from", str(pack),
                 "--parts", "compare-traces,compare,pack", device=("--device", "cuda"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "campaign on cuda (spec h200)" in r.stdout and "traces-qwen2.5-32b" in r.stdout.split("resumed from")[1]
    rows = json.loads((tmp_path / "o" / "compare-traces.json").read_text())["rows"]
    for row in rows:
        first, second = row["request_tps"]
        assert math.isclose(row["measured_tps_after_first"], second)
        assert math.isclose(row["error_after_first"], row["predicted_tps"] / second - 1)
        assert min(first, second) < row["measured_tps"] < max(first, second)
    ar = next(row for row in rows if row["mode"] == "ar")
    assert ar["request_tps"][1] > 2 * ar["request_tps"][0]  # the slow first ~85 s the validation page describes
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    flags = [run.get("offline") is not None for run in man["runs"]]
    assert flags[:2] == [False, False] and flags[-1] and "--resume-from" in man["runs"][-1]["command"]  # measured, then derived
    assert man["parts"]["kernels-qwen2.5-32b"]["resumed_from"] == str(pack)
    kernels = {row["arch"]: row for row in json.loads((tmp_path / "o" / "compare.json").read_text())[
        "model_vs_measured"] if row["timed"] == "kernel_sum"}
    assert set(kernels) == {"qwen2.5-1.5b", "qwen2.5-32b"} and all(k["points"] == 75 for k in kernels.values())


def test_derived_parts_without_the_device_need_a_spec(tmp_path):
    pytest.importorskip("torch")
    r = campaign("--work", str(tmp_path / "w"), "--parts", "compare", device=("--device", "cuda"))
    if "torch sees no CUDA device" not in r.stderr and r.returncode == 0:
        pytest.skip("a CUDA device is here")
    assert r.returncode == 2 and "need --spec or --resume-from PACK" in r.stderr and "Traceback" not in r.stderr
    r = campaign("--work", str(tmp_path / "w"), "--parts", "env", device=("--device", "cuda"))
    assert r.returncode == 2 and "torch sees no CUDA device" in r.stderr and "re-derives" in r.stderr


def test_campaign_smoke_on_cpu_is_resumable(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    work, out = tmp_path / "work", tmp_path / "pack"
    r = campaign("--work", str(work), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    order = ("env", "traces-tiny", "trace-points", "compare-traces", "peaks", "profile-tiny", "kernels-tiny",
             "compare", "pack", "validate")
    at = [r.stdout.find(f"{part}: done in") for part in order]
    assert -1 not in at and at == sorted(at), r.stdout  # every part ran, in this order: the traces first
    points = read_profile(out / "trace-points.json")
    assert points.timed == "wall" and points.arch("tiny").batch == (1, 2, 3) and points.arch("tiny").unmeasured == 0
    assert points.arch("tiny").positions == (1, 7, 13) and points.arch("tiny").context == (12, 36)
    check_compare_traces(out / "compare-traces.json")
    assert "lr-async on points (trace-points.json): measured" in r.stdout
    prof = read_profile(out / "profile-tiny.json")
    assert prof.timed == "wall" and prof.arch("tiny").unmeasured == 0 and "--device cpu" in prof.provenance.command
    assert read_profile(out / "kernels-tiny.json").timed == "kernel_sum"
    traces = out / "traces" / "tiny+tiny"
    assert {read_trace(traces / f"trace-{m}.jsonl").header.mode for m in ("ar", "lr-sync", "lr-async")} == {
        "ar", "lr-sync", "lr-async"}
    log = (out / "traces-tiny.log").read_text()  # one warm-up request per mode, in no trace
    assert "--warmup 1" in log and log.count("[warm-up]") == 3
    assert all([q.request for q in read_trace(traces / f"trace-{m}.jsonl").requests] == [0]
               for m in ("ar", "lr-sync", "lr-async"))
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
                 "--parts", "env,profile-tiny,compare-traces,compare")
    assert r.returncode == 0 and r.stdout.count("skipped (done)") == 2, r.stdout
    assert "resumed from" in r.stdout and "profile-tiny" in r.stdout.split("resumed from")[1].splitlines()[0]
    assert read_profile(out2 / "profile-tiny.json").timed == "wall"
    check_compare_traces(out2 / "compare-traces.json")  # derived again from the restored traces and points
    # no `pack` part asked for: the archive refreshes the pack after every part, so it is committable as it stands
    man2 = json.loads((out2 / "manifest.json").read_text())
    assert man2["parts"]["profile-tiny"]["resumed_from"] == str(out) and "traces-tiny" in man2["parts"]
    assert man2["parts"]["compare-traces"]["status"] == "done"
    with tarfile.open(tgz) as tar:
        names = set(tar.getnames())
    assert {"work/parts/compare.done.json", "pack/manifest.json", "pack/profile-tiny.json",
            "pack/compare-traces.json", "pack/traces/tiny+tiny/trace-lr-async.jsonl"} <= names
    assert sorted(p.name for p in tgz.parent.iterdir()) == [tgz.name]  # no temporary archive left


def test_campaign_refuses_to_resume_from_what_is_not_a_pack(tmp_path):
    r = campaign("--work", str(tmp_path / "w"), "--resume-from", str(tmp_path), "--parts", "env")
    assert r.returncode == 2 and "no manifest.json there" in r.stderr and "Traceback" not in r.stderr


def test_campaign_lists_its_parts_and_refuses_unknown_ones(tmp_path):
    r = campaign("--work", str(tmp_path), "--list")
    parts = [p for p, _ in listed(r.stdout)]
    assert r.returncode == 0 and parts[:4] == ["env", "traces-tiny", "trace-points", "compare-traces"], r.stdout
    assert "profile-tiny" in parts and "paper-check" not in parts
    r = campaign("--work", str(tmp_path), "--parts", "nope")
    assert r.returncode == 2 and "unknown part(s) nope" in r.stderr


@pytest.mark.parametrize("spec", ["h100-sxm", "h200"])
def test_the_gpu_plan_states_the_paper_pairs_traces_first_within_four_minutes(tmp_path, spec):
    pytest.importorskip("torch")
    r = campaign("--work", str(tmp_path), "--list", "--spec", spec, device=("--device", "cuda"))
    assert r.returncode == 0, r.stdout + r.stderr
    plan = listed(r.stdout)
    assert [p for p, _ in plan[:4]] == ["env", "traces-qwen2.5-32b", "trace-points", "compare-traces"], r.stdout
    stated = dict(plan)
    assert stated["traces-qwen2.5-32b"] <= 4.0 and stated["trace-points"] <= 1.1, r.stdout
    assert "qwen2.5-32b,qwen2.5-1.5b: ar, lr-sync, lr-async, p = 0.5, 6 x 192 tokens" in r.stdout  # >= 6 requests
    assert [p for p, _ in plan].index("traces-qwen3-32b") > [p for p, _ in plan].index("profile-qwen2.5-32b")


def test_the_traces_run_on_cuda_graphs_on_a_gpu_only(tmp_path, monkeypatch):
    """Issue 42: the campaign's traces decode with --cuda-graphs on CUDA (priced on the model's kernel sums), not in
    the CPU smoke test; a trace's header says which."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_campaign", ROOT / "studies" / "gpu_campaign.py")
    gc = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_campaign", gc)
    spec.loader.exec_module(gc)
    gpu, cpu = gc.Campaign("cuda", False, tmp_path, tmp_path), gc.Campaign("cpu", True, tmp_path, tmp_path)
    assert "--cuda-graphs" in gc.trace_command(gpu, "qwen2.5-32b", "qwen2.5-1.5b")
    assert "--cuda-graphs" not in gc.trace_command(cpu, "tiny", "tiny")
    assert gc.modelled_profile(gpu, graphs=True).endswith(":hf-eager:kernel")
    header = lambda info: type("T", (), {"header": type("H", (), {"config": {"backend_info": info}})})()  # noqa: E731
    assert gc.on_graphs([header({"cuda_graphs": True})]) and not gc.on_graphs([header(None)])


def test_a_subprocess_part_stops_at_the_budget_with_its_children(tmp_path, monkeypatch):
    import importlib.util
    import os
    import time

    spec = importlib.util.spec_from_file_location("gpu_campaign", ROOT / "studies" / "gpu_campaign.py")
    gc = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_campaign", gc)  # its dataclasses look their module up
    spec.loader.exec_module(gc)
    c = gc.Campaign("cpu", True, tmp_path, tmp_path / "pack", deadline=time.perf_counter() + 1.5)
    child = tmp_path / "child.pid"  # a grandchild, as lr-async's draft worker is: it must not outlive the stop
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="stopped after [12] s"):
        gc.run_logged(c, [sys.executable, "-c", code], 600, "stopped.log")
    assert time.perf_counter() - t0 < 10 and "stopped after" in (tmp_path / "stopped.log").read_text()
    pid = int(child.read_text())
    for _ in range(50):  # killed: gone, or a zombie its parent (killed too) left for init to reap
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the grandchild {pid} outlived the stop")
