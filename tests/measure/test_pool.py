"""The benchmark worker pool: every task reported once, dead workers replaced, no hang after a crash."""

import fcntl
import os

import pytest

from neuroshard.measure.pool import WorkerPool
from neuroshard.types.errors import NeuroShardError


def count_call(counter) -> int:
    """The number of earlier calls recorded in the file `counter`, recording this one (locked: workers share it)."""
    with open(counter, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        call = len(fh.read())
        fh.write("x")
    return call


class CountingMeasurer:
    """make_measurer for the pool: cost = sum of the ids; the n-th call over all workers (a shared
    counter file) raises when n is in `fail`, and kills its worker (os._exit) when n is in `crash`."""

    def __init__(self, counter, fail=(), crash=(), fatal=False):
        self.counter, self.fail, self.crash, self.fatal = str(counter), set(fail), set(crash), fatal

    def __call__(self, device, seed):
        if self.fatal:
            raise RuntimeError("no such device")

        def measure(ids):
            call = count_call(self.counter)
            if call in self.fail:
                raise RuntimeError(f"bad shard {ids}")
            if call in self.crash:
                os._exit(3)
            return float(sum(ids)), {"timed_s": 0.0}

        return measure


def drive(pool, n):
    """Run tasks [i, i+1] for i < n; returns ({task_no: cost}, {task_no: reason}, ids by task_no)."""
    given, ok, err = {}, {}, {}
    count = iter(range(n))

    def next_task(in_flight):
        i = next(count, None)
        if i is None:
            return None
        given[len(given)] = [i, i + 1]
        return [i, i + 1]

    def on_ok(task_no, ids, cost):
        assert task_no not in ok and task_no not in err
        ok[task_no] = cost

    def on_error(task_no, ids, reason):
        assert task_no not in ok and task_no not in err
        err[task_no] = reason

    pool.run(next_task, on_ok, on_error)
    return ok, err, given


def test_every_task_reported_once_through_errors_and_crashes(tmp_path):
    # calls 3, 9 raise; calls 5, 6, 12, 13, 20 kill their worker (two in a row: both workers at once)
    measurer = CountingMeasurer(tmp_path / "calls", fail=(3, 9), crash=(5, 6, 12, 13, 20))
    with WorkerPool(["cpu"] * 2, measurer, max_restarts=5) as pool:
        ok, err, given = drive(pool, 24)
        assert pool.restarts == 5
    assert len(given) == 24 and set(ok) | set(err) == set(given) and not set(ok) & set(err)
    assert len(err) == 7
    assert sum("bad shard" in r for r in err.values()) == 2
    assert sum(r == "worker died with exit code 3" for r in err.values()) == 5
    for task_no, cost in ok.items():
        assert cost == sum(given[task_no])  # each result reaches its own task


def test_too_many_deaths_stop_the_run(tmp_path):
    measurer = CountingMeasurer(tmp_path / "calls", crash=(0, 1, 2))
    with pytest.raises(NeuroShardError, match="exit code 3; 1 workers replaced already, stopping"):
        with WorkerPool(["cpu"], measurer, max_restarts=1) as pool:
            drive(pool, 5)


def test_a_worker_that_cannot_start_is_one_error(tmp_path):
    with pytest.raises(NeuroShardError, match="worker on cpu could not start: RuntimeError: no such device"):
        with WorkerPool(["cpu"], CountingMeasurer(tmp_path / "calls", fatal=True)) as pool:
            drive(pool, 2)


def test_a_worker_whose_parent_stopped_listening_ends_quietly(tmp_path):
    # a signal sent to the parent alone (kill -INT <pid>) closes its ends of the pipes while a worker still
    # measures: the worker's next reply finds a broken pipe and must end with exit code 0, not a traceback
    import multiprocessing as mp

    from neuroshard.measure.pool import _worker_main

    ctx = mp.get_context("spawn")
    tasks = ctx.Queue()
    for i in range(3):
        tasks.put((i, [i]))
    tasks.put(None)
    reader, writer = ctx.Pipe(duplex=False)
    reader.close()  # nobody listens
    proc = ctx.Process(target=_worker_main, args=(0, "cpu", CountingMeasurer(tmp_path / "n"), 0, tasks, writer))
    proc.start()
    writer.close()
    proc.join(60)
    assert proc.exitcode == 0
    assert not (tmp_path / "n").exists()  # it stopped at its first reply ("ready"), before measuring anything
