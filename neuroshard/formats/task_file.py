"""The task file (DESIGN §3): one task per line, `ids dims`, each a comma list."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from neuroshard.formats.io import (
    parse_int,
    parse_list,
    require_file,
    show_value,
    write_text_atomic,
)
from neuroshard.types.errors import InputError
from neuroshard.types.tables import Task

# --------------------------------------------------------------------------- task file


def read_tasks(path, num_tables: int | None = None) -> list[Task]:
    """Read a task file: one task per line, `ids dims` (two comma lists of equal length).

    `ids` are dataset table ids (checked against `num_tables` when given; may
    repeat); `dims` positive multiples of 4. Blank lines are skipped; a file
    without any task is an error.
    """
    path = Path(path)
    require_file(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text: {e.reason} at byte {e.start}") from None
    tasks = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise InputError(path, f"expected 2 fields \"ids dims\", got {len(fields)}: {show_value(line)}", n)
        ids = parse_list(path, n, fields[0], "table id", parse_int)
        dims = parse_list(path, n, fields[1], "dim", parse_int)
        if len(ids) != len(dims):
            raise InputError(path, f"{len(ids)} table ids but {len(dims)} dims", n)
        for tid in ids:
            if tid < 0 or (num_tables is not None and tid >= num_tables):
                bound = f" (dataset has {num_tables} tables)" if num_tables is not None else ""
                raise InputError(path, f"table id {tid} out of range{bound}", n)
        for d in dims:
            if d <= 0 or d % 4:
                raise InputError(path, f"dim {d} is not a positive multiple of 4", n)
        tasks.append(Task(tuple(ids), tuple(dims)))
    if not tasks:
        raise InputError(path, "no tasks in the file (expected one \"ids dims\" line per task)")
    return tasks


def write_tasks(path, tasks: Sequence[Task]) -> None:
    """Write a task file (atomic): one `ids dims` line per task."""
    lines = [",".join(map(str, t.table_ids)) + " " + ",".join(map(str, t.dims)) + "\n" for t in tasks]
    write_text_atomic(path, "".join(lines))
