"""The I/O every file format shares: atomic whole-file writes, append-only line files, run configs.

Whole-file writers are atomic (a uniquely named temp file in the target
directory, then `os.replace`), so a crash never leaves a half-written file
under the final name. Sample files are append-only, one complete line per
sample, flushed and fsynced per line; a line without its trailing newline
can only be the tail of a killed writer ("torn"), so readers skip it with a
warning and `open_append` cuts it off before appending. `check_run_config`
keeps a resumed run from mixing outputs made under other settings. The
helpers (`load_json`, `parse_int`, ...) raise `InputError` naming the file,
line and value in one line, for every reader of the package.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterable, Sequence

from neuroshard.types.errors import InputError

RUN_CONFIG = "config.json"


# --------------------------------------------------------------------------- atomic writes


@contextlib.contextmanager
def atomic_write(path, mode: str = "w"):
    """Write to a unique temp file beside `path`, then rename it over `path`."""
    path = os.fspath(path)
    if os.path.isdir(path):  # else os.replace reports the temp file's name
        raise InputError(path, "is a directory, expected a file path")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    # mkstemp makes the file 0600; give it the mode a plain open() would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path, obj) -> None:
    """Write `obj` as indented JSON (atomic); numpy/torch scalars become plain numbers."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, default=json_default)
        fh.write("\n")


def write_csv(path, header: Sequence[str], rows: Iterable[Sequence]) -> None:
    """Write a CSV file with a header (atomic); None becomes an empty cell, a float 6 significant digits."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in row])
    write_text_atomic(path, buf.getvalue())


def read_json(path):
    """A JSON file's content; InputError naming the file (and line) if missing or malformed."""
    return load_json(Path(path))


# --------------------------------------------------------------------------- small helpers


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def one_line(text: str, limit: int = 200) -> str:
    """First line of `text`, shortened: keeps error messages to one line."""
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return first if len(first) <= limit else first[:limit] + "..."


def show_value(value: str, limit: int = 60) -> str:
    """repr of an offending input value, shortened for error messages."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def require_file(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "file not found")
    if not path.is_file():
        raise InputError(path, "not a regular file")


def require_dir(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "directory not found")
    if not path.is_dir():
        raise InputError(path, "not a directory")


def write_text_atomic(path, text: str) -> None:
    with atomic_write(path, "w") as fh:
        fh.write(text)


def load_json(path: Path):
    require_file(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e.msg} (column {e.colno})", e.lineno) from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text: {e.reason} at byte {e.start}") from None


def read_model_file(path, cls, what: str, missing: str, ndevices: int | None = None):
    """A fitted model saved as JSON (`cls.from_json`, a codec record with an `ndevices`); InputError naming the
    file: `missing` (how to make one) when absent, "not a <what>" when malformed, and for a model fitted for
    other ranks than `ndevices` (a model whose `ndevices` is None is for any world size)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, f"no {what} here ({missing})")
    try:
        model = cls.from_json(load_json(path))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(path, f"not a {what}: {e}") from None
    if ndevices is not None and model.ndevices is not None and model.ndevices != ndevices:
        raise InputError(path, f"fitted for {model.ndevices} ranks, the plans are for {ndevices}")
    return model


