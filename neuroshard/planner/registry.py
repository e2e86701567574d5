"""The one registry of sharding algorithms behind every `--alg` flag and `neuroshard.shard(alg=...)`.

A sharder is a function `fn(tables, problem, ctx) -> Plan` (`problem`: the devices and
their memory, `problem.Problem`)
registered under a name with `@register("name")`. The package's own sharders
live in the modules of `_MODULES`; third-party packages register theirs
through the Python entry-point group `neuroshard.sharders`, e.g. in their
`pyproject.toml`:

    [project.entry-points."neuroshard.sharders"]
    round_robin = "my_package.sharders:round_robin"

An entry point naming a function registers it under the entry point's name;
one naming a module just imports it (its `@register` decorators run). Either
way the algorithm then appears in `--alg all`, the comparison tables and the
report, with no edit to this package.

A sharder that needs an optional package names it (`@register("torchrec",
requires_package="torchrec")`): it is listed either way, `--alg all` skips it with a
warning while the package is missing, and calling it is a one-line error. A
sharder may have a `prepare()` attribute (a heavy import, say), which the
evaluation runs once before timing any plan, and a `candidates(tables,
problem, ctx, k)` attribute: its k best distinct plans by the
models, its own choice first, for the evaluation's hardware in the loop
(`eval.refine`, `--refine K`).

A sharder's settings are typed: it registers the `Settings` classes it reads
from `ctx.options` (`settings=(SearchConfig,)`); their fields are its only
options (`options_for` picks them out of the evaluation's flags, and
`check_options` makes any other keyword of `ns.shard` a one-line error
listing the valid ones) and, through `add_sharder_args`, the flags of the
scripts that plan.
`neuroshard_plus` runs every plain sharder (`is_plain`: no trained policy,
no optional package) as a baseline to start from and to beat.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from typing import Callable, Sequence

from neuroshard.problem import Problem
from neuroshard.settings import check_known_options
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable

Sharder = Callable[[Sequence[ShardTable], Problem, "ShardingContext"], Plan]

ENTRY_POINT_GROUP = "neuroshard.sharders"
# The order in which `--alg all` runs and reports algorithms (DESIGN §2); others follow, sorted.
_ORDER = ["neuroshard", "random", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy",
          "torchrec", "dreamshard", "autoshard", "neuroshard_plus", "neuroshard_fitted", "torchrec_fitted",
          "torchrec_neural", "torchrec_full"]
# Modules that register algorithms when imported.
# The learned baselines register from their own folder (`neuroshard.learned.sharders`, torch-free), named
# here by string as a plug-in would be: the planner does not depend on them.
_MODULES = ["neuroshard.planner.baselines", "neuroshard.planner.search.sharding_types", "neuroshard.torchrec.sharder",
            "neuroshard.torchrec.full_planner", "neuroshard.learned.sharders", "neuroshard.planner.search.plus"]

_REGISTRY: dict[str, Sharder] = {}
_PACKAGES: dict[str, str] = {}  # algorithm -> the optional package it needs
_OPTIONS: dict[str, str] = {}  # algorithm -> the option it cannot run without (a trained policy's path)
_SETTINGS: dict[str, tuple] = {}  # algorithm -> the Settings classes of its options
_RUNS_OTHERS: set[str] = set()  # algorithms that run other sharders and pass their options on
_NOT_IN_ALL: set[str] = set()  # algorithms `--alg all` leaves out (run when named)
_loaded = False


@dataclass
class ShardingContext:
    """What a sharder may use besides the task and the problem: the cost models and its options.

    `models`: a `planner.costs.cost_models.CostModels` bundle (None for algorithms that
    need none); `options`: algorithm settings such as the beam width.
    """

    models: object = None
    options: dict = field(default_factory=dict)


@dataclass
class _ContextWithSeed(ShardingContext):
    """The context a sharder of the signature before `Problem` reads: its seed was the context's."""

    seed: int = 0


