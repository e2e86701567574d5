"""The package's errors: each names what was wrong (a file and line, a setting, a table) in one line.

Scripts print them as `error: <message>` and exit 1 (`cli.run_main`); anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Sequence


class NeuroShardError(Exception):
    """Base of all errors this package raises on purpose (reported in one line)."""


class InputError(NeuroShardError):
    """Malformed or missing input: names the file, the line (if any) and the value."""

    def __init__(self, path, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


class OutOfMemoryError(NeuroShardError):
    """A table (or a plan) does not fit within the per-device memory cap."""

    def __init__(self, message: str, table: int | None = None, size: float | None = None,
                 max_mem: float | None = None, used: Sequence[float] | None = None):
        self.table = table
        self.size = size
        self.max_mem = max_mem
        self.used = list(used) if used is not None else None
        super().__init__(message)


class InvalidPlanError(NeuroShardError):
    """A plan that breaks the rules: bad indices, tables placed twice or never, illegal splits."""


class ConfigError(NeuroShardError):
    """A bad setting (a flag or a config field): names the setting and the value."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(f"{name}: {message}")
