"""Tests of neuroshard.formats: round trips, torn lines, and one malformed case per check."""

from __future__ import annotations

import gzip
import json
import os

import pytest
import torch

from neuroshard import formats as F
from neuroshard.types import CostBreakdown, InputError, InvalidPlanError, Plan, PlanRecord, Task, TableConfig

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


def test_table_configs_round_trip(tmp_path):
    configs = [cfg(100, 0.0), cfg(12345, 15.75, dim=64)]
    path = tmp_path / "table_configs.json"
    F.write_table_configs(path, configs)
    assert F.read_table_configs(path) == configs
    raw = json.loads(path.read_text())
    assert raw[1]["dim"] == 64 and "dim" not in raw[0] and raw[0]["bin_16"] == 1.0
    assert no_temp_files(tmp_path)


def test_table_configs_malformed(tmp_path):
    path = tmp_path / "table_configs.json"
    expect_error(lambda: F.read_table_configs(path), path, "file not found")
    path.write_text('[\n{"row": 10,\n')
    expect_error(lambda: F.read_table_configs(path), path, "invalid JSON", line=3)
    path.write_text('{"row": 10}')
    expect_error(lambda: F.read_table_configs(path), path, "JSON list")
    good = cfg().to_json()
    bad = dict(good)
    del bad["bin_7"]
    path.write_text(json.dumps([good, bad]))
    expect_error(lambda: F.read_table_configs(path), path, "table 1", "bin_7")
    path.write_text(json.dumps([dict(good, row="ten")]))
    expect_error(lambda: F.read_table_configs(path), path, "table 0", "'ten'")
    path.write_text(json.dumps([dict(good, dim=6)]))
    expect_error(lambda: F.read_table_configs(path), path, "table 0", "multiple of 4", "6")


# --------------------------------------------------------------------------- dataset dir


def small_dataset():
    configs = [cfg(100, 1.5), cfg(100, 0.0), cfg(5000, 1.0)]
    indices = [torch.tensor([3, 4, 99]), torch.tensor([], dtype=torch.int64),
               torch.tensor([7, 4999], dtype=torch.int32)]
    offsets = [torch.tensor([0, 1, 3]), torch.tensor([0, 0, 0]), torch.tensor([0, 2, 2], dtype=torch.int32)]
    return configs, indices, offsets


def test_dataset_round_trip(tmp_path):
    configs, indices, offsets = small_dataset()
    F.write_dataset(tmp_path / "ds", configs, indices, offsets)
    ds = F.read_dataset(tmp_path / "ds")
    assert ds.configs == configs and len(ds) == 3 and ds.batch_size == 2
    for t in range(3):
        idx, off = ds.lookups(t)
        assert torch.equal(idx, indices[t]) and torch.equal(off, offsets[t])
        assert idx.dtype == indices[t].dtype
    assert no_temp_files(tmp_path / "ds")


def test_dataset_writes_views_compactly(tmp_path):
    # Tables sliced out of one big tensor (as when processing the public file)
    # must not each save the whole underlying storage.
    big = torch.arange(1_000_000) % 100
    configs = [cfg(100), cfg(100)]
    indices = [big[10:13], big[500_000:500_002]]
    offsets = [torch.tensor([0, 1, 3]), torch.tensor([0, 2, 2])]
    F.write_dataset(tmp_path, configs, indices, offsets)
    assert (tmp_path / "data.pt").stat().st_size < 20_000
    ds = F.read_dataset(tmp_path)
    assert ds.indices[0].tolist() == [10, 11, 12] and ds.indices[1].tolist() == [0, 1]


def write_raw_dataset(d, configs, indices, offsets):
    """Write without the writer's checks, to build malformed datasets."""
    d.mkdir(exist_ok=True)
    F.write_table_configs(d / "table_configs.json", configs)
    torch.save({"indices": indices, "offsets": offsets}, d / "data.pt")
    return d / "data.pt"