def _takes_loose_devices(fn) -> bool:
    """Whether `fn` is a sharder of the signature before `Problem` (77a2aaf): `fn(tables, ndevices, max_mem_gb,
    ctx)`, four positional parameters where there are three now."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(positional) == 4 and not any(p.kind == p.VAR_POSITIONAL for p in params)


def _with_loose_devices(name: str, fn) -> Sharder:
    """A sharder of the signature before `Problem` as a sharder now (a DeprecationWarning when registered): called
    with the problem's devices, its one memory size and a context holding its seed."""
    warnings.warn(f"sharder {name!r} takes (tables, ndevices, max_mem_gb, ctx), which is deprecated; take (tables, "
                  f"problem, ctx): problem.ndevices, problem.max_mem, problem.seed", DeprecationWarning, stacklevel=3)

    @functools.wraps(fn)
    def sharder(tables, problem: Problem, ctx: ShardingContext) -> Plan:
        mem = problem.single_mem(f"sharder {name!r} (of the signature before Problem)")
        return fn(tables, problem.ndevices, mem, _ContextWithSeed(ctx.models, ctx.options, problem.seed))

    return sharder


def _accepts_earlier_keywords(fn):
    """`register` as it is, and with the keywords of earlier versions: `requires=` (711d2f5-8a68b51: the option the
    algorithm cannot run without) is `requires_option=`, with a DeprecationWarning; `learned=` (2795828-8a68b51:
    it needs a trained policy) names no option, so `learned=True` is a TypeError saying what to give instead."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "requires" in kwargs:
            if "requires_option" in kwargs:
                raise TypeError("register() got both requires (its earlier name) and requires_option")
            kwargs["requires_option"] = kwargs.pop("requires")
            warnings.warn("register(requires=...) is deprecated; use register(requires_option=...)",
                          DeprecationWarning, stacklevel=2)
        if "learned" in kwargs:
            if kwargs.pop("learned"):
                raise TypeError("register(learned=True) is gone: give the option the sharder cannot run without "
                                "(its trained policy's path), register(requires_option='<option>')")
            warnings.warn("register(learned=False) is deprecated; leave it out", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    return call


@_accepts_earlier_keywords
def register(name: str, requires_package: str | None = None, requires_option: str | None = None,
             settings: tuple = (), runs_others: bool = False, in_all: bool = True) -> Callable[[Sharder], Sharder]:
    """Decorator: make `fn(tables, problem, ctx) -> Plan` available as `--alg name`.

    `requires_package`: the top-level module of an optional package the sharder
    imports when called (`--alg all` skips it, with a warning, when missing);
    `requires_option`: an option the algorithm cannot run without (a trained
    policy's path; `--alg all` leaves the algorithm out when it is not given);
    `settings`: the `Settings` classes whose fields are its options; `runs_others`: it runs other
    sharders (NeuroShard+ its baselines), so it also takes their options and hands each its own; `in_all`:
    False for an algorithm `--alg all` leaves out (an ablation's cell), run only when named.
    """
    def wrap(fn: Sharder) -> Sharder:
        if name in _REGISTRY and fn not in (_REGISTRY[name], getattr(_REGISTRY[name], "__wrapped__", None)):
            raise ValueError(f"sharding algorithm {name!r} registered twice")
        _REGISTRY[name] = _with_loose_devices(name, fn) if _takes_loose_devices(fn) else fn
        _SETTINGS[name] = tuple(settings)
        if not in_all:
            _NOT_IN_ALL.add(name)
        if runs_others:
            _RUNS_OTHERS.add(name)
        if requires_package:
            _PACKAGES[name] = requires_package
        if requires_option:
            _OPTIONS[name] = requires_option
        return fn
    return wrap


def missing_requirement(name: str) -> str | None:
    """The optional package algorithm `name` needs and that is not installed, or None."""
    module = _PACKAGES.get(name)
    return module if module and importlib.util.find_spec(module) is None else None


def prepare(name: str) -> None:
    """Run the sharder's `prepare()` if it has one (work that should not count as search time)."""
    hook = getattr(get_sharder(name), "prepare", None)
    if hook is not None:
        hook()


def required_option(name: str) -> str | None:
    """The option `name` cannot run without (None for most algorithms)."""
    _load_all()
    return _OPTIONS.get(name)


def _load_entry_points() -> None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plug-in is named, not a traceback
            raise NeuroShardError(f"sharder plug-in {ep.name!r} ({ep.value}) failed to load: "
                                  f"{type(e).__name__}: {e}") from None
        if callable(obj):
            register(ep.name)(obj)


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for module in _MODULES:
        importlib.import_module(module)
    _load_entry_points()
    _loaded = True


def algorithm_names() -> list[str]:
    """Registered algorithm names: the paper's order first, then any others sorted."""
    _load_all()
    known = [n for n in _ORDER if n in _REGISTRY]
    return known + sorted(n for n in _REGISTRY if n not in _ORDER)


def in_all(name: str) -> bool:
    """False for an algorithm `--alg all` leaves out (`register(in_all=False)`)."""
    _load_all()
    return name not in _NOT_IN_ALL


def is_plain(name: str) -> bool:
    """True for a sharder that needs neither a trained policy of its own nor an optional package."""
    _load_all()
    return name not in _OPTIONS and name not in _PACKAGES and name not in _NOT_IN_ALL


def settings_of(name: str) -> tuple:
    """The Settings classes of algorithm `name`'s options (empty for a sharder without options)."""
    get_sharder(name)
    return _SETTINGS.get(name, ())


def all_settings() -> list:
    """Every registered sharder's Settings classes, each once, in algorithm order (for the flags)."""
    out = []
    for name in algorithm_names():
        out += [cls for cls in _SETTINGS.get(name, ()) if cls not in out]
    return out


def option_names(name: str) -> list[str]:
    """The options algorithm `name` takes: the fields of its settings classes (and, for a sharder that runs
    the others, theirs too)."""
    classes = all_settings() if name in _RUNS_OTHERS else settings_of(name)
    return list(dict.fromkeys(f for cls in classes for f in cls.option_names()))


def options_for(name: str, options: dict | None) -> dict:
    """The entries of `options` (an evaluation's options for every algorithm) that `name` takes."""
    mine = set(option_names(name))
    return {k: v for k, v in (options or {}).items() if k in mine}


def check_options(name: str, options: dict) -> None:
    """A one-line ConfigError for an option `name` does not take (listing the valid ones) or a bad value."""
    check_known_options(options, option_names(name), f"--alg {name}")
    for cls in all_settings() if name in _RUNS_OTHERS else settings_of(name):
        cls.from_options(options)  # each class checks its values


def add_sharder_args(parser) -> None:
    """Every registered sharder's settings as flags (NeuroShard's search, NeuroShard+'s, the TorchRec
    planner's, the learned sharders' policy paths, a plug-in's), each declared once, by its settings class."""
    for cls in all_settings():
        cls.add_args(parser)


def sharder_options(args, batch_size: int | None) -> dict:
    """`ShardingContext.options` for every algorithm from a script's flags (those given; a learned sharder's
    policy only when named) and the dataset's batch size (None: the TorchRec sharder's default), checked: a
    one-line error on a bad value, before any work. `plan_task` hands each algorithm its own entries."""
    options = {}
    for cls in all_settings():
        config = cls.from_args(args, **({"batch_size": batch_size} if "batch_size" in cls.option_names()
                                        and batch_size is not None else {}))
        options.update({k: v for k, v in config.to_options().items() if v is not None})
    return options


def get_sharder(name: str) -> Sharder:
    """The sharder registered as `name`; an unknown name is an error listing the valid ones."""
    _load_all()
    if name not in _REGISTRY:
        raise NeuroShardError(f"unknown sharding algorithm {name!r}; choose from {', '.join(algorithm_names())}")
    return _REGISTRY[name]
