"""A function in a fork of this process behind Popen's handle: exit statuses, streams, environment, session."""

import atexit
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from neuroshard.measure.forked import ForkedProcess, can_fork

pytestmark = pytest.mark.skipif(not can_fork(), reason="helpers start as forks only where the platform has fork")


def _quiet_exit(code):
    def target():
        sys.exit(code)
    return target


def test_exit_statuses_are_the_interpreters(tmp_path):
    out = open(tmp_path / "out.log", "w")
    assert ForkedProcess(lambda: None, output=out.fileno()).wait() == 0
    assert ForkedProcess(lambda: 3, output=out.fileno()).wait() == 3
    assert ForkedProcess(_quiet_exit(4), output=out.fileno()).wait() == 4
    assert ForkedProcess(_quiet_exit("a message"), output=out.fileno()).wait() == 1

    def boom():
        raise ValueError("raised in the child")

    assert ForkedProcess(boom, output=out.fileno()).wait() == 1
    out.close()
    text = (tmp_path / "out.log").read_text()
    assert "a message\n" in text and "ValueError: raised in the child" in text and "Traceback" in text


def test_poll_wait_and_a_signal_as_popen_gives_them():
    child = ForkedProcess(lambda: time.sleep(30), output=os.open(os.devnull, os.O_WRONLY))
    assert child.poll() is None and child.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.05)
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL and child.poll() == -signal.SIGKILL


def test_the_child_writes_to_its_file_in_its_environment_and_session_and_skips_the_parents_exit_handlers(tmp_path):
    # a handler made before the fork holds this process's stream; the child's records go to the child's file
    logger = logging.getLogger("neuroshard.test_forked")
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    logger.propagate = False  # pytest's own handlers on the root logger are not what is checked here
    marker = tmp_path / "parent_exit_handler_ran"
    on_exit = lambda: marker.write_text("ran")  # noqa: E731
    atexit.register(on_exit)
    try:
        def child():
            print("printed", os.environ.get("ONLY_THIS"), "PATH" in os.environ, os.getsid(0) == os.getpid())
            logger.warning("logged")
            os.write(1, b"written to fd 1\n")
            return 0

        with open(tmp_path / "out.log", "w") as out:
            assert ForkedProcess(child, output=out.fileno(), env={"ONLY_THIS": "yes"}, new_session=True).wait() == 0
    finally:
        atexit.unregister(on_exit)
        logger.removeHandler(handler)
        logger.propagate = True
    lines = (tmp_path / "out.log").read_text().splitlines()
    assert sorted(lines) == sorted(["printed yes False True", "logged", "written to fd 1"])
    assert not marker.exists() and "ONLY_THIS" not in os.environ
