import subprocess
import sys

import pytest

from neuroshard.cli import atomic_write, parse_int_list, parse_range, write_json_atomic
from neuroshard.sharders import algorithm_names, get_sharder
from neuroshard.types import NeuroShardError


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_run_main_reports_one_line():
    r = _run("from neuroshard.cli import run_main\n"
             "from neuroshard.types import InputError\n"
             "def main(): raise InputError('x/y.txt', \"bad value 'q'\", line=4)\n"
             "run_main(main)")
    assert r.returncode == 1
    assert r.stderr.strip() == "error: x/y.txt:4: bad value 'q'"
    r = _run("from neuroshard.cli import run_main\n"
             "def main(): open('/nonexistent/file.txt')\n"
             "run_main(main)")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "/nonexistent/file.txt" in r.stderr


def test_parsers():
    assert parse_int_list("0,1, 3", "--gpu_devices") == [0, 1, 3]
    assert parse_range("10,60", "--T_range") == (10, 60)
    with pytest.raises(NeuroShardError, match="--T_range"):
        parse_range("60,10", "--T_range")
    with pytest.raises(NeuroShardError, match="--gpu_devices"):
        parse_int_list("a,b", "--gpu_devices")


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "x.json"
    write_json_atomic(p, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_write(p) as fh:
            fh.write("partial")
            raise RuntimeError
    assert p.read_text().startswith("{") and len(list(tmp_path.iterdir())) == 1


def test_registry_lists_paper_algorithms_and_rejects_unknown():
    names = algorithm_names()
    assert names[:6] == ["neuroshard", "random", "dim_greedy", "lookup_greedy", "size_greedy",
                         "size_lookup_greedy"]
    with pytest.raises(NeuroShardError, match="unknown sharding algorithm 'nope'"):
        get_sharder("nope")
