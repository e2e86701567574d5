"""NeuroShard+ (`--alg neuroshard_plus`): NeuroShard's search, then local search from several starts.

Beyond the paper, with the same pre-trained cost models and simulator:

1. Starts. NeuroShard's own plan (beam search + greedy grid search), its
   no-split grid-search plan, and the plan of every registered plain sharder
   (`registry.is_plain`: no trained policy, no optional package — `random`,
   the greedy baselines, plug-ins; not TorchRec, whose planner takes seconds,
   nor DreamShard/AutoShard), each run through `planner.shard.shard`.
2. Descent from each of the `plus_starts` best distinct starts (variable
   neighbourhood descent on the simulated plan cost). The simple
   neighbourhood, scored in one batch: every move of one piece (a table or
   a split half) to another device; every swap of a piece on the bottleneck
   device (the one with the largest total) with a piece elsewhere; every
   trade of two devices' whole shards (the comm models are not symmetric in
   the devices); and, with `plus_splits`, every column split of a piece
   with the new half on another device (two halves on one device cost more
   than the whole table on hardware, see `types.merge_colocated_halves`,
   which also undoes such splits in the final plan), so splits are chosen
   by their effect on the plan cost. On big tasks only pieces on the bottleneck move or split. When no
   simple candidate lowers the cost, the compound neighbourhood (while the
   bottleneck holds few pieces): two pieces off the bottleneck to one
   device, for nothing or for one of its pieces, and one piece for two;
   then (up to 6 devices) every order of the shards on the devices. The
   best candidate is taken while it lowers the cost by at least 0.1%
   (`_COARSE_GAIN`), up to `plus_max_moves` moves; new splits only once
   the descent without them is done (a split cannot be undone). Then the
   best of these local optima is descended from again taking any gain
   above 0.01% (`local_search._MIN_GAIN`). Small gains are mostly the objective's own
   sampling noise: a move that gains less than 0.1% under the search's
   fixed noise draws (`planner.costs.uncertainty`) often gains nothing under
   other draws, and such moves are many. The starts' descents win about
   equally often, so every start is still descended.
3. Tabu search across the plateau of the best local optimum
   (`plus_tabu` steps): the best simple candidate that does not raise the
   cost is taken even if it does not lower it either, but a piece just
   moved (or a device pair just traded) may not move back for a few
   steps, and a trade of two whole shards only if it lowers the cost (it
   opens no new move); each new best is descended from again. Tables of
   equal dims make such plateaus: a split whose halves balance the
   devices only after a second move. Steps that may raise the cost (as
   before) found 0.003% less under other draws than none, for 7% of
   NeuroShard+'s time.
4. The result is the plan with the lowest objective of all starts and all
   search results, so it is never above any baseline it ran, nor above
   NeuroShard's own plan, by that objective.

Against taking every gain above 0.01% from every start and four tabu
steps that may raise the cost (the search until this change), 2. and 3.
take 0.65-0.75x the time, and their plans cost 0.08% more by the search's
objective and 0.09% more under other draws (mean of 36 tasks; 17 worse,
16 better); with single models and the point cost
(`benchmarks/bench_search.py --parts baselines`), NeuroShard+ was 0.11%
and 0.31% below NeuroShard on 4 and 8 devices, against 0.15% and 0.38%.

The local search itself (the placement under search, its neighbourhoods, the objective and the
candidates' costs) is `local_search`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

from neuroshard.checks import check_float, check_int
from neuroshard.planner.costs.cost_models import require_models
from neuroshard.planner.costs.scorer import single_threaded_blas
from neuroshard.planner.registry import (
    ShardingContext,
    algorithm_names,
    is_plain,
    options_for,
    register,
    required_option,
)
from neuroshard.planner.search.beam import (
    SearchConfig,
    beam_search,
    make_space,
)
from neuroshard.planner.search.local_search import Objective, State, descend, tabu_search
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.settings import Settings, setting
from neuroshard.types.errors import (
    ConfigError,
    InputError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.plan import Plan, merge_colocated_halves
from neuroshard.types.tables import ShardTable

NAME = "neuroshard_plus"
# The descents from the starts take only gains above this fraction (module doc, 2.; any gain: `_MIN_GAIN`
# in `local_search`)
_COARSE_GAIN = 1e-3


@dataclass(frozen=True)
class PlusConfig(Settings):
    """NeuroShard+ settings beyond SearchConfig's (which its inner NeuroShard search uses)."""

    TITLE: ClassVar[str] = "NeuroShard+ (--alg neuroshard_plus; beyond the paper)"

    plus_starts: int = setting(3, "neuroshard_plus: local search from this many of the best distinct starting plans")
    plus_max_moves: int = setting(200, "neuroshard_plus: most moves per local search (0: no local search)")
    plus_tabu: int = setting(2, "neuroshard_plus: tabu-search steps from the best local optimum the descents found "
                                "(moves that do not lower the cost, to cross a plateau; 0: none)")
    plus_splits: bool = setting(True, "neuroshard_plus: the local search may split tables, the new half on any "
                                      "device (0 to turn off)")
    plus_baselines: str = setting("auto", "neuroshard_plus: sharders to start from and never to be above: 'auto' "
                                          "(every registered one that needs no trained policy), 'none', or a comma "
                                          "list")
    plus_robust: bool = setting(True, "neuroshard_plus: minimise the cost distribution's mean + plus_lambda x sd "
                                      "(the models' ensemble members and the measured noise of one measurement: "
                                      "the expected measured cost, not the cost of the mean parts) when the models "
                                      "have an uncertainty; 0: the point cost")
    plus_lambda: float = setting(0.5, "neuroshard_plus: the weight of the cost's sd in the robust objective (the "
                                      "pipeline chooses it on the training tasks)")

    def __post_init__(self):
        check_float("--plus_lambda", self.plus_lambda, 0.0)
        check_int("--plus_starts", self.plus_starts, 1)
        check_int("--plus_max_moves", self.plus_max_moves, 0)
        check_int("--plus_tabu", self.plus_tabu, 0)
        self.baselines()  # names must be known

    def baselines(self) -> list[str]:
        """The sharders to run as starts (never NeuroShard itself, never this one)."""
        names = [a for a in algorithm_names() if a not in ("neuroshard", NAME)]
        text = self.plus_baselines.strip()
        if text == "auto":
            return [a for a in names if is_plain(a)]
        if text == "none":
            return []
        wanted = [a.strip() for a in text.split(",") if a.strip()]
        unknown = [a for a in wanted if a not in names]
        if unknown:
            raise ConfigError("--plus_baselines", f"unknown sharder {', '.join(unknown)}; choose from "
                                                  f"auto, none, {', '.join(names)}")
        return wanted