@pytest.mark.parametrize("table, idx, off, fragments", [
    (0, [3, 4, 99], [1, 1, 3], ["table 0", "first offset is 1"]),
    (2, [7, 8, 9], [0, 2, 1, 3], ["table 2", "batch size 3, table 0 has 2"]),
    (0, [3, 4, 99], [0, 1, 4], ["table 0", "last offset is 4", "3"]),
    (2, [7, 8, 9], [0, 4, 3], ["table 2", "not monotone at position 2", "3 after 4"]),
    (0, [3, 4, 100], [0, 1, 3], ["table 0", "index 100 >= row 100"]),
    (2, [7, -1], [0, 1, 2], ["table 2", "negative index -1"]),
    (1, [], [0, 0, 0, 0], ["table 1", "batch size 3", "2"]),
])
def test_dataset_malformed_tensors(tmp_path, table, idx, off, fragments):
    configs, indices, offsets = small_dataset()
    indices[table] = torch.tensor(idx, dtype=torch.int64)
    offsets[table] = torch.tensor(off, dtype=torch.int64)
    data = write_raw_dataset(tmp_path / "ds", configs, indices, offsets)
    expect_error(lambda: F.read_dataset(tmp_path / "ds"), data, *fragments)
    with pytest.raises(ValueError):
        F.write_dataset(tmp_path / "out", configs, indices, offsets)
    assert not (tmp_path / "out" / "data.pt").exists()


def test_dataset_validate_false_skips_index_range(tmp_path):
    configs, indices, offsets = small_dataset()
    indices[0] = torch.tensor([3, 4, 100])
    write_raw_dataset(tmp_path / "ds", configs, indices, offsets)
    assert F.read_dataset(tmp_path / "ds", validate=False).batch_size == 2


def test_dataset_malformed_files(tmp_path):
    configs, indices, offsets = small_dataset()
    d = tmp_path / "ds"
    expect_error(lambda: F.read_dataset(d), d, "directory not found")
    F.write_dataset(d, configs, indices, offsets)
    data = d / "data.pt"
    data.write_bytes(b"not a torch file")
    expect_error(lambda: F.read_dataset(d), data, "cannot load torch file")
    torch.save({"indices": indices}, data)
    expect_error(lambda: F.read_dataset(d), data, '"offsets"')
    torch.save({"indices": indices[:2], "offsets": offsets[:2]}, data)
    expect_error(lambda: F.read_dataset(d), data, "2 index tensors", "3 tables")
    torch.save({"indices": [i.float() for i in indices], "offsets": offsets}, data)
    expect_error(lambda: F.read_dataset(d), data, "table 0: indices", "torch.float32")
    torch.save({"indices": [indices[0].view(3, 1)] + indices[1:], "offsets": offsets}, data)
    expect_error(lambda: F.read_dataset(d), data, "table 0: indices", "[3, 1]")
    data.unlink()
    expect_error(lambda: F.read_dataset(d), data, "file not found")


def test_dataset_batch_size_mismatch_in_memory():
    configs, indices, offsets = small_dataset()
    offsets[1] = torch.tensor([0, 0, 0, 0])
    with pytest.raises(InputError, match=r"batch size: \[2, 3\]"):
        F.Dataset(configs, indices, offsets).batch_size


def test_failed_write_keeps_old_file(tmp_path, monkeypatch):
    configs, indices, offsets = small_dataset()
    F.write_dataset(tmp_path, configs, indices, offsets)
    before = (tmp_path / "data.pt").read_bytes()

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(RuntimeError):
        F.write_dataset(tmp_path, configs, indices, offsets)
    assert (tmp_path / "data.pt").read_bytes() == before
    assert no_temp_files(tmp_path)


# --------------------------------------------------------------------------- public DLRM file


def public_tensors():
    # T=2 tables, B=3: table 0 bags [5], [], [1, 2]; table 1 bags [0, 0, 0], [9], [].
    lengths = torch.tensor([[1, 0, 2], [3, 1, 0]])
    offsets = torch.tensor([0, 1, 1, 3, 6, 7, 7])
    indices = torch.tensor([5, 1, 2, 0, 0, 0, 9])
    return indices, offsets, lengths


