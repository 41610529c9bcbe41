"""lrsim.trace: the shared schema round-trips, tolerates damage, refuses unknown versions."""

import json

import pytest

from lrsim import trace as tr


def sample(path):
    h = tr.Header(source="test", mode="lr-sync", config={"gamma": 2}, models={"draft": "d", "target": "t"})
    steps = [
        tr.StepRecord(request=0, cycle=0, position=0, branch=0, draft_start=0.0, draft_end=0.1, draft_tokens=5,
                      target_start=0.1, target_end=1.1, target_tokens=6, target_batch=3, verify_start=1.1,
                      verify_end=1.2, verifier="exact", score=1.0, decision=True, accepted=True, committed="draft"),
        tr.StepRecord(request=0, cycle=0, position=1, branch=0, decision=False, committed="target",
                      target_start=0.1, target_end=1.1, target_tokens=4),
    ]
    reqs = [tr.RequestRecord(request=0, start=0.0, end=1.2, output_tokens=9, steps=2, accepted_steps=1)]
    tr.write_trace(path, h, steps, reqs)
    return h, steps, reqs


def test_round_trip(tmp_path):
    p = tmp_path / "t.jsonl"
    h, steps, reqs = sample(p)
    t = tr.read_trace(p)
    assert t.header == h and t.steps == steps and t.requests == reqs and t.warnings == []
    first = json.loads(p.read_text().splitlines()[0])
    assert first["schema"] == tr.SCHEMA and first["version"] == tr.VERSION


def test_writer_flushes_each_line(tmp_path):
    p = tmp_path / "live.jsonl"
    w = tr.TraceWriter(p, tr.Header(source="test"))
    w.step(tr.StepRecord(request=0, cycle=0, position=0, committed="target"))
    assert len(p.read_text().splitlines()) == 2  # readable before close, as after a kill
    assert len(tr.read_trace(p).steps) == 1
    w.close()


def test_damaged_lines_are_skipped_with_file_and_line(tmp_path):
    p = tmp_path / "t.jsonl"
    sample(p)
    lines = p.read_text().splitlines()
    lines.insert(2, "{not json")
    lines.insert(3, json.dumps({"type": "step", "request": -1, "cycle": 0, "position": 0}))
    lines.insert(4, json.dumps({"type": "mystery"}))
    lines.append('{"type": "step", "request": 0, "cy')  # half-written last line of a killed run
    p.write_text("\n".join(lines) + "\n")
    t = tr.read_trace(p)
    assert len(t.steps) == 2 and len(t.requests) == 1
    assert len(t.warnings) == 4
    assert all(w.startswith(f"{p}:") for w in t.warnings)
    assert f"{p}:3:" in t.warnings[0]


def test_unknown_fields_are_ignored(tmp_path):
    p = tmp_path / "t.jsonl"
    sample(p)
    lines = p.read_text().splitlines()
    obj = json.loads(lines[1]) | {"future_field": 3}
    lines[1] = json.dumps(obj)
    p.write_text("\n".join(lines) + "\n")
    assert len(tr.read_trace(p).steps) == 2


