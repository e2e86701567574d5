"""Comm data collection: sampling rules, resume after a kill, settings guard, noise floor, and a
collection on two "nodes" of 2 ranks each that resumes a run and leaves node 1 writing nothing."""

import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from neuroshard.formats.cost_data import (
    read_comm_data,
    read_noise_floor,
    write_noise_floor,
)
from neuroshard.formats.io import check_run_config
from neuroshard.measure import comm_collect as cc
from neuroshard.measure import launch as torchrun
from neuroshard.measure.alltoall_job import SampleResult
from neuroshard.measure.launch import LaunchConfig
from neuroshard.types.errors import ConfigError, InputError
from tests.two_nodes import assert_none_left, free_port, launch_flags, run_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FixedRng:
    """rng.random() returns the queued values; integers() the queued ints."""

    def __init__(self, randoms, ints=()):
        self.randoms, self.ints = list(randoms), list(ints)

    def random(self):
        return self.randoms.pop(0)

    def integers(self, n):
        return self.ints.pop(0)


def test_random_greedy_p0_is_smallest_sum_first():
    # sorted desc: 128, 64, 32, 32, 4 -> dev0 128; dev1 64; dev2 32; dev2 32 (ties: lowest, 32<64);
    # then 4 -> dev1 (64) vs dev2 (64): lowest index wins -> dev1.
    sums = cc.random_greedy([32, 128, 4, 64, 32], 0.0, 3, FixedRng([0.5] * 5))
    assert sums == [128, 68, 64]


def test_random_greedy_p1_follows_the_random_device():
    sums = cc.random_greedy([8, 16, 4], 1.0, 2, FixedRng([0.0] * 3, ints=[1, 1, 0]))
    assert sums == [4, 24]  # 16 -> dev1, 8 -> dev1, 4 -> dev0


def test_draw_sample_respects_ranges():
    cfg = cc.CommCollectConfig(ndevices=4, T_range=(3, 5), sleep_range=(2.0, 6.0), max_dim=32)
    rng = np.random.default_rng(0)
    seen_t = set()
    for _ in range(300):
        s = cc.draw_sample(rng, cfg)
        assert len(s["dims"]) == 4 and len(s["sleeps"]) == 4
        total = sum(s["dims"])
        assert 3 * 4 <= total <= 5 * 32 and all(d % 4 == 0 for d in s["dims"])
        assert min(s["sleeps"]) == 0.0 and max(s["sleeps"]) < 6.0
        seen_t.add(total)
    assert len(seen_t) > 10


def test_draw_sample_log_spread_samples_near_simultaneous_starts():
    # spread log-uniform in [0.1, 50] ms: P(spread < 2) = ln(2 / 0.1) / ln(50 / 0.1) = 0.482, and a sample's
    # largest sleep (max - min of U(0, spread) draws) is below its spread; uniform in [0, 50]: P = 2 / 50 = 0.04
    def share_below_2ms(dist):
        cfg = cc.CommCollectConfig(ndevices=4, T_range=(3, 5), sleep_range=(0.0, 50.0), spread_dist=dist)
        rng = np.random.default_rng(0)
        return np.mean([max(cc.draw_sample(rng, cfg)["sleeps"]) < 2.0 for _ in range(2000)])

    assert 0.45 < share_below_2ms("log") < 0.60
    assert share_below_2ms("uniform") < 0.08


def test_spread_dist_recorded_only_when_not_the_default():
    assert "spread_dist" not in cc.CommCollectConfig().to_json()  # data dirs made before it still resume
    assert cc.CommCollectConfig(spread_dist="log").to_json()["spread_dist"] == "log"
    with pytest.raises(ConfigError, match="spread_dist"):
        cc.CommCollectConfig(spread_dist="normal").validate()


def test_config_validation():
    with pytest.raises(ConfigError, match="multiple"):
        cc.CommCollectConfig(ndevices=3, batch_size=100).validate()
    with pytest.raises(ConfigError, match="T_range"):
        cc.CommCollectConfig(T_range=(5, 2)).validate()
    with pytest.raises(ConfigError, match="max_dim"):
        cc.CommCollectConfig(max_dim=48).validate()


