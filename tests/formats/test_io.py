"""`neuroshard.formats.io`: atomic writes, append-only line files (torn lines), run configs."""

import json

import pytest

from neuroshard.formats.io import (
    append_line,
    atomic_write,
    check_run_config,
    open_append,
    read_lines_tolerant,
    write_json_atomic,
)
from tests.formats import expect_error


def test_open_append_truncates_torn_line(tmp_path, capsys):
    path = tmp_path / "data.txt"
    path.write_bytes(b"a 1\nb 2\nc 3.1")  # killed while writing "c 3.14\n"
    with open_append(path) as fh:
        append_line(fh, "c 3.14")
    assert path.read_text() == "a 1\nb 2\nc 3.14\n"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "5 bytes" in err


def test_open_append_edge_cases(tmp_path, capsys):
    new = tmp_path / "sub" / "new.txt"
    with open_append(new) as fh:  # created, with its folder
        append_line(fh, "x")
    assert new.read_text() == "x\n"
    with open_append(new) as fh:  # complete file: untouched, no warning
        append_line(fh, "y")
    assert new.read_text() == "x\ny\n"
    assert capsys.readouterr().err == ""
    only_torn = tmp_path / "torn.txt"
    only_torn.write_bytes(b"no newline at all")
    open_append(only_torn).close()
    assert only_torn.read_bytes() == b""
    assert "torn" in capsys.readouterr().err
    with open_append(new) as fh, pytest.raises(ValueError):
        append_line(fh, "two\nlines")


def test_open_append_long_torn_tail(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(b"ok\n" + b"z" * 200_000)  # tail longer than one backward-read block
    open_append(path).close()
    assert path.read_bytes() == b"ok\n"


def test_read_lines_tolerant(tmp_path, capsys):
    path = tmp_path / "data.txt"
    path.write_bytes(b"one\n\ntwo\r\nthree\nfou")
    assert read_lines_tolerant(path) == [(1, "one"), (3, "two"), (4, "three")]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:5" in err and "'fou'" in err
    path.write_bytes(b"one\n")
    assert read_lines_tolerant(path) == [(1, "one")]
    assert capsys.readouterr().err == ""
    path.write_bytes(b"ok\n\xff\xfe\n")
    expect_error(lambda: read_lines_tolerant(path), path, "not UTF-8", line=2)


# --------------------------------------------------------------------------- compute cost data


def test_check_run_config(tmp_path):
    out = tmp_path / "run"
    config = {"seed": 0, "T_range": (10, 60), "max_mem": 4.0}
    check_run_config(out, config)
    assert json.loads((out / "config.json").read_text()) == {"seed": 0, "T_range": [10, 60], "max_mem": 4.0}
    check_run_config(out, dict(config))  # same settings (tuple vs list is the same)
    msg = expect_error(lambda: check_run_config(out, {**config, "seed": 1, "extra": "x"}),
                       out / "config.json", "seed: was 0, now 1", 'extra: was "<missing>", now "x"')
    assert "max_mem" not in msg
    (out / "config.json").write_text("[1, 2]")
    expect_error(lambda: check_run_config(out, config), out / "config.json", "JSON object")
    (out / "config.json").write_text("{oops")
    expect_error(lambda: check_run_config(out, config), out / "config.json", "invalid JSON", line=1)


# --------------------------------------------------------------------------- plans


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "x.json"
    write_json_atomic(p, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_write(p) as fh:
            fh.write("partial")
            raise RuntimeError
    assert p.read_text().startswith("{") and len(list(tmp_path.iterdir())) == 1


# --------------------------------------------------------------------------- user table lists and TorchRec plans