@pytest.mark.parametrize("content, message", [
    ("", "empty trace"),
    ('{"type": "header", "schema": "lr-trace", "version": 99}\n', "unsupported lr-trace version 99"),
    ('{"type": "step"}\n', "not an lr-trace trace"),
    ("garbage\n", "first line is not a JSON header"),
])
def test_unreadable_traces_raise_one_line(tmp_path, content, message):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(tr.TraceError, match=message) as e:
        tr.read_trace(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(tr.TraceError, match="no such trace file"):
        tr.read_trace(tmp_path / "nope.jsonl")


def test_chrome_export(tmp_path):
    p = tmp_path / "t.jsonl"
    sample(p)
    ev = tr.to_chrome_trace(tr.read_trace(p))["traceEvents"]
    spans = [e for e in ev if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"draft", "target", "verify"}
    d = next(e for e in spans if e["cat"] == "draft")
    assert d["ts"] == 0.0 and d["dur"] == pytest.approx(1e5)


def test_schema_doc_matches_committed_docs():
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "trace-schema.md"
    assert doc.read_text() == tr.schema_doc() + "\n", "regenerate: python -c 'from lrsim.trace import schema_doc; print(schema_doc())' > docs/trace-schema.md"


def test_gzip_traces_read_like_plain_ones(tmp_path):
    import gzip

    p = tmp_path / "t.jsonl"
    h, steps, reqs = sample(p)
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    t = tr.read_trace(gz)
    assert t.header == h and t.steps == steps and t.requests == reqs and t.warnings == []


def test_truncated_gzip_keeps_what_was_readable(tmp_path):
    import gzip

    p = tmp_path / "t.jsonl"
    sample(p)
    data = gzip.compress(p.read_bytes() * 1)
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(data[: len(data) - 12])  # drop the gzip trailer (CRC, size) and a few data bytes
    t = tr.read_trace(gz)
    assert any("corrupt compressed data" in w and str(gz) in w for w in t.warnings)
    not_gzip = tmp_path / "plain.jsonl.gz"
    not_gzip.write_bytes(p.read_bytes())
    with pytest.raises(tr.TraceError, match="corrupt compressed data") as e:
        tr.read_trace(not_gzip)
    assert "\n" not in str(e.value)


def test_embedded_default_traces_are_real_lrref_runs():
    paths = tr.default_traces()
    traces = [tr.read_trace(p) for p in paths]
    assert len(traces) >= 2 and all(t.warnings == [] for t in traces)
    assert {t.header.source for t in traces} == {"lrref"}
    assert {"ar", "lr-sync"} <= {t.header.mode for t in traces}
    assert all(t.requests and t.steps for t in traces)


# ----------------------------------------------------------------------------- the header's setting

LEGACY = {  # what the traces shipped in the repository recorded, read from their lrref config (no `setting`)
    "lrsim/data/default/trace-ar.jsonl.gz": ("ar", 1, 1, 1, "one", "threads=2"),
    "lrsim/data/default/trace-sd.jsonl.gz": ("ar", 1, 5, 1, "one", "threads=2"),
    "lrsim/data/default/trace-lr-sync.jsonl.gz": ("sync", 3, 1, 1, "per_pair", "threads=2"),
    "lrsim/data/default/trace-lr-async.jsonl.gz": ("async", 2, 1, 1, "one", "threads=1"),
    "lrsim/data/default/trace-lr-async_sd.jsonl.gz": ("async", 2, 5, 1, "one", "threads=1"),
    "studies/data/validation/g3/trace-lr-sync_sd.jsonl.gz": ("sync", 4, 5, 1, "per_pair", "threads=2"),
    "studies/data/validation/g3/trace-lr-async.jsonl.gz": ("async", 3, 1, 1, "one", "threads=1"),
}


@pytest.mark.parametrize("path, expected", LEGACY.items())
def test_older_traces_read_as_before(path, expected):
    from pathlib import Path

    header = tr.read_trace(Path(__file__).resolve().parents[1] / path).header
    assert header.setting is None and header.source == "lrref"
    assert tr.recorded_setting(header) == tr.Setting(*expected)


def test_setting_round_trips_and_wins_over_the_config(tmp_path):
    s = tr.Setting("sync", 4, 3, 2, "per_pair", "gpu=0")
    p = tmp_path / "t.jsonl"
    # the config says something else (lrref-style keys): the setting is what counts
    tr.write_trace(p, tr.Header(source="someone", mode="lr-sync", config={"gamma": 9, "threads": 1},
                                setting=s.to_dict()), [])
    header = tr.read_trace(p).header
    # a single-request run is written as version 1, which readers of version 1 still read
    assert header.setting == {"version": 1, "mode": "sync", "k1": 4, "k2": 3, "width": 2,
                              "verify_calls": "per_pair", "hardware": "gpu=0"}
    assert tr.recorded_setting(header) == s


def test_setting_version_2_records_the_concurrency():
    s = tr.Setting("ar", 1, 5, 1, "one", "threads=2", concurrency=3)
    d = s.to_dict()
    assert d["version"] == tr.SETTING_VERSION == 2 and d["concurrency"] == 3
    assert tr.Setting.from_dict(d) == s
    assert tr.Setting.from_dict({"version": 1, "mode": "ar"}).concurrency == 1
    # version 1 has no concurrency: a stray field there is not read as one
    assert tr.Setting.from_dict({"version": 1, "mode": "ar", "concurrency": 4}).concurrency == 1
    legacy = tr.Header(source="lrref", mode="ar", config={"base_mode": "ar", "threads": 2, "concurrency": 2})
    assert tr.recorded_setting(legacy).concurrency == 2


@pytest.mark.parametrize("setting, message", [
    ({"version": 3, "mode": "sync"}, "unsupported setting version 3"),
    ({"version": 2, "mode": "ar", "concurrency": 0}, "concurrency must be an integer >= 1"),
    ({"version": 1, "mode": "fast"}, "bad setting"),
    ({"version": 1, "mode": "sync", "k1": 0}, "k1 must be an integer >= 1"),
    ({"version": 1, "verify_calls": "twice"}, "bad setting"),
    ("sync", "not a JSON object"),
])
def test_bad_settings_are_trace_errors(setting, message):
    with pytest.raises(tr.TraceError, match=message) as e:
        tr.recorded_setting(tr.Header(setting=setting))
    assert "\n" not in str(e.value)


def test_unknown_legacy_mode_is_a_trace_error():
    with pytest.raises(tr.TraceError, match="unknown mode 'beam'"):
        tr.recorded_setting(tr.Header(source="other", mode="beam"))


@pytest.mark.parametrize("mode, gamma, expected", [
    ("lr-sync", 2, ("sync", 3, "per_pair")), ("lr-sync+sd", 4, ("sync", 5, "per_pair")),
    ("lr-async", 2, ("async", 2, "one")), ("lr-async+sd", 3, ("async", 3, "one")),
    ("ar", 4, ("ar", 1, "one")), ("sd", 4, ("ar", 1, "one")),
])
def test_the_gamma_to_k1_rule_has_one_home(mode, gamma, expected):
    """lrsim.modes.lookahead_schedule: the rule lrref's decoder writes into headers and legacy headers are read by."""
    from lrsim.modes import lookahead_schedule

    assert tuple(lookahead_schedule(mode, gamma)) == expected
    base = mode.split("+")[0]
    legacy = tr.Header(source="lrref", mode=base, config={"base_mode": base, "gamma": gamma, "width": 2})
    s = tr.recorded_setting(legacy)
    assert (s.mode, s.k1, s.verify_calls, s.width) == expected + ((2 if expected[0] != "ar" else 1),)


def test_lookahead_schedule_refuses_an_unknown_mode():
    from lrsim.modes import lookahead_schedule

    with pytest.raises(ValueError, match="unknown decoding mode 'beam'"):
        lookahead_schedule("beam", 2)


def test_mode_tuples_have_one_home():
    """lrsim.modes holds every mode tuple; the serving simulator and the profile format use its objects."""
    from lrsim import modes
    from lrsim.cost import fromtraces
    from lrsim.latency import profile
    from lrsim.serve import config, plan

    assert config.SERVE_MODES is modes.SERVE_MODES and config.REGISTRY is modes.REGISTRY
    assert modes.SERVE_MODES[:-1] == modes.DECODE_MODES and modes.SERVE_MODES[-1] == "auto"
    assert plan.LR is modes.LR_DECODE_MODES
    assert fromtraces.SETUP_MODES is profile.SETUP_MODES is modes.SIM_MODES
    assert {modes.SIM_MODE[m] for m in modes.DECODE_MODES} == set(modes.SIM_MODES)
    assert all(m.removesuffix(modes.NGRAM_SUFFIX) in modes.DECODE_MODES for m in modes.ALL_DECODE_MODES)


def test_trace_errors_are_input_errors():
    from lrsim.errors import InputError

    assert issubclass(tr.TraceError, InputError) and issubclass(tr.TraceError, ValueError)


def test_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    p = tmp_path / "t.jsonl"
    p.write_text("old\n")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        sample(p)
    assert p.read_text() == "old\n" and [q.name for q in tmp_path.iterdir()] == ["t.jsonl"]


# --- pass records and the header rewritten at close ---------------------------------------------------------

def _pass(**kw):
    return tr.PassRecord(**({"engine": "target", "start": 0.5, "seconds": 0.08, "rows": 2, "tokens": 7, "outputs": 6,
                             "positions_max": 5, "context": 40.5, "context_max": 48, "threads": 2,
                             "requests": [0, 1]} | kw))


def test_pass_records_round_trip_and_keep_older_readers_working(tmp_path):
    p = tmp_path / "t.jsonl"
    h, steps, reqs = sample(p)
    passes = [_pass(), _pass(engine="draft", rows=1, tokens=1, outputs=1, requests=None)]
    tr.write_trace(p, h, steps, reqs, passes)
    t = tr.read_trace(p)
    assert t.passes == passes and t.steps == steps and t.requests == reqs and t.warnings == []
    assert json.loads(p.read_text().splitlines()[-1])["type"] == "pass"


@pytest.mark.parametrize("bad, message", [({"rows": 0}, "'rows' must be an integer >= 1"),
                                          ({"tokens": 1.5}, "'tokens' must be an integer"),
                                          ({"seconds": -1}, "'seconds' must be a number >= 0"),
                                          ({"context": None}, "'context' must be a number"),
                                          ({"engine": ""}, "'engine' must be a name")])
def test_bad_pass_records_are_skipped_with_file_and_line(tmp_path, bad, message):
    p = tmp_path / "t.jsonl"
    h, steps, reqs = sample(p)
    line = json.dumps({**json.loads(tr._line(_pass())), **bad})
    p.write_text(p.read_text() + line + "\n")
    t = tr.read_trace(p)
    assert t.passes == [] and len(t.steps) == 2
    assert len(t.warnings) == 1 and f"{p}:5: skipped pass record" in t.warnings[0] and message in t.warnings[0]


def test_pass_records_are_buffered_until_the_next_record(tmp_path):
    p = tmp_path / "live.jsonl"
    w = tr.TraceWriter(p, tr.Header(source="test"))
    w.write_pass(_pass())
    assert len(p.read_text().splitlines()) == 1  # not flushed on its own
    w.step(tr.StepRecord(request=0, cycle=0, position=0, committed="target"))
    assert len(p.read_text().splitlines()) == 3
    w.write_pass(_pass(start=1.0))
    w.close()
    assert [x.start for x in tr.read_trace(p).passes] == [0.5, 1.0]


def test_at_close_rewrites_the_header_atomically(tmp_path, monkeypatch):
    p = tmp_path / "t.jsonl"
    w = tr.TraceWriter(p, tr.Header(source="test"), at_close=lambda h: h.hardware.update(load={"busy": False}))
    w.step(tr.StepRecord(request=0, cycle=0, position=0, committed="target"))
    w.write_pass(_pass())
    assert "load" not in tr.read_trace(p).header.hardware  # a killed run keeps the header it started with
    w.close()
    t = tr.read_trace(p)
    assert t.header.hardware["load"] == {"busy": False} and len(t.steps) == 1 and len(t.passes) == 1
    assert [q.name for q in tmp_path.iterdir()] == ["t.jsonl"]
    w.close()  # a second close does nothing


def test_pass_records_are_documented_with_the_vllm_exception():
    doc = tr.schema_doc()
    assert "## `pass`" in doc and "| `context_max` |" in doc and "vllm" in doc and "| `draft_forwards` |" in doc