class FakeJob:
    """Stands in for AllToAllJob: fw = dims/10 ms, bw = dims/20 ms (+ a per-job offset)."""

    offset = 0.0

    def __init__(self, samples, ndevices, batch_size, **kw):
        self.samples = list(samples)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def results(self):
        for i, s in enumerate(self.samples):
            fw = [d / 10 + 1 + FakeJob.offset for d in s["dims"]]
            bw = [d / 20 + 1 + FakeJob.offset for d in s["dims"]]
            yield SampleResult(i, fw, bw, 1.0, 1.0)

    def sample(self, index):
        return self.samples[index]


def test_resume_draws_new_samples_and_noise_floor(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "AllToAllJob", FakeJob)
    cfg = cc.CommCollectConfig(ndevices=2, batch_size=8, T_range=(2, 6), max_dim=16)
    out = str(tmp_path / "comm")
    s1 = cc.collect(out, cfg, 7, chunk=3, progress=False)
    assert s1["added"] == 7 and len(read_comm_data(out)) == 7
    s2 = cc.collect(out, cfg, 12, chunk=3, progress=False)
    assert (s2["existing"], s2["added"], s2["total"]) == (7, 5, 12)
    data = read_comm_data(out)
    keys = [(tuple(s.dims), tuple(s.sleeps)) for s in data]
    assert len(set(keys)) == 12  # the resumed run did not replay the first stream
    assert cc.collect(out, cfg, 10, progress=False)["added"] == 0
    # Same settings are enforced on resume.
    with pytest.raises(InputError, match="batch_size"):
        cc.collect(out, cc.CommCollectConfig(ndevices=2, batch_size=16, T_range=(2, 6), max_dim=16),
                   20, progress=False)
    # Noise floor: re-measured times are recorded + 10% of (recorded - ... ) -> exact ratio.
    FakeJob.offset = 0.0
    nf = cc.noise_floor(out, cfg, 5, progress=False)
    fw, bw = (nf["targets"][k]["fresh_vs_stored"] for k in ("fw", "bw"))
    assert nf["num_samples"] == 5 and fw["median"] == 0.0 and bw["n"] == 10
    assert nf["targets"]["fw"]["fresh_vs_fresh"]["median"] == 0.0  # two interleaved repeats by default
    write_noise_floor(out, nf)
    assert read_noise_floor(out, "bw") == bw


def _lines(path):
    with open(path, "rb") as f:
        return f.read().split(b"\n")


