"""Cost data formats (DESIGN §3): the compute and comm cost data dirs, and the noise-floor report.

Sample files are append-only (`formats.io.open_append` + `append_line` +
`format_compute_sample` / `format_comm_sample`, one fsynced line per sample)
or written whole (`write_compute_data`, `write_comm_data`); readers skip a
torn last line with a warning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

from neuroshard.formats.dataset import (
    TABLE_CONFIGS,
    read_table_configs,
    write_table_configs,
)
from neuroshard.formats.io import (
    fmt_float,
    load_json,
    parse_float,
    parse_int,
    parse_list,
    read_lines_tolerant,
    require_dir,
    show_value,
    write_json_atomic,
    write_text_atomic,
)
from neuroshard.types.costs import RankNoise
from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig

DATA_TXT = "data.txt"
NOISE_JSON = "noise_floor.json"
NOISE_TARGETS = {"compute": ("cost",), "comm": ("fw", "bw")}


# --------------------------------------------------------------------------- compute cost data


class ComputeSample(NamedTuple):
    """One measured shard: `ids` (indices into the data dir's augmented table list), its forward+backward
    `cost` in ms and the global `batch` it was measured at (None: the collection's, `batch_size` in its
    config.json)."""

    ids: tuple[int, ...]
    cost: float
    batch: int | None = None


def format_compute_sample(ids: Sequence[int], cost_ms: float, batch: int | None = None) -> str:
    """One compute sample as a `data.txt` line (no newline): `i1,i2,..,ik cost_ms`, and ` batch` when it
    was measured at another batch than the collection's."""
    if not ids:
        raise ValueError("a compute sample needs at least one table")
    line = ",".join(str(int(i)) for i in ids) + " " + fmt_float(cost_ms)
    return line if batch is None else f"{line} {int(batch)}"


def read_compute_data(data_dir) -> tuple[list[TableConfig], list[ComputeSample]]:
    """Read a compute cost data dir: the augmented table list and the samples.

    `table_configs.json` lists every table with its `"dim"`; `data.txt` has one
    sample per line, `i1,i2,..,ik cost_ms [batch]` (indices into that list, the
    tables of one shard; its measured forward+backward time in ms, >= 0; the
    global batch it was measured at when not the collection's). A torn last
    line is skipped with a warning.
    """
    data_dir = Path(data_dir)
    require_dir(data_dir)
    cfg_path = data_dir / TABLE_CONFIGS
    configs = read_table_configs(cfg_path)
    for i, c in enumerate(configs):
        if c.dim is None:
            raise InputError(cfg_path, f"table {i}: missing \"dim\" (a compute data dir lists tables with dims)")
    path = data_dir / DATA_TXT
    samples = []
    for n, line in read_lines_tolerant(path):
        fields = line.split()
        if len(fields) not in (2, 3):
            raise InputError(path, f"expected 2 or 3 fields \"ids cost_ms [batch]\", got {len(fields)}: "
                                   f"{show_value(line)}", n)
        ids = parse_list(path, n, fields[0], "table index", parse_int)
        for i in ids:
            if not 0 <= i < len(configs):
                raise InputError(path, f"table index {i} out of range ({TABLE_CONFIGS} has {len(configs)} tables)", n)
        cost = parse_float(path, n, fields[1], "cost_ms")
        if cost < 0:
            raise InputError(path, f"negative cost_ms {fields[1]}", n)
        batch = parse_int(path, n, fields[2], "batch") if len(fields) == 3 else None
        if batch is not None and batch < 1:
            raise InputError(path, f"batch {fields[2]} is not >= 1", n)
        samples.append(ComputeSample(tuple(ids), cost, batch))
    return configs, samples


def collection_batch(data_dir) -> int | None:
    """The global batch a cost data dir's samples were measured at unless they say otherwise (`batch_size`
    in its config.json), None when it does not say."""
    path = Path(data_dir) / "config.json"
    if not path.exists():
        return None
    config = load_json(path)
    batch = config.get("batch_size") if isinstance(config, dict) else None
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise InputError(path, f"batch_size must be an integer >= 1, got {show_value(json.dumps(batch))}")
    return batch


class ComputeSources(NamedTuple):
    """Compute samples read from several data dirs over one augmented table list (`read_compute_sources`)."""

    configs: list[TableConfig]
    samples: list[ComputeSample]
    plan_samples: int
    extra_samples: int


def _measured_on(data_dir) -> dict:
    """What a compute data dir's samples were timed on (`device` and `clock` of its config.json)."""
    path = Path(data_dir) / "config.json"
    config = load_json(path) if path.exists() else {}
    return {k: config.get(k) if isinstance(config, dict) else None for k in ("device", "clock")}


def read_compute_sources(data_dir, plan_data_dir=None, extra_dirs: Sequence = ()) -> ComputeSources:
    """The samples of a compute data dir, of its on-policy data (`plan_data_dir`: collected on the same
    dataset, so over the same augmented table list, then the spread tables' shares its plans ran) and of
    compute data collected on other datasets
    (`extra_dirs`: their tables appended to the list, their samples' indices moved past the tables before
    them), each sample with the batch it was measured at (its own, else its dir's `batch_size`, else
    `data_dir`'s; None when no dir says). InputError naming the file for an on-policy table list that
    differs, or an extra dir timed on another device or clock."""
    configs, samples = read_compute_data(data_dir)
    ref = collection_batch(data_dir)

    def at(batch, got):
        return [s if s.batch is not None or batch is None else s._replace(batch=batch) for s in got]

    samples = at(ref, samples)
    plan_samples = []
    configs = list(configs)
    if plan_data_dir is not None:
        plan_configs, plan_samples = read_compute_data(plan_data_dir)
        if plan_configs[:len(configs)] != configs:
            raise InputError(Path(plan_data_dir) / TABLE_CONFIGS,
                             f"augmented table list differs from {data_dir}'s: on-policy data must be collected "
                             "on the same dataset with the same --max_dim")
        configs = list(plan_configs)  # the spread tables' shares its plans ran follow the augmented list
        plan_samples = at(collection_batch(plan_data_dir) or ref, plan_samples)
    timed = _measured_on(data_dir)
    extra = []
    for d in extra_dirs:
        more_configs, more = read_compute_data(d)
        if _measured_on(d) != timed:
            raise InputError(Path(d) / "config.json", f"timed on {_measured_on(d)}, {data_dir} on {timed}: "
                                                      "compute data trained on together must be timed alike")
        offset = len(configs)
        configs += more_configs
        extra += [s._replace(ids=tuple(offset + i for i in s.ids)) for s in at(collection_batch(d) or ref, more)]
    return ComputeSources(configs, samples + plan_samples + extra, len(plan_samples), len(extra))


def write_compute_data(data_dir, configs: Sequence[TableConfig], samples: Sequence) -> None:
    """Write a whole compute cost data dir (atomic per file); collection appends instead. `samples`:
    `ComputeSample`s or (ids, cost) pairs."""
    if any(c.dim is None for c in configs):
        raise ValueError("write_compute_data: every table needs a dim")
    write_table_configs(Path(data_dir) / TABLE_CONFIGS, configs)
    write_text_atomic(Path(data_dir) / DATA_TXT, "".join(format_compute_sample(*s) + "\n" for s in samples))


# --------------------------------------------------------------------------- comm cost data


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
                     *(",".join(fmt_float(v) for v in xs) for xs in (sample.sleeps, sample.fw, sample.bw))])


