"""How the driver starts a step: `python <script> <args>`, in a process of its own.

Most of a small step's time is the interpreter importing torch, FBGEMM and TorchRec (several seconds on the
CPU machine, for steps that then run for one or two). On Linux the driver imports them once and starts each
script step in a fork of itself instead: the child runs the script as `__main__` from the repository root,
exactly as `python <script>` would, and exits with its status, so a step still gets a process (and memory) of
its own and its printed command still reproduces it by hand. What the steps time runs in processes they start
themselves (torchrun ranks, `spawn`ed pool workers), which begin from a fresh interpreter either way.
`--fresh_interpreters` (or a platform without `fork`) starts every step as a new interpreter, and so does a
driver that holds a CUDA context, which a forked child could not use (the driver only imports; GPU steps create
their contexts in their own processes).
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Sequence

# imported once by the driver before its first forked step; the steps' own modules are light beside them
PRELOAD = ("torch", "fbgemm_gpu", "torchrec.distributed.model_parallel", "torchrec.distributed.planner")
# how long a step that had the driver's Ctrl-C may take to stop its ranks and keep what it has, before it is killed
INTERRUPT_GRACE_S = 10.0


def can_fork() -> bool:
    """Whether steps can start as forks of the driver (Linux: fork after these imports is safe there)."""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


class StepLauncher:
    """Runs step commands, `argv` as given to `python`, from `cwd`; returns each one's exit status.

    With `fork` (the default where `can_fork`), a script step (`argv[0]` a `.py` file) runs in a fork of this
    process after `PRELOAD` is imported here; anything else (`-c`, `-m`) runs as a fresh interpreter.
    """

    def __init__(self, cwd: Path, fork: bool | None = None, preload: Sequence[str] = PRELOAD,
                 interrupt_grace_s: float = INTERRUPT_GRACE_S):
        self.cwd = Path(cwd)
        self.interrupt_grace_s = interrupt_grace_s
        self.fork = can_fork() if fork is None else fork and can_fork()
        self._preload = list(preload) if self.fork else []

    def __call__(self, argv: Sequence[str]) -> int:
        argv = list(argv)
        if self.fork and argv and argv[0].endswith(".py"):
            self.preload()
            if not _cuda_initialized():
                return _fork_script(self.cwd, argv, self.interrupt_grace_s)
        return subprocess.call([sys.executable, *argv], cwd=self.cwd)

    def preload(self) -> None:
        """Import the modules every forked step starts with (once; nothing when steps start fresh)."""
        while self._preload:
            try:
                importlib.import_module(self._preload.pop(0))
            except ImportError:  # a step that needs it reports it in its own words
                pass


def _cuda_initialized() -> bool:
    """Whether this process holds a CUDA context, which a fork cannot use (the steps then start fresh)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _fork_script(cwd: Path, argv: list[str], grace_s: float) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child never returns into the driver's frames
        status = 1
        try:
            status = run_as_main(cwd, argv)
        finally:
            os._exit(status)
    try:
        _, wait_status = os.waitpid(pid, 0)
    except BaseException:
        # the step had the same Ctrl-C (one process group): it may end by itself, else it is killed; either
        # way it is reaped and the interrupt goes on
        _stop(pid, grace_s)
        raise
    return os.waitstatus_to_exitcode(wait_status)


def _stop(pid: int, grace_s: float) -> None:
    """Reap the child `pid`, killing it if it is still running after `grace_s`."""
    deadline = time.monotonic() + grace_s
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)
    except ChildProcessError:  # the interrupted wait had reaped it already
        pass


def run_as_main(cwd: Path, argv: list[str]) -> int:
    """Run the script `argv[0]` (its arguments `argv[1:]`) as `python` runs one, in this process; its exit
    status. What an interpreter does at exit follows: the script's threads are joined and exit handlers run."""
    try:
        os.chdir(cwd)
        path = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(path)
        main = types.ModuleType("__main__")
        main.__file__ = path  # a `spawn`ed worker of the script re-imports it from here
        sys.modules["__main__"] = main
        code = compile(Path(path).read_bytes(), path, "exec")
        exec(code, main.__dict__)
        status = 0
    except SystemExit as e:
        status = exit_status(e.code)
    except BaseException as e:  # the traceback from the script's own frames, as the interpreter prints it
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        status = 128 + signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status


def exit_status(code: object) -> int:
    """The exit status `sys.exit(code)` gives: None is 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
