"""Comm models for any world size (DESIGN §6): what the planner needs of them without torch.

One model pair (`nets.WorldCommModel`, `train_comm_cost_model.py --world 1`) prices every device count; a
`CostModels` bundle is bound to a problem's count by `CostModels.for_world`. Here: where a folder keeps them
(`comm_paths`), the warning for a count outside the sizes they were trained on (`world_warning`), and the per-rank
features the scorer runs their NumPy copies on (`world_inputs`, the twin of `nets.world_features`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def comm_paths(folder, ndevices: int | None) -> tuple[Path, Path]:
    """The (forward, backward) comm checkpoints of `folder` for `ndevices` ranks: its pair for that count
    (`comm_<n>_fw.pt`, `comm_<n>_bw.pt`), else its pair for any world size (`comm_fw.pt`, `comm_bw.pt`) when it
    has one; for `ndevices` None, the pair for any world size. (Loading a pair that is not there names it.)"""
    folder = Path(folder)
    world = (folder / "comm_fw.pt", folder / "comm_bw.pt")
    if ndevices is None:
        return world
    own = (folder / f"comm_{ndevices}_fw.pt", folder / f"comm_{ndevices}_bw.pt")
    return world if not own[0].is_file() and world[0].is_file() else own


def world_warning(what: str, sizes, ndevices: int) -> str | None:
    """The warning for `what` (a model for any world size, trained on world sizes `sizes`) pricing `ndevices`
    ranks outside them; None between them (or when they are not recorded)."""
    if not sizes or min(sizes) <= ndevices <= max(sizes):
        return None
    return f"{what} trained on {min(sizes)}-{max(sizes)} ranks; {ndevices} is extrapolation"


def world_inputs(kind: str, dims: np.ndarray, sleeps) -> np.ndarray:
    """`nets.world_features` of exchanges over every one of their n ranks, as NumPy: [..., n, F] float32 from
    dims (and for "fw" sleeps) [..., n]."""
    d = np.asarray(dims, dtype=np.float32)
    n = d.shape[-1]
    index = np.arange(n, dtype=np.float32)
    total, smallest = d.sum(-1, keepdims=True), d.min(-1, keepdims=True)
    cols = [np.float32(n), index / max(n - 1, 1), index == 0, d, total, d.max(-1, keepdims=True), smallest,
            d * np.float32((n - 1) / n), (total - d) / n, (total - smallest) / n]
    if kind == "fw":
        s = np.asarray(sleeps, dtype=np.float32)
        wait = s.max(-1, keepdims=True) - s
        gap = np.sort(wait, axis=-1)[..., 1:2] if n > 1 else np.zeros_like(total)
        cols += [wait, wait.max(-1, keepdims=True), wait.sum(-1, keepdims=True) / n, gap]
    return np.stack([np.broadcast_to(np.asarray(c, dtype=np.float32), d.shape) for c in cols], axis=-1)
