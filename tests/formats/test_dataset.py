"""`neuroshard.formats.dataset`: table configs, the dataset dir and the public DLRM file: round trips and one
malformed case per check."""

import gzip
import json
import os

import pytest
import torch

from neuroshard.formats import dataset as dataset_module
from neuroshard.formats.dataset import (
    Dataset,
    check_public_table,
    read_dataset,
    read_public_dlrm,
    read_table_configs,
    write_dataset,
    write_public_dlrm,
    write_table_configs,
)
from neuroshard.types.errors import InputError
from tests.formats import cfg, expect_error, no_temp_files


def test_table_configs_round_trip(tmp_path):
    configs = [cfg(100, 0.0), cfg(12345, 15.75, dim=64)]
    path = tmp_path / "table_configs.json"
    write_table_configs(path, configs)
    assert read_table_configs(path) == configs
    raw = json.loads(path.read_text())
    assert raw[1]["dim"] == 64 and "dim" not in raw[0] and raw[0]["bin_16"] == 1.0
    assert no_temp_files(tmp_path)


def test_table_configs_malformed(tmp_path):
    path = tmp_path / "table_configs.json"
    expect_error(lambda: read_table_configs(path), path, "file not found")
    path.write_text('[\n{"row": 10,\n')
    expect_error(lambda: read_table_configs(path), path, "invalid JSON", line=3)
    path.write_text('{"row": 10}')
    expect_error(lambda: read_table_configs(path), path, "JSON list")
    good = cfg().to_json()
    bad = dict(good)
    del bad["bin_7"]
    path.write_text(json.dumps([good, bad]))
    expect_error(lambda: read_table_configs(path), path, "table 1", "bin_7")
    path.write_text(json.dumps([dict(good, row="ten")]))
    expect_error(lambda: read_table_configs(path), path, "table 0", "'ten'")
    path.write_text(json.dumps([dict(good, dim=6)]))
    expect_error(lambda: read_table_configs(path), path, "table 0", "multiple of 4", "6")
    # where the lookups fall over the rows: shares of them, summing to 1
    path.write_text(json.dumps([good, dict(good, row_lookups=[0.5, 0.2])]))
    expect_error(lambda: read_table_configs(path), path, "table 1", "row_lookups sum to 0.7, not 1")
    path.write_text(json.dumps([dict(good, row_lookups="0.5,0.5")]))
    expect_error(lambda: read_table_configs(path), path, "table 0", "row_lookups must be a list")
    path.write_text(json.dumps([dict(good, row_lookups=[1.5, -0.5])]))
    expect_error(lambda: read_table_configs(path), path, "table 0", "shares in [0, 1]", "1.5")


# --------------------------------------------------------------------------- dataset dir


def small_dataset():
    configs = [cfg(100, 1.5), cfg(100, 0.0), cfg(5000, 1.0)]
    indices = [torch.tensor([3, 4, 99]), torch.tensor([], dtype=torch.int64),
               torch.tensor([7, 4999], dtype=torch.int32)]
    offsets = [torch.tensor([0, 1, 3]), torch.tensor([0, 0, 0]), torch.tensor([0, 2, 2], dtype=torch.int32)]
    return configs, indices, offsets


def test_dataset_round_trip(tmp_path):
    configs, indices, offsets = small_dataset()
    write_dataset(tmp_path / "ds", configs, indices, offsets)
    ds = read_dataset(tmp_path / "ds")
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
    write_dataset(tmp_path, configs, indices, offsets)
    assert (tmp_path / "data.pt").stat().st_size < 20_000
    ds = read_dataset(tmp_path)
    assert ds.indices[0].tolist() == [10, 11, 12] and ds.indices[1].tolist() == [0, 1]


def write_raw_dataset(d, configs, indices, offsets):
    """Write without the writer's checks, to build malformed datasets."""
    d.mkdir(exist_ok=True)
    write_table_configs(d / "table_configs.json", configs)
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
    expect_error(lambda: read_dataset(tmp_path / "ds"), data, *fragments)
    with pytest.raises(ValueError):
        write_dataset(tmp_path / "out", configs, indices, offsets)
    assert not (tmp_path / "out" / "data.pt").exists()


def test_dataset_validate_false_skips_index_range(tmp_path):
    configs, indices, offsets = small_dataset()
    indices[0] = torch.tensor([3, 4, 100])
    write_raw_dataset(tmp_path / "ds", configs, indices, offsets)
    assert read_dataset(tmp_path / "ds", validate=False).batch_size == 2


