"""The one validation layer of settings (`neuroshard.checks`): flag parsers and checks, one-line errors."""

import pytest

from neuroshard.checks import check_float, check_range, parse_int_list, parse_range
from neuroshard.types.errors import ConfigError, NeuroShardError


def test_parsers():
    assert parse_int_list("0,1, 3", "--gpu_devices") == [0, 1, 3]
    assert parse_range("10,60", "--T_range") == (10, 60)
    with pytest.raises(NeuroShardError, match="--T_range"):
        parse_range("60,10", "--T_range")
    with pytest.raises(NeuroShardError, match="--gpu_devices"):
        parse_int_list("a,b", "--gpu_devices")


def test_range_checks_name_the_flag():
    assert check_range("--sleep_range", (0.0, 2.5), 0.0) == (0.0, 2.5)
    with pytest.raises(ConfigError, match="--sleep_range: must be >= 0"):
        check_range("--sleep_range", (-1.0, 2.0), 0.0)
    with pytest.raises(ConfigError, match="--T_range: low 5 > high 2"):
        check_range("--T_range", (5, 2), 1, cast=int)


def test_float_bounds_open_and_closed():
    assert check_float("--x", 1, 0.0, 1.0) == 1.0
    assert check_float("--x", 0.0, 0.0, 1.0, hi_open=True) == 0.0
    with pytest.raises(ConfigError, match="--x: must be < 1, got 1"):
        check_float("--x", 1.0, 0.0, 1.0, hi_open=True)
    with pytest.raises(ConfigError, match="--x: must be > 0, got 0"):
        check_float("--x", 0.0, 0.0, lo_open=True)
    with pytest.raises(ConfigError, match="--x: expected a finite number"):
        check_float("--x", float("nan"))
