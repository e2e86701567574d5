"""TorchRec plan files: a `ShardingPlan` saved with `torch.save`, and its readable JSON beside it."""

from __future__ import annotations

import json
from pathlib import Path

from neuroshard.formats.io import (
    atomic_write,
    json_default,
    one_line,
    require_file,
    write_text_atomic,
)
from neuroshard.types.errors import InputError

# --------------------------------------------------------------------------- TorchRec plans


def write_torchrec_plan(path, sharding_plan, view: dict) -> list[Path]:
    """Write a TorchRec `ShardingPlan` with `torch.save` to `path` and its readable `view` as JSON beside it
    (`path` with the suffix `.json`), both atomic. Returns the two paths."""
    import torch

    path = Path(path)
    json_path = path.with_suffix(".json")
    if json_path == path:
        raise InputError(path, "the TorchRec plan file needs a suffix other than .json (e.g. plan.pt)")
    with atomic_write(path, "wb") as fh:
        torch.save(sharding_plan, fh)
    # one table per line, so the file reads and diffs well
    head = {k: v for k, v in view.items() if k != "modules"}
    modules = ",\n".join(f"  {json.dumps(m)}: [\n" + ",\n".join("   " + json.dumps(t, default=json_default)
                                                                 for t in tables) + "\n  ]"
                         for m, tables in view.get("modules", {}).items())
    text = json.dumps(head)[:-1] + (", " if head else "") + '"modules": {\n' + modules + "\n }}\n"
    json.loads(text)  # the hand-made layout must still be JSON
    write_text_atomic(json_path, text)
    return [path, json_path]


def read_torchrec_plan(path):
    """The `ShardingPlan` of a file written by `write_torchrec_plan` (needs torchrec; a full unpickle,
    so only for files you trust, as with any `torch.load(weights_only=False)`)."""
    import torch

    path = Path(path)
    require_file(path)
    try:
        plan = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - pickle, zip and import errors all mean "not a plan file we can read"
        raise InputError(path, f"cannot load TorchRec plan: {type(e).__name__}: {one_line(str(e))}") from None
    if not hasattr(plan, "plan") or not isinstance(plan.plan, dict):
        raise InputError(path, f"not a TorchRec ShardingPlan: {type(plan).__name__}")
    return plan