def test_dataset_malformed_files(tmp_path):
    configs, indices, offsets = small_dataset()
    d = tmp_path / "ds"
    expect_error(lambda: read_dataset(d), d, "directory not found")
    write_dataset(d, configs, indices, offsets)
    data = d / "data.pt"
    data.write_bytes(b"not a torch file")
    expect_error(lambda: read_dataset(d), data, "cannot load torch file")
    torch.save({"indices": indices}, data)
    expect_error(lambda: read_dataset(d), data, '"offsets"')
    torch.save({"indices": indices[:2], "offsets": offsets[:2]}, data)
    expect_error(lambda: read_dataset(d), data, "2 index tensors", "3 tables")
    torch.save({"indices": [i.float() for i in indices], "offsets": offsets}, data)
    expect_error(lambda: read_dataset(d), data, "table 0: indices", "torch.float32")
    torch.save({"indices": [indices[0].view(3, 1)] + indices[1:], "offsets": offsets}, data)
    expect_error(lambda: read_dataset(d), data, "table 0: indices", "[3, 1]")
    data.unlink()
    expect_error(lambda: read_dataset(d), data, "file not found")


def test_dataset_batch_size_mismatch_in_memory():
    configs, indices, offsets = small_dataset()
    offsets[1] = torch.tensor([0, 0, 0, 0])
    with pytest.raises(InputError, match=r"batch size: \[2, 3\]"):
        Dataset(configs, indices, offsets).batch_size


def test_failed_write_keeps_old_file(tmp_path, monkeypatch):
    configs, indices, offsets = small_dataset()
    write_dataset(tmp_path, configs, indices, offsets)
    before = (tmp_path / "data.pt").read_bytes()

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(RuntimeError):
        write_dataset(tmp_path, configs, indices, offsets)
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
    monkeypatch.setattr(dataset_module.tempfile, "tempdir", str(scratch))  # where .gz gets decompressed
    path = tmp_path / name
    write_public_dlrm(path, *public_tensors())
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    got = read_public_dlrm(path)
    for a, b in zip(got, public_tensors()):
        assert torch.equal(a, b)
    assert os.listdir(scratch) == []  # the decompressed copy is gone
    assert no_temp_files(tmp_path)
    idx, off = check_public_table(path, 1, *got)
    assert idx.tolist() == [0, 0, 0, 9] and off.tolist() == [0, 3, 4, 4]
    idx, off = check_public_table(path, 0, *got)
    assert idx.tolist() == [5, 1, 2] and off.tolist() == [0, 1, 1, 3]


def test_public_legacy_format_falls_back_to_full_load(tmp_path):
    path = tmp_path / "legacy.pt"  # torch < 1.6 layout: cannot be memory-mapped
    torch.save(public_tensors(), path, _use_new_zipfile_serialization=False)
    for a, b in zip(read_public_dlrm(path), public_tensors()):
        assert torch.equal(a, b)


def test_public_malformed(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(dataset_module.tempfile, "tempdir", str(scratch))
    indices, offsets, lengths = public_tensors()
    path = tmp_path / "bad.pt"
    expect_error(lambda: read_public_dlrm(path), path, "file not found")
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
        expect_error(lambda: read_public_dlrm(path), path, *fragments)
    gz = tmp_path / "bad.pt.gz"
    gz.write_bytes(gzip.compress(b"x" * 1000)[:15])  # truncated gzip stream
    expect_error(lambda: read_public_dlrm(gz), gz, "corrupt gzip")
    gz.write_bytes(gzip.compress(b"not a torch file"))
    expect_error(lambda: read_public_dlrm(gz), gz, "cannot load torch file")
    assert os.listdir(scratch) == []
    with pytest.raises(ValueError):
        write_public_dlrm(tmp_path / "w.pt", indices, offsets[:-1], lengths)


def test_public_gzip_disk_full_is_an_os_error(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(dataset_module.tempfile, "tempdir", str(scratch))
    path = tmp_path / "p.pt.gz"
    write_public_dlrm(path, *public_tensors())

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dataset_module.shutil, "copyfileobj", full)
    with pytest.raises(OSError, match="No space left on device while decompressing .*TMPDIR") as info:
        read_public_dlrm(path)
    assert info.value.filename == str(path)
    assert os.listdir(scratch) == []


def test_check_public_table_errors():
    indices, offsets, lengths = public_tensors()
    bad_lengths = torch.tensor([[1, 0, 2], [3, 2, 0]])
    with pytest.raises(InputError, match=r"f\.pt: table 1, sample 1: lengths says 2, offsets say 1"):
        check_public_table("f.pt", 1, indices, offsets, bad_lengths)
    neg = indices.clone()
    neg[6] = -4
    with pytest.raises(InputError, match="table 1: negative index -4"):
        check_public_table("f.pt", 1, neg, offsets, lengths)


# --------------------------------------------------------------------------- task file
