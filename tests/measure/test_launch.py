"""The launcher's multi-node side: launch flags and their validation, the torchrun command
of each node, failure messages assembled from reports that came from other nodes, and two
real "nodes" on this machine (a node that never joins; a rank failing on the other node).

Single-node jobs (the default launch) are tested through their users in test_comm.py."""

import argparse
import json
import os
import threading
import time

import pytest

from neuroshard.measure.alltoall_job import AllToAllJob
from neuroshard.measure.launch import JobError, LaunchConfig, TorchrunJob
from neuroshard.types.errors import ConfigError
from tests.two_nodes import assert_none_left, free_port, launch_flags, run_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWO_NODES = LaunchConfig(nnodes=2, node_rank=0, rdzv_endpoint="127.0.0.1:29555", rdzv_id="t1", join_timeout=42)


def test_launch_flags_parse_and_validate():
    p = argparse.ArgumentParser()
    LaunchConfig.add_args(p)
    launch = LaunchConfig.from_args(p.parse_args([]))
    assert launch == LaunchConfig() and not launch.multi_node and launch.writes_outputs
    launch = LaunchConfig.from_args(p.parse_args(["--nnodes", "2", "--node_rank", "1", "--rdzv_endpoint",
                                                  "node0.example:29500", "--rdzv_id", "run-7"]))
    assert launch.multi_node and not launch.writes_outputs and launch.nproc_per_node is None
    bad = [(["--nnodes", "0"], "--nnodes: must be >= 1"),
           (["--nnodes", "2", "--node_rank", "2", "--rdzv_endpoint", "h:1"], "--node_rank: must be <= 1, got 2"),
           (["--node_rank", "1"], "--node_rank: must be <= 0"),
           (["--nnodes", "2"], "--rdzv_endpoint: needed with --nnodes 2"),
           (["--nnodes", "2", "--rdzv_endpoint", "node0"], "expected HOST:PORT"),
           (["--nnodes", "2", "--rdzv_endpoint", "node0:0"], "port in 1..65535"),
           (["--nproc_per_node", "0"], "--nproc_per_node: must be >= 1"),
           (["--rdzv_id", "a b"], "--rdzv_id"),
           (["--join_timeout", "0"], "--join_timeout: must be > 0")]
    for argv, msg in bad:
        with pytest.raises(ConfigError, match=msg):
            LaunchConfig.from_args(p.parse_args(argv))


def test_world_size_splits_over_the_nodes():
    launch = TWO_NODES.for_world(8)
    assert launch.nproc_per_node == 4 and launch.node_of(3) == 0 and launch.node_of(4) == 1
    assert list(launch.local_ranks()) == [0, 1, 2, 3]
    assert list(LaunchConfig(nnodes=2, node_rank=1, rdzv_endpoint="h:1").for_world(4).local_ranks()) == [2, 3]
    assert launch.layout() == {"nnodes": 2, "nproc_per_node": 4}
    assert LaunchConfig().for_world(4).layout() == {}  # single-node run configs stay as they were
    with pytest.raises(ConfigError, match="5 ranks do not fill --nnodes 2"):
        TWO_NODES.for_world(5)
    with pytest.raises(ConfigError, match="--nnodes 2 x --nproc_per_node 3"):
        LaunchConfig(nnodes=2, nproc_per_node=3, rdzv_endpoint="h:1").for_world(4)


