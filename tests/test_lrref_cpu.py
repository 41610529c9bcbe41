"""lrref.host.cpu: what ``--dtype auto`` picks (mocked CPUs: no model, no torch for the flag paths)."""

import pytest

from lrref.host import cpu
from lrsim.errors import InputError

AVX2_EPYC = {"model name": "AMD EPYC", "flags": "fpu sse2 avx avx2 fma f16c"}
SPR_XEON = {"model name": "Intel(R) Xeon(R) Platinum 8480+",
            "flags": "avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8"}


@pytest.fixture
def fake_cpu(monkeypatch):
    """Install a fake ``/proc/cpuinfo`` block (and an architecture); caches are cleared around the test."""

    def install(info: dict, machine: str = "x86_64", probe: float | None = None):
        monkeypatch.setattr(cpu, "_cpuinfo", lambda: info)
        monkeypatch.setattr(cpu.platform, "machine", lambda: machine)
        if probe is None:
            monkeypatch.setattr(cpu, "matmul_probe", lambda *a, **k: pytest.fail("no probe where flags answer"))
        else:
            monkeypatch.setattr(cpu, "matmul_probe", lambda *a, **k: probe)
        for f in (cpu.cpu_model, cpu.cpu_flags, cpu.bf16_support):
            f.cache_clear()

    yield install
    for f in (cpu.cpu_model, cpu.cpu_flags, cpu.bf16_support):
        f.cache_clear()


def test_auto_is_float32_without_native_bf16(fake_cpu):
    fake_cpu(AVX2_EPYC)
    assert not cpu.native_bf16()
    assert cpu.resolve_dtype("auto") == "float32"
    assert cpu.resolve_dtype() == "float32"
    assert "AMD EPYC" in cpu.describe_auto() and "float32" in cpu.describe_auto()


def test_auto_is_bfloat16_with_avx512_bf16_or_amx(fake_cpu):
    fake_cpu(SPR_XEON)
    assert cpu.resolve_dtype("auto") == "bfloat16"
    fake_cpu({"model name": "x", "flags": "avx2 amx_tile amx_bf16"})
    assert cpu.resolve_dtype("auto") == "bfloat16"


def test_cuda_auto_is_bfloat16_and_explicit_dtypes_pass_through(fake_cpu):
    fake_cpu(AVX2_EPYC)
    assert cpu.resolve_dtype("auto", "cuda") == "bfloat16"
    assert cpu.resolve_dtype("bfloat16") == "bfloat16" and cpu.resolve_dtype("float32") == "float32"
    with pytest.raises(InputError, match="dtype must be one of"):
        cpu.resolve_dtype("float16")


