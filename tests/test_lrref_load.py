"""lrref.host.load: what else ran on the machine (a fake /proc), --require-idle, the warning line."""

import os
import time

import pytest

from lrref.host import load

HZ = os.sysconf("SC_CLK_TCK")


class FakeProc:
    """A directory laid out like /proc: ``stat`` (the cpu line) and ``<pid>/stat`` files."""

    def __init__(self, root):
        self.root = root
        self.busy = 0
        self.procs: dict[int, tuple[int, int, str]] = {}  # pid -> (ppid, ticks, name)

    def write(self):
        (self.root / "stat").write_text(f"cpu  {self.busy} 0 0 999999 7 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
        for pid, (ppid, ticks, name) in self.procs.items():
            d = self.root / str(pid)
            d.mkdir(exist_ok=True)
            # fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
            # utime stime cutime cstime ...
            (d / "stat").write_text(f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0\n")
        return self.root


@pytest.fixture
def proc(tmp_path):
    return FakeProc(tmp_path)


def test_tree_ticks_count_this_process_and_its_descendants_only(proc):
    proc.procs = {100: (1, 50, "python"), 101: (100, 30, "draft worker (x)"), 102: (101, 5, "grand) child"),
                  200: (1, 400, "someone else"), 201: (200, 70, "their child")}
    proc.write()
    assert load.tree_ticks(proc.root, 100) == 85 and load.tree_ticks(proc.root, 200) == 470
    assert load.machine_busy_ticks(proc.root) == 0


def test_other_processes_are_the_machine_minus_this_tree(proc):
    proc.procs = {100: (1, 0, "python")}
    a = load.take(proc.write(), 100)
    proc.busy, proc.procs[100] = 3 * HZ, (1, 2 * HZ, "python")  # 3 s busy, 2 s of them ours
    b = load.take(proc.write(), 100)
    got = load.between(a, b)
    window = b.t - a.t
    assert got.own_cores == pytest.approx(2 / window) and got.other_cores == pytest.approx(1 / window)
    late = load.Sample(a.t + 10, a.busy + 3 * HZ, a.own + 2 * HZ, (2.5, 1, 0.5))
    ten = load.between(a, late, cpus=2)
    assert ten.other_cores == pytest.approx(0.1) and not ten.busy  # exactly at the threshold: not busy
    d = load.between(a, load.Sample(a.t + 10, a.busy + 4 * HZ, a.own + 2 * HZ, (2.5, 1, 0.5)), cpus=2).to_dict()
    assert d["busy"] and d["other_cores"] == 0.2 and d["own_cores"] == 0.2 and d["loadavg_end"] == [2.5, 1, 0.5]
    assert d["cpus"] == 2 and d["busy_above_cores"] == load.BUSY_CORES


def test_require_idle_refuses_a_busy_machine_in_one_line(proc):
    proc.procs = {os.getpid(): (1, 0, "python")}
    proc.write()

    def other_work(seconds):  # during the sample another process takes 0.5 s of CPU
        time.sleep(seconds)
        proc.busy += HZ // 2
        proc.write()

    with pytest.raises(load.BusyError) as e:
        load.require_idle(0.5, proc.root, sleep=other_work)
    msg = str(e.value)
    start = "--require-idle: the machine is busy: other processes used "
    assert "\n" not in msg and msg.startswith(start) and 0.5 < float(msg[len(start):].split()[0]) <= 1.0

    def own_work(seconds):  # our own tree's CPU is not 'other'
        proc.busy += HZ // 2
        proc.procs[os.getpid()] = (1, proc.procs[os.getpid()][1] + HZ // 2, "python")
        proc.write()

    assert load.require_idle(0.0, proc.root, sleep=own_work).other_cores == 0


def test_no_proc_records_nothing_and_require_idle_says_why(tmp_path):
    assert load.Monitor(tmp_path / "none").record() is None
    with pytest.raises(load.BusyError, match="cannot read .* so idleness cannot be checked"):
        load.require_idle(0, tmp_path / "none")


def test_the_warning_is_one_line_on_stderr(capsys):
    idle = load.Load(10, 0.01, 1.9, (1, 1, 1), (1, 1, 1), 2)
    busy = load.Load(10, 0.8, 1.9, (1, 1, 1), (2, 1, 1), 2)
    assert not load.warn_if_busy(idle) and not load.warn_if_busy(None) and capsys.readouterr().err == ""
    assert load.warn_if_busy(busy, "the benchmark")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("lrref: warning: the machine was busy during the benchmark: ")
    assert "0.80 of one core" in err[0]


def test_the_real_proc_reads():
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc here")
    m = load.Monitor()
    sum(i * i for i in range(200_000))  # some CPU of our own
    got = m.now()
    assert got is not None and got.own_cores >= 0 and got.other_cores >= 0 and got.window_s > 0


@pytest.mark.parametrize("cmd", ["generate", "bench"])
def test_require_idle_stops_before_any_model_loads(tmp_path, monkeypatch, capsys, cmd):
    """A busy machine (mocked /proc readings) with --require-idle: one line, exit 2, no trace or results."""
    from lrref import cli

    samples = iter([load.Sample(0.0, 0, 0, (3.0, 2.0, 1.0)), load.Sample(1.0, HZ, 0, (3.0, 2.0, 1.0))])
    monkeypatch.setattr(load, "take", lambda proc=None, pid=None: next(samples))  # 1 s of other work in 1 s
    monkeypatch.setattr(load, "IDLE_SAMPLE_S", 0.0)
    out = tmp_path / "out"
    args = ["--random-weights", "tiny", "--require-idle", "--max-tokens", "8"]
    args += ["--trace", str(out / "t.jsonl")] if cmd == "generate" else ["--out", str(out), "--n", "1"]
    assert cli.main([cmd, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lrref: error: --require-idle: the machine is busy: other processes "
                                               "used 1.00 of one core on average over 1.0 s")
    assert not out.exists() or not any(out.iterdir())
