"""Readers and writers of every NeuroShard file format (DESIGN.md §3).

One reader and one writer per format:

=====================  =========================================  ===========================
format                 reader                                     writer
=====================  =========================================  ===========================
table configs          read_table_configs, read_dataset_configs   write_table_configs
dataset dir            read_dataset                               write_dataset
public DLRM file       read_public_dlrm                           write_public_dlrm
task file              read_tasks                                 write_tasks
compute cost data dir  read_compute_data                          write_compute_data, or
                                                                  open_append + append_line +
                                                                  format_compute_sample
comm cost data dir     read_comm_data                             write_comm_data, or
                                                                  open_append + append_line +
                                                                  format_comm_sample
plans                  read_plans                                 write_plans (+ plan_view)
TorchRec plan (+JSON)  read_torchrec_plan                         write_torchrec_plan
user table list        read_user_tables                           (written by the user)
noise floor JSON       read_noise_floor (also drift ratios)       write_noise_floor
measurement log        read_measurements                          open_append + append_line +
                                                                  format_measurement
run config.json        check_run_config (reads, compares, writes)
=====================  =========================================  ===========================

Every reader raises `InputError(path, message, line)` on malformed input; the
message is one line naming the offending value. Whole-file writers are atomic
(a uniquely named temp file in the target directory, then `os.replace`), so a
crash never leaves a half-written file under the final name. Sample files
(`data.txt` of the cost data dirs) are instead append-only, one complete line
per sample, flushed and fsynced per line; a line without its trailing newline
can only be the tail of a killed writer ("torn"), so readers skip it with a
warning and `open_append` cuts it off before appending.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Sequence

from .types import (DEFAULT_BINS, NUM_BINS, PLAN_STATUSES, CostBreakdown, InputError, InvalidPlanError, Plan,
                    PlanRecord, ShardTable, Task, TableConfig, apply_column_steps, can_split, size_gb)

TABLE_CONFIGS = "table_configs.json"
DATA_PT = "data.pt"
DATA_TXT = "data.txt"
RUN_CONFIG = "config.json"
NOISE_JSON = "noise_floor.json"
NOISE_TARGETS = {"compute": ("cost",), "comm": ("fw", "bw")}

if TYPE_CHECKING:
    import torch
# Elements per chunk when scanning big tensors (64 MB of int64): bounds the
# temporaries of the monotonicity check on the 56 M offsets of the public file.
_CHUNK = 8 * 2**20


# =========================================================================== atomic writes


@contextlib.contextmanager
def atomic_write(path, mode: str = "w"):
    """Write to a unique temp file beside `path`, then rename it over `path`."""
    path = os.fspath(path)
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
        json.dump(obj, fh, indent=2, default=_json_default)
        fh.write("\n")


def read_json(path):
    """A JSON file's content; InputError naming the file (and line) if missing or malformed."""
    return _load_json(Path(path))


# =========================================================================== small helpers


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _one_line(text: str, limit: int = 200) -> str:
    """First line of `text`, shortened: keeps error messages to one line."""
    first = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return first if len(first) <= limit else first[:limit] + "..."


