"""A user's table list (`tools/shard_tables.py --tables`): CSV with a header, or a JSON list of objects."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from neuroshard.formats.io import load_json, one_line, require_file, show_value
from neuroshard.formats.io import warn as print_warning
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import InputError, NeuroShardError
from neuroshard.types.tables import (
    DEFAULT_BINS,
    NUM_BINS,
    TableConfig,
    can_split,
    size_gb,
)

# --------------------------------------------------------------------------- user table lists


USER_TABLE_FIELDS = ("name", "rows", "dim", "pooling_factor")
CONSTRAINT_FIELDS = ("whole", "ranks", "group")  # optional: kept whole (0/1), its devices ("0;2"), a co-location label
KINDS = ("pooled", "sequence")  # the optional `kind`: an EmbeddingBagCollection's table, or an EmbeddingCollection's
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass
class UserTables:
    """A user's table list: `names[i]` and `configs[i]` (with its dim); `default_bins`: the names of the
    tables that had no locality bins and got `types.DEFAULT_BINS`."""

    names: list[str]
    configs: list[TableConfig]
    default_bins: list[str]
    whole: list[str] = field(default_factory=list)  # never column-split
    ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # the devices a table may use
    groups: dict[str, list[str]] = field(default_factory=dict)  # label -> tables placed whole together

    def constraints(self, ndevices: int, path=None) -> TableConstraints:
        """The list's constraints by table position; InputError naming the table for a device out of range
        or a group of one table."""
        index = {n: i for i, n in enumerate(self.names)}
        for name, ds in self.ranks.items():
            off = [d for d in ds if d >= ndevices]
            if off:
                raise InputError(path or "tables", f"table {name!r}: rank {off[0]} is not among the {ndevices} "
                                                   "devices")
        for label, members in self.groups.items():
            if len(members) < 2:
                raise InputError(path or "tables", f"group {label!r} has one table ({members[0]!r}): a group "
                                                   "places two or more tables together")
        try:
            return TableConstraints(whole=tuple(index[n] for n in self.whole),
                                    devices=tuple((index[n], ds) for n, ds in self.ranks.items()),
                                    colocate=tuple(tuple(index[n] for n in m) for m in self.groups.values()))
        except NeuroShardError as e:
            raise InputError(path or "tables", str(e)) from None


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
    kind = str(row.get("kind") or "pooled").strip().lower()
    if kind not in KINDS:
        raise ValueError(f"table {name!r}: kind must be {' or '.join(KINDS)}, got {row.get('kind')!r}")
    if any(not 0 <= b <= 1 for b in bins):
        raise ValueError(f"table {name!r}: locality bins must lie in [0, 1]")
    if max_mem is not None:
        narrow = dim
        while can_split(narrow):
            narrow //= 2
        if size_gb(rows, narrow) > max_mem:
            raise ValueError(f"table {name!r} ({size_gb(rows, dim):.4g} GB) does not fit a device of {max_mem:g} GB "
                             f"even split column-wise down to dim {narrow} ({size_gb(rows, narrow):.4g} GB)")
    return name, TableConfig(rows, pf, bins, dim, pooled=kind == "pooled"), not given


def _constraint_fields(row: dict, name: str, out: UserTables) -> None:
    """The optional constraint columns of one table into `out`; ValueError naming the table if bad."""
    whole = row.get("whole")
    if whole not in (None, ""):
        if str(whole).strip().lower() not in ("0", "1", "true", "false"):
            raise ValueError(f"table {name!r}: whole must be 0 or 1, got {whole!r}")
        if str(whole).strip().lower() in ("1", "true"):
            out.whole.append(name)
    ranks = row.get("ranks")
    if ranks not in (None, ""):
        items = ranks if isinstance(ranks, list) else str(ranks).replace(";", " ").split()
        try:
            ds = tuple(sorted({int(r) for r in items}))
            if not ds or min(ds) < 0 or any(isinstance(r, (bool, float)) for r in items):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"table {name!r}: ranks must be device indices (\"0;2\"), got {ranks!r}") from None
        out.ranks[name] = ds
    group = row.get("group")
    if group not in (None, ""):
        out.groups.setdefault(str(group).strip(), []).append(name)


def read_user_tables(path, max_mem: float | None = None, warn: bool = True) -> UserTables:
    """Read a user's table list: CSV with a header, or a JSON list of objects.

    Fields: `name, rows, dim, pooling_factor` and optionally `bin_0` ..
    `bin_16` (all or none; without them a table gets `types.DEFAULT_BINS`,
    and a warning names it) and the constraints: `whole` (1: never split),
    `ranks` (the devices it may use, "0;2"), `group` (tables with the same
    label go whole to one device together); `kind`: `pooled` (the default, an
    EmbeddingBagCollection's table) or `sequence` (an EmbeddingCollection's,
    unpooled: its costs count every looked-up row, `TableConfig.pooled`).
    Names are unique, of letters, digits, `_`, `-`.
    Dims are multiples of 4. With `max_mem` (GB), a table that fits no device
    even at its narrowest column split is refused. Each bad row is an
    InputError naming the file, the line (CSV) or table index (JSON), and the value.
    `warn`: print the default-bins warning (off when re-reading a list already planned).
    """
    import csv

    path = Path(path)
    require_file(path)
    if path.suffix.lower() == ".json":
        data = load_json(path)
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
            raise InputError(path, f"not a readable CSV file: {one_line(str(e))}") from None
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
                raise ValueError(f"expected a JSON object, got {show_value(json.dumps(d))}")
            if None in d:  # csv.DictReader puts extra cells under the key None
                raise ValueError(f"{len(d[None])} more cell(s) than header columns")
            name, config, default = _user_table(d, max_mem)
        except ValueError as e:
            message = f"{label}: {e}" if label else str(e)
            raise InputError(path, one_line(message), line) from None
        if name in out.names:
            raise InputError(path, f"{label + ': ' if label else ''}table name {name!r} used twice", line)
        out.names.append(name)
        out.configs.append(config)
        if default:
            out.default_bins.append(name)
        try:
            _constraint_fields(d, name, out)
        except ValueError as e:
            raise InputError(path, one_line(f"{label}: {e}" if label else str(e)), line) from None
    known = set(USER_TABLE_FIELDS) | set(CONSTRAINT_FIELDS) | {f"bin_{j}" for j in range(NUM_BINS)} | {"kind"}
    unknown = list(dict.fromkeys(k for _, _, d in rows if isinstance(d, dict) for k in d
                                 if k is not None and k not in known))
    if unknown and warn:
        print_warning(f"{path}: ignoring unknown column(s) {', '.join(map(repr, unknown[:5]))}"
                      f"{', ...' if len(unknown) > 5 else ''} (known: {', '.join(USER_TABLE_FIELDS)}, "
                      f"bin_0..bin_{NUM_BINS - 1}, {', '.join(CONSTRAINT_FIELDS)}, kind)")
    if out.default_bins and warn:
        shown = ", ".join(out.default_bins[:5]) + (", ..." if len(out.default_bins) > 5 else "")
        print_warning(f"{path}: {len(out.default_bins)} table(s) without locality bins ({shown}) get the default "
                      f"profile of the public DLRM dataset (neuroshard.types.DEFAULT_BINS)")
    return out
