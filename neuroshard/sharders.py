"""The one registry of sharding algorithms behind every `--alg` flag."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from neuroshard.types import NeuroShardError, Plan, ShardTable

Sharder = Callable[[Sequence[ShardTable], int, float, "ShardingContext"], Plan]

# The order in which `--alg all` runs and reports algorithms (DESIGN §2).
_ORDER = ["neuroshard", "random", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy"]
# Modules that register algorithms when imported.
_MODULES = ["neuroshard.baselines", "neuroshard.search"]

_REGISTRY: dict[str, Sharder] = {}


@dataclass
class ShardingContext:
    """What a sharder may use besides the task: cost models, a seed, options.

    `compute_model`, `fw_model`, `bw_model` are trained cost models (None for
    algorithms that need none); `options` holds algorithm settings such as the
    beam width.
    """

    compute_model: Any = None
    fw_model: Any = None
    bw_model: Any = None
    seed: int = 0
    options: dict = field(default_factory=dict)


def register(name: str) -> Callable[[Sharder], Sharder]:
    """Decorator: make `fn(tables, ndevices, max_mem_gb, ctx) -> Plan` available as `--alg name`."""
    def wrap(fn: Sharder) -> Sharder:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"sharding algorithm {name!r} registered twice")
        _REGISTRY[name] = fn
        return fn
    return wrap


def _load_all() -> None:
    for module in _MODULES:
        importlib.import_module(module)


def algorithm_names() -> list[str]:
    """Registered algorithm names: the paper's order first, then any others sorted."""
    _load_all()
    known = [n for n in _ORDER if n in _REGISTRY]
    return known + sorted(n for n in _REGISTRY if n not in _ORDER)


def get_sharder(name: str) -> Sharder:
    """The sharder registered as `name`; an unknown name is an error listing the valid ones."""
    _load_all()
    if name not in _REGISTRY:
        raise NeuroShardError(f"unknown sharding algorithm {name!r}; choose from {', '.join(algorithm_names())}")
    return _REGISTRY[name]
