"""The all-to-all measurement job (`measure.alltoall_job`, through the rank loop of `measure.rank`): real
gloo jobs with value checks, and failure handling (a raising or hung rank ends the job)."""

import glob
import math
import os
import time

import pytest

from neuroshard.measure import launch
from neuroshard.measure.alltoall_job import AllToAllJob
from neuroshard.measure.launch import JobError
from neuroshard.types.errors import ConfigError


def test_batch_not_divisible_is_a_clear_error():
    with pytest.raises(ConfigError, match="multiple of the number of ranks"):
        AllToAllJob([{"dims": [4, 4, 4], "sleeps": [0, 0, 0]}], 3, 100)
    with pytest.raises(ConfigError, match="expected 2"):
        AllToAllJob([{"dims": [4, 4, 4], "sleeps": [0, 0, 0]}], 2, 8)


def _assert_no_survivors(job_dir, within=15.0):
    pids = []
    for path in glob.glob(os.path.join(job_dir, "rank*.pid")):
        with open(path) as f:
            pids.append(int(f.read()))
    deadline = time.monotonic() + within
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if launch._pid_alive(p) and job_dir in launch._cmdline(p)]
        time.sleep(0.1)
    assert not alive, f"ranks still running: {alive}"


def test_gloo_4_ranks_checks_values_and_returns_per_rank_medians(tmp_path):
    # (2 ranks with --check: tests/test_comm_collect.py::test_resume_after_kill)
    dims, sleeps = [64, 4, 0, 28], [1.0, 0.0, 3.0, 0.5]
    n = len(dims)
    samples = [{"dims": dims, "sleeps": sleeps}, {"dims": dims[::-1], "sleeps": [0.0] * n}]
    with AllToAllJob(samples, n, 8 * n, warmup=1, iters=3, check=True, timeout=20,
                     work_dir=str(tmp_path)) as job:
        results = list(job.results())
        job_dir = job.job_dir
    assert [r.index for r in results] == [0, 1]
    for r in results:
        assert len(r.fw) == n and len(r.bw) == n
        assert all(math.isfinite(v) and v > 0 for v in r.fw + r.bw)
        assert r.algbw_fw > 0 and r.algbw_bw > 0
    assert not os.path.exists(job_dir)  # cleaned up after success


def test_rank_that_raises_ends_the_job_with_its_message(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULTY_RANKS", "comm:1:1:raise")
    samples = [{"dims": [8, 16], "sleeps": [0.0, 0.0]}] * 3
    t0 = time.monotonic()
    got = []
    with pytest.raises(JobError) as err:
        with AllToAllJob(samples, 2, 8, warmup=1, iters=2, timeout=10, work_dir=str(tmp_path),
                         worker_module="tests.faulty_ranks") as job:
            for r in job.results():
                got.append(r.index)
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert "rank 1 (sample 1" in msg and "injected fault" in msg
    assert got == [0]  # the sample before the failure still arrived
    _assert_no_survivors(job.job_dir)


def test_hung_rank_is_named_and_the_job_ends_within_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULTY_RANKS", "comm:0:0:hang")
    samples = [{"dims": [8, 16], "sleeps": [0.0, 0.0]}] * 2
    t0 = time.monotonic()
    with pytest.raises(JobError) as err:
        with AllToAllJob(samples, 2, 8, warmup=1, iters=2, timeout=3, work_dir=str(tmp_path),
                         worker_module="tests.faulty_ranks") as job:
            list(job.results())
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert "rank 0 stopped responding" in msg
    assert "rank(s) 1 aborted waiting for peers" in msg
    _assert_no_survivors(job.job_dir)
