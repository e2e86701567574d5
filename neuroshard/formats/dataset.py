"""Dataset formats (DESIGN §3): table configs, the dataset dir (`table_configs.json` + `data.pt`), the public
DLRM file.

Readers raise `InputError(path, message, line)` naming the offending value;
writers are atomic (`formats.io`). `data.pt` is loaded tensors-only and
memory-mapped where the format allows.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from neuroshard.formats.io import (
    atomic_write,
    load_json,
    one_line,
    require_dir,
    require_file,
    show_value,
    write_text_atomic,
)
from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig

if TYPE_CHECKING:
    import torch

TABLE_CONFIGS = "table_configs.json"
DATA_PT = "data.pt"
# Elements per chunk when scanning big tensors (64 MB of int64): bounds the
# temporaries of the monotonicity check on the 56 M offsets of the public file.
_CHUNK = 8 * 2**20


# --------------------------------------------------------------------------- table configs


def read_table_configs(path) -> list[TableConfig]:
    """Read a `table_configs.json`: a JSON list of `{"row", "pooling_factor", "bin_0".."bin_16"[, "dim"]
    [, "row_lookups"]}`."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, list):
        raise InputError(path, f"expected a JSON list of table objects, got {type(data).__name__}")
    configs = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise InputError(path, f"table {i}: expected a JSON object, got {show_value(json.dumps(entry))}")
        try:
            configs.append(TableConfig.from_json(entry))
        except KeyError as e:
            raise InputError(path, f"table {i}: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise InputError(path, f"table {i}: {one_line(str(e))}") from None
    return configs


def read_dataset_configs(path) -> list[TableConfig]:
    """The table configs of a dataset: `path` is a dataset dir or its `table_configs.json`."""
    path = Path(path)
    return read_table_configs(path / TABLE_CONFIGS if path.is_dir() else path)


def write_table_configs(path, configs: Sequence[TableConfig]) -> None:
    """Write `configs` as a `table_configs.json` (atomic), one table object per line."""
    body = ",\n".join(" " + json.dumps(c.to_json()) for c in configs)
    write_text_atomic(path, "[\n" + body + "\n]\n" if configs else "[]\n")


# --------------------------------------------------------------------------- torch files


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
        reason = f"{type(e).__name__}: {one_line(str(e))}"
        text = str(e)
        if "Weights only load failed" in text:
            # torch's message is a paragraph; the cause is the line after "WeightsUnpickler error:".
            cause = text.split("WeightsUnpickler error:", 1)[-1] if "WeightsUnpickler error:" in text else ""
            reason = ("not a torch.save file of plain tensors/lists/dicts (weights-only unpickling: "
                      f"{one_line(cause) or 'failed'})")
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


# --------------------------------------------------------------------------- dataset dir


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
    require_dir(dataset_dir)
    configs = read_table_configs(dataset_dir / TABLE_CONFIGS)
    data_path = dataset_dir / DATA_PT
    require_file(data_path)
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


# --------------------------------------------------------------------------- public DLRM file


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
    require_file(path)
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
                raise InputError(path, f"corrupt gzip file: {one_line(str(e))}") from None
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
