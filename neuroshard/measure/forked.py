"""A function run in a fork of this process, behind the handle `subprocess.Popen` gives a command.

A helper process that only coordinates (the torchrun agent of a job, a pipeline step) costs, started as a fresh
interpreter, an import of torch: seconds of CPU on the CPU machine, for each job of every step and test. A
process that has torch imported already forks instead where that is safe (Linux, and no CUDA context here,
which a fork could not use). What is timed still runs in processes started from a fresh interpreter: the
ranks that torchrun starts, the pool workers that `spawn` starts.

The child gets a session of its own if asked (so that the caller can signal its whole tree), stdin from
/dev/null, stdout and stderr on the given file, and an environment of its own; Python's streams and the
logging handlers made before the fork are pointed at the new stdout and stderr, and the child ends with
`os._exit`, never running the parent's exit handlers.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import traceback
from typing import Callable, Mapping


def can_fork() -> bool:
    """Whether a helper can start as a fork of this process: Linux, and no CUDA context in it."""
    if not (hasattr(os, "fork") and sys.platform.startswith("linux")):
        return False
    torch = sys.modules.get("torch")
    return torch is None or not torch.cuda.is_initialized()


def exit_status(code: object) -> int:
    """The exit status `sys.exit(code)` gives: None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


class ForkedProcess:
    """`target()` run in a fork of this process; its return value (or `sys.exit` code) is the exit status,
    an uncaught exception prints its traceback and exits 1. `pid`, `returncode`, `poll()` and `wait()` as
    `subprocess.Popen` has them (a status of -N: killed by signal N)."""

    def __init__(self, target: Callable[[], int | None], *, output: int | None = None,
                 env: Mapping[str, str] | None = None, new_session: bool = False):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the child never returns into the caller's frames
            status = 1
            try:
                if new_session:
                    os.setsid()
                _own_streams(output)
                if env is not None:
                    os.environ.clear()
                    os.environ.update(env)
                status = exit_status(target())
            except SystemExit as e:
                status = exit_status(e.code)
            except BaseException:
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except (OSError, ValueError):
                        pass
                os._exit(status)
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by a wait that an interrupt cut short, as Popen takes it
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None and self.returncode is None:  # blocking: no polling beside a measurement
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


def _own_streams(output: int | None) -> None:
    """stdin from /dev/null, stdout and stderr on `output` (kept where None), Python's streams on them, and the
    logging handlers that write to a stream writing to stderr (a handler made before the fork holds the parent's
    stream, which may be a test's capture or a pipe to the parent's reader)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if output is not None:
        os.dup2(output, 1)
        os.dup2(output, 2)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    loggers = [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                      if isinstance(x, logging.Logger))]
    for handler in (h for x in loggers for h in x.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.stream = sys.stderr