def _show(value: str, limit: int = 60) -> str:
    """repr of an offending input value, shortened for error messages."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def _require_file(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "file not found")
    if not path.is_file():
        raise InputError(path, "not a regular file")


def _require_dir(path: Path) -> None:
    if not path.exists():
        raise InputError(path, "directory not found")
    if not path.is_dir():
        raise InputError(path, "not a directory")


def _write_text_atomic(path, text: str) -> None:
    with atomic_write(path, "w") as fh:
        fh.write(text)


def _load_json(path: Path):
    _require_file(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e.msg} (column {e.colno})", e.lineno) from None
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text: {e.reason} at byte {e.start}") from None


def _parse_int(path, lineno: int, text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(path, f"{what}: not an integer: {_show(text)}", lineno) from None


def _parse_float(path, lineno: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, f"{what}: not a number: {_show(text)}", lineno) from None
    if not math.isfinite(value):
        raise InputError(path, f"{what}: not a finite number: {_show(text)}", lineno)
    return value


def _parse_list(path, lineno: int, field: str, what: str, parse) -> list:
    """Parse a comma list like `3,17,402`; empty items (`3,,4`) are errors."""
    items = field.split(",")
    return [parse(path, lineno, item, what) for item in items]


def _json_default(obj):
    # numpy / torch scalars in records (costs computed with numpy) -> plain Python numbers.
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _fmt_float(x: float) -> str:
    # repr is the shortest text that reads back to the same float: exact round trips.
    return repr(float(x))


# =========================================================================== table configs


def read_table_configs(path) -> list[TableConfig]:
    """Read a `table_configs.json`: a JSON list of `{"row", "pooling_factor", "bin_0".."bin_16"[, "dim"]}`."""
    path = Path(path)
    data = _load_json(path)
    if not isinstance(data, list):
        raise InputError(path, f"expected a JSON list of table objects, got {type(data).__name__}")
    configs = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise InputError(path, f"table {i}: expected a JSON object, got {_show(json.dumps(entry))}")
        try:
            configs.append(TableConfig.from_json(entry))
        except KeyError as e:
            raise InputError(path, f"table {i}: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise InputError(path, f"table {i}: {_one_line(str(e))}") from None
    return configs


def read_dataset_configs(path) -> list[TableConfig]:
    """The table configs of a dataset: `path` is a dataset dir or its `table_configs.json`."""
    path = Path(path)
    return read_table_configs(path / TABLE_CONFIGS if path.is_dir() else path)


def write_table_configs(path, configs: Sequence[TableConfig]) -> None:
    """Write `configs` as a `table_configs.json` (atomic), one table object per line."""
    body = ",\n".join(" " + json.dumps(c.to_json()) for c in configs)
    _write_text_atomic(path, "[\n" + body + "\n]\n" if configs else "[]\n")


# =========================================================================== torch files


def _torch_load(path: Path, mmap: bool, name=None):
    """torch.load with tensors only (no arbitrary pickles); memory-mapped where the format allows.

    mmap needs the zip format of torch >= 1.6; older (legacy) files fall back to
    a normal load, which reads everything into memory. `name`: the file to
    blame in errors (the user's file when `path` is a decompressed copy).
    """
    import torch

    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError as e:
            if not mmap or "mmap" not in str(e):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle, zip and torch errors all mean "not a valid file"
        reason = f"{type(e).__name__}: {_one_line(str(e))}"
        text = str(e)
        if "Weights only load failed" in text:
            # torch's message is a paragraph; the cause is the line after "WeightsUnpickler error:".
            cause = text.split("WeightsUnpickler error:", 1)[-1] if "WeightsUnpickler error:" in text else ""
            reason = ("not a torch.save file of plain tensors/lists/dicts (weights-only unpickling: "
                      f"{_one_line(cause) or 'failed'})")
        raise InputError(name or path, f"cannot load torch file: {reason}") from None


def _int_vector_problem(x, what: str) -> str | None:
    import torch

    if not isinstance(x, torch.Tensor):
        return f"{what} is a {type(x).__name__}, expected a tensor"
    if x.dtype not in (torch.int32, torch.int64):
        return f"{what} has dtype {x.dtype}, expected int32 or int64"
    if x.dim() != 1:
        return f"{what} has shape {list(x.shape)}, expected 1-D"
    return None


def _offsets_problem(offsets: torch.Tensor, n_indices: int, n_bags: int, what: str) -> str | None:
    """Check that `offsets` (1-D) has n_bags+1 entries, starts at 0, ends at n_indices, never decreases.

    Scans in chunks so a 56 M-entry offsets tensor (memory-mapped) needs no full temporary.
    """
    if offsets.numel() != n_bags + 1:
        return f"{what}: length {offsets.numel()}, expected {n_bags + 1}"
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0:
        return f"{what}: first offset is {first}, expected 0"
    if last != n_indices:
        return f"{what}: last offset is {last}, expected the number of indices {n_indices}"
    for start in range(0, offsets.numel() - 1, _CHUNK):
        chunk = offsets[start:start + _CHUNK + 1]  # one overlapping element joins the chunks
        bad = (chunk[1:] < chunk[:-1]).nonzero()
        if bad.numel():
            p = start + int(bad[0, 0])
            return (f"{what}: not monotone at position {p + 1}: "
                    f"{int(offsets[p + 1])} after {int(offsets[p])}")
    return None


# =========================================================================== dataset dir


@dataclass
class Dataset:
    """A dataset dir in memory: per-table configs and FBGEMM-style lookups.

    `indices[t]`: 1-D int tensor of the rows table t looks up, all samples one
    after another; `offsets[t]`: 1-D int tensor of length B+1 starting at 0,
    sample b uses `indices[t][offsets[t][b]:offsets[t][b+1]]`.
    """

    configs: list[TableConfig]
    indices: list[torch.Tensor]
    offsets: list[torch.Tensor]

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def batch_size(self) -> int:
        """B, the number of samples (bags) per table; the same for all tables."""
        sizes = {len(o) - 1 for o in self.offsets}
        if len(sizes) != 1:
            raise InputError("<dataset>", f"tables differ in batch size: {sorted(sizes)}")
        return sizes.pop()

    def lookups(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices, offsets) of table t; offsets start at 0."""
        return self.indices[t], self.offsets[t]


def _dataset_problem(configs: Sequence[TableConfig], indices, offsets, validate: bool) -> str | None:
    """Why (indices, offsets) do not form a valid dataset for `configs`, or None if they do."""
    if not isinstance(indices, (list, tuple)) or not isinstance(offsets, (list, tuple)):
        return "\"indices\" and \"offsets\" must be lists of tensors"
    if len(indices) != len(configs) or len(offsets) != len(configs):
        return (f"{len(indices)} index tensors and {len(offsets)} offset tensors "
                f"for {len(configs)} tables in {TABLE_CONFIGS}")
    batch = None
    for t, (idx, off) in enumerate(zip(indices, offsets)):
        problem = (_int_vector_problem(idx, f"table {t}: indices")
                   or _int_vector_problem(off, f"table {t}: offsets"))
        if problem:
            return problem
        if batch is None:
            batch = off.numel() - 1
        if off.numel() - 1 != batch:
            return f"table {t}: batch size {off.numel() - 1}, table 0 has {batch}"
        problem = _offsets_problem(off, idx.numel(), batch, f"table {t}: offsets")
        if problem:
            return problem
        if validate and idx.numel():
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0:
                return f"table {t}: negative index {lo}"
            if hi >= configs[t].row:
                return f"table {t}: index {hi} >= row {configs[t].row}"
    if batch is not None and batch < 1:
        return f"batch size {batch}, expected at least 1"
    return None


def read_dataset(dataset_dir, validate: bool = True) -> Dataset:
    """Read a dataset dir (`table_configs.json` + `data.pt`).

    Shapes, dtypes, batch sizes and offsets (length B+1, start 0, end at the
    number of indices, non-decreasing) are always checked; with `validate`,
    also that every index lies in [0, row) of its table (one pass over all
    indices). `data.pt` is memory-mapped where possible, so a large dataset is
    paged in on use rather than read up front.
    """
    dataset_dir = Path(dataset_dir)
    _require_dir(dataset_dir)
    configs = read_table_configs(dataset_dir / TABLE_CONFIGS)
    data_path = dataset_dir / DATA_PT
    _require_file(data_path)
    data = _torch_load(data_path, mmap=True)
    if not isinstance(data, dict) or "indices" not in data or "offsets" not in data:
        raise InputError(data_path, "expected a dict with keys \"indices\" and \"offsets\"")
    problem = _dataset_problem(configs, data["indices"], data["offsets"], validate)
    if problem:
        raise InputError(data_path, problem)
    return Dataset(configs, list(data["indices"]), list(data["offsets"]))


def _compact(x: torch.Tensor) -> torch.Tensor:
    """`x` itself if it owns its storage exactly, else a compact copy.

    torch.save writes a view's whole storage: a table sliced out of the public
    file's 887 M indices would otherwise drag all of them into data.pt.
    """
    import torch

    if x.is_contiguous() and x.untyped_storage().nbytes() == x.numel() * x.element_size():
        return x
    return x.clone(memory_format=torch.contiguous_format)


def write_dataset(dataset_dir, configs: Sequence[TableConfig], indices: Sequence[torch.Tensor],
                  offsets: Sequence[torch.Tensor]) -> None:
    """Write a dataset dir: `table_configs.json` and `data.pt` (both atomic).

    Raises ValueError if the tensors do not form a valid dataset for `configs`
    (same checks as `read_dataset(validate=True)`), so a bad dataset is never written.
    """
    import torch

    dataset_dir = Path(dataset_dir)
    problem = _dataset_problem(configs, list(indices), list(offsets), validate=True)
    if problem:
        raise ValueError(f"write_dataset: {problem}")
    dataset_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(dataset_dir / DATA_PT, "wb") as fh:
        torch.save({"indices": [_compact(x) for x in indices],
                    "offsets": [_compact(x) for x in offsets]}, fh)
    write_table_configs(dataset_dir / TABLE_CONFIGS, configs)


# =========================================================================== public DLRM file


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def read_public_dlrm(path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Read the public DLRM dataset file: `(indices, offsets, lengths)`.

    `lengths` is [T, B]; `offsets` has T*B+1 entries indexing the flat 1-D
    `indices` of all tables one after another (table t, sample b is bag t*B+b).

    Memory: the full file holds about 887 M int64 indices (~7 GB). A `.pt` is
    memory-mapped (no copy in RAM; pages load as they are touched). A gzip
    file (detected by its magic bytes, normally `.pt.gz`) is first decompressed
    in 16 MB chunks to a uniquely named file in the system temp dir (`$TMPDIR`,
    needs ~8 GB free for the full file), memory-mapped, and unlinked at once:
    the mapping keeps the data readable and the disk space is freed when the
    tensors are released.

    Checked here (cheaply, chunk by chunk, no full copies): the tuple layout,
    dtypes, shapes, and offsets (start 0, end at len(indices), non-decreasing).
    Not checked: that `lengths` equals the offsets' differences and that
    indices are >= 0 -- both need a pass over the data, which the per-table
    processing does anyway (`check_public_table` does it for one table).
    """
    path = Path(path)
    _require_file(path)
    if _is_gzip(path):
        fd, tmp = tempfile.mkstemp(prefix="neuroshard_dlrm_", suffix=".pt")
        try:
            try:
                with os.fdopen(fd, "wb") as out, gzip.open(path, "rb") as src:
                    shutil.copyfileobj(src, out, 16 * 2**20)
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                if isinstance(e, OSError) and e.errno is not None:
                    # A real I/O error (disk full...), not a bad file: say where the copy went.
                    raise OSError(e.errno, f"{e.strerror} while decompressing to {tmp} (set TMPDIR "
                                  "to a folder with room for the uncompressed file)", str(path)) from e
                raise InputError(path, f"corrupt gzip file: {_one_line(str(e))}") from None
            data = _torch_load(Path(tmp), mmap=True, name=path)
        finally:
            os.unlink(tmp)
    else:
        data = _torch_load(path, mmap=True)
    problem = _public_problem(data)
    if problem:
        raise InputError(path, problem)
    return data[0], data[1], data[2]


def _public_problem(data) -> str | None:
    import torch

    if not isinstance(data, (tuple, list)) or len(data) != 3:
        kind = type(data).__name__ + (f" of length {len(data)}" if isinstance(data, (tuple, list)) else "")
        return f"expected a tuple (indices, offsets, lengths), got a {kind}"
    indices, offsets, lengths = data
    problem = (_int_vector_problem(indices, "indices") or _int_vector_problem(offsets, "offsets"))
    if problem:
        return problem
    if not isinstance(lengths, torch.Tensor) or lengths.dtype not in (torch.int32, torch.int64):
        return "lengths must be an int32/int64 tensor"
    if lengths.dim() != 2:
        return f"lengths has shape {list(lengths.shape)}, expected [T, B]"
    T, B = lengths.shape
    return _offsets_problem(offsets, indices.numel(), T * B, f"offsets (T={T}, B={B})")


def check_public_table(path, t: int, indices: torch.Tensor, offsets: torch.Tensor,
                       lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Slice and fully check table t of a public file: returns its (indices, offsets from 0).

    Checks what `read_public_dlrm` leaves out for this table only: lengths match
    the offsets and no index is negative. Raises InputError naming `path`.
    """
    B = lengths.shape[1]
    off = offsets[t * B:(t + 1) * B + 1]
    start, end = int(off[0]), int(off[-1])
    idx = indices[start:end]
    local = off - start
    diff = local[1:] - local[:-1]
    bad = (diff != lengths[t]).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise InputError(path, f"table {t}, sample {b}: lengths says {int(lengths[t, b])}, "
                               f"offsets say {int(diff[b])}")
    if idx.numel() and int(idx.min()) < 0:
        raise InputError(path, f"table {t}: negative index {int(idx.min())}")
    return idx, local


def write_public_dlrm(path, indices: torch.Tensor, offsets: torch.Tensor, lengths: torch.Tensor) -> None:
    """Write `(indices, offsets, lengths)` in the public file layout (atomic); gzip if the name ends in `.gz`."""
    import torch

    path = Path(path)
    problem = _public_problem((indices, offsets, lengths))
    if problem:
        raise ValueError(f"write_public_dlrm: {problem}")
    with atomic_write(path, "wb") as fh:
        if path.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb") as gz:
                torch.save((indices, offsets, lengths), gz)
        else:
            torch.save((indices, offsets, lengths), fh)


# =========================================================================== line files


def read_lines_tolerant(path) -> list[tuple[int, str]]:
    """Complete, non-blank lines of an append-only text file as (1-based line number, text).

    A last line without its trailing newline is a torn write of a killed run: it
    is dropped with one warning on stderr. Blank lines are skipped.
    """
    path = Path(path)
    _require_file(path)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    if torn:
        _warn(f"{path}:{len(lines) + 1}: ignoring torn last line (no trailing newline): "
              f"{_show(torn.decode('utf-8', 'replace'))}")
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
                _warn(f"{path}: truncated a torn last line ({size - keep} bytes without a trailing newline)")


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


# =========================================================================== task file


def read_tasks(path, num_tables: int | None = None) -> list[Task]:
    """Read a task file: one task per line, `ids dims` (two comma lists of equal length).

    `ids` are dataset table ids (checked against `num_tables` when given; may
    repeat); `dims` positive multiples of 4. Blank lines are skipped; a file
    without any task is an error.
    """
    path = Path(path)
    _require_file(path)
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
            raise InputError(path, f"expected 2 fields \"ids dims\", got {len(fields)}: {_show(line)}", n)
        ids = _parse_list(path, n, fields[0], "table id", _parse_int)
        dims = _parse_list(path, n, fields[1], "dim", _parse_int)
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
    _write_text_atomic(path, "".join(lines))


# =========================================================================== compute cost data


def format_compute_sample(ids: Sequence[int], cost_ms: float) -> str:
    """One compute sample as a `data.txt` line (no newline): `i1,i2,..,ik cost_ms`."""
    if not ids:
        raise ValueError("a compute sample needs at least one table")
    return ",".join(str(int(i)) for i in ids) + " " + _fmt_float(cost_ms)


def read_compute_data(data_dir) -> tuple[list[TableConfig], list[tuple[tuple[int, ...], float]]]:
    """Read a compute cost data dir: the augmented table list and the samples.

    `table_configs.json` lists every table with its `"dim"`; `data.txt` has one
    sample per line, `i1,i2,..,ik cost_ms` (indices into that list, the
    tables of one shard; its measured forward+backward time in ms, >= 0).
    A torn last line is skipped with a warning.
    """
    data_dir = Path(data_dir)
    _require_dir(data_dir)
    cfg_path = data_dir / TABLE_CONFIGS
    configs = read_table_configs(cfg_path)
    for i, c in enumerate(configs):
        if c.dim is None:
            raise InputError(cfg_path, f"table {i}: missing \"dim\" (a compute data dir lists tables with dims)")
    path = data_dir / DATA_TXT
    samples = []
    for n, line in read_lines_tolerant(path):
        fields = line.split()
        if len(fields) != 2:
            raise InputError(path, f"expected 2 fields \"ids cost_ms\", got {len(fields)}: {_show(line)}", n)
        ids = _parse_list(path, n, fields[0], "table index", _parse_int)
        for i in ids:
            if not 0 <= i < len(configs):
                raise InputError(path, f"table index {i} out of range ({TABLE_CONFIGS} has {len(configs)} tables)", n)
        cost = _parse_float(path, n, fields[1], "cost_ms")
        if cost < 0:
            raise InputError(path, f"negative cost_ms {fields[1]}", n)
        samples.append((tuple(ids), cost))
    return configs, samples


def write_compute_data(data_dir, configs: Sequence[TableConfig],
                       samples: Sequence[tuple[Sequence[int], float]]) -> None:
    """Write a whole compute cost data dir (atomic per file); collection appends instead."""
    if any(c.dim is None for c in configs):
        raise ValueError("write_compute_data: every table needs a dim")
    write_table_configs(Path(data_dir) / TABLE_CONFIGS, configs)
    _write_text_atomic(Path(data_dir) / DATA_TXT,
                       "".join(format_compute_sample(ids, c) + "\n" for ids, c in samples))


# =========================================================================== comm cost data


@dataclass
class CommSample:
    """One all-to-all measurement over `ndevices` ranks (each list has one entry per rank).

    `dims`: per-device sum of embedding dims; `sleeps`: per-device start delay
    (ms); `fw`, `bw`: measured forward / backward all-to-all time (ms).
    """

    dims: list[int]
    sleeps: list[float]
    fw: list[float]
    bw: list[float]

    @property
    def ndevices(self) -> int:
        return len(self.dims)


def format_comm_sample(sample: CommSample) -> str:
    """One comm sample as a `data.txt` line (no newline): `dims sleeps fw bw`, four comma lists."""
    n = len(sample.dims)
    if not n or any(len(x) != n for x in (sample.sleeps, sample.fw, sample.bw)):
        raise ValueError(f"format_comm_sample: lists of unequal or zero length: {sample}")
    return " ".join([",".join(str(int(d)) for d in sample.dims),
                     *(",".join(_fmt_float(v) for v in xs) for xs in (sample.sleeps, sample.fw, sample.bw))])


def read_comm_data(data_dir, ndevices: int | None = None) -> list[CommSample]:
    """Read a comm cost data dir's `data.txt`: lines `dims sleeps fw bw`.

    Each field is a comma list of length `ndevices` (when not given, the first
    sample's length, and every line must agree). Dims are multiples of 4 (sums
    of table dims; 0 for an empty device); sleeps and times finite and >= 0 (ms).
    A torn last line is skipped with a warning.
    """
    data_dir = Path(data_dir)
    _require_dir(data_dir)
    path = data_dir / DATA_TXT
    samples = []
    for n, line in read_lines_tolerant(path):
        fields = line.split()
        if len(fields) != 4:
            raise InputError(path, f"expected 4 fields \"dims sleeps fw bw\", got {len(fields)}: {_show(line)}", n)
        dims = _parse_list(path, n, fields[0], "dim", _parse_int)
        sleeps = _parse_list(path, n, fields[1], "sleep", _parse_float)
        fw = _parse_list(path, n, fields[2], "fw", _parse_float)
        bw = _parse_list(path, n, fields[3], "bw", _parse_float)
        lengths = [len(dims), len(sleeps), len(fw), len(bw)]
        if len(set(lengths)) != 1:
            raise InputError(path, f"lists of unequal length (dims, sleeps, fw, bw): {lengths}", n)
        if ndevices is None:
            ndevices = len(dims)
        elif len(dims) != ndevices:
            raise InputError(path, f"sample has {len(dims)} devices, expected {ndevices}", n)
        for d in dims:
            if d < 0 or d % 4:
                raise InputError(path, f"dim sum {d} is not a non-negative multiple of 4", n)
        for what, values in (("sleep", sleeps), ("fw", fw), ("bw", bw)):
            bad = [v for v in values if v < 0]
            if bad:
                raise InputError(path, f"negative {what} {bad[0]!r} (ms)", n)
        samples.append(CommSample(dims, sleeps, fw, bw))
    return samples


def write_comm_data(data_dir, samples: Sequence[CommSample]) -> None:
    """Write a whole comm cost data dir's `data.txt` (atomic); collection appends instead."""
    _write_text_atomic(Path(data_dir) / DATA_TXT, "".join(format_comm_sample(s) + "\n" for s in samples))


# =========================================================================== run config


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
        _write_text_atomic(path, json.dumps(new, indent=2, sort_keys=True) + "\n")
        return
    old = _load_json(path)
    if not isinstance(old, dict):
        raise InputError(path, f"expected a JSON object, got {type(old).__name__}")
    missing = "<missing>"
    diffs = [f"{k}: was {json.dumps(old.get(k, missing))}, now {json.dumps(new.get(k, missing))}"
             for k in sorted(set(old) | set(new)) if old.get(k, missing) != new.get(k, missing)]
    if diffs:
        raise InputError(path, "settings differ from the existing run in this directory ("
                         + "; ".join(diffs) + "); use the same settings or a new output directory")


# =========================================================================== plans


def plan_view(tables: Sequence[ShardTable], plan: Plan) -> list[dict]:
    """Readable per-original-table view of a plan.

    `tables`: the task's tables before any split (origin = position). Returns
    `[{"table": origin, "shards": [{"dim": d, "device": r}, ...]}, ...]` in
    origin order; the shards of a split table in post-split table order.
    Raises InvalidPlanError if a post-split table is placed never, twice, or
    is out of range.
    """
    split = apply_column_steps(tables, plan.column_steps)
    device_of: dict[int, int] = {}
    for r, shard in enumerate(plan.shards):
        for i in shard:
            if not 0 <= i < len(split):
                raise InvalidPlanError(f"device {r}: table {i} out of range (0..{len(split) - 1})")
            if i in device_of:
                raise InvalidPlanError(f"table {i} placed on devices {device_of[i]} and {r}")
            device_of[i] = r
    missing = [i for i in range(len(split)) if i not in device_of]
    if missing:
        raise InvalidPlanError(f"tables {missing} are placed on no device")
    view = [{"table": t.origin, "shards": []} for t in tables]
    for i, t in enumerate(split):
        view[t.origin]["shards"].append({"dim": t.dim, "device": device_of[i]})
    return view


def write_plans(path, records: Sequence[PlanRecord]) -> None:
    """Write plan records as JSON (atomic): a JSON list, one record per line, its "view" one
    original table per line, so the file reads well and diffs well."""
    chunks = []
    for rec in records:
        d = rec.to_json()
        view = d.pop("view", None)
        head = json.dumps(d, default=_json_default)
        if view is None:
            chunks.append(" " + head)
            continue
        rows = ",\n".join("   " + json.dumps(v, default=_json_default) for v in view)
        body = "[\n" + rows + "\n  ]" if view else "[]"
        chunks.append(" " + head[:-1] + ',\n  "view": ' + body + "}")
    _write_text_atomic(path, "[\n" + ",\n".join(chunks) + "\n]\n" if chunks else "[]\n")


def read_plans(path) -> list[PlanRecord]:
    """Read plan records written by `write_plans` (or eval.py's results.json)."""
    path = Path(path)
    data = _load_json(path)
    if not isinstance(data, list):
        raise InputError(path, f"expected a JSON list of plan records, got {type(data).__name__}")
    return [_record_from_json(path, k, rec) for k, rec in enumerate(data)]


def _record_from_json(path: Path, k: int, rec) -> PlanRecord:
    if not isinstance(rec, dict):
        raise InputError(path, f"record {k}: expected a JSON object")
    task = rec.get("task")
    if isinstance(task, bool) or not isinstance(task, int) or task < 0:
        raise InputError(path, f"record {k}: \"task\" must be a non-negative integer, got {json.dumps(task)}")
    where = f"record {k} (task {task})"
    alg = rec.get("alg")
    if not isinstance(alg, str) or not alg:
        raise InputError(path, f"{where}: \"alg\" must be an algorithm name, got {json.dumps(alg)}")
    if "plan" not in rec:
        raise InputError(path, f"{where}: missing \"plan\"")
    status = rec.get("status", "ok" if rec["plan"] is not None else None)
    if status not in PLAN_STATUSES:
        raise InputError(path, f"{where}: \"status\" must be one of {', '.join(PLAN_STATUSES)}, "
                               f"got {json.dumps(status)}")
    plan = None if rec["plan"] is None else _plan_from_json(path, where, rec["plan"])
    if (plan is None) != (status != "ok"):
        raise InputError(path, f"{where}: status {status!r} with "
                               f"{'no plan' if plan is None else 'a plan'}")
    try:
        estimate = None if rec.get("estimate") is None else CostBreakdown.from_json(rec["estimate"])
        measured = None if rec.get("measured") is None else CostBreakdown.from_json(rec["measured"])
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(path, f"{where}: malformed cost breakdown ({type(e).__name__}: {e})") from None
    return PlanRecord(task=task, alg=alg, status=status, message=rec.get("message"), plan=plan,
                      estimate=estimate, search_ms=rec.get("search_ms"), num_tables=rec.get("num_tables"),
                      view=rec.get("view"), measured=measured, e2e=rec.get("e2e"),
                      repeat_costs=rec.get("repeat_costs"))


def _plan_from_json(path, where: str, d) -> Plan:
    if not isinstance(d, dict):
        raise InputError(path, f"{where}: \"plan\" must be an object, got {_show(json.dumps(d))}")
    steps, shards = d.get("column_steps"), d.get("shards")

    def int_list(x):
        return isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in x)

    if not int_list(steps):
        raise InputError(path, f"{where}: \"column_steps\" must be a list of table indices, "
                               f"got {_show(json.dumps(steps))}")
    if not isinstance(shards, list) or not all(int_list(s) for s in shards):
        raise InputError(path, f"{where}: \"shards\" must be a list of lists of table indices, "
                               f"got {_show(json.dumps(shards))}")
    return Plan.from_json(d)


# =========================================================================== TorchRec plans


def write_torchrec_plan(path, sharding_plan, view: dict) -> list[Path]:
    """Write a TorchRec `ShardingPlan` with `torch.save` to `path` and its readable `view` as JSON beside it
    (`path` with the suffix `.json`), both atomic. Returns the two paths."""
    import torch

    path = Path(path)
    json_path = path.with_suffix(".json")
    if json_path == path:
        raise InputError(path, "the TorchRec plan file needs a suffix other than .json (e.g. plan.pt)")
    with atomic_write(path, "wb") as fh:
        torch.save(sharding_plan, fh)
    # one table per line, so the file reads and diffs well
    head = {k: v for k, v in view.items() if k != "modules"}
    modules = ",\n".join(f"  {json.dumps(m)}: [\n" + ",\n".join("   " + json.dumps(t, default=_json_default)
                                                                 for t in tables) + "\n  ]"
                         for m, tables in view.get("modules", {}).items())
    text = json.dumps(head)[:-1] + (", " if head else "") + '"modules": {\n' + modules + "\n }}\n"
    json.loads(text)  # the hand-made layout must still be JSON
    _write_text_atomic(json_path, text)
    return [path, json_path]


def read_torchrec_plan(path):
    """The `ShardingPlan` of a file written by `write_torchrec_plan` (needs torchrec; a full unpickle,
    so only for files you trust, as with any `torch.load(weights_only=False)`)."""
    import torch

    path = Path(path)
    _require_file(path)
    try:
        plan = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - pickle, zip and import errors all mean "not a plan file we can read"
        raise InputError(path, f"cannot load TorchRec plan: {type(e).__name__}: {_one_line(str(e))}") from None
    if not hasattr(plan, "plan") or not isinstance(plan.plan, dict):
        raise InputError(path, f"not a TorchRec ShardingPlan: {type(plan).__name__}")
    return plan


# =========================================================================== user table lists


USER_TABLE_FIELDS = ("name", "rows", "dim", "pooling_factor")
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass
class UserTables:
    """A user's table list: `names[i]` and `configs[i]` (with its dim); `default_bins`: the names of the
    tables that had no locality bins and got `types.DEFAULT_BINS`."""

    names: list[str]
    configs: list[TableConfig]
    default_bins: list[str]


def _user_table(row: dict, max_mem: float | None) -> tuple[str, TableConfig, bool]:
    """One table of a user list from its fields (strings from CSV, or JSON values); ValueError if bad."""
    name = str(row.get("name") or "").strip()
    if not name or set(name) - _NAME_CHARS:
        raise ValueError(f"name must be letters, digits, '_' or '-', got {row.get('name')!r}")

    def number(key: str, integer: bool):
        value = row.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"table {name!r}: missing {key}")
        try:
            if isinstance(value, bool) or (integer and isinstance(value, float)):
                raise ValueError
            parsed = int(value) if integer else float(value)
            if not math.isfinite(parsed):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"table {name!r}: {key} is not {'an integer' if integer else 'a number'}: "
                             f"{value!r}") from None
        return parsed

    rows, dim, pf = number("rows", True), number("dim", True), number("pooling_factor", False)
    if rows < 1:
        raise ValueError(f"table {name!r}: rows must be >= 1, got {rows}")
    if dim < 4 or dim % 4:
        raise ValueError(f"table {name!r}: dim must be a positive multiple of 4 (FBGEMM), got {dim}")
    if pf < 0:
        raise ValueError(f"table {name!r}: pooling_factor must be >= 0, got {pf:g}")
    given = [j for j in range(NUM_BINS) if row.get(f"bin_{j}") not in (None, "")]
    if given and len(given) != NUM_BINS:
        missing = [f"bin_{j}" for j in range(NUM_BINS) if j not in given]
        raise ValueError(f"table {name!r}: give all of bin_0..bin_{NUM_BINS - 1} or none, missing "
                         f"{', '.join(missing)}")
    bins = tuple(number(f"bin_{j}", False) for j in range(NUM_BINS)) if given else DEFAULT_BINS
    if any(not 0 <= b <= 1 for b in bins):
        raise ValueError(f"table {name!r}: locality bins must lie in [0, 1]")
    if max_mem is not None:
        narrow = dim
        while can_split(narrow):
            narrow //= 2
        if size_gb(rows, narrow) > max_mem:
            raise ValueError(f"table {name!r} ({size_gb(rows, dim):.4g} GB) does not fit a device of {max_mem:g} GB "
                             f"even split column-wise down to dim {narrow} ({size_gb(rows, narrow):.4g} GB)")
    return name, TableConfig(rows, pf, bins, dim), not given


