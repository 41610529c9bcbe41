"""``--vllm-metrics``: alpha2 from vLLM's speculative-decoding counters (lrsim.prediction.vllm_metrics), in calibrate, plan
and replay; every bad input one line on stderr with exit code 2."""

import json
import math

import pytest

from lrsim.cli import main
from lrsim.prediction.vllm_metrics import parse_dump, read_vllm_metrics
from lrsim.stats import Z95

P = "vllm:spec_decode_num_"


def dump(engines: dict[str, tuple[int, int, int, tuple[int, ...]]], total: bool = True, model: str = "qwen") -> str:
    """A /metrics text as vLLM V1 writes it: HELP/TYPE comments, ``_created`` samples, other metrics; one label set
    per engine holding (drafts, draft tokens, accepted, accepted per position)."""
    t = "_total" if total else ""
    lines = [f"# HELP {P}drafts{t} Number of spec decoding drafts.", f"# TYPE {P}drafts{t} counter"]
    for e, (n, d, a, per) in engines.items():
        lab = f'engine="{e}",model_name="{model}"'
        lines += [f"{P}drafts{t}{{{lab}}} {n}.0", f"{P}drafts_created{{{lab}}} 1.7424e+09",
                  f"{P}draft_tokens{t}{{{lab}}} {d}.0", f"{P}accepted_tokens{t}{{{lab}}} {a}.0"]
        lines += [f'{P}accepted_tokens_per_pos{t}{{{lab},position="{i}"}} {c}.0' for i, c in enumerate(per)]
        lines.append(f'vllm:num_requests_running{{{lab}}} 3.0')
    return "\n".join(lines) + "\n"


# two engines; summed: 800 drafts of k = 3 tokens, 700 accepted, positions reached by 400, 200, 100 drafts
TWO_ENGINES = {"0": (480, 1440, 420, (240, 120, 60)), "1": (320, 960, 280, (160, 80, 40))}
BEFORE = {"0": (200, 600, 480, (180, 160, 140))}
AFTER = {"0": (600, 1800, 830, (380, 260, 190))}  # the window: 400 drafts, 350 accepted, (200, 100, 50)