@pytest.mark.parametrize("name", ["public.pt", "public.pt.gz"])
def test_public_round_trip(tmp_path, monkeypatch, name):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(F.tempfile, "tempdir", str(scratch))  # where .gz gets decompressed
    path = tmp_path / name
    F.write_public_dlrm(path, *public_tensors())
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    got = F.read_public_dlrm(path)
    for a, b in zip(got, public_tensors()):
        assert torch.equal(a, b)
    assert os.listdir(scratch) == []  # the decompressed copy is gone
    assert no_temp_files(tmp_path)
    idx, off = F.check_public_table(path, 1, *got)
    assert idx.tolist() == [0, 0, 0, 9] and off.tolist() == [0, 3, 4, 4]
    idx, off = F.check_public_table(path, 0, *got)
    assert idx.tolist() == [5, 1, 2] and off.tolist() == [0, 1, 1, 3]


def test_public_legacy_format_falls_back_to_full_load(tmp_path):
    path = tmp_path / "legacy.pt"  # torch < 1.6 layout: cannot be memory-mapped
    torch.save(public_tensors(), path, _use_new_zipfile_serialization=False)
    for a, b in zip(F.read_public_dlrm(path), public_tensors()):
        assert torch.equal(a, b)


def test_public_malformed(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(F.tempfile, "tempdir", str(scratch))
    indices, offsets, lengths = public_tensors()
    path = tmp_path / "bad.pt"
    expect_error(lambda: F.read_public_dlrm(path), path, "file not found")
    cases = [
        ((indices, offsets), "tuple of length 2"),
        ({"indices": indices}, "got a dict"),
        ((indices, offsets, lengths.flatten()), "lengths has shape [6]"),
        ((indices, offsets[:-1], lengths), "length 6, expected 7"),
        ((indices[:-1], offsets, lengths), "last offset is 7", "6"),
        ((indices, torch.tensor([0, 1, 1, 3, 2, 7, 7]), lengths), "not monotone at position 4", "2 after 3"),
        ((indices.float(), offsets, lengths), "indices has dtype torch.float32"),
    ]
    for obj, *fragments in cases:
        torch.save(obj, path)
        expect_error(lambda: F.read_public_dlrm(path), path, *fragments)
    gz = tmp_path / "bad.pt.gz"
    gz.write_bytes(gzip.compress(b"x" * 1000)[:15])  # truncated gzip stream
    expect_error(lambda: F.read_public_dlrm(gz), gz, "corrupt gzip")
    gz.write_bytes(gzip.compress(b"not a torch file"))
    expect_error(lambda: F.read_public_dlrm(gz), gz, "cannot load torch file")
    assert os.listdir(scratch) == []
    with pytest.raises(ValueError):
        F.write_public_dlrm(tmp_path / "w.pt", indices, offsets[:-1], lengths)


def test_public_gzip_disk_full_is_an_os_error(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(F.tempfile, "tempdir", str(scratch))
    path = tmp_path / "p.pt.gz"
    F.write_public_dlrm(path, *public_tensors())

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(F.shutil, "copyfileobj", full)
    with pytest.raises(OSError, match="No space left on device while decompressing .*TMPDIR") as info:
        F.read_public_dlrm(path)
    assert info.value.filename == str(path)
    assert os.listdir(scratch) == []


def test_check_public_table_errors():
    indices, offsets, lengths = public_tensors()
    bad_lengths = torch.tensor([[1, 0, 2], [3, 2, 0]])
    with pytest.raises(InputError, match=r"f\.pt: table 1, sample 1: lengths says 2, offsets say 1"):
        F.check_public_table("f.pt", 1, indices, offsets, bad_lengths)
    neg = indices.clone()
    neg[6] = -4
    with pytest.raises(InputError, match="table 1: negative index -4"):
        F.check_public_table("f.pt", 1, neg, offsets, lengths)


# --------------------------------------------------------------------------- task file


def test_tasks_round_trip(tmp_path):
    tasks = [Task((3, 17, 17, 402), (64, 128, 32, 16)), Task((0,), (4,))]
    path = tmp_path / "tasks.txt"
    F.write_tasks(path, tasks)
    assert path.read_text() == "3,17,17,402 64,128,32,16\n0 4\n"
    assert F.read_tasks(path, num_tables=403) == tasks
    # Hand-written files: blank lines and a missing final newline are fine.
    path.write_text("\n1,2 8,8\n\n5 4")
    assert F.read_tasks(path) == [Task((1, 2), (8, 8)), Task((5,), (4,))]


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
    expect_error(lambda: F.read_tasks(path, num_tables=10), path, *fragments, line=line)


def test_tasks_missing(tmp_path):
    expect_error(lambda: F.read_tasks(tmp_path / "nope.txt"), tmp_path / "nope.txt", "file not found")


# --------------------------------------------------------------------------- append-only lines


def test_open_append_truncates_torn_line(tmp_path, capsys):
    path = tmp_path / "data.txt"
    path.write_bytes(b"a 1\nb 2\nc 3.1")  # killed while writing "c 3.14\n"
    with F.open_append(path) as fh:
        F.append_line(fh, "c 3.14")
    assert path.read_text() == "a 1\nb 2\nc 3.14\n"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "5 bytes" in err


def test_open_append_edge_cases(tmp_path, capsys):
    new = tmp_path / "sub" / "new.txt"
    with F.open_append(new) as fh:  # created, with its folder
        F.append_line(fh, "x")
    assert new.read_text() == "x\n"
    with F.open_append(new) as fh:  # complete file: untouched, no warning
        F.append_line(fh, "y")
    assert new.read_text() == "x\ny\n"
    assert capsys.readouterr().err == ""
    only_torn = tmp_path / "torn.txt"
    only_torn.write_bytes(b"no newline at all")
    F.open_append(only_torn).close()
    assert only_torn.read_bytes() == b""
    assert "torn" in capsys.readouterr().err
    with F.open_append(new) as fh, pytest.raises(ValueError):
        F.append_line(fh, "two\nlines")


def test_open_append_long_torn_tail(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(b"ok\n" + b"z" * 200_000)  # tail longer than one backward-read block
    F.open_append(path).close()
    assert path.read_bytes() == b"ok\n"


def test_read_lines_tolerant(tmp_path, capsys):
    path = tmp_path / "data.txt"
    path.write_bytes(b"one\n\ntwo\r\nthree\nfou")
    assert F.read_lines_tolerant(path) == [(1, "one"), (3, "two"), (4, "three")]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:5" in err and "'fou'" in err
    path.write_bytes(b"one\n")
    assert F.read_lines_tolerant(path) == [(1, "one")]
    assert capsys.readouterr().err == ""
    path.write_bytes(b"ok\n\xff\xfe\n")
    expect_error(lambda: F.read_lines_tolerant(path), path, "not UTF-8", line=2)


# --------------------------------------------------------------------------- compute cost data


def test_compute_data_round_trip(tmp_path):
    configs = [cfg(100, 1.0, dim=4), cfg(2000, 3.25, dim=128)]
    samples = [((0,), 0.125), ((1, 0, 1), 12.5), ((1,), 1e-05)]
    F.write_compute_data(tmp_path, configs, samples)
    assert (tmp_path / "data.txt").read_text() == "0 0.125\n1,0,1 12.5\n1 1e-05\n"
    assert F.read_compute_data(tmp_path) == (configs, samples)
    assert F.format_compute_sample([2, 3], 0.1 + 0.2) == "2,3 0.30000000000000004"


def test_compute_data_append_and_torn_line(tmp_path, capsys):
    configs = [cfg(100, 1.0, dim=4), cfg(2000, 3.25, dim=8)]
    F.write_table_configs(tmp_path / "table_configs.json", configs)
    with F.open_append(tmp_path / "data.txt") as fh:
        F.append_line(fh, F.format_compute_sample([0, 1], 2.5))
        F.append_line(fh, F.format_compute_sample([1], 1.0))
        fh.write("0,1 3.")  # a kill in the middle of a write
        fh.flush()
    assert F.read_compute_data(tmp_path)[1] == [((0, 1), 2.5), ((1,), 1.0)]
    assert "data.txt:3" in capsys.readouterr().err
    with F.open_append(tmp_path / "data.txt") as fh:  # resume
        F.append_line(fh, F.format_compute_sample([0], 0.5))
    assert F.read_compute_data(tmp_path)[1] == [((0, 1), 2.5), ((1,), 1.0), ((0,), 0.5)]


@pytest.mark.parametrize("text, line, fragments", [
    ("0 1.0\n0,1\n", 2, ["expected 2 fields", "got 1"]),
    ("0 1.0 2.0\n", 1, ["expected 2 fields", "got 3"]),
    ("0,a 1.0\n", 1, ["table index", "'a'"]),
    ("0,2 1.0\n", 1, ["table index 2 out of range", "2 tables"]),
    ("0 fast\n", 1, ["cost_ms", "'fast'"]),
    ("0 nan\n", 1, ["cost_ms", "'nan'"]),
    ("1 -0.5\n", 1, ["negative cost_ms -0.5"]),
])
def test_compute_data_malformed(tmp_path, text, line, fragments):
    F.write_table_configs(tmp_path / "table_configs.json", [cfg(dim=4), cfg(dim=8)])
    (tmp_path / "data.txt").write_text(text)
    expect_error(lambda: F.read_compute_data(tmp_path), tmp_path / "data.txt", *fragments, line=line)


def test_compute_data_missing_parts(tmp_path):
    d = tmp_path / "cc"
    expect_error(lambda: F.read_compute_data(d), d, "directory not found")
    d.mkdir()
    expect_error(lambda: F.read_compute_data(d), d / "table_configs.json", "file not found")
    F.write_table_configs(d / "table_configs.json", [cfg(dim=4), cfg()])
    expect_error(lambda: F.read_compute_data(d), d / "table_configs.json", "table 1", '"dim"')
    F.write_table_configs(d / "table_configs.json", [cfg(dim=4)])
    expect_error(lambda: F.read_compute_data(d), d / "data.txt", "file not found")


# --------------------------------------------------------------------------- comm cost data


def test_comm_data_round_trip(tmp_path, capsys):
    samples = [F.CommSample([64, 0], [0.0, 1.5], [0.25, 2.0], [0.5, 0.75]),
               F.CommSample([8, 12], [0.3, 0.0], [1.0, 1.0], [3.0, 4.0])]
    F.write_comm_data(tmp_path, samples)
    assert (tmp_path / "data.txt").read_text().splitlines()[0] == "64,0 0.0,1.5 0.25,2.0 0.5,0.75"
    assert F.read_comm_data(tmp_path) == samples
    assert F.read_comm_data(tmp_path, ndevices=2)[1].ndevices == 2
    with F.open_append(tmp_path / "data.txt") as fh:
        fh.write("4,4 0.0,0.0 1.0")  # torn
    assert F.read_comm_data(tmp_path) == samples
    assert "torn" in capsys.readouterr().err


@pytest.mark.parametrize("text, ndevices, line, fragments", [
    ("4,4 0,0 1,1\n", None, 1, ["expected 4 fields", "got 3"]),
    ("4,4 0,0 1,1 1,1\n4,4,4 0,0,0 1,1,1 1,1,1\n", None, 2, ["3 devices, expected 2"]),
    ("4,4 0,0 1,1 1,1\n", 4, 1, ["2 devices, expected 4"]),
    ("4,4 0,0 1,1,1 1,1\n", None, 1, ["unequal length", "[2, 2, 3, 2]"]),
    ("4,6 0,0 1,1 1,1\n", None, 1, ["dim sum 6"]),
    ("4,x 0,0 1,1 1,1\n", None, 1, ["dim", "'x'"]),
    ("4,4 0,-1 1,1 1,1\n", None, 1, ["negative sleep -1.0"]),
    ("4,4 0,0 1,inf 1,1\n", None, 1, ["fw", "'inf'"]),
    ("4,4 0,0 1,1 1,slow\n", None, 1, ["bw", "'slow'"]),
])
def test_comm_data_malformed(tmp_path, text, ndevices, line, fragments):
    (tmp_path / "data.txt").write_text(text)
    expect_error(lambda: F.read_comm_data(tmp_path, ndevices), tmp_path / "data.txt", *fragments, line=line)


# --------------------------------------------------------------------------- run config


def test_check_run_config(tmp_path):
    out = tmp_path / "run"
    config = {"seed": 0, "T_range": (10, 60), "max_mem": 4.0}
    F.check_run_config(out, config)
    assert json.loads((out / "config.json").read_text()) == {"seed": 0, "T_range": [10, 60], "max_mem": 4.0}
    F.check_run_config(out, dict(config))  # same settings (tuple vs list is the same)
    msg = expect_error(lambda: F.check_run_config(out, {**config, "seed": 1, "extra": "x"}),
                       out / "config.json", "seed: was 0, now 1", 'extra: was "<missing>", now "x"')
    assert "max_mem" not in msg
    (out / "config.json").write_text("[1, 2]")
    expect_error(lambda: F.check_run_config(out, config), out / "config.json", "JSON object")
    (out / "config.json").write_text("{oops")
    expect_error(lambda: F.check_run_config(out, config), out / "config.json", "invalid JSON", line=1)


# --------------------------------------------------------------------------- plans


def two_table_task():
    configs = [cfg(100), cfg(1000), cfg(10)]
    return Task((2, 1), (64, 16)).tables(configs)


def test_plan_view():
    tables = two_table_task()
    # Split table 0 (64 -> 32 + 32, the copy becomes table 2), then split table 2 again (-> 16 + 16, copy 3).
    plan = Plan((0, 2), ((0, 3), (1,), (2,)))
    assert F.plan_view(tables, plan) == [
        {"table": 0, "shards": [{"dim": 32, "device": 0}, {"dim": 16, "device": 2}, {"dim": 16, "device": 0}]},
        {"table": 1, "shards": [{"dim": 16, "device": 1}]},
    ]
    assert F.plan_view(tables, Plan((), ((), (1, 0)))) == [
        {"table": 0, "shards": [{"dim": 64, "device": 1}]},
        {"table": 1, "shards": [{"dim": 16, "device": 1}]},
    ]
    for bad, fragment in [(Plan((), ((0,), ())), r"\[1\] are placed on no device"),
                          (Plan((), ((0, 1), (1,))), "table 1 placed on devices 0 and 1"),
                          (Plan((), ((0, 1, 2),)), "table 2 out of range")]:
        with pytest.raises(InvalidPlanError, match=fragment):
            F.plan_view(tables, bad)


def test_plans_round_trip(tmp_path):
    tables = two_table_task()
    plan = Plan((0,), ((0,), (1, 2)))
    records = [
        PlanRecord(0, "dim_greedy", plan=plan, view=F.plan_view(tables, plan), search_ms=1.5, num_tables=2,
                   estimate=CostBreakdown([1.0, 0.5], [0.25, 0.25], [0.5, 0.5], {"dims": [8, 32]})),
        PlanRecord(1, "dim_greedy", status="oom", message="out of memory", num_tables=2),
    ]
    path = tmp_path / "plans.json"
    F.write_plans(path, records)
    back = F.read_plans(path)
    assert back == records
    assert isinstance(back[0].plan, Plan) and back[0].estimated_cost == 1.75 and back[0].num_splits == 1
    text = path.read_text()
    assert '   {"table": 1, "shards": [{"dim": 16, "device": 1}]}' in text.splitlines()
    F.write_plans(path, [])
    assert F.read_plans(path) == []


@pytest.mark.parametrize("data, fragments", [
    ({"task": 0}, ["JSON list"]),
    ([{"alg": "x", "plan": None}], ["record 0", '"task"']),
    ([{"task": 0, "alg": "x", "plan": None, "status": "oom"}, {"task": 1, "alg": "x"}],
     ["record 1 (task 1)", 'missing "plan"']),
    ([{"task": 0, "alg": "x", "plan": {"column_steps": [], "shards": [[0, "1"]]}}],
     ["record 0", '"shards"', '"1"']),
    ([{"task": 0, "alg": "x", "plan": {"shards": [[0]]}}], ["record 0", '"column_steps"']),
    ([{"task": 0, "alg": "x", "plan": [1, 2]}], ["record 0", '"plan" must be an object']),
    ([{"task": 0, "plan": None}], ["record 0 (task 0)", '"alg"']),
    ([{"task": 0, "alg": "x", "plan": None}], ["record 0 (task 0)", '"status"']),
    ([{"task": 0, "alg": "x", "plan": None, "status": "ok"}], ["record 0 (task 0)", "status 'ok' with no plan"]),
])
def test_plans_malformed(tmp_path, data, fragments):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(data))
    expect_error(lambda: F.read_plans(path), path, *fragments)


def test_plans_invalid_json_names_line(tmp_path):
    path = tmp_path / "plans.json"
    path.write_text('[\n {"task": 0,\n  "plan": nul}\n]\n')
    expect_error(lambda: F.read_plans(path), path, "invalid JSON", line=3)


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "x.json"
    F.write_json_atomic(p, {"a": 1})
    with pytest.raises(RuntimeError):
        with F.atomic_write(p) as fh:
            fh.write("partial")
            raise RuntimeError
    assert p.read_text().startswith("{") and len(list(tmp_path.iterdir())) == 1


# --------------------------------------------------------------------------- user table lists and TorchRec plans


def test_user_tables_from_json_with_and_without_bins(tmp_path, capsys):
    path = tmp_path / "tables.json"
    bins = {f"bin_{j}": 1.0 if j == 16 else 0.0 for j in range(17)}
    path.write_text(json.dumps([{"name": "a", "rows": 100, "dim": 8, "pooling_factor": 1.5, **bins},
                                {"name": "b-2", "rows": 10, "dim": 4, "pooling_factor": 0}]))
    user = F.read_user_tables(path, max_mem=1.0)
    assert user.names == ["a", "b-2"] and user.default_bins == ["b-2"]
    assert user.configs == [TableConfig(100, 1.5, BINS, 8), TableConfig(10, 0.0, F.DEFAULT_BINS, 4)]
    assert "1 table(s) without locality bins (b-2)" in capsys.readouterr().err
    F.read_user_tables(path, warn=False)
    assert capsys.readouterr().err == ""
    path.write_text(json.dumps([{"name": "a", "rows": 1.5, "dim": 8, "pooling_factor": 1}]))
    expect_error(lambda: F.read_user_tables(path), path, "table 0: table 'a': rows is not an integer: 1.5")
    path.write_text(json.dumps([{"name": "a", "rows": 10, "dim": 8, "pooling_factor": 1, "bin_0": 1.0}]))
    expect_error(lambda: F.read_user_tables(path), path, "give all of bin_0..bin_16 or none, missing bin_1")
    path.write_text("[]")
    expect_error(lambda: F.read_user_tables(path), path, "no tables")


def test_user_tables_csv_header_is_checked(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("name,rows,dims,pooling_factor\na,1,4,1\n")
    expect_error(lambda: F.read_user_tables(path), path, "missing dim", line=1)


def test_torchrec_plan_reader_refuses_other_files(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"not": "a plan"}, path)
    expect_error(lambda: F.read_torchrec_plan(path), path, "not a TorchRec ShardingPlan: dict")
    path.write_text("garbage")
    expect_error(lambda: F.read_torchrec_plan(path), path, "cannot load TorchRec plan")