def read_user_tables(path, max_mem: float | None = None, warn: bool = True) -> UserTables:
    """Read a user's table list: CSV with a header, or a JSON list of objects.

    Fields: `name, rows, dim, pooling_factor` and optionally `bin_0` ..
    `bin_16` (all or none; without them a table gets `types.DEFAULT_BINS`,
    and a warning names it). Names are unique, of letters, digits, `_`, `-`.
    Dims are multiples of 4. With `max_mem` (GB), a table that fits no device
    even at its narrowest column split is refused. Each bad row is an
    InputError naming the file, the line (CSV) or table index (JSON), and the value.
    `warn`: print the default-bins warning (off when re-reading a list already planned).
    """
    import csv

    path = Path(path)
    _require_file(path)
    if path.suffix.lower() == ".json":
        data = _load_json(path)
        if not isinstance(data, list):
            raise InputError(path, f"expected a JSON list of table objects, got {type(data).__name__}")
        rows = [(None, f"table {k}", d) for k, d in enumerate(data)]
    else:
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                header = [h.strip() for h in reader.fieldnames or []]
                reader.fieldnames = header
                rows = [(reader.line_num, None, d) for d in reader]
        except (UnicodeDecodeError, csv.Error) as e:
            raise InputError(path, f"not a readable CSV file: {_one_line(str(e))}") from None
        missing = [f for f in USER_TABLE_FIELDS if f not in header]
        if missing:
            raise InputError(path, f"header needs columns {', '.join(USER_TABLE_FIELDS)} "
                                   f"(optional bin_0..bin_16), missing {', '.join(missing)}", 1)
    if not rows:
        raise InputError(path, "no tables")
    out = UserTables([], [], [])
    for line, label, d in rows:
        try:
            if not isinstance(d, dict):
                raise ValueError(f"expected a JSON object, got {_show(json.dumps(d))}")
            if None in d:  # csv.DictReader puts extra cells under the key None
                raise ValueError(f"{len(d[None])} more cell(s) than header columns")
            name, config, default = _user_table(d, max_mem)
        except ValueError as e:
            message = f"{label}: {e}" if label else str(e)
            raise InputError(path, _one_line(message), line) from None
        if name in out.names:
            raise InputError(path, f"{label + ': ' if label else ''}table name {name!r} used twice", line)
        out.names.append(name)
        out.configs.append(config)
        if default:
            out.default_bins.append(name)
    if out.default_bins and warn:
        shown = ", ".join(out.default_bins[:5]) + (", ..." if len(out.default_bins) > 5 else "")
        _warn(f"{path}: {len(out.default_bins)} table(s) without locality bins ({shown}) get the default profile "
              f"of the public DLRM dataset (neuroshard.types.DEFAULT_BINS)")
    return out


