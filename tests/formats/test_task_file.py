"""`neuroshard.formats.task_file`: the task file: round trip and one malformed case per check."""

import pytest

from neuroshard.formats.task_file import read_tasks, write_tasks
from neuroshard.types.tables import Task
from tests.formats import expect_error


def test_tasks_round_trip(tmp_path):
    tasks = [Task((3, 17, 17, 402), (64, 128, 32, 16)), Task((0,), (4,))]
    path = tmp_path / "tasks.txt"
    write_tasks(path, tasks)
    assert path.read_text() == "3,17,17,402 64,128,32,16\n0 4\n"
    assert read_tasks(path, num_tables=403) == tasks
    # Hand-written files: blank lines and a missing final newline are fine.
    path.write_text("\n1,2 8,8\n\n5 4")
    assert read_tasks(path) == [Task((1, 2), (8, 8)), Task((5,), (4,))]


@pytest.mark.parametrize("text, line, fragments", [
    ("1,2 8,8\n1,2 8,8 7\n", 2, ["expected 2 fields", "got 3"]),
    ("1,2\n", 1, ["expected 2 fields", "got 1"]),
    ("1,x 8,8\n", 1, ["table id", "'x'"]),
    ("1,,2 8,8,8\n", 1, ["table id", "''"]),
    ("1,2 8,8.5\n", 1, ["dim", "'8.5'"]),
    ("0 4\n1,2 8\n", 2, ["2 table ids but 1 dims"]),
    ("1,10 8,8\n", 1, ["table id 10 out of range", "10 tables"]),
    ("-1 8\n", 1, ["table id -1 out of range"]),
    ("1 6\n", 1, ["dim 6", "multiple of 4"]),
    ("1 0\n", 1, ["dim 0"]),
])
def test_tasks_malformed(tmp_path, text, line, fragments):
    path = tmp_path / "tasks.txt"
    path.write_text(text)
    expect_error(lambda: read_tasks(path, num_tables=10), path, *fragments, line=line)


def test_tasks_missing(tmp_path):
    expect_error(lambda: read_tasks(tmp_path / "nope.txt"), tmp_path / "nope.txt", "file not found")


# --------------------------------------------------------------------------- append-only lines
