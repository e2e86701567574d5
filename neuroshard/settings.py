"""Settings dataclasses whose fields are their command-line flags: each flag is declared once.

A settings class (collection, hardware measurement, training, launch, a
sharder's options, the TorchRec export) is a dataclass that mixes in
`Settings`; each field is made with `setting(default, help, ...)` (or
`common(name)` for a flag that several settings share with one meaning,
such as `--warmup`). The mixin turns the class into flags and back:

    class CollectConfig(Settings):
        TITLE: ClassVar[str] = "collection"
        warmup: int = common("warmup")
        T_range: tuple[int, int] = setting((10, 60), "inclusive range of tables per sample")
        device: str = setting("cpu", "", cli=False)      # set by the script, not a flag

    CollectConfig.add_args(parser)                         # --warmup, --T_range 10,60
    cfg = CollectConfig.from_args(args, device="cuda")     # checked by the class (one-line error)

Field types give the flag's parser: int, float, str, `X | None`, a bool
(`--flag 0|1`, or `switch=True` for `--flag` alone) and `tuple[X, X]`
("lo,hi"). A field whose type is itself a `Settings` class (a
`LaunchConfig` inside `HardwareConfig`) brings its own flags. The same
fields are the keys of `ShardingContext.options` for sharders' settings
(`from_options`, `option_names`). Checks live in the class (`__post_init__`
or `validate()`), so a bad value is a `ConfigError` naming the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import types
import typing
from dataclasses import MISSING, fields
from typing import Any, ClassVar

from neuroshard.checks import parse_range
from neuroshard.types.codec import Record
from neuroshard.types.errors import ConfigError

# The flag catalog: every flag that more than one script (or settings class) takes, declared here once with
# its type, its default and what it means; a script or a settings field names it (`add_flag`, `common`) and
# may give its own default and a more specific help, never another type or meaning. A flag of one script only
# is declared where it is used. `tests/test_flags.py` checks that every flag has exactly one declaration.
# "type" defaults to the default's type (str for None); "switch": a bool given as `--flag` alone.
FLAGS: dict[str, dict] = {
    # how a measurement is timed
    "warmup": {"default": 5, "help": "untimed iterations per measurement"},
    "iters": {"default": 10, "help": "timed iterations per measurement (their median is kept)"},
    "repeats": {"default": 1, "help": "measurements of each item, in interleaved rounds"},
    "clock": {"default": "cpu", "help": "compute time: cpu (the process's CPU time, robust to other load on "
                                        "shared cores) or wall (elapsed time)", "choices": ("cpu", "wall")},
    "timeout": {"default": 60.0, "help": "collective timeout in s: a dead or hung rank ends the job after about this"},
    "gpu_devices": {"default": None, "help": "GPUs to use, e.g. 0,1,2,3, one rank or worker each (implies --device "
                                             "cuda)"},
    "num_workers": {"default": 1, "help": "benchmark processes on CPU (one thread each); on GPUs one per "
                                          "--gpu_devices entry"},
    # sizes
    "max_dim": {"default": 128, "help": "largest dim; the dim set halves down to 4"},
    "T_range": {"default": "10,60", "help": "inclusive range of the number of tables per task (or per sample)",
                "metavar": "LO,HI"},
    "data_size": {"default": 1000, "help": "how many samples (or tasks) to make"},
    "num_samples": {"default": None, "type": int, "help": "how many samples to use"},
    "num_tables": {"default": 856, "help": "number of tables"},
    "batch_size": {"default": None, "type": int, "help": "samples per training step"},
    "max_tasks": {"default": None, "type": int, "help": "only the first N tasks"},
    "seed": {"default": 0, "help": "random seed (same seed, same output)"},
    "local_world_size": {"default": None, "type": int, "metavar": "N",
                         "help": "ranks per host, consecutive ranks (a table-row-wise table stays within one host; "
                                 "the cuda:<index> of an exported placement); left out: every rank on one host"},
    "lr": {"default": 1e-3, "help": "Adam learning rate"},
    "ensemble": {"default": 1, "help": "members per cost model (1: one model)"},
    "refine": {"default": 0, "help": "hardware in the loop: each task's K best candidates of --refine_algs' plans by "
                                     "the models measured on hardware, the measured best kept (0: off)"},
    # what a step reads
    "data": {"default": None, "help": "public DLRM dataset file (.pt or .pt.gz) instead of synthetic data"},
    "data_dir": {"default": "data/dlrm_datasets", "help": "the input folder (the dataset: table_configs.json and "
                                                         "data.pt)"},
    "dataset_dir": {"default": "data/dlrm_datasets", "help": "the dataset folder (table_configs.json, data.pt)"},
    "task_path": {"default": "data/tasks/4_gpu/data.txt", "help": "task file (one task per line)"},
    "eval_task_path": {"default": None, "help": "the evaluation's task file: a task of it here is an error (never "
                                                "learn on the evaluation's tasks)"},
    "compute_model": {"default": "models/compute.pt", "help": "compute cost model checkpoint"},
    "fw_comm_model": {"default": None, "help": "forward comm cost model checkpoint (default: "
                                               "models/comm_<ndevices>_fw.pt)"},
    "bw_comm_model": {"default": None, "help": "backward comm cost model checkpoint (default: "
                                               "models/comm_<ndevices>_bw.pt)"},
    "collective_model": {"default": None, "help": "the collectives of row-wise and data-parallel tables on the "
                                                  "paper's runtime (collectives_<ndevices>.json; "
                                                  "collect_collective_cost_data.py fits it; default: those tables are "
                                                  "not priced there)"},
    "models_dir": {"default": None, "help": "a pipeline run's cost models: the run's folder (e.g. results/quick), "
                                            "its models/ or models/onpolicy/; loaded with all the run plans with "
                                            "(CostModels.load_run: the on-policy models, the collective model)"},
    "models": {"default": None, "help": "a folder of cost models as the pipeline writes them"},
    "runtime_model": {"default": None, "help": "a TorchRec runtime model (torchrec_runtime_<ndevices>.json; "
                                               "train_torchrec_cost_model.py fits it)"},
    "calibration": {"default": None, "help": "dir with drift_compute.json and drift_comm.json measured just before "
                                             "planning: the models' compute, fw and bw predictions are scaled by how "
                                             "much slower or faster the machine runs now than when the cost data was "
                                             "recorded (default: unscaled)"},
    "plan_data_dir": {"default": None, "help": "on-policy cost data (collect_plan_cost_data.py's out_dir/compute "
                                               "or /comm) to train on as well"},
    "extra_data_dirs": {"default": None, "help": "compute cost data collected on other datasets "
                                                 "(collect_compute_cost_data.py out_dirs, comma-separated) to train "
                                                 "on as well, their tables beside --data_dir's", "metavar": "DIR,.."},
    "plans": {"default": None, "help": "a plans file (eval_simulator.py's plans.json)"},
    "test_share": {"default": 0.25, "type": float, "help": "share of the samples held out to measure the fit's "
                                                           "error on unseen ones"},
    "folds": {"default": 5, "type": int, "help": "cross-validation folds: each sample judged by a fit without it"},
    "check_data_dirs": {"default": None, "metavar": "DIR,..",
                        "help": "collections of world sizes the model for any world size may never have seen (comma "
                                "list), each judged against its own noise floor"},
    "bw_linear": {"default": None, "type": int, "choices": [0, 1],
                  "help": "1: the backward comm model linear in its features (per-rank dim sums for one world size), "
                          "fitted on the squared error; 0: a network on --loss. Unset: 1 for one world size, 0 for "
                          "any (--world 1)"},
    "results": {"default": None, "help": "an evaluation's results.json (measured plans)"},
    "round_anchors": {"default": None, "help": "per-round calibration: plans of tasks that are not evaluated, "
                                               "measured in every round, spread over it: each round's speed against "
                                               "the models"},
    "anchors_per_round": {"default": 4, "type": int, "help": "how many of --round_anchors' plans each round "
                                                             "measures (taken over its tasks and algorithms)"},
    "tables": {"default": None, "help": "the user's table list: CSV (with header) or JSON list: name, rows, dim, "
                                        "pooling_factor[, bin_0..bin_16]"},
    "alg": {"default": "neuroshard", "help": "sharding algorithm (any registered name)"},
    # what a step writes
    "out_dir": {"default": None, "help": "output folder"},
    "out_path": {"default": None, "help": "output file"},
    "out": {"default": None, "help": "output file"},
    "out_json": {"default": None, "help": "also write the figures here (JSON)"},
    # checks
    "check": {"default": False, "switch": True, "help": "also verify the exchanged values and gradients against a "
                                                        "reference (validates a new setup; slower)"},
}


def _flag_type(spec: dict):
    if "type" in spec:
        return spec["type"]
    return type(spec["default"]) if spec["default"] is not None else str


def setting(default: Any, help: str, *, cli: bool = True, switch: bool = False, choices=None,
            aliases: tuple[str, ...] = (), metavar: str | None = None, show_default: bool = True,
            flag_default: Any = MISSING, omit=None, catalog: str | None = None):
    """A settings field. `cli=False`: not a flag (the script or the library sets it); `switch`: a bool
    that is `--name` alone (store_true); `aliases`: other spellings (the released scripts' `--a-b`);
    `flag_default`: the flag's default when it differs from the field's (None: the script resolves it);
    `omit`: a predicate on the value under which the codec leaves the field out of the JSON (a default
    older files never carried); `catalog`: the `FLAGS` entry the field's flag comes from (see `common`)."""
    meta = {"help": help, "cli": cli, "switch": switch, "choices": choices, "aliases": tuple(aliases),
            "metavar": metavar, "show_default": show_default, "flag_default": flag_default, "omit": omit,
            "catalog": catalog}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def common(name: str, default: Any = MISSING, help: str | None = None, **kw):
    """The catalog flag `name` of `FLAGS` as a field (optionally with its own default or help)."""
    spec = FLAGS[name]
    kw.setdefault("choices", spec.get("choices"))
    kw.setdefault("metavar", spec.get("metavar"))
    return setting(spec["default"] if default is MISSING else default, help or spec["help"], catalog=name, **kw)


def add_flag(parser, name: str, default: Any = MISSING, help: str | None = None, *, required: bool = False,
             aliases: tuple[str, ...] = ()) -> None:
    """Add the catalog flag `name` of `FLAGS` to a script's parser, with the same spelling, type and meaning as
    everywhere else (optionally its own default, a more specific help, `required`, or the released scripts'
    other spelling in `aliases`)."""
    spec = FLAGS[name]
    default = spec["default"] if default is MISSING else default
    shown = "" if default is None or required else f" (default: {default})"
    kw: dict = {"dest": name, "help": ((help or spec["help"]) + shown).replace("%", "%%")}
    if spec.get("switch"):
        kw["action"] = "store_true"
    else:
        kw.update(type=_flag_type(spec), default=default)
        for key in ("choices", "metavar"):
            if spec.get(key):
                kw[key] = spec[key]
    if required:
        kw["required"] = True
        kw.pop("default", None)
    parser.add_argument(f"--{name}", *aliases, **kw)


@dataclasses.dataclass(frozen=True)
class Renamed:
    """An old spelling that means exactly the flag `new` (same values, same effect)."""

    new: str


@dataclasses.dataclass(frozen=True)
class Removed:
    """An old spelling whose meaning no flag has now: `use` says what to do instead."""

    use: str


# Spellings that a script of an earlier version of the suite accepted and that it no longer declares (the original
# release's flags are all still declared), by script: its file name, "neuroshard.pipeline" for the driver; the
# commit that dropped each. A `Renamed` one is rewritten to its new flag before parsing, with one line on stderr
# ("warning: --old is deprecated; use --new"), so it behaves exactly as the new one; a `Removed` one (its meaning is
# gone) is a one-line error saying what to do. `tests/test_flags.py` checks that every script parses through
# `parse_flags`, that no old spelling is a flag of its script and that each new one is.
DEPRECATED_FLAGS: dict[str, dict[str, Renamed | Removed]] = {
    # root scripts (tools/ before 77a2aaf for calibrate_band.py and model_error.py)
    "calibrate_band.py": {"--rank_error_models": Renamed("--heldout_models")},  # ee4b4ca
    "collect_collective_cost_data.py": {"--test_share": Removed("each form is now judged by cross-validation: give "
                                                               "--folds K instead")},  # 2d375dd
    "collect_comm_cost_data.py": {"--quiet": Renamed("--no_progress")},  # 93e77c1
    "collect_compute_cost_data.py": {"--quiet": Renamed("--no_progress")},  # 93e77c1
    "gen_dlrm_data.py": {"--quiet": Renamed("--no_progress")},  # 93e77c1
    "gen_tasks.py": {"--hot_pooling": Renamed("--hot_min_pooling")},  # 1fd3409
    "model_error.py": {"--models": Renamed("--model_set")},  # 77a2aaf
    "train_autoshard.py": {"--gpu-devices": Renamed("--gpu_devices")},  # 93e77c1
    "train_comm_cost_model.py": {"--threads": Removed("training runs on one thread (the models are tiny): leave it "
                                                      "out")},  # bba2430
    "train_dreamshard.py": {"--gpu-devices": Renamed("--gpu_devices")},  # 93e77c1
    "train_torchrec_cost_model.py": {"--samples": Renamed("--results"),
                                     "--check": Renamed("--check_results")},  # 77a2aaf
    # tools/
    "dataset_stats.py": {"--reference": Renamed("--published"),
                         "--reference_block": Renamed("--published_block")},  # 77a2aaf
    # benchmarks/
    "bench_compute_collection.py": {"--samples": Renamed("--num_samples")},  # 77a2aaf
    "bench_torchrec_planner.py": {"--tables": Renamed("--num_tables")},  # 77a2aaf
}


def deprecated_spellings(argv: list[str], script: str) -> list[str]:
    """`argv` with `script`'s old spellings (`DEPRECATED_FLAGS`, as `--old` or `--old=value`) rewritten to their new
    flags, each old spelling warned about once (a line on stderr); ConfigError naming a removed one. Nothing after
    `--` is touched."""
    table = DEPRECATED_FLAGS.get(script, {})
    out: list[str] = []
    warned: set[str] = set()
    for i, arg in enumerate(argv):
        if arg == "--":
            out.extend(argv[i:])
            break
        name, eq, value = arg.partition("=")
        entry = table.get(name) if name.startswith("--") else None
        if entry is None:
            out.append(arg)
            continue
        if isinstance(entry, Removed):
            raise ConfigError(name, f"{script} no longer takes it: {entry.use}")
        if name not in warned:
            print(f"warning: {name} is deprecated; use {entry.new}", file=sys.stderr, flush=True)
            warned.add(name)
        out.append(f"{entry.new}={value}" if eq else entry.new)
    return out


def parse_flags(parser: argparse.ArgumentParser, argv, script: str) -> argparse.Namespace:
    """`parser.parse_args(argv)` for the script `script` (its `__file__`, or the table's name for it), its old
    spellings (`DEPRECATED_FLAGS`) accepted as their new flags with a warning: every script parses through here."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    name = script if script in DEPRECATED_FLAGS else os.path.basename(script)
    return parser.parse_args(deprecated_spellings(argv, name))


def _meta(f: dataclasses.Field) -> dict:
    return {"help": "", "cli": True, "switch": False, "choices": None, "aliases": (), "metavar": None,
            "show_default": True, "flag_default": MISSING, "catalog": None, **f.metadata}


def _parse_bool(text: str) -> bool:
    if text not in ("0", "1", "true", "false", "True", "False"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text in ("1", "true", "True")


def _unwrap_optional(tp):
    """(inner type, optional?) of `X | None` / Optional[X]."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


class Settings(Record):
    """Mixin for a (frozen) dataclass of settings whose fields are flags of the same name (see the module doc);
    it is written to and read from JSON by the one codec (`types.codec`), as a run's config.json.

    `TITLE`: the flag group's title in `--help`; `RELEASED_ALIASES`: every `--a_b` flag also answers to `--a-b`
    (the spelling of the released scripts a class reproduces)."""

    TITLE: ClassVar[str] = ""
    RELEASED_ALIASES: ClassVar[bool] = False

    # ------------------------------------------------------------------ fields

    @classmethod
    def _hints(cls) -> dict:
        return typing.get_type_hints(cls)

    @classmethod
    def _nested(cls, f) -> type | None:
        tp, _ = _unwrap_optional(cls._hints()[f.name])
        return tp if isinstance(tp, type) and issubclass(tp, Settings) else None

    @classmethod
    def option_names(cls) -> list[str]:
        """The names of the fields, as keys of `ShardingContext.options` (flags or not; nested settings
        classes left out)."""
        return [f.name for f in fields(cls) if cls._nested(f) is None]

    # ------------------------------------------------------------------ flags

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser, skip: tuple[str, ...] = (),
                 defaults: dict | None = None, helps: dict | None = None) -> None:
        """One flag per field (defaults from the dataclass, or from `defaults` by field name: a script's own;
        `helps`: a script's more specific help of a field) in a group titled `TITLE`; a flag the parser
        already has (another settings class's, e.g. the shared `--warmup`) is not added twice."""
        group = parser.add_argument_group(cls.TITLE) if cls.TITLE else parser
        hints = cls._hints()
        for f in fields(cls):
            meta = _meta(f)
            if not meta["cli"] or f.name in skip:
                continue
            nested = cls._nested(f)
            if nested is not None:
                nested.add_args(parser, skip, defaults, helps)
                continue
            names = [f"--{f.name}", *meta["aliases"]]
            if cls.RELEASED_ALIASES and "_" in f.name:
                names.append(f"--{f.name.replace('_', '-')}")
            if any(n in parser._option_string_actions for n in names):
                continue
            default = f.default if f.default is not MISSING else f.default_factory()
            if meta["flag_default"] is not MISSING:
                default = meta["flag_default"]
            if defaults and f.name in defaults:
                default = defaults[f.name]
            tp, _ = _unwrap_optional(hints[f.name])
            kw: dict = {"dest": f.name, "default": default}
            shown = default
            if tp is bool and meta["switch"]:
                kw["action"] = "store_true"
                shown = None
            elif tp is bool:
                kw.update(type=_parse_bool, metavar="0|1")
                shown = int(default)
            elif typing.get_origin(tp) is tuple:  # "lo,hi", parsed in from_args (a one-line error)
                kw.update(type=str, metavar="LO,HI")
                shown = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in default)
            else:
                kw["type"] = tp if tp in (int, float, str) else str
            if meta["choices"] is not None:
                kw["choices"] = list(meta["choices"])
            if meta["metavar"]:
                kw["metavar"] = meta["metavar"]
            help_text = (helps or {}).get(f.name, meta["help"])
            if (meta["show_default"] or (defaults and f.name in defaults)) and shown is not None:
                help_text += f" (default: {shown})"
            kw["help"] = help_text.replace("%", "%%")
            group.add_argument(*names, **kw)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **fixed):
        """The settings of parsed flags; `fixed` sets fields that are not flags (or overrides flags,
        e.g. a device resolved from `--device` and `--gpu_devices`). Checked by the class."""
        kw = {}
        for f in fields(cls):
            if f.name in fixed:
                kw[f.name] = fixed[f.name]
                continue
            nested = cls._nested(f)
            if nested is not None and _meta(f)["cli"]:
                kw[f.name] = nested.from_args(args)
            elif _meta(f)["cli"] and hasattr(args, f.name):
                value = getattr(args, f.name)
                tp, _ = _unwrap_optional(cls._hints()[f.name])
                if typing.get_origin(tp) is tuple and isinstance(value, str):
                    value = parse_range(value, f"--{f.name}", typing.get_args(tp)[0])
                kw[f.name] = value
        obj = cls(**kw)
        validate = getattr(obj, "validate", None)
        if callable(validate):
            validate()
        return obj

    def flags(self, skip=()) -> dict:
        """The record as the flags that rebuild it (`from_args`): {flag name: value} of every flag field but
        those in `skip`, a nested settings record's inline; a "lo,hi" range as text, a switch as True/False,
        another bool as 1/0 (a script's command line from a record, e.g. the pipeline's steps)."""
        out = {}
        for f in fields(self):
            meta = _meta(f)
            if not meta["cli"] or f.name in skip:
                continue
            value = getattr(self, f.name)
            if self._nested(f) is not None:
                out.update(value.flags(skip))
            elif isinstance(value, tuple):
                out[f.name] = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in value)
            elif isinstance(value, bool) and not meta["switch"]:
                out[f.name] = int(value)
            else:
                out[f.name] = value
        return out

    # ------------------------------------------------------------------ sharder options

    @classmethod
    def from_options(cls, options: dict | None):
        """This class's fields picked out of `ShardingContext.options` (None values: the default)."""
        names = set(cls.option_names())
        return cls(**{k: v for k, v in (options or {}).items() if k in names and v is not None})

    def to_options(self) -> dict:
        """The fields as `ShardingContext.options` entries."""
        return {name: getattr(self, name) for name in self.option_names()}


def check_known_options(options: dict, valid: list[str], what: str) -> None:
    """ConfigError when `options` holds a key that is not in `valid`, listing the valid ones."""
    unknown = sorted(set(options) - set(valid))
    if unknown:
        listed = ", ".join(sorted(valid)) or "none"
        raise ConfigError(unknown[0], f"not an option of {what} (valid: {listed})")