# =========================================================================== noise floor


def write_noise_floor(data_dir, report: dict, path=None) -> Path:
    """Write `path` (default `<data_dir>/noise_floor.json`; atomic): a report made by
    `bench.noise.noise_report`. Returns the path written."""
    path = Path(path) if path is not None else Path(data_dir) / NOISE_JSON
    write_json_atomic(path, report)
    return path


# what each statistic of a noise report is called in errors
_NOISE_STATS = {"fresh_vs_stored": "noise floor", "fresh_over_stored": "drift ratio"}


def read_noise_floor(data_dir, target: str, path=None, stat: str = "fresh_vs_stored") -> dict | None:
    """The `stat` statistics of `target` ("cost", "fw" or "bw") in a noise report (default
    `<data_dir>/noise_floor.json`), or None when the file does not exist. `stat`: "fresh_vs_stored"
    (|fresh - recorded| / recorded: {"median", "mean", "p90", "n"}) or "fresh_over_stored" (fresh /
    recorded, the machine's drift: {"median", "mean", "n"})."""
    path = Path(path) if path is not None else Path(data_dir) / NOISE_JSON
    if not path.exists():
        return None
    report = _load_json(path)
    try:
        stats = report["targets"][target][stat]
        if not all(isinstance(stats[k], (int, float)) for k in ("median", "mean", "n")):
            raise TypeError
    except (KeyError, TypeError):
        raise InputError(path, f"no {_NOISE_STATS[stat]} for {target!r} (expected \"targets\": "
                               f"{{\"{target}\": {{\"{stat}\": {{\"median\", \"mean\", \"n\"}}}}}})") from None
    return stats


# =========================================================================== measurement log


def format_measurement(key: str, measurement: dict) -> str:
    """One line of eval.py's measurement log (no newline): `{"key": plan identity, "m": measurement}`."""
    return json.dumps({"key": key, "m": measurement}, separators=(",", ":"), default=_json_default)


def read_measurements(path) -> dict[str, dict]:
    """eval.py's append-only measurement log: plan identity -> the job's raw measurement of it.

    One JSON object per line (`format_measurement`); a torn last line is
    skipped with a warning; a missing file is an empty log.
    """
    path = Path(path)
    if not path.exists():
        return {}
    out = {}
    for n, line in read_lines_tolerant(path):
        try:
            rec = json.loads(line)
            key, m = rec["key"], rec["m"]
            if not isinstance(key, str) or not isinstance(m, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise InputError(path, f"not a measurement record: {_show(line)}", n) from None
        out[key] = m
    return out
