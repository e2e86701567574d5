"""eval.py end to end on a tiny dataset with 2 CPU ranks: plans computed by the
simulator's code for every algorithm, measured in one job, an out-of-memory task
reported and not run, every output written; a failing rank ends the script with
a one-line message and exit code 1; two "nodes" of 2 ranks each measure plans
for 4 devices, node 0 alone writing the results."""

import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.dataset import write_dataset
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.task_file import write_tasks
from neuroshard.planner.costs.cost_models import save_model
from neuroshard.planner.costs.nets import linear_comm_model, linear_compute_model
from neuroshard.types.tables import Task, size_gb
from tests.two_nodes import (
    assert_none_left,
    free_port,
    interruptible,
    launch_flags,
    run_nodes,
)

ROOT = Path(__file__).resolve().parent.parent


def _linear_models(out: Path, n: int) -> None:
    """compute = 0.5 + 0.01 x (sum of dims) ms; comm = 0.1 + 0.02 x dims (+ 0.5 x sleep) ms."""
    save_model(linear_compute_model(0.01, 0.5), out / "compute.pt")
    save_model(linear_comm_model("fw", n, np.hstack([0.02 * np.eye(n), 0.5 * np.eye(n)]), np.full(n, 0.1)),
               out / f"comm_{n}_fw.pt")
    save_model(linear_comm_model("bw", n, 0.02 * np.eye(n), np.full(n, 0.1)), out / f"comm_{n}_bw.pt")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=6, batch_size=128, max_rows=200_000, seed=2),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    by_rows = sorted(range(len(configs)), key=lambda t: configs[t].row)
    small, big = by_rows[:4], by_rows[-1]
    dims = (8, 16, 4, 8)
    # task 0 fits on one device (so every algorithm is valid); task 1 holds the largest
    # table at dim 4 (it cannot be split) and that exceeds the cap
    write_tasks(d / "tasks.txt", [Task(tuple(small), dims), Task((big, small[0]), (4, 4))])
    max_mem = 0.9 * size_gb(configs[big].row, 4)
    assert sum(size_gb(configs[t].row, dim) for t, dim in zip(small, dims)) < max_mem
    _linear_models(d, 2)
    args = ["--data_dir", str(d / "ds"), "--task_path", str(d / "tasks.txt"), "--compute_model",
            str(d / "compute.pt"), "--fw_comm_model", str(d / "comm_2_fw.pt"), "--bw_comm_model",
            str(d / "comm_2_bw.pt"), "--ndevices", "2", "--device", "cpu", "--max_mem", repr(max_mem),
            "--warmup", "1", "--iters", "2", "--timeout", "20", "--no_progress"]
    return d, args


