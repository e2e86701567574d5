"""The repository's scripts run as their command lines run them (`main` through `run_main`), in the test's own
process: torch is imported once per test process rather than once per script run."""

import contextlib
import io
import os
import runpy
import subprocess
from pathlib import Path

from neuroshard.cli import run_main
from neuroshard.pipeline.processes import exit_status

ROOT = Path(__file__).resolve().parents[1]


def script_path(name) -> Path:
    """A pipeline step script (the repository root, even where tools/ holds the original release's path of it) or a
    standalone tool (tools/) by file name; a path as given."""
    path = Path(name)
    if path.is_absolute():
        return path
    return ROOT / name if (ROOT / name).exists() else ROOT / "tools" / name


def run_script(script, argv, cwd=None) -> subprocess.CompletedProcess:
    """Run `script` (`script_path`) with `argv` from `cwd` as `python script argv...` would: its exit status and
    what it printed to stdout and stderr. An exception `run_main` does not turn into a one-line error (a bug)
    propagates, as a traceback would end the command."""
    path = script_path(script)
    args = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        main = runpy.run_path(str(path))["main"]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                run_main(lambda: main(args))
            except SystemExit as e:
                code = exit_status(e.code)
    finally:
        os.chdir(old)
    return subprocess.CompletedProcess([str(path), *args], code, out.getvalue(), err.getvalue())
