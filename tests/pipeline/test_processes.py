"""The driver's step launcher: a script run in a fork of the driver sees and does what `python <script>` would.

Each test runs the launcher in a driver process of its own (as `python -m neuroshard.pipeline` does), never in
the pytest worker, whose threads and exit handlers a fork must not inherit.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from neuroshard.pipeline.processes import can_fork
from tests.two_nodes import interruptible

pytestmark = pytest.mark.skipif(not can_fork(), reason="steps start as forks only where the platform has fork")

# what a script sees of itself and its process, written where its first argument says
SEES = """
import json, os, sys
import mod_beside
json.dump({"name": __name__, "file": __file__, "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
           "beside": mod_beside.VALUE}, open(sys.argv[1], "w"))
"""

# a `spawn`ed worker running a function of the script (pickled as __main__.square), a thread still running
# when the script's code ends, and an exit handler
SPAWNS = """
import atexit, multiprocessing as mp, sys, threading, time

def square(x):
    return x * x

def late(path):
    time.sleep(0.3)
    open(path, "a").write("thread\\n")

if __name__ == "__main__":
    out = sys.argv[1]
    with mp.get_context("spawn").Pool(1) as pool:
        open(out, "a").write(f"{pool.map(square, [3, 4])}\\n")
    atexit.register(lambda: open(out, "a").write("atexit\\n"))
    threading.Thread(target=late, args=(out,)).start()
"""


def _launch(tmp_path, scripts, fork):
    """Run each of `scripts` (argv lists) with a StepLauncher in a fresh driver process; their exit statuses."""
    driver = textwrap.dedent(f"""
        import json, sys
        from neuroshard.pipeline.processes import StepLauncher
        launch = StepLauncher({str(tmp_path)!r}, fork={fork}, preload=["json"])
        print(json.dumps([launch(argv) for argv in {scripts!r}]))
        print("driver still here", file=sys.stderr)
    """)
    r = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path.parent, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("driver still here") == 1  # no child ever returned into the driver's code
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_a_forked_script_sees_what_a_fresh_interpreter_shows_it(tmp_path):
    (tmp_path / "sees.py").write_text(SEES)
    (tmp_path / "mod_beside.py").write_text("VALUE = 7\n")
    fresh, forked = tmp_path / "fresh.json", tmp_path / "forked.json"
    assert _launch(tmp_path, [["sees.py", str(fresh), "--flag"]], fork=False)[0] == [0]
    assert _launch(tmp_path, [["sees.py", str(forked), "--flag"]], fork=True)[0] == [0]
    want = {"name": "__main__", "file": str(tmp_path / "sees.py"), "argv": ["sees.py", str(fresh), "--flag"],
            "cwd": str(tmp_path), "path0": str(tmp_path), "beside": 7}
    assert json.loads(fresh.read_text()) == want
    assert json.loads(forked.read_text()) == dict(want, argv=["sees.py", str(forked), "--flag"])


@pytest.mark.parametrize("fork", [False, True])
def test_exit_statuses_are_the_interpreters(tmp_path, fork):
    bodies = {"ok.py": "x = 1", "three.py": "import sys; sys.exit(3)", "message.py": "import sys; sys.exit('bad')",
              "raises.py": "raise ValueError('boom')", "none.py": "import sys; sys.exit(None)",
              "one_line.py": "from neuroshard.cli import run_main\n"
                             "from neuroshard.types.errors import NeuroShardError\n"
                             "def main():\n    raise NeuroShardError('no such table t3')\n"
                             "run_main(main)"}
    for name, body in bodies.items():
        (tmp_path / name).write_text(body + "\n")
    statuses, err = _launch(tmp_path, [[name] for name in bodies], fork)
    assert statuses == [0, 3, 1, 1, 0, 1]
    lines = err.splitlines()
    assert "bad" in lines and "ValueError: boom" in lines and "error: no such table t3" in lines
    # the traceback starts at the script, not in the launcher
    assert lines[lines.index("Traceback (most recent call last):") + 1].startswith(f'  File "{tmp_path / "raises.py"}"')


def test_a_forked_script_spawns_workers_joins_its_threads_and_runs_its_exit_handlers(tmp_path):
    (tmp_path / "spawns.py").write_text(SPAWNS)
    out = tmp_path / "out.txt"
    assert _launch(tmp_path, [["spawns.py", str(out)]], fork=True)[0] == [0]
    assert out.read_text().splitlines() == ["[9, 16]", "thread", "atexit"]


def test_commands_that_are_not_scripts_start_a_fresh_interpreter(tmp_path):
    out = tmp_path / "c.txt"
    code = "import sys; open(sys.argv[1], 'w').write(sys.argv[0])"
    assert _launch(tmp_path, [["-c", code, str(out)]], fork=True)[0] == [0]
    assert out.read_text() == "-c"


# waits for Ctrl-C, says it is ready first; with "stubborn" it ignores Ctrl-C and has to be killed
WAITS = """
import os, signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    open(sys.argv[1] + ".pid", "w").write(str(os.getpid()))
    time.sleep(60)
except KeyboardInterrupt:
    open(sys.argv[1], "w").write("cleaned up")
    sys.exit(130)
"""


@pytest.mark.parametrize("how", ["clean", "stubborn"])
def test_ctrl_c_reaches_the_step_and_ends_the_driver_with_no_step_left(tmp_path, how):
    (tmp_path / "waits.py").write_text(WAITS)
    mark = tmp_path / "mark"
    grace = 30 if how == "clean" else 0.5  # the clean step's cleanup well within it, the stubborn one killed
    driver = textwrap.dedent(f"""
        import sys
        from neuroshard.pipeline.processes import StepLauncher
        try:
            StepLauncher({str(tmp_path)!r}, fork=True, preload=[], interrupt_grace_s={grace})(
                ["waits.py", {str(mark)!r}, {how!r}])
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], cwd=tmp_path.parent, start_new_session=True,
                            preexec_fn=interruptible)
    pid_file = tmp_path / "mark.pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    assert proc.wait(timeout=30) == 130
    step = int(pid_file.read_text())
    assert not os.path.exists(f"/proc/{step}")  # ended (and reaped) either way
    assert mark.exists() == (how == "clean")