def test_eval_script_measures_every_algorithm_and_reports_oom(setup, capsys):
    import importlib.util

    d, args = setup
    spec = importlib.util.spec_from_file_location("eval_script", ROOT / "eval.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = d / "out"
    assert script.main([*args, "--alg", "all", "--out_dir", str(out)]) == 0
    printed = capsys.readouterr().out

    summary = json.loads((out / "summary.json").read_text())
    algs = [r["alg"] for r in summary["algorithms"]]
    assert algs[0] == "neuroshard" and len(algs) > 1
    for row in summary["algorithms"]:
        assert (row["valid"], row["tasks"], row["oom"]) == (1, 2, 1)  # task 1 is out of memory for all
        assert row["average"] > 0 and row["average_estimated"] > 0
    assert printed.count("Average: ") == len(algs) and printed.count("Valid 1 / 2") == len(algs)
    assert "Out of memory" in printed and "Simulator vs hardware" in printed
    acc = summary["simulator_accuracy"]
    assert acc["plans"] == len(algs) and acc["mape"] is not None
    assert acc["pairs"] + acc["pairs_tied"] == len(algs) * (len(algs) - 1) // 2

    results = json.loads((out / "results.json").read_text())
    assert len(results) == 2 * len(algs)
    for r in results:
        if r["task"] == 1:
            assert r["status"] == "oom" and r["cost"] is None and "measured" not in r
        else:
            m = r["measured"]
            assert r["status"] == "ok" and r["cost"] == pytest.approx(max(m["total"]))
            assert m["total"] == pytest.approx([a + b + c for a, b, c in zip(m["compute"], m["bw_comm"],
                                                                               m["fw_comm"])])
    # the plans handed to the job are the ones eval_simulator's code computed, with their estimates
    plans = read_plans(out / "plans.json")
    assert [(p.task, p.alg) for p in plans] == [(r["task"], r["alg"]) for r in results]
    assert all(p.estimated_cost == r["estimated_cost"] for p, r in zip(plans, results))
    for name in ("config.json", "results.csv", "ranks.csv", "summary.csv", "summary.md"):
        assert (out / name).exists()


def test_eval_verdicts_are_prediction_powered_by_unmeasured_tasks(setup, tmp_path):
    """eval_simulator.py's plans of two measured tasks and of three that are not measured: eval.py measures the
    first, simulates the others again and reads the verdicts with their estimates (eval/intervals.py)."""
    import importlib.util

    from neuroshard.formats.task_file import read_tasks
    from neuroshard.types.errors import ConfigError

    d, args = setup
    small = read_tasks(d / "tasks.txt")[0].table_ids
    write_tasks(tmp_path / "measured.txt", [Task(small[:2], (8, 16)), Task(small[2:], (4, 8))])
    write_tasks(tmp_path / "unmeasured.txt", [Task(small[1:3], (16, 4)), Task((small[0], small[3]), (8, 8)),
                                              Task(small[:3], (8, 8, 8))])
    flags = dict(zip(args[:-1:2], args[1::2]))  # flag -> value ("--no_progress" is the odd one out, last)
    simulate = runpy.run_path(str(ROOT / "eval_simulator.py"))["main"]
    for name in ("measured", "unmeasured"):
        sim = {**{k: v for k, v in flags.items() if k not in ("--warmup", "--iters", "--timeout", "--device")},
               "--task_path": str(tmp_path / f"{name}.txt"), "--alg": "neuroshard,size_greedy",
               "--out_dir": str(tmp_path / f"sim_{name}")}
        assert simulate([*(x for kv in sim.items() for x in kv), "--quiet", "--no_progress"]) == 0
    flags = [x for kv in {**flags, "--task_path": str(tmp_path / "measured.txt")}.items() for x in kv]
    spec = importlib.util.spec_from_file_location("eval_script", ROOT / "eval.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "hw"
    powered = ["--plans", str(tmp_path / "sim_measured" / "plans.json"), "--unmeasured_plans",
               str(tmp_path / "sim_unmeasured" / "plans.json"), "--unmeasured_task_path",
               str(tmp_path / "unmeasured.txt")]
    assert script.main([*flags, "--alg", "all", "--repeats", "2", "--out_dir", str(out), "--quiet",
                        "--no_progress", *powered]) == 0
    summary = json.loads((out / "summary.json").read_text())
    [vs] = [r["vs_reference"] for r in summary["algorithms"] if r["alg"] == "size_greedy"]
    assert vs["power"]["predicted"] == 3 and 0.0 <= vs["weight"] <= 1.0 and "plain_diff_ms" in vs
    assert json.loads((out / "config.json").read_text())["unmeasured_tasks"] == 3
    with pytest.raises(ConfigError, match="needs both --unmeasured_plans and --unmeasured_task_path"):
        script.main([*flags, "--out_dir", str(tmp_path / "x"), *powered[:4]])


# eval.py's own main and run_main, with the job's rank entry point swapped for one that fails
# (tests/faulty_ranks.py): production code has no fault flag.
_WITH_FAULTY_RANKS = """
import runpy, sys
from neuroshard.cli import run_main
from neuroshard.measure import launch
launch.MODULE = "tests.faulty_ranks"
script = runpy.run_path(sys.argv[1])
run_main(lambda: script["main"](sys.argv[2:]))
"""


def test_eval_script_failing_rank_exits_nonzero_with_its_message(setup, tmp_path):
    _, args = setup
    env = dict(os.environ, PYTHONPATH=str(ROOT), FAULTY_RANKS="hardware:1:0:raise")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _WITH_FAULTY_RANKS, str(ROOT / "eval.py"), *args, "--alg",
                           "neuroshard", "--out_dir", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=150, env=env, cwd=tmp_path)
    assert time.monotonic() - t0 < 120
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "rank 1 (plan 0, before compute)" in last and "injected fault" in last


def _wait_lines(path: Path, n: int, proc, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {n} measurements within {timeout} s")


@pytest.mark.heavy(19)
def test_eval_resumes_after_kill_and_ctrl_c_without_measuring_a_plan_twice(setup, tmp_path):
    import signal

    _, args = setup
    out = tmp_path / "out"
    # 20 timed iterations (each after a cache flush) so that a plan takes long enough to be interrupted; five
    # algorithms' plans are enough to be stopped twice and finished (test above: every algorithm)
    algs = "neuroshard,random,dim_greedy,size_greedy,lookup_greedy"
    cmd = [sys.executable, str(ROOT / "eval.py"), *args, "--alg", algs, "--out_dir", str(out), "--iters", "20",
           "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = out / ".partial" / "measurements.jsonl"

    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    _wait_lines(log, 1, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9, mid-way
    proc.wait()
    assert_none_left(str(out), within=30)  # no rank left behind after kill -9
    after_kill = log.read_bytes().count(b"\n")

    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=interruptible)
    _wait_lines(log, after_kill + 1, proc)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, mid-way
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"Traceback" not in err, err
    assert_none_left(str(out), within=30)  # nor after Ctrl-C
    after_ctrl_c = log.read_bytes().count(b"\n")
    assert after_kill < after_ctrl_c

    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    runnable = sum(1 for r in json.loads((out / "results.json").read_text()) if r["plan"] is not None)
    hw = summary["hardware"]
    # every plan measured exactly once over the three runs
    print(f"\nresume: {after_kill} measurement(s) logged before kill -9, {after_ctrl_c} before Ctrl-C, "
          f"{hw['measurements']} in the final run, {runnable} plans")  # for the record (pytest -s)
    assert hw["measurements_resumed"] == after_ctrl_c and hw["measurements_resumed"] + hw["measurements"] == runnable
    assert f"{after_ctrl_c} measurements were made by an earlier, interrupted run" in done.stderr
    assert not (out / ".partial").exists()  # the log and the job folders go once every plan is measured
    # the same plan set as an uninterrupted run would measure: the plans eval_simulator's code makes
    results = json.loads((out / "results.json").read_text())
    assert all(r["cost"] is not None for r in results if r["plan"] is not None)
    assert [(p.task, p.alg, p.plan_key) for p in read_plans(out / "plans.json")] == \
        [(r["task"], r["alg"], r["plan_key"]) for r in results]


def _set(args: list, flag: str, value: str) -> list:
    """`args` with `flag`'s value replaced."""
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


@pytest.mark.heavy(18)
def test_eval_script_on_two_nodes_measures_all_four_ranks(setup, tmp_path):
    """The same eval.py command on two "nodes" (2 ranks each, one rendezvous on 127.0.0.1): node 0
    plans and writes; node 1 lends its ranks, reads its own dataset copy, writes nothing."""
    d, args = setup
    _linear_models(tmp_path, 4)
    args = _set(_set(_set(args, "--ndevices", "4"), "--fw_comm_model", str(tmp_path / "comm_4_fw.pt")),
                "--bw_comm_model", str(tmp_path / "comm_4_bw.pt"))
    args = _set(args, "--timeout", "60")
    # task 0 only (task 1 is out of memory): two algorithms -> two plans over 4 ranks
    common = [str(ROOT / "eval.py"), *args, "--alg", "dim_greedy,size_greedy", "--max_tasks", "1"]
    port, out, node1_out = free_port(), tmp_path / "out", tmp_path / "node1_out"
    (tmp_path / "node1_tmp").mkdir()
    node0, node1 = run_nodes([common + ["--out_dir", str(out)] + launch_flags(port, 0),
                              common + ["--out_dir", str(node1_out)] + launch_flags(port, 1)],
                             cwd=tmp_path, env=[{}, {"TMPDIR": str(tmp_path / "node1_tmp")}], timeout=420)
    assert node0.returncode == 0, node0.stderr[-3000:]
    assert node1.returncode == 0, node1.stderr[-3000:]
    assert "node 1: 2 plans measured with node 0" in node1.stdout

    results = json.loads((out / "results.json").read_text())
    assert [(r["task"], r["alg"], r["status"]) for r in results] == [(0, "dim_greedy", "ok"), (0, "size_greedy", "ok")]
    for r in results:
        m = r["measured"]
        for part in ("compute", "bw_comm", "fw_comm", "total"):
            assert len(m[part]) == 4, part
        assert all(x > 0 for x in m["bw_comm"] + m["fw_comm"])
        assert r["cost"] == pytest.approx(max(m["total"]))
    assert len((out / "ranks.csv").read_text().splitlines()) == 1 + 2 * 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hardware"]["launch"]["nnodes"] == 2 and summary["hardware"]["problem"]["ndevices"] == 4
    # node 1 never wrote its --out_dir; its scratch job dir (system temp dir) went after success
    assert not node1_out.exists()
    assert not [n for n in os.listdir(tmp_path / "node1_tmp") if n.startswith("hw_eval_job_")]
    assert_none_left(str(tmp_path), f"127.0.0.1:{port}")
    print(f"two-node eval.py: node 0 {node0.elapsed_s:.1f} s, node 1 {node1.elapsed_s:.1f} s")