@dataclass
class PlusResult:
    """What NeuroShard+ found: the best plan, its simulated cost (ms) and where it came from."""

    plan: Plan
    cost: float
    source: str  # the start it came from ("neuroshard", "neuroshard_no_split" or a baseline's name)
    refined: bool  # True if the local search improved on that start
    start_costs: dict  # simulated cost of each start (inf: no plan)
    neuroshard_cost: float
    moves: int  # moves taken, all local searches together (tabu steps included)
    seconds: float
    candidates: list = field(default_factory=list)  # (cost, source, plan) of the `keep` best distinct plans seen


# --------------------------------------------------------------------------- NeuroShard+


def search_plus(tables: Sequence[ShardTable], problem: Problem, models, config: SearchConfig | None = None,
                plus: PlusConfig | None = None, options: dict | None = None, keep: int = 0) -> PlusResult:
    """NeuroShard+ (module doc); OutOfMemoryError when no start fits. The problem's seed and `options` are
    passed to the baselines. `keep`: also return the `keep` best distinct plans seen (starts and local
    optima, by the objective) as `candidates`, best first."""
    from neuroshard.planner.shard import shard

    t0 = time.perf_counter()
    plus = plus or PlusConfig()
    baselines = plus.baselines()
    for alg in baselines:  # a start named explicitly ('auto' names only plain ones) is never skipped silently
        needs = required_option(alg)
        if needs and not (options or {}).get(needs):
            raise ConfigError("--plus_baselines", f"{alg} needs its trained policy: give --{needs} "
                                                  f"(or leave {alg} out of --plus_baselines)")
    starts: dict[str, Plan] = {}
    with single_threaded_blas():
        space = make_space(tables, problem, models, config)
        try:
            res = beam_search(space, t0)
        except OutOfMemoryError:
            res = None
        else:
            starts["neuroshard"] = merge_colocated_halves(tables, res.plan)
            if res.start_plan is not None:
                starts["neuroshard_no_split"] = res.start_plan
    objective = Objective(space.scorer, models.noise_model, plus.plus_robust, plus.plus_lambda)
    base_costs = {}  # the starts' simulated costs (the objective when it is the point cost)
    for alg in baselines:
        try:
            got = shard(tables, problem, models=models, alg=alg, simulated=not objective.robust,
                        **options_for(alg, options))
        except (ConfigError, InputError):  # a bad setting or policy file of a named start: not skipped
            raise
        except NeuroShardError:  # out of memory, or a sharder that cannot run here
            continue
        starts[alg] = got.plan
        if got.cost_ms is not None:
            base_costs[alg] = got.cost_ms
    if not starts:
        raise OutOfMemoryError(f"{NAME} found no plan of {len(tables)} tables on {problem.ndevices} devices of "
                               f"{problem.mem_text} (neither NeuroShard nor any baseline)",
                               max_mem=min(problem.caps))

    def cost_of(name: str, plan: Plan) -> float:
        """The objective of a plan, from scratch (the point cost is the simulator's)."""
        if objective.robust:
            with single_threaded_blas():
                return State(space, plan, objective).cost()[0]
        return base_costs[name] if name in base_costs else simulate(tables, plan, models, problem).cost

    costs = {name: cost_of(name, plan) for name, plan in starts.items()}
    best_name = min(costs, key=lambda a: (costs[a], a != "neuroshard"))
    seen = [(c, name, starts[name]) for name, c in costs.items()]
    best_plan, best_cost, refined, moves = starts[best_name], costs[best_name], False, 0
    if plus.plus_max_moves:
        # descend from the best distinct starts taking gains of _COARSE_GAIN, from the best local optimum
        # again taking any gain, then tabu search from there (module doc)
        names = []
        for name in sorted(costs, key=lambda a: costs[a]):
            if len(names) < plus.plus_starts and all(starts[name] != starts[x] for x in names):
                names.append(name)
        with single_threaded_blas():
            found = []
            for name in names:
                # first without new splits (they cannot be undone), then with them
                state, m = descend(State(space, starts[name], objective), plus.plus_max_moves, False,
                                    gain=_COARSE_GAIN)
                if plus.plus_splits:
                    state, m2 = descend(state, plus.plus_max_moves - m, True, settled=True, gain=_COARSE_GAIN)
                    m += m2
                found.append([state.cost()[0], name, state, m])
            best = min(found, key=lambda f: f[0])
            best[2], m2 = descend(best[2], plus.plus_max_moves - best[3], plus.plus_splits)
            best[3] += m2
            if plus.plus_tabu and problem.ndevices > 1 and best[2].gids:
                best[2], m2 = tabu_search(best[2], plus.plus_tabu, plus.plus_max_moves - best[3], plus.plus_splits)
                best[3] += m2  # (best[0], the descent's cost, is not read again)
            moves = sum(f[3] for f in found)
        for _, name, state, m in found:
            if m:
                plan = merge_colocated_halves(tables, state.plan())
                c = cost_of("", plan)
                seen.append((c, f"{name}+search", plan))
                if c < best_cost:
                    best_name, best_plan, best_cost, refined = name, plan, c, True
    ns_cost = costs.get("neuroshard", math.inf)
    start_costs = {a: costs.get(a, math.inf) for a in ["neuroshard", "neuroshard_no_split", *baselines]}
    candidates = []
    for c, source, plan in sorted(seen, key=lambda s: s[0]):
        if len(candidates) < keep and all(plan != p for _, _, p in candidates):
            candidates.append((c, source, plan))
    return PlusResult(plan=best_plan, cost=best_cost, source=best_name, refined=refined, start_costs=start_costs,
                      neuroshard_cost=ns_cost, moves=moves, seconds=time.perf_counter() - t0,
                      candidates=candidates)


