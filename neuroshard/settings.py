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
import types
import typing
from dataclasses import MISSING, fields
from typing import Any, ClassVar

from neuroshard.checks import parse_range
from neuroshard.types import ConfigError

# Flags that several settings classes share, with one meaning and one spelling everywhere.
COMMON: dict[str, dict] = {
    "warmup": {"default": 5, "help": "untimed iterations per measurement"},
    "iters": {"default": 10, "help": "timed iterations per measurement (their median is kept)"},
    "timeout": {"default": 60.0, "help": "collective timeout in s: a dead or hung rank ends the job after about this"},
    "gpu_devices": {"default": None, "help": "GPUs to use, e.g. 0,1,2,3, one rank or worker each (implies --device "
                                             "cuda)"},
    "max_dim": {"default": 128, "help": "largest dim; the dim set halves down to 4"},
}


def setting(default: Any, help: str, *, cli: bool = True, switch: bool = False, choices=None,
            aliases: tuple[str, ...] = (), metavar: str | None = None, show_default: bool = True,
            flag_default: Any = MISSING):
    """A settings field. `cli=False`: not a flag (the script or the library sets it); `switch`: a bool
    that is `--name` alone (store_true); `aliases`: other spellings (the released scripts' `--a-b`);
    `flag_default`: the flag's default when it differs from the field's (None: the script resolves it)."""
    meta = {"help": help, "cli": cli, "switch": switch, "choices": choices, "aliases": tuple(aliases),
            "metavar": metavar, "show_default": show_default, "flag_default": flag_default}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def common(name: str, default: Any = MISSING, help: str | None = None, **kw):
    """The shared flag `name` of `COMMON` as a field (optionally with its own default or help)."""
    spec = COMMON[name]
    return setting(spec["default"] if default is MISSING else default, help or spec["help"], **kw)


def add_flag(parser, name: str, default: Any = MISSING, help: str | None = None) -> None:
    """Add the shared flag `name` of `COMMON` to a script that has no settings class for it (a tool
    measuring one sample, say), with the same spelling and meaning as everywhere else."""
    spec = COMMON[name]
    default = spec["default"] if default is MISSING else default
    kind = {int: int, float: float}.get(spec["default"].__class__, str)
    shown = "" if default is None else f" (default: {default})"
    parser.add_argument(f"--{name}", type=kind, default=default, help=(help or spec["help"]) + shown)


def _meta(f: dataclasses.Field) -> dict:
    return {"help": "", "cli": True, "switch": False, "choices": None, "aliases": (), "metavar": None,
            "show_default": True, "flag_default": MISSING, **f.metadata}


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


class Settings:
    """Mixin for a (frozen) dataclass of settings whose fields are flags of the same name (see the module doc).

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
    def add_args(cls, parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
        """One flag per field (defaults from the dataclass) in a group titled `TITLE`; a flag the parser
        already has (another settings class's, e.g. the shared `--warmup`) is not added twice."""
        group = parser.add_argument_group(cls.TITLE) if cls.TITLE else parser
        hints = cls._hints()
        for f in fields(cls):
            meta = _meta(f)
            if not meta["cli"] or f.name in skip:
                continue
            nested = cls._nested(f)
            if nested is not None:
                nested.add_args(parser, skip)
                continue
            names = [f"--{f.name}", *meta["aliases"]]
            if cls.RELEASED_ALIASES and "_" in f.name:
                names.append(f"--{f.name.replace('_', '-')}")
            if any(n in parser._option_string_actions for n in names):
                continue
            default = f.default if f.default is not MISSING else f.default_factory()
            if meta["flag_default"] is not MISSING:
                default = meta["flag_default"]
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
            help_text = meta["help"]
            if meta["show_default"] and shown is not None:
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
