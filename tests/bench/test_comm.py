"""All-to-all benchmark: buffer layout against a reference, real gloo jobs with
value checks, and failure handling (a raising or hung rank ends the job)."""

import glob
import math
import os
import time

import pytest
import torch

from neuroshard.bench import comm as cb
from neuroshard.bench import torchrun
from neuroshard.bench.torchrun import JobError
from neuroshard.types import ConfigError


def simulated_all_to_all(sends, in_splits, out_splits):
    """What dist.all_to_all_single delivers, computed in one process: rank q receives
    from each peer p the q-th chunk (in_splits[p][q] elements) of p's send buffer."""
    n = len(sends)
    chunks = [list(torch.split(sends[p], in_splits[p])) for p in range(n)]
    recv = []
    for q in range(n):
        parts = [chunks[p][q] for p in range(n)]
        assert [len(x) for x in parts] == out_splits[q]
        recv.append(torch.cat(parts))
    return recv


@pytest.mark.parametrize("dims", [[4, 12], [64, 8, 0, 20], [16, 16, 16]])
def test_layout_round_trip_matches_reference(dims):
    n, batch = len(dims), 6 * len(dims)
    splits = [cb.split_sizes(dims, r, batch) for r in range(n)]
    xs = [cb.pattern(r, batch, dims[r]) for r in range(n)]
    recv = simulated_all_to_all([x.reshape(-1) for x in xs], [s[0] for s in splits], [s[1] for s in splits])
    for q in range(n):
        got = cb.unpack_forward(recv[q], dims, batch // n)
        assert got.shape == (batch // n, sum(dims))
        assert torch.equal(got, cb.expected_forward(dims, q, batch))
    # Backward: rank q's gradient goes back; the splits swap roles.
    grads = [cb.pattern(q, batch // n, sum(dims), salt=0.5) for q in range(n)]
    back = simulated_all_to_all([cb.pack_backward(g, dims) for g in grads],
                                [s[1] for s in splits], [s[0] for s in splits])
    for r in range(n):
        got = cb.unpack_backward(back[r], batch, dims[r])
        assert torch.equal(got, cb.expected_backward(dims, r, batch))


def test_reference_values_by_hand():
    # 2 ranks, B=2, dims [1, 2]: rank 0 holds [[a0],[a1]], rank 1 holds [[b00,b01],[b10,b11]].
    a, b = cb.pattern(0, 2, 1), cb.pattern(1, 2, 2)
    assert a.flatten().tolist() == [0.0, 1.0]
    assert b.flatten().tolist() == [65536.0, 65537.0, 65538.0, 65539.0]
    # rank 1 gets row 1 of everyone: [a1, b10, b11]
    assert cb.expected_forward([1, 2], 1, 2).tolist() == [[1.0, 65538.0, 65539.0]]
    assert cb.split_sizes([1, 2], 0, 2) == ([1, 1], [1, 2])
    assert cb.split_sizes([1, 2], 1, 2) == ([2, 2], [1, 2])


def test_algbw_by_hand():
    # B=1000, dims 250+250 -> 2e6 bytes in all, 1e6 per rank; 1 ms -> 1 GB/s.
    assert cb.algbw_gbps([250, 250], 1000, 1.0) == pytest.approx(1.0)
    assert math.isnan(cb.algbw_gbps([4], 4, 0.0))


def test_batch_not_divisible_is_a_clear_error():
    with pytest.raises(ConfigError, match="multiple of the number of ranks"):
        cb.CommJob([{"dims": [4, 4, 4], "sleeps": [0, 0, 0]}], 3, 100)
    with pytest.raises(ConfigError, match="expected 2"):
        cb.CommJob([{"dims": [4, 4, 4], "sleeps": [0, 0, 0]}], 2, 8)


def _assert_no_survivors(job_dir, within=15.0):
    pids = []
    for path in glob.glob(os.path.join(job_dir, "rank*.pid")):
        with open(path) as f:
            pids.append(int(f.read()))
    deadline = time.monotonic() + within
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if torchrun._pid_alive(p) and job_dir in torchrun._cmdline(p)]
        time.sleep(0.1)
    assert not alive, f"ranks still running: {alive}"


def test_gloo_4_ranks_checks_values_and_returns_per_rank_medians(tmp_path):
    # (2 ranks with --check: tests/test_comm_collect.py::test_resume_after_kill)
    dims, sleeps = [64, 4, 0, 28], [1.0, 0.0, 3.0, 0.5]
    n = len(dims)
    samples = [{"dims": dims, "sleeps": sleeps}, {"dims": dims[::-1], "sleeps": [0.0] * n}]
    with cb.CommJob(samples, n, 8 * n, warmup=1, iters=3, check=True, timeout=20,
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
        with cb.CommJob(samples, 2, 8, warmup=1, iters=2, timeout=10, work_dir=str(tmp_path),
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
        with cb.CommJob(samples, 2, 8, warmup=1, iters=2, timeout=3, work_dir=str(tmp_path),
                        worker_module="tests.faulty_ranks") as job:
            list(job.results())
    assert time.monotonic() - t0 < 60
    msg = str(err.value)
    assert "rank 0 stopped responding" in msg
    assert "rank(s) 1 aborted waiting for peers" in msg
    _assert_no_survivors(job.job_dir)
