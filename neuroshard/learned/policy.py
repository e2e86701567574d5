"""What the two learned baselines (DreamShard, AutoShard) share: the policy base class, its checkpoints,
loading a policy for a task's setting, and the memory room (importing this module does not import torch).

A policy is loaded once per file (torch is imported then) and must have
been trained for the task's device count and memory cap. Memory is checked
with the simulator's one checker (`mem_cap_elements`, whole fp32 elements),
so a learned policy never picks a device without room; a table with no
legal device makes the task out of memory (`OutOfMemoryError`), never an
overfilled plan.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from neuroshard.planner.simulator import mem_cap_elements, table_elements
from neuroshard.problem import Problem
from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable

# option key (= flag name) of each learned sharder's policy checkpoint
POLICY_OPTIONS = {"dreamshard": "dreamshard_policy", "autoshard": "autoshard_policy"}
# checkpoint "type" -> the torch module that rebuilds and runs its policy
_NETS = {"dreamshard": "neuroshard.learned.dreamshard", "autoshard": "neuroshard.learned.autoshard"}
_CACHE: dict = {}


def load_policy(alg: str, options: dict | None, problem: Problem):
    """The trained policy of `alg` named in `options`, checked against the problem it plans for.

    One-line errors (ConfigError / InputError): no policy given, a file that
    is not a policy of this algorithm, or one trained for another device
    count or memory cap. Loaded once per file (cached by path, size and mtime).
    """
    import importlib

    key = POLICY_OPTIONS[alg]
    path = (options or {}).get(key)
    if not path:
        raise ConfigError(f"--{key}", f"--alg {alg} needs a trained policy: train one with train_{alg}.py "
                                      f"and pass its checkpoint")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise InputError(path, f"{alg} policy checkpoint not found")
    st = os.stat(path)
    cache_key = (alg, path, st.st_size, st.st_mtime_ns)
    if cache_key not in _CACHE:
        _CACHE[cache_key] = importlib.import_module(_NETS[alg]).load_policy(path)
    policy = _CACHE[cache_key]
    check_setting(policy.meta, problem, path, alg)
    return policy


def require_plain(problem: Problem, alg: str) -> None:
    """The learned baselines are trained and used on devices of one memory, without table constraints (their
    networks and released training know nothing else): ConfigError otherwise."""
    if not problem.uniform:
        raise ConfigError("--max_mem", f"{alg} places tables on devices of one memory, the problem has "
                                       f"{problem.mem_text}")
    if not problem.table_constraints.empty:
        raise ConfigError("constraints", f"{alg} takes no table constraints (kept whole, devices, co-location)")


def check_setting(meta: dict, problem: Problem, path, alg: str) -> None:
    """A policy is used only in the setting it was trained for (device count, memory cap)."""
    require_plain(problem, alg)
    ndevices, max_mem = problem.ndevices, problem.max_mem
    if int(meta["ndevices"]) != ndevices:
        raise ConfigError(f"--{POLICY_OPTIONS[alg]}", f"{path} was trained for {meta['ndevices']} devices, "
                                                      f"the task has {ndevices}")
    if mem_cap_elements(float(meta["max_mem"])) != mem_cap_elements(max_mem):
        raise ConfigError(f"--{POLICY_OPTIONS[alg]}", f"{path} was trained for max_mem {meta['max_mem']:g} GB, "
                                                      f"the task has {max_mem:g} GB")


def element_sizes(tables: Sequence[ShardTable], max_mem: float) -> tuple[np.ndarray, int]:
    """(fp32 elements of each table [T] int64, the per-device cap in elements): the simulator's memory check."""
    return np.array([table_elements(t) for t in tables], dtype=np.int64), mem_cap_elements(max_mem)


def plan_from_assignment(assignment: Sequence[int], ndevices: int) -> "Plan":
    """A no-split plan from the device of each table (tables listed in index order per device)."""
    from neuroshard.types.plan import Plan

    shards = [[] for _ in range(ndevices)]
    for t, d in enumerate(assignment):
        shards[int(d)].append(t)
    return Plan(column_steps=(), shards=tuple(tuple(s) for s in shards))


# --------------------------------------------------------------------------- policies and checkpoints


