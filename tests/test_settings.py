"""Settings dataclasses as flags (`neuroshard.settings`): each field one flag, parsed back by type, nested
settings, fields that are not flags, the shared flags, sharder options, old spellings of flags."""

import argparse
from dataclasses import dataclass
from typing import ClassVar

import pytest

from neuroshard import settings
from neuroshard.settings import Removed, Renamed, Settings, add_flag, check_known_options, common, parse_flags, setting
from neuroshard.types.errors import ConfigError


@dataclass(frozen=True)
class Inner(Settings):
    TITLE: ClassVar[str] = "inner"

    nodes: int = setting(1, "machines")


@dataclass(frozen=True)
class Outer(Settings):
    TITLE: ClassVar[str] = "outer"
    RELEASED_ALIASES: ClassVar[bool] = True

    warmup: int = common("warmup")
    share: float = setting(0.5, "a share")
    name: str = setting("a", "a choice", choices=("a", "b"))
    fallback: bool = setting(True, "a 0/1 flag")
    quick: bool = setting(False, "a switch", switch=True)
    T_range: tuple[int, int] = setting((10, 60), "a range")
    gpu_devices: str | None = common("gpu_devices")
    batch_size: int = setting(4096, "the batch", flag_default=None)
    device: str = setting("cpu", "", cli=False)
    inner: Inner = Inner()

    def validate(self) -> None:
        if self.share > 1:
            raise ConfigError("--share", f"must be <= 1, got {self.share}")


def parser():
    p = argparse.ArgumentParser()
    Outer.add_args(p)
    return p


def test_defaults_round_trip_and_fields_that_are_not_flags():
    args = parser().parse_args([])
    assert args.batch_size is None and not hasattr(args, "device")  # resolved by the script; not a flag
    assert Outer.from_args(args, batch_size=4096) == Outer()
    assert Outer.from_args(args, batch_size=8, device="cuda").device == "cuda"


def test_each_type_parses_from_its_flag():
    args = parser().parse_args(["--warmup", "2", "--share", "0.25", "--name", "b", "--fallback", "0", "--quick",
                                "--T_range", "3,7", "--gpu_devices", "0,1", "--batch-size", "64", "--nodes", "2"])
    cfg = Outer.from_args(args)
    assert (cfg.warmup, cfg.share, cfg.name, cfg.fallback, cfg.quick) == (2, 0.25, "b", False, True)
    assert (cfg.T_range, cfg.gpu_devices, cfg.batch_size, cfg.inner) == ((3, 7), "0,1", 64, Inner(2))


def test_bad_values_are_one_line_errors_naming_the_flag():
    with pytest.raises(ConfigError, match="--T_range: lo 7 > hi 3"):
        Outer.from_args(parser().parse_args(["--T_range", "7,3"]))
    with pytest.raises(ConfigError, match="--T_range: expected 'lo,hi'"):
        Outer.from_args(parser().parse_args(["--T_range", "x"]))
    with pytest.raises(ConfigError, match="--share: must be <= 1, got 2.0"):
        Outer.from_args(parser().parse_args(["--share", "2"]))
    with pytest.raises(SystemExit):  # argparse's own usage error (exit 2)
        parser().parse_args(["--fallback", "yes"])


def test_a_flag_is_added_once_and_skip_leaves_fields_out():
    p = argparse.ArgumentParser()
    add_flag(p, "warmup", 3)
    Outer.add_args(p, skip=("share", "inner"))
    args = p.parse_args([])
    assert args.warmup == 3 and not hasattr(args, "share") and not hasattr(args, "nodes")
    help_text = p.format_help()
    assert help_text.count("\n  --warmup") == 1 and "(default: 3)" in help_text  # once, with its first default


def test_sharder_options():
    assert Outer.option_names() == ["warmup", "share", "name", "fallback", "quick", "T_range", "gpu_devices",
                                    "batch_size", "device"]
    cfg = Outer.from_options({"share": 0.75, "other": 1, "name": None})
    assert cfg.share == 0.75 and cfg.name == "a"  # other keys are not this class's; None is the default
    assert cfg.to_options()["share"] == 0.75
    check_known_options({"share": 1}, ["share"], "--alg x")
    with pytest.raises(ConfigError, match=r"beam_kk: not an option of --alg x \(valid: beam_k, share\)"):
        check_known_options({"beam_kk": 3}, ["share", "beam_k"], "--alg x")


def test_old_spellings_are_rewritten_to_their_flags_with_one_warning_each(monkeypatch, capsys):
    monkeypatch.setitem(settings.DEPRECATED_FLAGS, "s.py", {"--old": Renamed("--new"), "--gone": Removed("use --x"),
                                                            "--loud": Renamed("--quiet")})
    p = argparse.ArgumentParser()
    p.add_argument("--new", action="append")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("rest", nargs="*")
    args = parse_flags(p, ["--old", "a", "--old=b", "--new", "c", "--loud", "--", "--old"], "/some/dir/s.py")
    assert vars(args) == {"new": ["a", "b", "c"], "quiet": True, "rest": ["--old"]}  # nothing after -- rewritten
    assert capsys.readouterr().err.splitlines() == ["warning: --old is deprecated; use --new",
                                                    "warning: --loud is deprecated; use --quiet"]
    with pytest.raises(ConfigError, match=r"^--gone: s.py no longer takes it: use --x$"):
        parse_flags(p, ["--gone", "1"], "s.py")
    # another script's old spellings are no concern of this one's: argparse's own error
    with pytest.raises(SystemExit):
        parse_flags(p, ["--old", "a"], "other.py")
