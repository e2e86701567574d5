"""Settings dataclasses whose every field is a command-line flag of the same name.

The search settings (`SearchConfig`, `PlusConfig`) and the learned
baselines' training settings (`DreamShardConfig`, `AutoShardConfig`) all
define their flags, defaults and checks in one frozen dataclass; this mixin
turns it into flags and back.
"""

from __future__ import annotations

from dataclasses import fields
from typing import ClassVar


class FlagOptions:
    """For frozen dataclasses of settings whose every field is a flag of the same name (and, for the
    search settings, a key of `ShardingContext.options`). Subclasses set HELP (the help text of each
    field) and TITLE; RELEASED_ALIASES adds `--a-b` beside `--a_b` (the released scripts' spelling)."""

    HELP: ClassVar[dict] = {}
    TITLE: ClassVar[str] = ""
    RELEASED_ALIASES: ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: dict | None):
        """Pick this config's keys out of `ShardingContext.options` (other keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (options or {}).items() if k in names and v is not None})

    @classmethod
    def add_args(cls, parser) -> None:
        """One flag per field (defaults from the dataclass), shared by every script that uses it."""
        g = parser.add_argument_group(cls.TITLE)
        for f in fields(cls):
            kind = {"int": int, "float": float, "str": str, "bool": lambda text: bool(int(text))}[f.type]
            names = [f"--{f.name}"]
            if cls.RELEASED_ALIASES and "_" in f.name:
                names.append(f"--{f.name.replace('_', '-')}")
            g.add_argument(*names, dest=f.name, type=kind, default=f.default,
                           help=f"{cls.HELP[f.name]} (default: {int(f.default) if f.type == 'bool' else f.default})")

    @classmethod
    def from_args(cls, args):
        """This config from the parsed flags (one-line error on a bad value)."""
        return cls.from_options({f.name: getattr(args, f.name) for f in fields(cls)})

    @classmethod
    def options_from_args(cls, args) -> dict:
        """`ShardingContext.options` from the parsed flags, checked (one-line error on a bad value)."""
        config = cls.from_args(args)
        return {f.name: getattr(config, f.name) for f in fields(cls)}
