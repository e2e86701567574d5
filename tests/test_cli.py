import subprocess
import sys

import pytest

from neuroshard.cli import resolve_ranks
from neuroshard.types.errors import ConfigError


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_run_main_reports_one_line():
    r = _run("from neuroshard.cli import run_main\n"
             "from neuroshard.types.errors import InputError\n"
             "def main(): raise InputError('x/y.txt', \"bad value 'q'\", line=4)\n"
             "run_main(main)")
    assert r.returncode == 1
    assert r.stderr.strip() == "error: x/y.txt:4: bad value 'q'"
    r = _run("from neuroshard.cli import run_main\n"
             "def main(): open('/nonexistent/file.txt')\n"
             "run_main(main)")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "/nonexistent/file.txt" in r.stderr


def test_resolve_ranks_checks_the_device_flags():
    assert resolve_ranks("cpu", None, None) == ("cpu", 4)
    assert resolve_ranks("cpu", 2, None) == ("cpu", 2)
    with pytest.raises(ConfigError, match="--ndevices: need at least 1 rank, got 0"):
        resolve_ranks("cpu", 0, None)
    with pytest.raises(ConfigError, match="--gpu_devices"):
        resolve_ranks("cpu", None, "0,1")


def test_resolve_ranks_on_several_nodes_counts_every_node():
    # --ndevices is the world; it splits over the nodes unless --nproc_per_node says otherwise
    assert resolve_ranks("cpu", None, None, nnodes=2) == ("cpu", 4)
    assert resolve_ranks("cpu", 8, None, nnodes=2) == ("cpu", 8)
    assert resolve_ranks("cpu", None, None, nnodes=3, nproc_per_node=2) == ("cpu", 6)
    with pytest.raises(ConfigError, match="--ndevices: 5 ranks do not split evenly over --nnodes 2"):
        resolve_ranks("cpu", 5, None, nnodes=2)
    with pytest.raises(ConfigError, match="--ndevices: 4 ranks but --nproc_per_node 3 x --nnodes 2 makes 6"):
        resolve_ranks("cpu", 4, None, nnodes=2, nproc_per_node=3)
    with pytest.raises(ConfigError, match="--nproc_per_node: give --nproc_per_node or --ndevices with --nnodes 3"):
        resolve_ranks("cpu", None, None, nnodes=3)
    # --gpu_devices names this node's GPUs
    assert resolve_ranks("cuda", None, "0,1,2,3", nnodes=2) == ("cuda", 8)
    with pytest.raises(ConfigError, match="--ndevices: 4 ranks but --gpu_devices names 4 GPUs x --nnodes 2"):
        resolve_ranks("cuda", 4, "0,1,2,3", nnodes=2)
    with pytest.raises(ConfigError, match="--nproc_per_node: 2 ranks per node but --gpu_devices names 4 GPUs"):
        resolve_ranks("cuda", None, "0,1,2,3", nnodes=2, nproc_per_node=2)
