"""The planning problem record: per-device memory from a flag, its JSON and flags round trips, its errors."""

import argparse

import pytest

from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import ConfigError


def parsed(*argv) -> Problem:
    parser = argparse.ArgumentParser()
    Problem.add_args(parser)
    return Problem.from_args(parser.parse_args(list(argv)))


def test_one_number_or_one_per_device():
    assert parsed("--max_mem", "2").max_mem == 2.0 and parsed("--max_mem", "2").caps == (2.0,) * 4
    p = parsed("--ndevices", "4", "--max_mem", "16,16,8,8")
    assert p.max_mem == (16.0, 16.0, 8.0, 8.0) and p.caps == p.max_mem and not p.uniform
    assert p.mem_text == "[16, 16, 8, 8] GB" and parsed("--max_mem", "1.5").mem_text == "1.5 GB"
    # equal values are one number: the same problem as identical devices
    assert parsed("--ndevices", "2", "--max_mem", "3,3") == Problem(2, 3.0)
    assert Problem(2, [1, 2]).max_mem == (1.0, 2.0)


def test_round_trips():
    p = Problem(3, (1.0, 2.0, 0.5), seed=7, constraints=TableConstraints(whole=(2, 0), colocate=((1, 3),)))
    assert p.to_json() == {"ndevices": 3, "max_mem": [1.0, 2.0, 0.5], "seed": 7,
                           "constraints": {"whole": [0, 2], "colocate": [[1, 3]]}}
    assert Problem.from_json(p.to_json()) == p
    assert Problem(4, 1.0).to_json() == {"ndevices": 4, "max_mem": 1.0, "seed": 0}  # files as before
    assert p.flags() == {"ndevices": 3, "max_mem": "1,2,0.5", "seed": 7, "local_world_size": None}
    assert parsed("--ndevices", "3", "--max_mem", "1,2,0.5", "--seed", "7") == Problem(3, (1.0, 2.0, 0.5), 7)
    hosts = parsed("--ndevices", "4", "--local_world_size", "2")
    assert hosts.to_json() == {"ndevices": 4, "max_mem": 4.0, "seed": 0, "local_world_size": 2}
    assert Problem.from_json(hosts.to_json()) == hosts and hosts.flags()["local_world_size"] == 2


def test_hosts_are_consecutive_ranks():
    assert Problem(4, 1.0, local_world_size=2).hosts == [(0, 1), (2, 3)]
    assert Problem(6, 1.0, local_world_size=3).hosts == [(0, 1, 2), (3, 4, 5)]
    assert Problem(4, 1.0).hosts == [(0, 1, 2, 3)]
    # one host of every device is the problem without hosts
    assert Problem(4, 1.0, local_world_size=4) == Problem(4, 1.0)


@pytest.mark.parametrize("argv, message", [
    (["--ndevices", "4", "--local_world_size", "3"], "--local_world_size: 3 devices per host do not divide the 4 "
                                                     "devices"),
    (["--ndevices", "4", "--local_world_size", "8"], "--local_world_size: must be <= 4, got 8"),
    (["--ndevices", "4", "--local_world_size", "0"], "--local_world_size: must be >= 1, got 0"),
])
def test_bad_hosts_are_a_one_line_error(argv, message):
    with pytest.raises(ConfigError, match=message):
        parsed(*argv)


@pytest.mark.parametrize("argv, message", [
    (["--max_mem", "0"], "--max_mem: must be > 0, got 0"),
    (["--ndevices", "4", "--max_mem", "1,2,3"], "--max_mem: 3 values for 4 devices"),
    (["--max_mem", "1,x"], "--max_mem: expected GB per device as a number or a comma list, got '1,x'"),
    (["--ndevices", "2", "--max_mem", "1,inf"], "--max_mem: expected a finite number of GB, got inf"),
    (["--ndevices", "2", "--max_mem", "1,-2"], "--max_mem: must be > 0, got -2"),
])
def test_bad_memory_is_a_one_line_error(argv, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parsed(*argv)


def test_what_knows_one_memory_size_says_so():
    assert Problem(2, 1.0).single_mem("the compute collection") == 1.0
    with pytest.raises(ConfigError, match=r"--max_mem: the compute collection takes one memory size for every "
                                          r"device, got \[1, 2\] GB"):
        Problem(2, (1.0, 2.0)).single_mem("the compute collection")
