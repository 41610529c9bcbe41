"""Latency profiles: format round trip, validation, interpolation, embedded H100 data, the adapter, `lrsim profiles`."""

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lrsim.cli import main
from lrsim.cost.library import embedded, load_profile
from lrsim.cost.passcost import ProfileCost, cost_from_dict, cost_ratio
from lrsim.errors import InputError
from lrsim.latency.profile import ArchProfile, Prefill, Profile, Provenance, read_profile, write_profile

SHARED = Path(os.environ.get("LRSIM_GPU_SRC", Path(__file__).resolve().parents[1].parent / "shared/gpu/h100"))
if not SHARED.is_dir():
    SHARED = Path("/work/shared/gpu/h100")


def small_profile(ms=None, missing=()) -> Profile:
    """context (0, 1000) x batch (1, 4) x positions (1, 8); times are 1 + b (q + L/1000) ms."""
    ms = ms or tuple(tuple(tuple(1 + b * (q + L / 1000) for q in (1, 8)) for b in (1, 4)) for L in (0, 1000))
    a = ArchProfile("toy", 1000, 2, 256, (0, 1000), (1, 4), (1, 8), ms, tuple(missing),
                    Prefill("wall", (1, 4), (16, 64), ((2.0, 4.0), (3.0, 9.0))))
    return Profile("toy-profile", "wall", Provenance("test CPU", "numpy", "float32", "2026-01-01"), {"toy": a})


def test_round_trip(tmp_path):
    p = small_profile()
    write_profile(p, tmp_path / "p.json")
    q = read_profile(tmp_path / "p.json")
    assert q.path == str(tmp_path / "p.json")
    assert q.to_dict() == p.to_dict() and q.archs == p.archs and q.provenance == p.provenance


def mutate(d: dict, path: str, value) -> dict:
    """Set (or with value ... delete) a key given as 'a.b.c' in a copy of d."""
    d = copy.deepcopy(d)
    *head, last = path.split(".")
    node = d
    for k in head:
        node = node[k]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return d


@pytest.mark.parametrize("path, value, message", [
    ("archs.toy.context", ..., "missing axis 'context'"),
    ("archs.toy.batch", [4, 1], "values must increase strictly"),
    ("archs.toy.positions", [1, 1], "values must increase strictly"),
    ("archs.toy.ms", [[[1, 2], [3, 4]], [[5, 6], [7, 0]]], "time must be a number > 0"),
    ("archs.toy.ms", [[[1, 2], [3, 4]], [[5, 6], [7, -1.5]]], "time must be a number > 0"),
    ("archs.toy.ms", [[[1, 2], [3, 4]], [[5, 6], [7, None]]], "no 'missing' note says why"),
    ("archs.toy.ms", [[[1, 2], [3, 4]]], "expected a list of 2"),
    ("version", 2, "unknown version 2"),
    ("version", ..., "unknown version None"),
    ("format", "something-else", "not a latency profile"),
    ("unit", "s", "times must be in 'ms'"),
    ("timed", "cpu_time", "expected one of kernel_sum, wall"),
    ("provenance.device", ..., "missing 'device'"),
    ("provenance.date", "yesterday", "ISO 8601"),
    ("archs.toy.params", 0, "expected an integer >= 1"),
    ("archs.toy.prefill.prompt", [64, 16], "values must increase strictly"),
    ("archs", {}, "non-empty object"),
    ("archs.toy.speed", 3, "unknown key(s) 'speed'"),
])
def test_validation_errors_are_one_line_naming_the_file(tmp_path, path, value, message):
    bad = mutate(small_profile().to_dict(), path, value)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(InputError) as e:
        read_profile(f)
    text = str(e.value)
    assert "\n" not in text and text.startswith(str(f)) and message in text, text


