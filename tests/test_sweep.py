"""lrsim.sweep: grid parsing, local pool and Dask give the same rows, atomic CSV/Parquet output."""

import csv

import pytest

from lrsim.cli import positive_int, unit
from lrsim.commands.common import plain
from lrsim.sim import SimConfig, simulate
from lrsim.sweep import build_configs, check_output, parse_grid, run_configs, run_grid, write_rows

AXES = {"mode": ["sync", "async"], "alpha1": [0.6, 0.8], "k1": [2, 4]}


@pytest.mark.parametrize("text, convert, values", [
    ("0.7", unit, [0.7]),
    ("1,2,4,8", positive_int, [1, 2, 4, 8]),
    ("0.5:0.9:5", unit, [0.5, 0.6, 0.7, 0.8, 0.9]),
    ("1:8:8", positive_int, list(range(1, 9))),
    ("sync,async", str, ["sync", "async"]),
])
def test_parse_grid(text, convert, values):
    got = parse_grid(text, convert)
    assert got == (values if convert is str else pytest.approx(values))


@pytest.mark.parametrize("text, convert, msg", [
    ("1:2:3", plain(positive_int), "an integer >= 1"),
    ("0:1.5:4", plain(unit), r"in \[0, 1\]"),
    ("a:b:c", float, "bad range"),
    ("1:2:0", float, "NUM must be >= 1"),
    (",", float, "empty grid"),
])
def test_parse_grid_rejects(text, convert, msg):
    with pytest.raises(ValueError, match=msg):
        parse_grid(text, convert)


def test_grid_order_and_invalid_points():
    configs, skipped = build_configs({"steps": 100}, {"k1": [2, 4], "k2": [2, 4], "budget": [8]}, skip_invalid=True)
    assert skipped == 1 and [(c.k1, c.k2) for c in configs] == [(2, 2), (2, 4), (4, 2)]
    with pytest.raises(ValueError, match="grid point k1=4, k2=4, budget=8: over budget"):
        build_configs({"steps": 100}, {"k1": [2, 4], "k2": [2, 4], "budget": [8]})


def test_local_pool_matches_serial_and_direct_runs():
    serial = run_grid({}, AXES, steps=400, workers=1)
    pooled = run_grid({}, AXES, steps=400, workers=2)
    assert [r["speedup"] for r in serial] == [r["speedup"] for r in pooled]
    assert [r["point"] for r in pooled] == list(range(8))
    direct = simulate(SimConfig(mode="async", alpha1=0.8, k1=4, steps=400)).speedup
    assert pooled[-1]["mode"] == "async" and pooled[-1]["speedup"] == direct


def test_dask_local_cluster_gives_the_same_rows():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        rows = run_grid({}, AXES, steps=400, scheduler=c.scheduler_address)
    local = run_grid({}, AXES, steps=400, workers=1)
    assert [r["speedup"] for r in rows] == [r["speedup"] for r in local]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_tables_round_trip(tmp_path, suffix):
    out = tmp_path / f"s{suffix}"
    rows = run_grid({}, {"k1": [1, 3]}, out=out, steps=200, workers=1)
    if suffix == ".csv":
        back = list(csv.DictReader(out.open()))
        assert [float(r["speedup"]) for r in back] == [r["speedup"] for r in rows]
        assert back[0]["step_tokens"] == '{"kind":"constant","value":52}'
    else:
        import pyarrow.parquet as pq

        t = pq.read_table(out)
        assert t.column("speedup").to_pylist() == [r["speedup"] for r in rows]
        assert t.column("ci_low").to_pylist() == [r["ci_low"] for r in rows]
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary file left behind


def test_output_checked_before_work(tmp_path):
    with pytest.raises(ValueError, match="unknown format"):
        check_output(tmp_path / "x.txt")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot write"):
        check_output(blocker / "sub" / "x.csv")


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "s.csv"
    out.write_text("old\n")
    rows = run_configs([SimConfig(steps=100)], workers=1, progress=False)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        write_rows(rows, out)
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["s.csv"]


def test_distinct_seeds():
    same = run_grid({"steps": 300, "seed": 5}, {"c1": [0.1, 0.2]}, workers=1)
    own = run_grid({"steps": 300, "seed": 5}, {"c1": [0.1, 0.2]}, workers=1, distinct_seeds=True)
    assert [r["seed"] for r in same] == [5, 5] and [r["seed"] for r in own] == [5, 6]
    assert own[0]["speedup"] == same[0]["speedup"] and own[1]["speedup"] != same[1]["speedup"]


def test_workers_come_from_a_forkserver_while_other_threads_run():
    """A fork from a process with other threads may copy a lock some thread holds (a worker stalled 20 s inside
    tests/test_cli.py): with a thread running, the pool's workers come from a forkserver."""
    import threading

    from lrsim.sweep import _pool_context

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        ctx = _pool_context()
        assert ctx is not None and ctx.get_start_method() == "forkserver"
    finally:
        stop.set()
        t.join()