def write_model_file(path, model) -> None:
    """Save a fitted model's record as JSON (atomic; parent folders made)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, model.to_json())


def parse_int(path, lineno: int, text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(path, f"{what}: not an integer: {show_value(text)}", lineno) from None


def parse_float(path, lineno: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, f"{what}: not a number: {show_value(text)}", lineno) from None
    if not math.isfinite(value):
        raise InputError(path, f"{what}: not a finite number: {show_value(text)}", lineno)
    return value


def parse_list(path, lineno: int, field: str, what: str, parse) -> list:
    """Parse a comma list like `3,17,402`; empty items (`3,,4`) are errors."""
    items = field.split(",")
    return [parse(path, lineno, item, what) for item in items]


def json_default(obj):
    # numpy / torch scalars in records (costs computed with numpy) -> plain Python numbers.
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def fmt_float(x: float) -> str:
    # repr is the shortest text that reads back to the same float: exact round trips.
    return repr(float(x))


# --------------------------------------------------------------------------- line files


def read_lines_tolerant(path) -> list[tuple[int, str]]:
    """Complete, non-blank lines of an append-only text file as (1-based line number, text).

    A last line without its trailing newline is a torn write of a killed run: it
    is dropped with one warning on stderr. Blank lines are skipped.
    """
    path = Path(path)
    require_file(path)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    if torn:
        warn(f"{path}:{len(lines) + 1}: ignoring torn last line (no trailing newline): "
              f"{show_value(torn.decode('utf-8', 'replace'))}")
    out = []
    for n, line in enumerate(lines, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(path, f"not UTF-8 text: {e.reason} at byte {e.start}", n) from None
        text = text.rstrip("\r")
        if text.strip():
            out.append((n, text))
    return out


def open_append(path, exclusive: bool = False) -> IO[str]:
    """Open an append-only line file for appending (text, UTF-8), creating it if missing.

    `exclusive`: hold an exclusive lock on it for as long as the handle is
    open; if another process holds it (a second collection into the same
    directory would interleave and double-count), InputError. If the file
    ends in a torn line (no trailing newline, left by a killed writer), that
    tail is truncated first, with a warning on stderr, so the next sample
    starts on its own line.
    """
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = open(path, "a", encoding="utf-8")
    if exclusive:
        try:
            fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.close()
            raise InputError(path.parent, "another collection is writing to this directory") from None
    try:
        _cut_torn_line(path)
    except BaseException:
        out.close()
        raise
    return out


def _cut_torn_line(path: Path) -> None:
    with open(path, "rb+") as fh:  # we only truncate, never rewrite
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                keep = _last_newline_end(fh, size)
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
                warn(f"{path}: truncated a torn last line ({size - keep} bytes without a trailing newline)")


def _last_newline_end(fh, size: int, block: int = 65536) -> int:
    """Offset just past the last b"\\n" in a binary file of `size` bytes (0 if none), reading backwards."""
    end = size
    while end > 0:
        start = max(0, end - block)
        fh.seek(start)
        chunk = fh.read(end - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


def append_line(fh: IO[str], line: str) -> None:
    """Append one line (+ newline) and make it durable: flush and fsync, so a kill loses at most this line."""
    if "\n" in line or "\r" in line:
        raise ValueError(f"append_line: line contains a newline: {line!r}")
    fh.write(line + "\n")
    fh.flush()
    os.fsync(fh.fileno())


# --------------------------------------------------------------------------- run config


def _normalise(obj):
    # A JSON round trip makes tuples lists and keys strings, as they read back from disk.
    return json.loads(json.dumps(obj))


def check_run_config(out_dir, config: dict) -> None:
    """Make `out_dir/config.json` record the settings of the run that writes `out_dir`.

    Missing: it is written (atomic). Present: it must equal `config`, so a
    resumed run never mixes samples made under other settings; otherwise
    InputError naming every differing key with both values.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RUN_CONFIG
    new = _normalise(config)
    if not path.exists():
        write_text_atomic(path, json.dumps(new, indent=2, sort_keys=True) + "\n")
        return
    old = load_json(path)
    if not isinstance(old, dict):
        raise InputError(path, f"expected a JSON object, got {type(old).__name__}")
    missing = "<missing>"
    diffs = [f"{k}: was {json.dumps(old.get(k, missing))}, now {json.dumps(new.get(k, missing))}"
             for k in sorted(set(old) | set(new)) if old.get(k, missing) != new.get(k, missing)]
    if diffs:
        raise InputError(path, "settings differ from the existing run in this directory ("
                         + "; ".join(diffs) + "); use the same settings or a new output directory")
