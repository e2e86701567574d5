"""The torchrun agent started as a fork of a process that has torch imported, or as a fresh interpreter: the same
job either way (its ranks' environment, its output in the log, its own session, torchrun's exit status)."""

import json
import os
import sys
import textwrap
import time

import pytest
import torch  # noqa: F401  (imported: this process may fork the agent)

from neuroshard.measure import agent
from neuroshard.measure.agent import ForkedAgent, can_fork_agent, start_agent

SCRIPT = textwrap.dedent("""
    import json, os, sys
    out = sys.argv[1]
    with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
        json.dump({"world": os.environ["WORLD_SIZE"], "marker": os.environ.get("AGENT_TEST_MARKER")}, f)
    print(f"rank {os.environ['RANK']} says hello", flush=True)
    sys.exit(int(sys.argv[2]) if os.environ["RANK"] == "1" else 0)
""")


def _run(tmp_path, status: int, fork: bool, monkeypatch):
    if not fork:
        monkeypatch.setattr(agent, "can_fork_agent", lambda: False)
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    out = tmp_path / ("fork" if fork else "fresh")
    out.mkdir()
    env = {**os.environ, "AGENT_TEST_MARKER": "m1"}
    with open(out / "log.txt", "w") as log:
        proc = start_agent(["--nproc_per_node=2", "--nnodes=1", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
                            "--max_restarts=0", str(script), str(out), str(status)], env, log)
        own_session = _own_session(proc.pid)
        code = proc.wait(timeout=120)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert own_session  # so the launcher can signal the whole job at once
    return proc, code, ranks, (out / "log.txt").read_text()


def _own_session(pid: int) -> bool:
    """Whether `pid` leads a session of its own within a few seconds (a forked child calls setsid first)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if os.getsid(pid) == pid:
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("fork", [True, False])
def test_the_agent_runs_the_ranks_with_the_jobs_environment_and_logs_them(tmp_path, monkeypatch, fork):
    assert can_fork_agent()  # torch is imported here, on Linux, with no CUDA context
    proc, code, ranks, log = _run(tmp_path, 0, fork, monkeypatch)
    assert isinstance(proc, ForkedAgent) == fork
    assert code == 0 and proc.poll() == 0
    assert [r["world"] for r in ranks] == ["2", "2"] and {r["marker"] for r in ranks} == {"m1"}
    assert "rank 0 says hello" in log and "rank 1 says hello" in log


def test_a_failing_rank_gives_torchruns_nonzero_status_through_the_fork(tmp_path, monkeypatch):
    _, forked, _, log = _run(tmp_path, 3, True, monkeypatch)
    _, fresh, _, _ = _run(tmp_path, 3, False, monkeypatch)
    assert forked == fresh == 1  # torchrun's status for a failed rank, whichever way it started
    assert "ChildFailedError" in log


def test_without_torch_or_fork_the_agent_is_a_fresh_interpreter(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    assert not can_fork_agent()
