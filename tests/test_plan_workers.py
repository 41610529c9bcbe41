"""lrsim.prediction.workers: a plan's simulations on several cores, with the numbers of one.

Forking is tested in fresh interpreters (the test runner's own threads make a fork here unsafe, which is why
:func:`lrsim.prediction.workers.executor` then runs serially, as tested below)."""

import json
import subprocess
import sys
import threading

import pytest

from lrsim.prediction.workers import Forked, Job, Serial, _Held, assign, executor


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_longest_first_to_the_worker_that_ends_first():
    held = [_Held(), _Held()]
    jobs = [Job("f", cost=c) for c in (1, 5, 3, 3)]
    # 5 -> w0 (5); 3 -> w1 (3); 3 -> w1 (6 vs 8); 1 -> w0 (6 vs 7)
    assert assign(jobs, held) == [0, 0, 1, 1]
    assert [h.load for h in held] == [6, 6]


def test_a_run_a_worker_holds_costs_it_only_its_missing_steps():
    held = [_Held(), _Held()]
    assign([Job("f", keys=("a",), steps=1000, cost=1000)], held)  # "a" to w0, which then holds it at 1000 steps
    for h in held:
        h.load = 0.0
    held[0].load = 2000.0  # w0 is busy: a fresh 4000-step run of "a" on w1 ends at 4000, continued on w0 at 5000
    assert assign([Job("f", keys=("a",), steps=4000, cost=4000)], held) == [1]
    held[0].load, held[1].load = 0.0, 0.0  # idle: w1 holds "a" at 4000 now, w0 at 1000
    assert assign([Job("f", keys=("a",), steps=8000, cost=8000)], held) == [1]
    assert held[1].load == 4000.0  # 8000 - 4000 steps


class _Toy:
    def __init__(self):
        self.calls = 0

    def square(self, x):
        self.calls += 1
        return x * x


def test_serial_calls_in_order_and_reports_each_job():
    done = []
    assert Serial(_Toy()).map([Job("square", (i,)) for i in range(4)], done.append) == [0, 1, 4, 9]
    assert done == [0, 1, 2, 3]


def test_other_threads_mean_no_fork():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert isinstance(executor(_Toy(), 2), Serial) and not isinstance(executor(_Toy(), 2), Forked)
    finally:
        stop.set()
        t.join()
    assert type(executor(_Toy(), 1)) is Serial


FORKED = """
from lrsim.errors import InputError
from lrsim.prediction.workers import Forked, Job

class Runner:
    def __init__(self):
        self.seen = []
    def add(self, x):
        self.seen.append(x)
        return sum(self.seen)  # what this worker has seen: state kept between batches
    def bad_input(self):
        raise InputError("no such profile")
    def bug(self):
        return 1 / 0

with Forked(Runner(), 2) as ex:
    print(ex.map([Job("add", (x,), keys=(k,), steps=1, cost=1) for x, k in ((1, "a"), (2, "b"))]))
    print(ex.map([Job("add", (10,), keys=("a",), steps=1, cost=1)]))
    try:
        ex.map([Job("bad_input")])
    except InputError as e:
        print("input:", e)
    try:
        ex.map([Job("bug")])
    except RuntimeError as e:
        print("bug:", "ZeroDivisionError" in str(e))
    print(ex.map([Job("add", (0,))]))  # workers live on after a failure
"""


def test_forked_workers_keep_state_and_report_failures():
    p = _python(FORKED)
    assert p.returncode == 0, p.stderr
    first, second, inp, bug, alive = p.stdout.splitlines()
    assert json.loads(first) == [1, 2]  # one job each: worker 0 has seen 1, worker 1 has seen 2
    assert json.loads(second) == [11]  # to worker 0, which holds run "a" (costs it nothing), and adds to what it saw
    assert inp == "input: no such profile"
    assert bug == "bug: True"
    assert json.loads(alive) == [11]  # worker 0 again (the tie goes to the lower), its state intact


PLAN = ["plan", "--hardware", "model:h100:tp2", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
        "--alpha1", "0.7", "--alpha2", "0.5", "--budget", "16", "--json"]


@pytest.mark.parametrize("extra", [[], ["--trace", "--bootstrap", "10"]], ids=["hardware", "traces-bootstrap"])
def test_a_plan_on_two_workers_is_the_plan_on_one(extra):
    """The same JSON, byte for byte: screening, halving, refinement, the winner and its bootstrap interval."""
    argv = PLAN if not extra else ["plan", "--budget", "6", "--k2-max", "4", "--json", *extra]
    outs = []
    for w in ("1", "2"):
        p = subprocess.run([sys.executable, "-m", "lrsim.cli", *argv, "--workers", w], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1]
    plan = json.loads(outs[0])
    assert plan["ranked"][0]["steps"] == 4000
    if extra:
        assert plan["best"]["replicates"] >= 10


def test_progress_bars_start_no_thread():
    p = _python("from lrsim.progress import bar\nimport threading\n"
                "b = bar(total=3, enabled=False)\nb.update(3)\nb.close()\nlist(bar(range(3)))\n"
                "print(threading.active_count())")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "1"


def test_a_disabled_bar_is_quiet_and_imports_no_tqdm():
    p = _python("import sys\nfrom lrsim.progress import bar\nq = bar(range(3), enabled=False)\n"
                "assert list(q) == [0, 1, 2]\nwith bar(total=5, enabled=False) as b:\n    b.update(2)\n    b.update()\n"
                "print(b.n, 'tqdm' in sys.modules)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["3", "False"]
