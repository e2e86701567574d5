"""Two torchrun "nodes" on this machine, for the multi-node tests.

A node is one launcher process (the same command each time, with `--node_rank 0`
or `1`) whose torchrun agent joins one rendezvous endpoint on 127.0.0.1, as two
machines would. The helpers start the nodes together, collect what each printed,
and check that no process of theirs is left behind.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the rendezvous endpoint of one test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# imported once by the test process's fork server: each rank is a fork of it, not an interpreter importing them
RANK_PRELOAD = ["torch", "torch.distributed", "fbgemm_gpu", "torchrec.distributed.model_parallel"]


def spawn_ranks(fn, *args, seconds: float, what: str, world: int = 2) -> None:
    """Run `fn(rank, world, port, *args)` in `world` fresh processes (torch.multiprocessing, forked by a server
    that imported `RANK_PRELOAD`) that share a free 127.0.0.1 port for their process group; kill them and fail
    the test naming `what` when they are not done within `seconds`."""
    import multiprocessing

    import pytest
    import torch.multiprocessing as mp

    multiprocessing.set_forkserver_preload(RANK_PRELOAD)  # read when the server starts (once per test process)
    ctx = mp.start_processes(fn, args=(world, free_port(), *args), nprocs=world, join=False,
                             start_method="forkserver")
    deadline = time.monotonic() + seconds
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{what} did not finish within {seconds:g} s")


def launch_flags(port: int, node_rank: int, nnodes: int = 2, nproc: int = 2, join_timeout: float = 90) -> list[str]:
    return ["--nnodes", str(nnodes), "--node_rank", str(node_rank), "--nproc_per_node", str(nproc),
            "--rdzv_endpoint", f"127.0.0.1:{port}", "--join_timeout", str(join_timeout)]


@dataclass
class NodeRun:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


def run_nodes(commands: list[list[str]], *, cwd, env: list[dict] | None = None, timeout: float = 300) -> list[NodeRun]:
    """Start every node's command at once (python scripts, run with this interpreter) and wait for all."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, *cmd], cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, **(env[k] if env else {})})
             for k, cmd in enumerate(commands)]
    runs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))
            runs.append(NodeRun(p.returncode, out, err, time.monotonic() - t0))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return runs


def processes_mentioning(marker: str) -> list[int]:
    """Pids of live processes (this one's excluded) whose command line contains `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmd and not zombie:
            found.append(int(name))
    return found


def assert_none_left(*markers: str, within: float = 20.0) -> None:
    """No launcher, torchrun agent or rank mentioning any of `markers` survives (after a short grace)."""
    deadline = time.monotonic() + within
    while True:
        left = {m: processes_mentioning(m) for m in markers}
        left = {m: p for m, p in left.items() if p}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"processes left behind: {left}"


def interruptible() -> None:
    """`Popen(preexec_fn=interruptible)`: Ctrl-C (SIGINT) back to its default in the child. A shell starts a
    background job (`make test &`) with SIGINT ignored, and an ignored signal stays ignored across exec: the
    Ctrl-C tests' children would then never see their Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
