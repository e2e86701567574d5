"""What the report's sections share: the readers of the files the steps wrote, and the cells' number formats."""

from __future__ import annotations

import json
from pathlib import Path

from neuroshard.eval.summary import AlgorithmRow, Summary
from neuroshard.formats.side_files import read_side_file


def load_json(path: Path):
    """The JSON in `path`; None when the file is missing or not JSON (the step did not run)."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def load_summary(path: Path) -> Summary | None:
    """The `summary.json` in `path` as a `Summary`; None when there is none."""
    data = load_json(path)
    return None if data is None else Summary.from_json(data)


def optional_side_file(path: Path, cls):
    """The side file's record, None when the step that writes it did not run."""
    return read_side_file(path, cls) if path.exists() else None


def rows_by_alg(summary: Summary | None) -> dict[str, AlgorithmRow]:
    """The summary's rows by algorithm (none without a summary)."""
    return {} if summary is None else {r.alg: r for r in summary.algorithms}


def fmt_ms(x) -> str:
    """A cell in ms ("-" for none)."""
    return "-" if x is None else f"{x:.2f}"


def signed_pct(x) -> str:
    """A signed percentage cell of a fraction ("-" for none)."""
    return "-" if x is None else f"{100 * x:+.1f}%"
