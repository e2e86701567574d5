"""The measuring processes' environment: malloc's thresholds pinned unless the user set them, in the environment
a torchrun job is given (`measuring_env`) and in a spawned pool worker."""

import os

from neuroshard.measure.pool import WorkerPool
from neuroshard.measure.process_env import MALLOC_ENV, inherited_malloc_env, measuring_env

MMAP = "MALLOC_MMAP_THRESHOLD_"


def test_defaults_fill_what_is_unset_and_keep_what_is_set():
    env = measuring_env({"PATH": "/bin", "OMP_NUM_THREADS": "4", "MALLOC_TRIM_THRESHOLD_": "0"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "4", "MALLOC_TRIM_THRESHOLD_": "0", MMAP: "33554432"}
    assert measuring_env({}) == {"OMP_NUM_THREADS": "1", MMAP: "33554432", "MALLOC_TRIM_THRESHOLD_": "2147483648"}


def test_the_parent_environment_is_restored_after_the_start(monkeypatch):
    monkeypatch.delenv(MMAP, raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "7")
    with inherited_malloc_env():
        assert os.environ[MMAP] == MALLOC_ENV[MMAP] and os.environ["MALLOC_TRIM_THRESHOLD_"] == "7"
    assert MMAP not in os.environ and os.environ["MALLOC_TRIM_THRESHOLD_"] == "7"


class EnvMeasurer:
    """make_measurer for the pool: the cost of any task is the worker's mmap threshold (-1 when unset)."""

    def __call__(self, device, seed):
        def measure(ids):
            return float(os.environ.get(MMAP, -1)), {"timed_s": 0.0}

        return measure


def test_a_spawned_worker_starts_with_the_thresholds(monkeypatch):
    monkeypatch.delenv(MMAP, raising=False)
    costs = []
    tasks = iter([[0]])
    with WorkerPool(["cpu"], EnvMeasurer()) as pool:
        pool.run(lambda in_flight: next(tasks, None), lambda no, ids, cost: costs.append(cost),
                 lambda no, ids, reason: costs.append(reason))
    assert costs == [float(32 << 20)] and MMAP not in os.environ