def read_comm_data(data_dir, ndevices: int | None = None) -> list[CommSample]:
    """Read a comm cost data dir's `data.txt`: lines `dims sleeps fw bw`.

    Each field is a comma list of length `ndevices` (when not given, the first
    sample's length, and every line must agree). Dims are multiples of 4 (sums
    of table dims; 0 for an empty device); sleeps and times finite and >= 0 (ms).
    A torn last line is skipped with a warning.
    """
    data_dir = Path(data_dir)
    require_dir(data_dir)
    path = data_dir / DATA_TXT
    samples = []
    for n, line in read_lines_tolerant(path):
        fields = line.split()
        if len(fields) != 4:
            raise InputError(path, f"expected 4 fields \"dims sleeps fw bw\", got {len(fields)}: {show_value(line)}", n)
        dims = parse_list(path, n, fields[0], "dim", parse_int)
        sleeps = parse_list(path, n, fields[1], "sleep", parse_float)
        fw = parse_list(path, n, fields[2], "fw", parse_float)
        bw = parse_list(path, n, fields[3], "bw", parse_float)
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
    write_text_atomic(Path(data_dir) / DATA_TXT, "".join(format_comm_sample(s) + "\n" for s in samples))


# --------------------------------------------------------------------------- noise floor


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
    report = load_json(path)
    try:
        stats = report["targets"][target][stat]
        if not all(isinstance(stats[k], (int, float)) for k in ("median", "mean", "n")):
            raise TypeError
    except (KeyError, TypeError):
        raise InputError(path, f"no {_NOISE_STATS[stat]} for {target!r} (expected \"targets\": "
                               f"{{\"{target}\": {{\"{stat}\": {{\"median\", \"mean\", \"n\"}}}}}})") from None
    return stats


def read_rank_noise(data_dir) -> RankNoise | None:
    """The "rank_noise" of on-policy comm data (`<data_dir>/config.json`, `eval.onpolicy`: one measurement's
    sds of a rank's total, its own and shared with the plan's ranks), or None when the file or the key is
    absent (data measured once per plan)."""
    path = Path(data_dir) / "config.json"
    if not path.exists():
        return None
    config = load_json(path)
    noise = config.get("rank_noise") if isinstance(config, dict) else None
    if noise is None:
        return None
    try:
        return RankNoise.from_json(noise)
    except ValueError as e:
        raise InputError(path, f"\"rank_noise\" {e}, got {show_value(noise)}") from None