def test_bad_profile_on_the_command_line(tmp_path, capsys):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(mutate(small_profile().to_dict(), "archs.toy.context", ...)))
    assert main(["profiles", str(f)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and str(f) in err and "missing axis 'context'" in err
    f.write_text("{not json")
    assert main(["profiles", str(f)]) == 2
    assert "invalid JSON" in capsys.readouterr().err


def test_write_refuses_an_invalid_profile_and_writes_nothing(tmp_path):
    p = small_profile(ms=(((1.0, 2.0), (3.0, 4.0)), ((5.0, 6.0), (7.0, -1.0))))
    with pytest.raises(InputError, match="time must be a number > 0"):
        write_profile(p, tmp_path / "p.json")
    assert list(tmp_path.iterdir()) == []


def test_exact_on_every_grid_point_of_every_embedded_profile():
    for name in embedded():
        p = load_profile(name)
        for a in p.archs.values():
            for i, L in enumerate(a.context):
                for j, b in enumerate(a.batch):
                    for k, q in enumerate(a.positions):
                        if a.ms[i][j][k] is not None:
                            assert p.time_ms(a.name, L, b, q) == a.ms[i][j][k]


def test_trilinear_reproduces_a_cost_affine_in_each_axis():
    """T = a + b B + c B q + d B L + e B q L is affine in each axis: exact inside every cell."""
    def f(L, b, q):
        return 3 + 0.5 * b + 0.25 * b * q + 1e-3 * b * L + 1e-4 * b * q * L

    Ls, bs, qs = (0, 1024, 8192), (1, 2, 4, 8), (1, 2, 4, 64)
    a = ArchProfile("m", 1, 1, 1, Ls, bs, qs, tuple(tuple(tuple(f(L, b, q) for q in qs) for b in bs) for L in Ls))
    rng = np.random.default_rng(0)
    for L, b, q in zip(rng.uniform(0, 8192, 50), rng.uniform(1, 8, 50), rng.uniform(1, 64, 50)):
        assert a.time_ms(L, b, q) == pytest.approx(f(L, b, q), rel=1e-12)


def test_outside_the_grid_error_clamp_linear():
    p = small_profile()
    with pytest.raises(InputError, match=r"context 2000 is outside the measured range 0..1000 .*'error'"):
        p.time_ms("toy", 2000, 1, 1)
    with pytest.raises(InputError, match="batch 8 is outside"):
        p.time_ms("toy", 0, 8, 1)
    def t(L, b, q):  # the toy grid: affine in each axis
        return 1 + b * (q + L / 1000)

    assert p.time_ms("toy", 2000, 1, 1, "clamp") == t(1000, 1, 1)
    assert p.time_ms("toy", 0, 8, 16, "clamp") == t(0, 4, 8)
    assert p.time_ms("toy", 2000, 8, 16, "linear") == pytest.approx(t(2000, 8, 16))
    with pytest.raises(InputError, match="must be one of"):
        p.time_ms("toy", 0, 1, 1, "nearest")
    with pytest.raises(InputError, match="batch must be a finite number >= 1"):
        p.time_ms("toy", 0, 0, 1)


def test_linear_extrapolation_below_zero_and_on_one_point_axes_is_refused():
    ms = ((((5.0, 1.0),),),)  # context 0 only, batch 1 only, positions (1, 8) falling
    a = ArchProfile("m", 1, 1, 1, (0,), (1,), (1, 8), ms[0])
    with pytest.raises(InputError, match="<= 0"):
        a.time_ms(0, 1, 64, "linear")
    with pytest.raises(InputError, match="'linear' extrapolation needs two measured context values"):
        a.time_ms(10, 1, 1, "linear")
    assert a.time_ms(10, 1, 1, "clamp") == 5.0


def test_missing_points_are_never_invented():
    ms = (((1.0, 2.0), (3.0, 4.0)), ((5.0, 6.0), (None, None)))
    p = small_profile(ms=ms, missing=["context 1000 batch 4: out of memory"])
    assert p.time_ms("toy", 1000, 1, 8) == 6.0
    assert p.time_ms("toy", 500, 1, 1) == 3.0
    for policy in ("error", "clamp", "linear"):
        with pytest.raises(InputError, match=r"toy context 1000 batch 4 positions 1 \(context 1000 batch 4: out of"):
            p.time_ms("toy", 1000, 4, 1, policy)
    with pytest.raises(InputError, match="was not measured"):
        p.time_ms("toy", 999, 3, 1)


def test_prefill_lookup():
    p = small_profile()
    assert p.prefill_ms("toy", 64, 4) == 9.0
    assert p.prefill_ms("toy", 40, 1) == pytest.approx(3.0)  # halfway between 16 and 64 tokens
    with pytest.raises(InputError, match="prompt 128 is outside"):
        p.prefill_ms("toy", 128)
    assert p.prefill_ms("toy", 128, 1, "clamp") == 4.0


# --- the embedded H100 profiles ----------------------------------------------------------------------


@pytest.mark.parametrize("profile, arch, point, ms", [
    ("h100-context-kernel", "qwen2.5-32b", (1024, 1, 1), 27.95),     # latency-context.json
    ("h100-context-kernel", "qwen2.5-1.5b", (8192, 4, 4), 17.633),
    ("h100-context-eager", "qwen2.5-32b", (1024, 1, 1), 88.87),
    ("h100-ctx0-kernel", "qwen2.5-0.5b", (0, 1, 1), 2.284),          # latency-small.json key L1024/b1/q1
    ("h100-ctx0-kernel", "qwen2.5-0.5b", (0, 16, 64), 5.403),
    ("h100-ctx0-kernel", "qwen3-32b", (0, 8, 8), 36.6),               # latency-32b.json
    ("h100-ctx0-eager", "qwen3-1.7b", (0, 4, 2), 52.428),
])
def test_embedded_h100_numbers(profile, arch, point, ms):
    assert load_profile(profile).time_ms(arch, *point) == ms


def test_embedded_h100_prefill_context_and_missing():
    k = load_profile("h100-ctx0-kernel")
    assert k.prefill_ms("qwen2.5-7b", 2048, 4) == 215.489 and k.archs["qwen2.5-7b"].prefill.timed == "wall"
    assert k.archs["qwen2.5-32b"].context == (0,)  # the source's "L1024" keys are context ~0
    with pytest.raises(InputError, match="context 1024 is outside the measured value 0"):
        k.time_ms("qwen2.5-32b", 1024, 1, 1)
    c = load_profile("h100-context-kernel")
    assert c.archs["qwen2.5-32b"].unmeasured == 4 * 3 + 4 * 4 and c.archs["qwen2.5-1.5b"].unmeasured == 0
    assert c.timed == "kernel_sum" and load_profile("h100-context-eager").timed == "wall"
    assert c.provenance.date == "2026-11-22" and c.provenance.dtype == "bfloat16"


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared/gpu/h100 not on this machine")
def test_embedded_h100_profiles_reproduce_every_shared_number():
    files = {"latency-context.json": ("h100-context", {1024: 1024, 8192: 8192, 16384: 16384}),
             "latency-small.json": ("h100-ctx0", {1024: 0}), "latency-32b.json": ("h100-ctx0", {1024: 0})}
    n = 0
    for fname, (prefix, contexts) in files.items():
        src = json.loads((SHARED / fname).read_text())
        for kind, field in (("kernel", "kernel_ms"), ("eager", "eager_ms")):
            p = load_profile(f"{prefix}-{kind}")
            for arch, m in src["models"].items():
                a = p.arch(arch)
                assert (a.params, a.kv_bytes_per_token) == (m["params"], m["kv_bytes_per_token"])
                for key, v in m[field].items():
                    L, b, q = (int(x[1:]) for x in key.split("/"))
                    if L in contexts:
                        assert p.time_ms(arch, contexts[L], b, q) == v
                        n += 1
    assert n == 2 * (60 + 32 + 4 * 25 + 2 * 25)  # all of latency-context.json, every L1024 key of the others


def test_cost_ratio_and_profile_cost():
    t, d = (ProfileCost.of("h100-context-kernel", a, "error") for a in ("qwen2.5-32b", "qwen2.5-1.5b"))
    assert cost_ratio(d, t, context=1024) == pytest.approx(3.637 / 27.95)
    assert t.seconds(1024, 1, 1) == pytest.approx(0.02795) and t.seconds(1024, 4, 8) == pytest.approx(0.043119)
    assert t.seconds(1024, 3, 1) == pytest.approx((0.029254 + 0.031774) / 2)
    a = t.table
    big = a.batch[-1]
    assert t.seconds(1024, 2 * big, 1) == pytest.approx(t.seconds(1024, big, 2))  # rows beyond the grid fold
    with pytest.raises(ValueError, match="h100-context-kernel.json: qwen2.5-32b: positions 100 is outside"):
        t.check(1, 100, 1024, 1024)
    assert cost_from_dict(json.loads(json.dumps(t.to_dict()))).to_dict() == t.to_dict()
    with pytest.raises(InputError, match="no architecture 'llama'"):
        ProfileCost.of("h100-context-kernel", "llama")
    with pytest.raises(InputError, match="neither an embedded profile"):
        load_profile("h100-nonexistent")


def test_simulator_runs_on_a_profile():
    from lrsim.sim import SimConfig, simulate

    t, d = (ProfileCost.of("h100-context-kernel", a) for a in ("qwen2.5-32b", "qwen2.5-1.5b"))
    cfg = SimConfig(mode="sync", k1=2, steps=200, target_latency=t, draft_latency=d, prompt_tokens=8192)
    r = simulate(cfg)
    assert r.c1_eff == pytest.approx(4.41 / 34.444, rel=1e-6) and r.speedup > 1
    with pytest.raises(ValueError, match="batch 4 positions 1 .*was not measured"):
        SimConfig(mode="sync", k1=4, target_latency=t, prompt_tokens=8192)


# --- lrsim profiles ----------------------------------------------------------------------------------


def test_lrsim_profiles_lists_one_line_per_embedded_profile(capsys):
    assert main(["profiles"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = [ln.split()[0] for ln in lines]
    assert names == sorted(embedded()) and {"h100-ctx0-kernel", "h100-context-eager"} <= set(names)
    for n in names:
        assert load_profile(n).name == n
    assert "kernel_sum" in lines[names.index("h100-context-kernel")]


def test_lrsim_profiles_json_file_path_and_pricing(capsys, tmp_path):
    write_profile(small_profile(), tmp_path / "mine.json")
    assert main(["profiles", "--json", str(tmp_path / "mine.json"), "h100-ctx0-eager"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [x["name"] for x in d] == ["toy-profile", "h100-ctx0-eager"] and d[0]["archs"]["toy"]["batch"] == [1, 4]
    assert main(["profiles", "h100-context-kernel", "--arch", "qwen2.5-32b", "--context", "1024",
                 "--draft", "qwen2.5-1.5b", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["ms"] == 27.95 and row["c1"] == pytest.approx(3.637 / 27.95)
    assert main(["profiles", "h100-context-kernel", "--arch", "qwen2.5-32b", "--context", "100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "h100-context-kernel.json" in err and "context 100 is outside" in err


def test_lrsim_profile_modules_do_not_import_torch():
    code = ("import sys, lrsim.cost.library, lrsim.latency.profile, lrsim.cli; "
            "lrsim.cost.library.load_profile('h100-ctx0-kernel');"
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_embedded_profiles_are_small():
    for path in embedded().values():
        assert path.stat().st_size < 16_000, path


# --- profile vs trace --------------------------------------------------------------------------------


def test_profile_check_on_a_synthetic_ar_trace(tmp_path):
    """Steps after the first: pass j of a step that starts after G tokens sees prompt + G - 1 + j cached tokens."""
    from lrsim.cost.check import compare
    from lrsim.trace import Header, RequestRecord, StepRecord, read_trace, write_trace

    def t(L):  # ms per pass at context L, affine: exact for linear interpolation
        return 10 + 0.01 * L

    ctx = ArchProfile("m", 1, 1, 1, (0, 1000), (1,), (1,), (((t(0),),), ((t(1000),),)))
    prof = Profile("p", "wall", Provenance("cpu", "x", "float32", "2026-01-01"), {"m": ctx})
    steps, start = [], 0.0
    for cycle, n in enumerate((5, 4, 3)):
        gen = sum((5, 4, 3)[:cycle])
        secs = 2 * sum(t(20 + gen - 1 + j) for j in range(n)) / 1000  # recorded = 2x the profile
        steps.append(StepRecord(request=0, cycle=cycle, target_start=start, target_end=start + secs, target_tokens=n,
                                target_batch=1, target_forwards=n, committed="target"))
        start += secs
    header = Header(source="lrref", mode="ar", config={"mode": "ar", "ngram": 0})
    write_trace(tmp_path / "ar.jsonl", header, steps, [RequestRecord(request=0, prompt_tokens=20, output_tokens=12)])
    c = compare(prof, "m", [read_trace(tmp_path / "ar.jsonl")])
    assert (c.steps, c.forwards, c.contexts) == (2, 7, (24, 30)) and c.ratio == pytest.approx(2.0)
    assert "recorded/profile = 2.000" in c.format()
    write_trace(tmp_path / "sd.jsonl", Header(source="lrref", mode="ar", config={"mode": "sd", "ngram": 4}), steps)
    with pytest.raises(InputError, match="needs a target-only trace without n-gram"):
        compare(prof, "m", [read_trace(tmp_path / "sd.jsonl")])


def test_a_role_a_mode_leaves_out_runs_on_its_target_setup():
    """The measured llama.cpp profile names no draft for ar: ar's draft is priced on ar's target setup."""
    from pathlib import Path

    from lrsim.cost.hardware import HardwareSpec

    path = Path(__file__).resolve().parents[1] / "studies" / "data" / "profiles" / "cpu-llamacpp-epyc-zen4.json"
    hw = HardwareSpec(str(path), "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")
    assert hw.entry("ar", "draft") == "qwen2.5-coder-0.5b-instruct@t2" == hw.entry("sync", "draft")
    assert hw.entry("async", "draft") == "qwen2.5-coder-0.5b-instruct@t1co"
    assert hw.draft("ar").seconds(0, 1, 1) == hw.draft("sync").seconds(0, 1, 1) > 0


# --- one home for c1, layers of the profile packages ----------------------------------------------------


def test_c1_has_one_computation():
    """c1 of a pair is ``lrsim.cost.passcost.cost_ratio``; a hardware spec's is that of the mode's setup, and the
    calibration's the same ratio of measured means (lrsim.stats.ratio_of_means); no other ``cost_ratio``."""
    import ast

    from lrsim.cost.hardware import HardwareSpec
    from lrsim.prediction.calibrate import Summary
    from lrsim.stats import ratio_of_means

    hw = HardwareSpec("h100-context-kernel", "qwen2.5-32b", "qwen2.5-1.5b")
    assert hw.c1("async", 1024) == cost_ratio(hw.draft("async"), hw.target("async"), 1024) == \
        pytest.approx(3.637 / 27.95)
    with pytest.raises(InputError, match="c1 needs a draft architecture"):
        HardwareSpec("h100-context-kernel", "qwen2.5-32b").c1("async")
    d, t = Summary.of([1.0, 2.0, 3.0]), Summary.of([4.0, 4.0, 5.0, 7.0])
    r, (lo, hi) = ratio_of_means(d, t)
    assert r == 2.0 / 5.0 and lo < r < hi
    assert ratio_of_means(Summary.of([1.0]), t) == (0.2, None) and ratio_of_means(d, Summary.of([])) == (None, None)
    root = Path(__file__).resolve().parents[1] / "lrsim"
    homes = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef) and n.name == "cost_ratio"]
    assert homes == ["cost/passcost.py"]


def _package_imports(package: str) -> set[str]:
    """The lrsim packages (``lrsim.X``) that any module of ``lrsim/<package>`` imports, lazily or not."""
    import ast

    root = Path(__file__).resolve().parents[1] / "lrsim"
    out = set()
    for path in (root / package).rglob("*.py"):
        here = ["lrsim", package] + list(path.relative_to(root / package).with_suffix("").parts)[:-1]
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom):
                base = here[: len(here) - n.level + 1] if n.level else []
                name = ".".join(base + ([n.module] if n.module else [])) if n.level else (n.module or "")
            elif isinstance(n, ast.Import):
                name = " ".join(a.name for a in n.names)
            else:
                continue
            out |= {".".join(m.split(".")[:2]) for m in name.split() if m.startswith("lrsim.")}
    return out - {f"lrsim.{package}"}


def test_the_profile_format_is_the_layer_below_cost_and_gpu():
    """latency < gpu < cost: lrsim.gpu never imports lrsim.cost (not even lazily), lrsim.latency neither."""
    assert "lrsim.cost" not in _package_imports("gpu")
    assert not {"lrsim.cost", "lrsim.gpu"} & _package_imports("latency")
    assert "lrsim.gpu" in _package_imports("cost")  # model: specs resolve downwards
    assert importlib.util.find_spec("lrsim.cost.profile") is None  # one home for the format: lrsim.latency.profile
