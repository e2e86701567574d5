"""Tests of `neuroshard.formats`, one file per format family, and the helpers they share."""

import os

import pytest

from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig

BINS = tuple([0.0] * 16 + [1.0])


def cfg(row=100, pf=1.5, dim=None):
    return TableConfig(row, pf, BINS, dim)


def expect_error(fn, path, *fragments, line=None):
    """Run fn, expect InputError naming `path` (and `line`), with every fragment in its message."""
    with pytest.raises(InputError) as info:
        fn()
    err = info.value
    msg = str(err)
    assert "\n" not in msg
    assert err.path == str(path), msg
    assert err.line == line, msg
    if line is not None:
        assert f"{path}:{line}:" in msg
    for frag in fragments:
        assert frag in msg, msg
    return msg


def no_temp_files(directory):
    return [n for n in os.listdir(directory) if n.endswith(".tmp")] == []


# --------------------------------------------------------------------------- table configs
