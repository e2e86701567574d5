"""Command-line plumbing for the scripts: one-line errors (`run_main`) and flag helpers.

No library module imports this one; scripts (and `python -m` entry points) do.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from neuroshard.checks import check_gpu_ids
from neuroshard.types.errors import ConfigError, NeuroShardError


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


def add_progress_arg(parser: argparse.ArgumentParser) -> None:
    """`--no_progress`: the one switch, in every script, that turns progress bars off (nothing else)."""
    parser.add_argument("--no_progress", action="store_true", help="no progress bars")


def add_quiet_arg(parser: argparse.ArgumentParser) -> None:
    """`--quiet`: the evaluation scripts print only the summary, not a line per task and algorithm."""
    parser.add_argument("--quiet", action="store_true", help="print only the summary, no per-task lines")


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


def resolve_devices(device: str, gpu_devices: str | None) -> str:
    """The device ("cpu" or "cuda") from `--device` and `--gpu_devices`: naming GPUs means CUDA, and
    is an error with `--device cpu` or where no (or too few) CUDA devices are visible."""
    if not gpu_devices:
        return resolve_device(device)
    ids = check_gpu_ids("--gpu_devices", gpu_devices)
    if device == "cpu":
        raise ConfigError("--gpu_devices", f"GPUs {gpu_devices} were named with --device cpu")
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not visible:
        raise ConfigError("--gpu_devices", f"GPUs {gpu_devices} were named but no CUDA device is visible")
    if max(ids) >= visible:
        raise ConfigError("--gpu_devices", f"{gpu_devices}: only GPUs 0..{visible - 1} are visible")
    return "cuda"


def resolve_ranks(device: str, ndevices: int | None, gpu_devices: str | None, nnodes: int = 1,
                  nproc_per_node: int | None = None) -> tuple[str, int]:
    """(device, number of ranks) from `--device` (resolved), `--ndevices`, `--gpu_devices` and, on
    several machines, `--nnodes` and `--nproc_per_node`: the job has nnodes x ranks-per-node ranks
    (`--ndevices` counts them all; `--gpu_devices` names this node's GPUs)."""
    if ndevices is not None and ndevices < 1:
        raise ConfigError("--ndevices", f"need at least 1 rank, got {ndevices}")
    if nproc_per_node is not None and nproc_per_node < 1:
        raise ConfigError("--nproc_per_node", f"need at least 1 rank, got {nproc_per_node}")
    nodes = f" x --nnodes {nnodes}" if nnodes > 1 else ""
    local = nproc_per_node
    if gpu_devices:
        n = len([g for g in gpu_devices.split(",") if g.strip()])
        if device != "cuda":
            raise ConfigError("--gpu_devices", "GPUs were named but the device is cpu; "
                              "pass --device cuda (or leave --device out on a GPU machine)")
        if local is not None and local != n:
            raise ConfigError("--nproc_per_node", f"{local} ranks per node but --gpu_devices names {n} GPUs")
        if ndevices is not None and ndevices != n * nnodes:
            raise ConfigError("--ndevices", f"{ndevices} ranks but --gpu_devices names {n} GPUs{nodes}")
        return device, n * nnodes
    if local is None and ndevices is not None:
        if ndevices % nnodes:
            raise ConfigError("--ndevices", f"{ndevices} ranks do not split evenly over --nnodes {nnodes}; "
                                            "give --nproc_per_node")
        local = ndevices // nnodes
    if device == "cuda":
        import torch

        if local is None:
            local = torch.cuda.device_count()
        gpus = torch.cuda.device_count()
        if local > gpus:
            raise ConfigError("--ndevices" if nproc_per_node is None else "--nproc_per_node",
                              f"{local} ranks{' per node' if nnodes > 1 else ''} but only {gpus} GPUs")
    elif local is None:  # CPU ranks standing in for 4 devices
        if 4 % nnodes:
            raise ConfigError("--nproc_per_node", f"give --nproc_per_node or --ndevices with --nnodes {nnodes}")
        local = 4 // nnodes
    if ndevices is not None and ndevices != local * nnodes:
        raise ConfigError("--ndevices", f"{ndevices} ranks but --nproc_per_node {local}{nodes} makes "
                                        f"{local * nnodes}")
    return device, local * nnodes
