"""The one validation layer for settings (flags and config fields).

Every config object's `validate()` and every script's flag check goes through
these helpers, so a bad value always ends in the same kind of one-line error,
`ConfigError("--name", "why, with the value")`: numbers must be finite and in
range, counts at least 1 where 0 makes no sense, choices from their list.
"""

from __future__ import annotations

import math
from typing import Iterable

from neuroshard.types.errors import ConfigError
from neuroshard.types.tables import dim_set


def check_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi] (bounds optional); bools and non-integral numbers are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or not math.isfinite(value):
        raise ConfigError(name, f"expected an integer, got {value!r}")
    value = int(value)
    if lo is not None and value < lo:
        raise ConfigError(name, f"must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ConfigError(name, f"must be <= {hi}, got {value}")
    return value


def check_float(name: str, value, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False) -> float:
    """`value` as a finite float with lo <= value (lo < value when `lo_open`) and value <= hi (value < hi when
    `hi_open`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(name, f"expected a finite number, got {value!r}")
    value = float(value)
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ConfigError(name, f"must be {'>' if lo_open else '>='} {lo:g}, got {value:g}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise ConfigError(name, f"must be {'<' if hi_open else '<='} {hi:g}, got {value:g}")
    return value


def check_choice(name: str, value, choices: Iterable) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(map(str, choices))}, got {value!r}")


def check_range(name: str, pair, lo: float, cast=float) -> tuple:
    """A (low, high) pair with lo <= low <= high, both finite."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise ConfigError(name, f"expected 'low,high', got {pair!r}")
    check = check_int if cast is int else check_float
    a, b = (check(name, x, lo) for x in pair)
    if a > b:
        raise ConfigError(name, f"low {a:g} > high {b:g}")
    return a, b


def parse_int_list(text: str, name: str) -> list[int]:
    """Parse '0,1,2' (a flag value) into ints; a one-line error names the flag."""
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise ConfigError(name, f"expected a comma list of integers, got {text!r}") from None


def parse_float_list(text: str, name: str, lo: float | None = None) -> list[float]:
    """Parse '0,0.5,1' (a flag value) into distinct finite floats >= `lo`; a one-line error names the flag."""
    try:
        values = [float(x) for x in str(text).split(",") if x.strip() != ""]
    except ValueError:
        raise ConfigError(name, f"expected a comma list of numbers, got {text!r}") from None
    if not values or len(set(values)) != len(values):
        raise ConfigError(name, f"expected distinct numbers, got {text!r}")
    return [check_float(name, v, lo) for v in values]


def parse_path_list(text: str | None, name: str) -> list[str]:
    """Parse 'a,b' (a flag value naming paths) into its paths (none for None); an empty entry is a one-line
    error naming the flag. Whether each path exists is for its reader to say (it names the path)."""
    if text is None:
        return []
    paths = [x.strip() for x in str(text).split(",")]
    if any(not x for x in paths):
        raise ConfigError(name, f"expected a comma list of paths, got {text!r}")
    return paths


def parse_range(text: str, name: str, cast=int) -> tuple:
    """Parse 'lo,hi' into a (lo, hi) pair with lo <= hi."""
    parts = text.split(",")
    try:
        lo, hi = (cast(p) for p in parts)
    except ValueError:
        raise ConfigError(name, f"expected 'lo,hi', got {text!r}") from None
    if lo > hi:
        raise ConfigError(name, f"lo {lo} > hi {hi}")
    return lo, hi


def check_gpu_ids(name: str, text: str) -> list[int]:
    """A comma list of distinct GPU ids >= 0 ("0,1,2,3")."""
    try:
        ids = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(name, f"expected a comma list of GPU ids, got {text!r}") from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise ConfigError(name, f"expected distinct GPU ids >= 0, got {text!r}")
    return ids


def check_max_dim(name: str, value) -> int:
    """A power of two >= 4 (the dim set halves from it down to 4)."""
    value = check_int(name, value, 4)
    try:
        dim_set(value)
    except ValueError as e:
        raise ConfigError(name, str(e)) from None
    return value


def check_output_file(name: str, path) -> None:
    """`path` can be written as a file: not a directory, and no part of its parent is a file."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        raise ConfigError(name, f"{path} is a directory, expected a file path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(name, f"cannot create {path}: {parent} is a file")
            break


def check_fields(config, min_int: dict | None = None, open_floats: Iterable[str] = (),
                 skip: Iterable[str] = ("seed",)) -> None:
    """Check every field of a settings dataclass, flag-named `--<field>`: floats finite and >= 0 (> 0
    for `open_floats`), ints >= 1 (or `min_int[name]`); `skip`ped fields are not checked."""
    from dataclasses import fields

    open_floats, skip = set(open_floats), set(skip)
    for f in fields(config):
        if f.name in skip:
            continue
        value = getattr(config, f.name)
        if f.type in ("float", float):
            check_float(f"--{f.name}", value, 0.0, lo_open=f.name in open_floats)
        else:
            check_int(f"--{f.name}", value, (min_int or {}).get(f.name, 1))