def write(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_dump_by_hand(tmp_path):
    m = read_vllm_metrics(write(tmp_path, "m.prom", dump(TWO_ENGINES)))
    assert (m.drafts, m.draft_tokens, m.accepted, m.k, m.k2, m.series) == (800, 2400, 700, 3, 4, 2)
    assert m.mean_acceptance_length == 1 + 700 / 800 == 1.875
    assert m.draft_acceptance_rate == 700 / 2400 and m.drafted_per_draft == 3.0
    assert [p.p for p in m.by_position] == [0.5, 0.25, 0.125]  # 400/800, 200/800, 100/800
    assert [(c.k, c.n) for c in m.conditional] == [(400, 800), (200, 400), (100, 200)]
    # 1 + a + a^2 + a^3 = 1.875 at a = 1/2 (k2 = 4 positions: 3 drafts and the bonus token)
    assert m.alpha2 == pytest.approx(0.5, abs=1e-12)
    # E[L] = 0.875, E[L^2] = (1*400 + 3*200 + 5*100)/800 = 1.875: sd of the mean sqrt((1.875 - 0.875^2)/800)
    half = Z95 * math.sqrt((1.875 - 0.875**2) / 800)
    lo, hi = m.alpha2_ci95
    assert lo + lo**2 + lo**3 == pytest.approx(0.875 - half, abs=1e-9)
    assert hi + hi**2 + hi**3 == pytest.approx(0.875 + half, abs=1e-9)
    assert 0.47 < lo < 0.5 < hi < 0.53
    assert m.iid_p_value == pytest.approx(1.0) and m.notes == ()


def test_names_without_total_read_the_same(tmp_path):
    a = read_vllm_metrics(write(tmp_path, "a.prom", dump(TWO_ENGINES)))
    b = read_vllm_metrics(write(tmp_path, "b.prom", dump(TWO_ENGINES, total=False)))
    assert a.to_dict() | {"sources": None} == b.to_dict() | {"sources": None}


def test_parse_keeps_only_the_counters_and_sums_nothing_yet():
    d = parse_dump(dump(TWO_ENGINES), "x")
    assert len(d) == 2 * 6  # per engine: drafts, draft tokens, accepted, 3 positions (no _created, no gauge)
    assert d[(P + "drafts", (("engine", "1"), ("model_name", "qwen")))] == 320.0


def test_two_dumps_give_the_window(tmp_path):
    before, after = write(tmp_path, "before.prom", dump(BEFORE)), write(tmp_path, "after.prom", dump(AFTER))
    w = read_vllm_metrics(f"{before},{after}")
    assert (w.drafts, w.draft_tokens, w.accepted) == (600 - 200, 1800 - 600, 830 - 480)
    assert [p.k for p in w.by_position] == [200, 100, 50]
    assert w.mean_acceptance_length == 1.875 and w.alpha2 == pytest.approx(0.5, abs=1e-12)
    assert w.sources == (before, after) and "after.prom - " in w.where()
    alone = read_vllm_metrics(after)  # the server's whole life: another acceptance
    assert alone.mean_acceptance_length == 1 + 830 / 600
    assert [c.p for c in alone.conditional] == [380 / 600, 260 / 380, 190 / 260]
    a = alone.alpha2
    assert a + a**2 + a**3 == pytest.approx(830 / 600)


def test_several_models_need_vllm_model(tmp_path, capsys):
    text = dump(TWO_ENGINES, model="big") + dump({"0": (100, 300, 30, (20, 8, 2))}, model="small")
    f = write(tmp_path, "two-models.prom", text)
    m = read_vllm_metrics(f, "small")
    assert (m.drafts, m.accepted, m.model) == (100, 30, "small")
    code, out, err = run(capsys, "calibrate", "--vllm-metrics", f)
    assert code == 2 and out == "" and "big, small" in err and "--vllm-model" in err


def test_calibrate_prints_the_counters_fit(tmp_path, capsys):
    f = write(tmp_path, "m.prom", dump(TWO_ENGINES))
    code, out, err = run(capsys, "calibrate", "--vllm-metrics", f)
    assert code == 0 and err == ""
    assert "mean acceptance length: 1.875" in out and "0.5000 [" in out and "k2 = 4" in out
    assert "Calibration from" not in out  # no trace given: the counters only
    code, out, _ = run(capsys, "calibrate", "--vllm-metrics", f, "--json")
    d = json.loads(out)
    assert d["alpha2"] == pytest.approx(0.5) and d["k2"] == 4 and d["by_position"][2]["k"] == 100


def test_calibrate_with_traces_prints_both(tmp_path, capsys):
    from lrsim.trace import default_traces

    f = write(tmp_path, "m.prom", dump(TWO_ENGINES))
    trace = str(default_traces()[2])
    code, out, _ = run(capsys, "calibrate", trace, "--vllm-metrics", f)
    assert code == 0 and "Calibration from 1 trace(s)" in out and "vLLM speculative decoding" in out
    code, out, _ = run(capsys, "calibrate", trace, "--vllm-metrics", f, "--json")
    d = json.loads(out)
    assert d["steps"] > 0 and d["vllm_metrics"]["k2"] == 4


def test_plan_with_vllm_metrics_equals_plan_with_its_alpha2(tmp_path, capsys):
    f = write(tmp_path, "after.prom", dump(AFTER))  # alpha2 not a round number
    a2 = repr(read_vllm_metrics(f).alpha2)
    code, out, err = run(capsys, "plan", "--vllm-metrics", f, "--json")
    assert code == 0 and err == ""
    got = json.loads(out)
    source = got.pop("alpha2_source")
    assert source["alpha2"] == float(a2) and source["k2"] == 4 and source["vllm_metrics"] == [f]
    _, ref, _ = run(capsys, "plan", "--alpha2", a2, "--json")
    assert got == json.loads(ref)
    _, text, _ = run(capsys, "plan", "--vllm-metrics", f)
    _, ref_text, _ = run(capsys, "plan", "--alpha2", a2)
    assert text.startswith(ref_text.rstrip("\n")) and "note: alpha2 = " in text and "from vLLM's counters" in text


def test_plan_default_alpha2_unchanged(capsys):
    _, a, _ = run(capsys, "plan", "--json")
    _, b, _ = run(capsys, "plan", "--alpha2", "0.6", "--json")
    assert a == b


def test_replay_with_vllm_metrics_equals_replay_with_its_alpha2(tmp_path, capsys):
    f = write(tmp_path, "m.prom", dump(TWO_ENGINES))
    a2 = repr(read_vllm_metrics(f).alpha2)
    base = ["replay", "--hardware", "h100-ctx0-eager", "--target-arch", "qwen2.5-32b", "--draft-arch",
            "qwen2.5-1.5b", "--alpha1", "0.7", "--k2", "4", "--steps", "300", "--bootstrap", "2", "--json"]
    code, out, err = run(capsys, *base, "--vllm-metrics", f)
    assert code == 0, err
    got = json.loads(out)
    assert got.pop("alpha2_source")["alpha2"] == float(a2)
    _, ref, _ = run(capsys, *base, "--alpha2", a2)
    assert got == json.loads(ref)


# ----------------------------------------------------------------------------- bad input: one line, exit 2


NO_SPEC = 'vllm:num_requests_running{engine="0",model_name="qwen"} 3.0\n'


def bad_cases(tmp_path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, a piece of the one error line)."""
    ok = write(tmp_path, "ok.prom", dump(TWO_ENGINES))
    before, after = write(tmp_path, "before.prom", dump(BEFORE)), write(tmp_path, "after.prom", dump(AFTER))
    no_pos = "".join(x + "\n" for x in dump(TWO_ENGINES).splitlines() if "per_pos" not in x)
    zero = write(tmp_path, "zero.prom", dump({"0": (0, 0, 0, (0, 0, 0))}))
    binary = tmp_path / "binary.prom"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    return {
        "missing file": (["calibrate", "--vllm-metrics", str(tmp_path / "nope.prom")], "No such file"),
        "not text": (["calibrate", "--vllm-metrics", str(binary)], "not UTF-8"),
        "no counters": (["calibrate", "--vllm-metrics", write(tmp_path, "none.prom", NO_SPEC)],
                        f"no {P}drafts, {P}draft_tokens, {P}accepted_tokens, {P}accepted_tokens_per_pos"),
        "no per-position counter": (["plan", "--vllm-metrics", write(tmp_path, "nopos.prom", no_pos)],
                                    f"no {P}accepted_tokens_per_pos"),
        "counter went down": (["calibrate", "--vllm-metrics", f"{after},{before}"],
                              f'counter {P}drafts{{engine="0",model_name="qwen"}} went down from 600 to 200'),
        "zero drafts in the window": (["calibrate", "--vllm-metrics", f"{after},{after}"], "no drafts"),
        "zero drafts in one dump": (["plan", "--vllm-metrics", zero], "no drafts"),
        "plan with --alpha2": (["plan", "--vllm-metrics", ok, "--alpha2", "0.5"], "drop --alpha2"),
        "replay with --alpha2": (["replay", "--hardware", "h100-ctx0-eager", "--alpha1", "0.7", "--alpha2", "0.5",
                                  "--vllm-metrics", ok], "drop --alpha2"),
        "replay on traces": (["replay", "--vllm-metrics", ok], "with --hardware PROFILE and --alpha1"),
        "plan --trace": (["plan", "--trace", "--vllm-metrics", ok], "with --trace the traces give"),
        "three files": (["calibrate", "--vllm-metrics", f"{ok},{ok},{ok}"], "expected FILE or BEFORE,AFTER"),
        "flag twice": (["calibrate", "--vllm-metrics", before, "--vllm-metrics", after], "one flag"),
        "model not there": (["calibrate", "--vllm-metrics", ok, "--vllm-model", "other"], "its models: qwen"),
        "--vllm-model alone": (["plan", "--vllm-model", "qwen"], "only goes with --vllm-metrics"),
        "profile-out without traces": (["calibrate", "--vllm-metrics", ok, "--profile-out",
                                        str(tmp_path / "out.json")], "give TRACE files"),
    }


CASES = ["missing file", "not text", "no counters", "no per-position counter", "counter went down",
         "zero drafts in the window", "zero drafts in one dump", "plan with --alpha2", "replay with --alpha2",
         "replay on traces", "plan --trace", "three files", "flag twice", "model not there", "--vllm-model alone",
         "profile-out without traces"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, case):
    argv, piece = bad_cases(tmp_path)[case]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("lrsim: error:") and piece in err, err
    assert not (tmp_path / "out.json").exists()


def test_cases_listed_once(tmp_path):
    assert sorted(CASES) == sorted(bad_cases(tmp_path))


def test_every_token_accepted_fits_no_alpha2(tmp_path, capsys):
    f = write(tmp_path, "all.prom", dump({"0": (10, 30, 30, (10, 10, 10))}))
    code, out, _ = run(capsys, "calibrate", "--vllm-metrics", f)
    assert code == 0 and "note: every draft token accepted" in out and "alpha2 (" not in out
    code, out, err = run(capsys, "plan", "--vllm-metrics", f)
    assert code == 2 and out == "" and err.count("\n") == 1 and "give --alpha2" in err
