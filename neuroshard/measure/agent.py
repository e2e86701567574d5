"""How a job's torchrun agent starts: a fork of this process where it has torch imported, else a fresh interpreter.

The agent (`python -m torch.distributed.run`) only rendezvouses, starts the ranks and watches them; a fresh
interpreter spends about 2 s of CPU importing torch for it, as long as a small job's measurement on the CPU
machine. A process that has imported torch already (a script that loaded cost models, a pipeline step forked
from a driver that preloads torch) forks instead, and the child runs torchrun's `main` as the interpreter
would: in a session of its own, its output in the job's log, the environment the job gives it, exiting with
torchrun's status. The ranks it starts are fresh interpreters either way (torchrun execs them), so what they
measure does not change, nor does the malloc setting they get from the environment (`measure.process_env`).
Without fork, with torch not imported, or with a CUDA context here (a fork cannot use it), the agent starts
as `python -m torch.distributed.run`.
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback

AGENT_MODULE = "torch.distributed.run"


def can_fork_agent() -> bool:
    """Whether the agent can start as a fork of this process: Linux, torch imported, no CUDA context."""
    torch = sys.modules.get("torch")
    return hasattr(os, "fork") and sys.platform.startswith("linux") and torch is not None \
        and not torch.cuda.is_initialized()


def start_agent(args: list[str], env: dict[str, str], log) -> subprocess.Popen | ForkedAgent:
    """Start `torchrun args` in a session of its own, its output (stdout and stderr) in the open file `log`, with
    the environment `env`; a handle with `pid`, `poll()` and `wait(timeout)` as `subprocess.Popen`'s."""
    if not can_fork_agent():
        return subprocess.Popen([sys.executable, "-m", AGENT_MODULE, *args], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's frames
        status = 1
        try:
            status = _run_agent(args, env, log.fileno())
        finally:
            os._exit(status)
    return ForkedAgent(pid)


def _run_agent(args: list[str], env: dict[str, str], log_fd: int) -> int:
    """In the forked child: torchrun's `main` as `python -m torch.distributed.run args` runs it; its status."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    # what the caller set up for itself is not the agent's: its log handlers (a fresh interpreter has none, and
    # torchrun's warnings then reach stderr, the log), its signal handlers
    logging.root.handlers.clear()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [AGENT_MODULE, *args]
    try:
        runpy.run_module(AGENT_MODULE, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # as the interpreter prints an uncaught exception
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status & 0xFF


class ForkedAgent:
    """The forked agent's handle: `pid`, `returncode`, `poll()` and `wait(timeout)` as `subprocess.Popen`'s."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: nothing more to know
                self.returncode = -1
                return self.returncode
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(AGENT_MODULE, timeout)
            time.sleep(0.01)
        return self.returncode
