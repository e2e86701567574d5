"""`neuroshard.formats.cost_data`: the compute and comm cost data: round trips, torn lines and one malformed
case per check."""

import pytest

from neuroshard.formats.cost_data import (
    CommSample,
    ComputeSample,
    format_compute_sample,
    read_comm_data,
    read_compute_data,
    read_compute_sources,
    write_comm_data,
    write_compute_data,
)
from neuroshard.formats.dataset import write_table_configs
from neuroshard.formats.io import append_line, open_append, write_json_atomic
from tests.formats import cfg, expect_error


def test_compute_data_round_trip(tmp_path):
    configs = [cfg(100, 1.0, dim=4), cfg(2000, 3.25, dim=128)]
    samples = [ComputeSample((0,), 0.125), ComputeSample((1, 0, 1), 12.5, 512), ComputeSample((1,), 1e-05)]
    write_compute_data(tmp_path, configs, samples)
    assert (tmp_path / "data.txt").read_text() == "0 0.125\n1,0,1 12.5 512\n1 1e-05\n"
    assert read_compute_data(tmp_path) == (configs, samples)
    assert format_compute_sample([2, 3], 0.1 + 0.2) == "2,3 0.30000000000000004"
    write_compute_data(tmp_path, configs, [((0,), 0.5)])  # (ids, cost) pairs: the collection's batch
    assert read_compute_data(tmp_path)[1] == [ComputeSample((0,), 0.5, None)]


def test_compute_sources_join_on_policy_and_other_datasets_data_over_one_table_list(tmp_path):
    main, plan, other = tmp_path / "main", tmp_path / "plan", tmp_path / "other"
    configs = [cfg(100, 1.0, dim=4), cfg(2000, 3.25, dim=8)]
    write_compute_data(main, configs, [ComputeSample((0, 1), 2.0), ComputeSample((1,), 1.0, 256)])
    write_compute_data(plan, configs, [ComputeSample((1,), 1.5)])
    more = [cfg(4_000_000, 2.0, dim=32), cfg(300, 150.0, dim=4), cfg(100, 1.0, dim=4)]
    write_compute_data(other, more, [ComputeSample((0, 2), 9.0), ComputeSample((1,), 3.0, 1024)])
    for d, batch in ((main, 512), (plan, None), (other, 2048)):
        write_json_atomic(d / "config.json", {"device": "cpu", "clock": "cpu", "batch_size": batch})
    src = read_compute_sources(main, plan, [other])
    assert src.configs == configs + more  # the other dataset's tables after the first's, even a twin (index 4)
    assert src.samples == [ComputeSample((0, 1), 2.0, 512), ComputeSample((1,), 1.0, 256),
                           ComputeSample((1,), 1.5, 512),  # the plan dir says no batch: the first dir's
                           ComputeSample((2, 4), 9.0, 2048), ComputeSample((3,), 3.0, 1024)]
    assert (src.plan_samples, src.extra_samples) == (1, 2)
    assert read_compute_sources(main).samples == src.samples[:2]
    write_json_atomic(other / "config.json", {"device": "cpu", "clock": "wall", "batch_size": 2048})
    expect_error(lambda: read_compute_sources(main, extra_dirs=[other]), other / "config.json", "timed on",
                 "'clock': 'wall'")
    # on-policy data whose plans ran spread tables lists their shares after the augmented tables: the shares
    # come before the other dataset's tables, and its indices move past both
    share = cfg(50, 0.5, dim=8)
    write_compute_data(plan, configs + [share], [ComputeSample((0, 2), 1.75)])
    write_json_atomic(other / "config.json", {"device": "cpu", "clock": "cpu", "batch_size": 2048})
    src = read_compute_sources(main, plan, [other])
    assert src.configs == configs + [share] + more
    assert src.samples[2:] == [ComputeSample((0, 2), 1.75, 512), ComputeSample((3, 5), 9.0, 2048),
                               ComputeSample((4,), 3.0, 1024)]
    write_compute_data(plan, more, [])
    expect_error(lambda: read_compute_sources(main, plan), plan / "table_configs.json", "augmented table list")
    expect_error(lambda: read_compute_sources(main, extra_dirs=[tmp_path / "none"]), tmp_path / "none")