@register(NAME, settings=(SearchConfig, PlusConfig), runs_others=True)
def neuroshard_plus(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext) -> Plan:
    """NeuroShard+ under ctx's cost models: NeuroShard's search, every plain baseline, local search.

    Options (ctx.options): the fields of SearchConfig and PlusConfig. Raises OutOfMemoryError when
    no plan fits.
    """
    return _run(tables, problem, ctx).plan


def _run(tables, problem: Problem, ctx: ShardingContext, keep: int = 0) -> PlusResult:
    models = require_models(ctx.models if ctx is not None else None, NAME)
    if models.runtime is not None:
        raise ConfigError("--runtime", f"{NAME} searches the paper's execution only; plan for TorchRec's with "
                                       "neuroshard (--runtime torchrec)")
    options = dict(ctx.options or {})
    return search_plus(tables, problem, models, SearchConfig.from_options(options), PlusConfig.from_options(options),
                       options=options, keep=keep)


def _best_plans(tables, problem: Problem, ctx: ShardingContext, k: int) -> list[Plan]:
    """The k best distinct plans NeuroShard+ saw (its objective), its own choice first (for `--refine`)."""
    return [plan for _, _, plan in _run(tables, problem, ctx, keep=k).candidates]


neuroshard_plus.candidates = _best_plans