def test_torch_capability_answers_without_cpuinfo(fake_cpu, monkeypatch):
    tc = pytest.importorskip("torch.cpu")
    fake_cpu({})
    monkeypatch.setattr(tc, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(tc, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(tc, "_is_avx2_supported", lambda: True)
    assert cpu.resolve_dtype("auto") == "float32" and "avx2" in cpu.cpu_flags()
    fake_cpu({})
    monkeypatch.setattr(tc, "_is_avx512_bf16_supported", lambda: True)
    assert cpu.resolve_dtype("auto") == "bfloat16"


def test_probe_decides_where_flags_do_not(fake_cpu):
    fake_cpu({}, machine="arm64", probe=9.0)  # bf16 9x slower: emulated
    assert cpu.resolve_dtype("auto") == "float32" and "probe" in cpu.bf16_support()[1]
    fake_cpu({"features": "fp asimd bf16"}, machine="aarch64", probe=0.8)
    assert cpu.resolve_dtype("auto") == "bfloat16"


def test_hardware_facts_name_the_cpu_and_relevant_flags(fake_cpu):
    fake_cpu(AVX2_EPYC)
    hw = cpu.hardware_facts("float32", 2)
    assert hw["cpu_model"] == "AMD EPYC" and hw["cpu_flags"] == ["avx2", "fma", "f16c"]
    assert hw["dtype"] == "float32" and hw["threads"] == 2 and hw["bf16_native"] is False


@pytest.mark.parametrize("vendor, family, model, kind", [
    ("AuthenticAMD", "25", "17", "AMD EPYC Zen 4"),  # the Zen 4 of studies/data/validation-llamacpp
    ("AuthenticAMD", "26", "2", "AMD EPYC Zen 5"),  # the Zen 5 of studies/data/validation-llamacpp-zen5
    ("AuthenticAMD", "25", "1", "AMD EPYC Zen 3"),
    ("GenuineIntel", "6", "143", "AMD EPYC Sapphire Rapids"),
])
def test_header_facts_tell_cpu_generations_apart(fake_cpu, vendor, family, model, kind):
    fake_cpu(AVX2_EPYC | {"vendor_id": vendor, "cpu family": family, "model": model, "stepping": "1"})
    hw = cpu.hardware_facts("float32", 2)
    assert (hw["cpu_family"], hw["cpu_model_number"], hw["cpu_stepping"]) == (int(family), int(model), 1)
    assert hw["cpu_kind"] == kind  # the model name, then the microarchitecture the numbers name
    fake_cpu(AVX2_EPYC | {"vendor_id": vendor, "cpu family": family, "model": "250"})
    assert cpu.hardware_facts("float32", 2)["cpu_kind"] is None  # numbers it does not know: no guess


def test_real_cpuinfo_parses():
    cpu._cpuinfo.cache_clear()
    assert isinstance(cpu.cpu_model(), str) and cpu.cpu_model()


# --- every dtype-dependent path under each CPU kind (the tests must pass on every CPU; here each is mocked) -------

CPU_KINDS = {  # name: (/proc/cpuinfo block, what --dtype auto picks there)
    "avx2-amd": ({"model name": "AMD EPYC 7B13 64-Core Processor", "flags": "fpu sse2 avx avx2 fma f16c"}, "float32"),
    "avx512-intel": ({"model name": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
                      "flags": "fpu sse2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512_vnni"}, "float32"),
    "amx-intel": (SPR_XEON, "bfloat16"),
}


@pytest.fixture(params=sorted(CPU_KINDS))
def cpu_kind(request, fake_cpu):
    """Each CPU kind in turn (mocked): returns the dtype ``--dtype auto`` must pick on it."""
    info, dtype = CPU_KINDS[request.param]
    fake_cpu(info)
    return dtype


def test_auto_dtype_and_the_header_facts_follow_the_cpu_kind(cpu_kind):
    from lrref.config import DecodeConfig
    from lrref.decode.decoder import make_header
    from lrref.profiling.profile import resolve_dtype

    assert cpu.resolve_dtype("auto") == resolve_dtype("auto", "cpu") == cpu_kind
    assert cpu.describe_auto().startswith(f"dtype auto -> {cpu_kind} (")
    hw = make_header(DecodeConfig(mode="ar", dtype="auto"), {}, "hf", None).hardware
    assert hw["dtype"] == cpu_kind and hw["bf16_native"] == (cpu_kind == "bfloat16")
    assert hw["cpu_model"] == cpu.cpu_model() and ("avx512f" in hw["cpu_flags"]) == ("Intel" in hw["cpu_model"])


def test_random_weights_load_in_the_chosen_dtype(cpu_kind):
    torch = pytest.importorskip("torch")
    from lrref.archs import load_arch
    from lrref.backends.hf_random import RandomBackend

    be = RandomBackend(load_arch("tiny"), dtype="auto", threads=1, prompt_tokens=4)
    assert be.dtype == cpu_kind and next(be.model.parameters()).dtype == getattr(torch, cpu_kind)


def test_the_profiler_on_each_cpu_kind(cpu_kind, tmp_path, capsys):
    """``lrref profile --arch tiny`` with ``--dtype auto``: KV bytes, name and provenance follow the kind's dtype
    (the failure of issue 16 item 7: an AMX CPU picks bfloat16, 256 KV bytes, where float32 gave 512)."""
    pytest.importorskip("torch")
    from test_lrref_profile import FAST, check_tiny_profile

    from lrref import cli

    out = tmp_path / "tiny.json"
    assert cli.main(["profile", *FAST, "--out", str(out)]) == 0
    check_tiny_profile(out, capsys, cpu_kind)