def test_compute_data_append_and_torn_line(tmp_path, capsys):
    configs = [cfg(100, 1.0, dim=4), cfg(2000, 3.25, dim=8)]
    write_table_configs(tmp_path / "table_configs.json", configs)
    with open_append(tmp_path / "data.txt") as fh:
        append_line(fh, format_compute_sample([0, 1], 2.5))
        append_line(fh, format_compute_sample([1], 1.0))
        fh.write("0,1 3.")  # a kill in the middle of a write
        fh.flush()
    assert read_compute_data(tmp_path)[1] == [ComputeSample((0, 1), 2.5), ComputeSample((1,), 1.0)]
    assert "data.txt:3" in capsys.readouterr().err
    with open_append(tmp_path / "data.txt") as fh:  # resume
        append_line(fh, format_compute_sample([0], 0.5))
    assert read_compute_data(tmp_path)[1] == [ComputeSample((0, 1), 2.5), ComputeSample((1,), 1.0),
                                              ComputeSample((0,), 0.5)]


@pytest.mark.parametrize("text, line, fragments", [
    ("0 1.0\n0,1\n", 2, ["expected 2 or 3 fields", "got 1"]),
    ("0 1.0 2 3\n", 1, ["expected 2 or 3 fields", "got 4"]),
    ("0 1.0 2.0\n", 1, ["batch", "'2.0'"]),
    ("0 1.0 0\n", 1, ["batch 0 is not >= 1"]),
    ("0,a 1.0\n", 1, ["table index", "'a'"]),
    ("0,2 1.0\n", 1, ["table index 2 out of range", "2 tables"]),
    ("0 fast\n", 1, ["cost_ms", "'fast'"]),
    ("0 nan\n", 1, ["cost_ms", "'nan'"]),
    ("1 -0.5\n", 1, ["negative cost_ms -0.5"]),
])
def test_compute_data_malformed(tmp_path, text, line, fragments):
    write_table_configs(tmp_path / "table_configs.json", [cfg(dim=4), cfg(dim=8)])
    (tmp_path / "data.txt").write_text(text)
    expect_error(lambda: read_compute_data(tmp_path), tmp_path / "data.txt", *fragments, line=line)


def test_compute_data_missing_parts(tmp_path):
    d = tmp_path / "cc"
    expect_error(lambda: read_compute_data(d), d, "directory not found")
    d.mkdir()
    expect_error(lambda: read_compute_data(d), d / "table_configs.json", "file not found")
    write_table_configs(d / "table_configs.json", [cfg(dim=4), cfg()])
    expect_error(lambda: read_compute_data(d), d / "table_configs.json", "table 1", '"dim"')
    write_table_configs(d / "table_configs.json", [cfg(dim=4)])
    expect_error(lambda: read_compute_data(d), d / "data.txt", "file not found")


# --------------------------------------------------------------------------- comm cost data


def test_comm_data_round_trip(tmp_path, capsys):
    samples = [CommSample([64, 0], [0.0, 1.5], [0.25, 2.0], [0.5, 0.75]),
               CommSample([8, 12], [0.3, 0.0], [1.0, 1.0], [3.0, 4.0])]
    write_comm_data(tmp_path, samples)
    assert (tmp_path / "data.txt").read_text().splitlines()[0] == "64,0 0.0,1.5 0.25,2.0 0.5,0.75"
    assert read_comm_data(tmp_path) == samples
    assert read_comm_data(tmp_path, ndevices=2)[1].ndevices == 2
    with open_append(tmp_path / "data.txt") as fh:
        fh.write("4,4 0.0,0.0 1.0")  # torn
    assert read_comm_data(tmp_path) == samples
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
    expect_error(lambda: read_comm_data(tmp_path, ndevices), tmp_path / "data.txt", *fragments, line=line)


# --------------------------------------------------------------------------- run config