@pytest.mark.heavy(15)
def test_resume_after_kill(tmp_path):
    """SIGKILL the collector mid-run (ranks must go too), tear the last line, resume.

    Runs with --check, so this 2-rank job also verifies exchanged values and
    gradients against the reference (the 4-rank check is in test_comm_bench)."""
    out = tmp_path / "comm"
    cmd = [sys.executable, os.path.join(ROOT, "collect_comm_cost_data.py"), "--device", "cpu",
           "--ndevices", "2", "--batch_size", "8", "--T_range", "2,4", "--max_dim", "16",
           "--sleep_range", "0,1", "--warmup", "0", "--iters", "1", "--chunk", "100000", "--check",
           "--out_dir", str(out), "--no_progress"]
    proc = subprocess.Popen(cmd + ["--data_size", "100000"], cwd=str(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = out / "data.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if data.exists() and data.read_bytes().count(b"\n") >= 5:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "collector ended early"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The ranks notice their launcher is gone and exit by themselves.
    job_dirs = glob.glob(str(out / ".jobs" / "comm_job_*"))
    assert len(job_dirs) == 1
    pids = [int(open(p).read()) for p in glob.glob(os.path.join(job_dirs[0], "rank*.pid"))]
    assert len(pids) == 2
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(torchrun._pid_alive(p) and job_dirs[0] in torchrun._cmdline(p)
                                              for p in pids):
        time.sleep(0.2)
    assert not any(torchrun._pid_alive(p) and job_dirs[0] in torchrun._cmdline(p) for p in pids)

    before = [line for line in _lines(data) if line]
    with open(data, "ab") as f:
        f.write(b"16,8 0.1")  # a torn write
    target = len(before) + 4
    res = subprocess.run(cmd + ["--data_size", str(target)], cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "torn" in res.stderr
    after = [line for line in _lines(data) if line]
    assert len(after) == target and after[:len(before)] == before
    old = {tuple(line.split()[:2]) for line in before}
    assert all(tuple(line.split()[:2]) not in old for line in after[len(before):])
    assert len(read_comm_data(out)) == target


def test_two_nodes_resume_a_collection_and_only_node_0_writes(tmp_path):
    """The same command on two "nodes" (2 ranks each, one rendezvous on 127.0.0.1) continues a
    2-node collection whose data.txt holds 2 samples and a torn line: node 0 appends 2 more samples
    measured on all 4 ranks; node 1 lends its ranks and never writes its --out_dir."""
    out, node1_out = tmp_path / "comm", tmp_path / "node1_out"
    cfg = cc.CommCollectConfig(ndevices=4, batch_size=16, T_range=(2, 4), sleep_range=(0.0, 1.0), max_dim=16,
                               warmup=1, iters=2)
    check_run_config(out, {**cfg.to_json(), "nnodes": 2, "nproc_per_node": 2})  # what the first run wrote
    before = [b"16,8,8,0 0.36,0.165,0.0,0.381 4.4,4.6,5.1,4.6 0.93,2.9,2.4,2.5",
              b"16,0,0,8 0.118,0.0,0.029,0.193 2.07,2.5,2.2,2.4 2.2,2.3,2.3,2.9"]
    (out / "data.txt").write_bytes(b"\n".join(before) + b"\n16,8 0.1")  # killed mid-line
    cmd = [os.path.join(ROOT, "collect_comm_cost_data.py"), "--device", "cpu", "--ndevices", "4", "--batch_size",
           "16", "--T_range", "2,4", "--max_dim", "16", "--sleep_range", "0,1", "--warmup", "1", "--iters", "2",
           "--data_size", "4", "--timeout", "60", "--no_progress"]
    port = free_port()
    (tmp_path / "node1_tmp").mkdir()
    node0, node1 = run_nodes([cmd + ["--out_dir", str(out)] + launch_flags(port, 0),
                              cmd + ["--out_dir", str(node1_out)] + launch_flags(port, 1)],
                             cwd=tmp_path, env=[{}, {"TMPDIR": str(tmp_path / "node1_tmp")}], timeout=300)
    print(f"two-node collection of 2 samples: node 0 {node0.elapsed_s:.1f} s, node 1 {node1.elapsed_s:.1f} s")
    assert node0.returncode == 0, node0.stderr[-3000:]
    assert node1.returncode == 0, node1.stderr[-3000:]
    assert "torn" in node0.stderr and "2 samples added (4 in total)" in node0.stdout
    assert "node 1: 2 samples measured with node 0" in node1.stdout
    after = [line for line in _lines(out / "data.txt") if line]
    assert after[:2] == before and len(after) == 4
    data = read_comm_data(out, 4)  # well-formed lines, per-device values for all 4 ranks
    for sample in data[2:]:
        assert len(sample.dims) == len(sample.sleeps) == 4 and min(sample.sleeps) == 0.0
        assert len(sample.fw) == len(sample.bw) == 4 and all(v > 0 for v in sample.fw + sample.bw)
    assert not node1_out.exists()
    assert not [n for n in os.listdir(tmp_path / "node1_tmp") if n.startswith("comm_job_")]
    assert not (out / ".jobs").exists()
    assert_none_left(str(tmp_path), f"127.0.0.1:{port}")


def test_a_collection_keeps_its_node_layout(tmp_path, monkeypatch):
    """Samples measured across 2 nodes are not mixed with samples of one node (or another layout)."""
    monkeypatch.setattr(cc, "AllToAllJob", FakeJob)
    cfg = cc.CommCollectConfig(ndevices=4, batch_size=16, T_range=(2, 4), max_dim=16)
    two = LaunchConfig(nnodes=2, rdzv_endpoint="127.0.0.1:29500")
    out = str(tmp_path / "comm")
    assert cc.collect(out, cfg, 3, progress=False, launch=two)["added"] == 3
    with pytest.raises(InputError, match="nnodes: was 2, now \"<missing>\""):
        cc.collect(out, cfg, 5, progress=False)
    with pytest.raises(ConfigError, match="--node_rank: only node 0 collects"):
        cc.collect(out, cfg, 5, progress=False, launch=LaunchConfig(nnodes=2, node_rank=1, rdzv_endpoint="h:1"))
    assert cc.collect(out, cfg, 5, progress=False, launch=two)["added"] == 2