def test_torchrun_command_of_each_mode():
    # one node: a free local port and the job's own id, as before multi-node existed
    assert LaunchConfig().for_world(4).torchrun_args("abc") == [
        "--nproc_per_node=4", "--nnodes=1", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0", "--rdzv_id=abc"]
    # several: torchrun's static rendezvous honours --node_rank; its store waits --join_timeout s
    assert LaunchConfig(nnodes=2, node_rank=1, rdzv_endpoint="node0:29500", join_timeout=42.4).for_world(
        4).torchrun_args() == ["--nproc_per_node=2", "--nnodes=2", "--node_rank=1", "--rdzv_backend=static",
                               "--rdzv_endpoint=node0:29500", "--rdzv_id=neuroshard", "--rdzv_conf=timeout=42"]


def _job_with_reports(tmp_path, launch, reports, pids=(0, 1), log=""):
    """A (never started) 4-rank job whose dir holds the given pid files, error reports and log."""
    job = TorchrunJob("some.worker", [], 4, 3, launch=launch)
    job.job_dir = str(tmp_path)
    for r in pids:
        (tmp_path / f"rank{r}.pid").write_text("999999999")
    for rep in reports:
        (tmp_path / f"rank{rep['rank']}.error").write_text(json.dumps(rep))
    (tmp_path / "torchrun.log").write_text(log)
    return job


def _report(rank, peer, message, node, **extra):
    return {"rank": rank, "sample": 1, "phase": "forward barrier" if peer else "before forward",
            "type": "RuntimeError", "message": message, "peer": peer, "node": node, "host": f"h{node}", **extra}


def test_node_0_names_a_rank_of_another_node_from_the_reports_its_ranks_collected(tmp_path):
    culprit = _report(3, False, "injected fault", 1)
    lost = _report(2, True, "Connection closed by peer", 1)
    job = _job_with_reports(tmp_path, TWO_NODES, [
        _report(0, True, "Connection closed by peer", 0, remote=[culprit, lost]),
        _report(1, True, "Connection closed by peer", 0)])
    assert job.diagnose() == (
        "rank 3 (sample 1, before forward) on node 1 (h1): RuntimeError: injected fault; "
        "rank(s) 0,1,2 aborted waiting for peers (rank 0 (sample 1, forward barrier) on node 0 (h0): "
        "RuntimeError: Connection closed by peer)")


def test_node_0_says_which_ranks_elsewhere_went_silent(tmp_path):
    job = _job_with_reports(tmp_path, TWO_NODES, [_report(0, True, "Timed out", 0), _report(1, True, "Timed out", 0)])
    msg = job.diagnose()
    assert msg.startswith("rank(s) 2,3 on node(s) 1 stopped responding (no report reached this node")
    assert "rank(s) 0,1 aborted waiting for peers" in msg


def test_a_failed_rendezvous_is_explained_from_the_torchrun_log(tmp_path):
    log = "torch.distributed.DistStoreError: Timed out after 43 seconds waiting for clients. 1/2 clients joined.\n"
    (tmp_path / "a").mkdir()
    job = _job_with_reports(tmp_path / "a", TWO_NODES, [], pids=(), log=log)
    assert job.diagnose().startswith("the rendezvous at 127.0.0.1:29555 did not complete within 42 s: "
                                     "1 of 2 nodes joined; the missing node(s) were never started")
    (tmp_path / "b").mkdir()
    node1 = LaunchConfig(nnodes=2, node_rank=1, rdzv_endpoint="127.0.0.1:29555", join_timeout=42)
    log = "[c10d] The client socket has timed out after 42000ms while trying to connect to (127.0.0.1, 29555).\n"
    job = _job_with_reports(tmp_path / "b", node1, [], pids=(), log=log)
    assert job.diagnose().startswith("node 0 never answered at 127.0.0.1:29555 within 42 s")


def test_a_node_that_never_joins_ends_the_other_within_the_join_timeout(tmp_path):
    """Node 0 started without node 1, and node 1 without node 0 (two separate rendezvous): each ends
    by itself within --join_timeout + 30 s (+ start-up) with a message naming what is missing."""
    join = 10
    cmd = [os.path.join(ROOT, "collect_comm_cost_data.py"), "--device", "cpu", "--ndevices", "4", "--batch_size",
           "16", "--warmup", "1", "--iters", "2", "--data_size", "2", "--no_progress"]
    ports = free_port(), free_port()
    (tmp_path / "node1_tmp").mkdir()
    alone0, alone1 = run_nodes(
        [cmd + ["--out_dir", str(tmp_path / "out")] + launch_flags(ports[0], 0, join_timeout=join),
         cmd + ["--out_dir", str(tmp_path / "out1")] + launch_flags(ports[1], 1, join_timeout=join)],
        cwd=tmp_path, env=[{}, {"TMPDIR": str(tmp_path / "node1_tmp")}], timeout=180)
    print(f"missing node 1: node 0 ended after {alone0.elapsed_s:.1f} s; missing node 0: node 1 ended after "
          f"{alone1.elapsed_s:.1f} s (--join_timeout {join})")
    assert alone0.returncode == 1 and alone1.returncode == 1
    last0, last1 = alone0.stderr.strip().splitlines()[-1], alone1.stderr.strip().splitlines()[-1]
    assert last0.startswith(f"error: node 0: torchrun exited with code 1 after 0 of 2 samples: the rendezvous at "
                            f"127.0.0.1:{ports[0]} did not complete within {join} s: 1 of 2 nodes joined"), last0
    assert last1.startswith("error: node 1: ") and f"node 0 never answered at 127.0.0.1:{ports[1]}" in last1, last1
    # bounded: torchrun's own start-up on a loaded machine, then at most join_timeout + 30 s
    assert alone0.elapsed_s < join + 60 and alone1.elapsed_s < join + 60
    assert not (tmp_path / "out1").exists() and not (tmp_path / "out" / "data.txt").read_text()
    assert_none_left(str(tmp_path), f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}")


def test_a_rank_failing_on_node_1_ends_both_nodes_and_node_0_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULTY_RANKS", "comm:3:1:raise")  # global rank 3 = node 1's second rank
    port = free_port()
    samples = [{"dims": [8, 16, 4, 4], "sleeps": [0.0] * 4}] * 3
    got, errors = {0: [], 1: []}, {}

    def node(k):
        launch = LaunchConfig(nnodes=2, node_rank=k, rdzv_endpoint=f"127.0.0.1:{port}", join_timeout=90)
        try:
            with AllToAllJob(samples if k == 0 else (), 4, 16, warmup=1, iters=2, timeout=30, launch=launch,
                         worker_module="tests.faulty_ranks", work_dir=str(tmp_path / f"node{k}")) as job:
                for res in job.results():
                    got[k].append(res.index)
        except JobError as e:
            errors[k] = str(e)

    t0 = time.monotonic()
    threads = [threading.Thread(target=node, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert time.monotonic() - t0 < 240 and sorted(errors) == [0, 1], errors
    assert got == {0: [0], 1: [0]}  # sample 0 arrived on both nodes before the fault
    for k in (0, 1):  # each node's message names rank 3 on node 1 and its cause
        assert errors[k].startswith(f"node {k}: torchrun exited with code 1 after 1")
        assert "rank 3 (sample 1, before forward) on node 1" in errors[k], errors[k]
        assert "RuntimeError: injected fault on rank 3 at item 1" in errors[k]
    assert_none_left(str(tmp_path), f"127.0.0.1:{port}")