class LearnedPolicy:
    """A trained network (`net_class`) and the setting it was trained for (`meta`: ndevices, max_mem,
    feature normalisation, training settings); subclasses implement `_plan(tables, problem)`."""

    kind: str = ""
    net_class: type = object
    # meta entries a policy of this kind cannot plan without (numbers or lists of numbers, all finite)
    meta_arrays: tuple[str, ...] = ()

    def __init__(self, net, meta: dict):
        self.net = net.eval()
        self.meta = meta

    def plan(self, tables: Sequence[ShardTable], problem: Problem) -> "Plan":
        """Place the tables greedily (argmax over the legal devices); OutOfMemoryError when one fits nowhere.

        Runs torch single-threaded: the networks are tiny, and on a loaded
        2-core machine two intra-op threads made a plan 20x slower (measured
        0.9 s vs 39 ms per DreamShard plan of 10-30 tables).
        """
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._plan(tables, problem)
        finally:
            torch.set_num_threads(threads)

    def save(self, path) -> None:
        save_checkpoint(path, self.kind, self.meta, self.net.state_dict())

    @classmethod
    def load(cls, path):
        """Rebuild a policy from its checkpoint; InputError (one line) for a file that is not a policy of
        this kind (`read_checkpoint`), or whose weights or settings are not those of one: missing or
        unexpected weights, shapes of another network, non-finite values, settings out of range."""
        import torch

        ckpt = read_checkpoint(path, cls.kind)
        meta, state = ckpt["meta"], ckpt["state_dict"]
        what = f"{cls.kind} policy checkpoint"
        check_meta(path, what, meta, cls.meta_arrays)
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise InputError(path, f"malformed {what}: \"state_dict\" must map names to tensors")
        net = cls.net_class()
        expected = net.state_dict()
        missing = [k for k in expected if k not in state]
        if missing:
            raise InputError(path, f"malformed {what}: missing weight {missing[0]!r}"
                                   f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}")
        unexpected = [k for k in state if k not in expected]
        if unexpected:
            raise InputError(path, f"malformed {what}: unexpected weight {unexpected[0]!r} (another network?)")
        for name, t in state.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise InputError(path, f"{what} holds non-finite values in {name!r}")
        try:
            net.load_state_dict(state)
        except (RuntimeError, TypeError, ValueError) as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise InputError(path, f"malformed {what} ({lines[-1] if lines else type(e).__name__})") from None
        return cls(net, meta)


def check_meta(path, what: str, meta, arrays: Sequence[str] = ()) -> None:
    """The setting a policy checkpoint records: a device count >= 1, a finite memory cap > 0, and the
    finite numbers (`arrays`) its planning needs; InputError naming the entry otherwise."""
    import math

    if not isinstance(meta, dict):
        raise InputError(path, f"malformed {what}: \"meta\" must be a dict")
    n = meta.get("ndevices")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(path, f"malformed {what}: ndevices must be an integer >= 1, got {n!r}")
    mem = meta.get("max_mem")
    if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not math.isfinite(mem) or mem <= 0:
        raise InputError(path, f"malformed {what}: max_mem must be a finite number > 0, got {mem!r}")
    for key in arrays:
        if key not in meta:
            raise InputError(path, f"malformed {what}: missing {key!r}")
        try:
            values = np.asarray(meta[key], dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(path, f"malformed {what}: {key!r} must be numbers") from None
        if values.size == 0 or not np.isfinite(values).all():
            raise InputError(path, f"{what} holds non-finite or no values in {key!r}")


CHECKPOINT_FORMAT = 1


def save_checkpoint(path, kind: str, meta: dict, state_dict: dict) -> None:
    """A self-describing policy checkpoint, written atomically: `kind` ("dreamshard"/"autoshard"),
    `meta` (ndevices, max_mem, feature normalisation, training config) and the weights."""
    import torch

    from neuroshard.formats.io import atomic_write

    with atomic_write(path, "wb") as fh:
        torch.save({"type": f"{kind}_policy", "format": CHECKPOINT_FORMAT, "meta": meta,
                    "state_dict": state_dict}, fh)


def read_checkpoint(path, kind: str) -> dict:
    """The checkpoint at `path`, which must be a `kind` policy; InputError (one line) otherwise."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        found = ckpt["type"]
        ckpt["meta"]["ndevices"], ckpt["meta"]["max_mem"], ckpt["state_dict"]
    except Exception as e:  # noqa: BLE001 - any unreadable file gets the same one-line report
        raise InputError(path, f"not a {kind} policy checkpoint ({type(e).__name__}: {e})") from None
    if found != f"{kind}_policy":
        raise InputError(path, f"expected a {kind} policy checkpoint, found {found!r}")
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise InputError(path, f"{kind} policy checkpoint format {ckpt.get('format')!r}, "
                               f"this version reads {CHECKPOINT_FORMAT}")
    return ckpt
