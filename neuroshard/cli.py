"""Shared command-line plumbing: one-line errors, device choice, atomic writes."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from typing import Callable

from neuroshard.types import NeuroShardError


def run_main(main: Callable[[], object]) -> None:
    """Run a script's `main`; expected failures print one line and exit non-zero.

    NeuroShardError (bad input, out of memory, invalid plan) and OSError
    (missing files, permissions) become `error: <message>` on stderr with exit
    code 1; Ctrl-C exits with 130. Anything else is a bug and keeps its traceback.
    """
    try:
        rc = main()
    except NeuroShardError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        name = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"error:{name}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where kernels run: cpu (fbgemm-gpu-cpu) or cuda (fbgemm-gpu); "
                             "auto picks cuda when a GPU is visible")


def resolve_device(name: str) -> str:
    """Map 'auto'/'cpu'/'cuda' to a concrete device; 'cuda' without a GPU is an error."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise NeuroShardError("--device cuda: no CUDA device is visible")
    if name not in ("cpu", "cuda"):
        raise NeuroShardError(f"unknown device {name!r} (expected auto, cpu or cuda)")
    return name


def parse_int_list(text: str, name: str) -> list[int]:
    """Parse '0,1,2' (a flag value) into ints; a one-line error names the flag."""
    try:
        return [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise NeuroShardError(f"{name}: expected a comma list of integers, got {text!r}") from None


def parse_range(text: str, name: str, cast=int) -> tuple:
    """Parse 'lo,hi' into a (lo, hi) pair with lo <= hi."""
    parts = text.split(",")
    try:
        lo, hi = (cast(p) for p in parts)
    except ValueError:
        raise NeuroShardError(f"{name}: expected 'lo,hi', got {text!r}") from None
    if lo > hi:
        raise NeuroShardError(f"{name}: lo {lo} > hi {hi}")
    return lo, hi


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
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2)
        fh.write("\n")
