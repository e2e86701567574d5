"""NeuroShard search: speed, scale and quality against exhaustive search and the baselines.

    python benchmarks/bench_search.py                      # everything, synthetic cost models
    python benchmarks/bench_search.py --parts speed,scale --tasks_per_size 5
    python benchmarks/bench_search.py --parts speed --ensemble 3           # ensembles and NeuroShard+ beside it
    python benchmarks/bench_search.py --parts speed --ensemble 3 --noise 0.08,0.15,0.07,0.93,0.14  # ... sampling noise
    python benchmarks/bench_search.py --parts torchrec --torchrec_tasks 3   # TorchRec beside NeuroShard
    python benchmarks/bench_search.py --parts torchrec_scale --torchrec_timeout 600   # ... on 1,000 x 128
    python benchmarks/bench_search.py --parts scale --scale_tables 10000 --scale_devices 1024
    python benchmarks/bench_search.py --parts exhaustive,baselines --compute_model results/quick/models/compute.pt \
        --comm_models 2:results/quick/models/comm_2_fw.pt,results/quick/models/comm_2_bw.pt ... (also 3, 4 and 8)
    python benchmarks/bench_search.py --compute_model models/compute.pt \
        --comm_models 4:models/comm_4_fw.pt,models/comm_4_bw.pt --comm_models 8:models/comm_8_fw.pt,models/comm_8_bw.pt

Parts (--parts, comma list):

* speed: median search time per task for T = 10, 20, ..., 60 tables on 4 and
  8 devices (targets: 4 devices <= 50 ms, 8 devices <= 100 ms per task),
  wall and CPU time, default settings (k=3, n=10, max_length=10, 11 scales).
  With --ensemble K, on the same tasks in turn: NeuroShard with K-member
  ensembles of every cost (target <= 1.5x the single models' time) and
  NeuroShard+ with them (robust objective; target <= 3x NeuroShard with
  them), as per-task ratios. --noise gives NeuroShard+ the measurement noise
  and per-rank model error it samples with trained models (without it only
  the ensemble's spread is sampled, which is faster).
* scale: one task of --scale_tables tables on --scale_devices devices (comma
  lists, taken pairwise; default 1,000 x 128) with a feasible memory cap
  (1.3 x the mean load, at least 1.05 x the largest table): wall and CPU
  time and peak memory (ru_maxrss of the process and its children, so far:
  run one size per call for a clean figure). Targets: 1,000 x 128 <= 1 s;
  10,000 x 1,024 <= 120 s and <= 4 GB.
* exhaustive: small tasks (4-8 tables, 2-3 devices): the greedy grid search
  (no splits) and NeuroShard+ without splits (its inner search with
  max_length 0, its local search with plus_splits 0) against the best of all
  n^T placements under the same cost models; NeuroShard and NeuroShard+
  against the best of all placements of every "each table split at most
  once" state (T <= 5 on 2 devices, T <= 4 on 3); the gap distributions.
* baselines: a task set (T in 10..60, 4 and 8 devices): mean simulated cost
  of NeuroShard, NeuroShard+, NeuroShard's own no-split start and every
  registered baseline on the tasks valid for all; NeuroShard's relative
  improvement; NeuroShard+ against NeuroShard and against the best baseline
  of each task; mean search times.
* spread: under TorchRec's runtime model (`--runtime_model`, a fitted
  `torchrec_runtime_<n>.json` for --scale_devices ranks; else synthetic
  coefficients that price row-wise and data-parallel tables) and on the
  paper's runtime with the collective model (`--collective_model`, else
  synthetic; `--spread_runtimes` picks), on the scale
  task(s): NeuroShard's table-wise + column-wise search against the search
  over every type (`search.sharding_types`), alternating, `--spread_reps`
  times each; wall and CPU times, their ratio (target <= 2 at 1,000 x 128),
  every type's wall time against its target (paper runtime: <= 1 s at
  1,000 x 128, <= 15 s at 10,000 x 1,024; TorchRec's: twice that), costs
  and the tables made row-wise, table-row-wise or data-parallel. With
  --local_world_size K the paper runtime's devices sit on hosts of K ranks
  and table-row-wise is searched too (the collective model's host fits, or
  synthetic ones: `SYNTHETIC_HOST_COLLECTIVES`).
* torchrec: TorchRec's planner (`--alg torchrec`) beside NeuroShard on the same
  tasks and cost models: planning time (the library call's `search_ms`) and
  simulated plan cost, per T = 10, ..., 60 on 4 and 8 devices
  (--torchrec_tasks per T), and on the first scale task as torchrec_scale
  does; prints the planning-time ratio TorchRec / NeuroShard.
  Skipped without torchrec.
* torchrec_scale: the torchrec part's scale task alone: NeuroShard (table-wise
  + column-wise) here, TorchRec's planner in a child process with
  --torchrec_timeout s to plan (after its imports): planning wall and CPU
  time, simulated cost and the child's peak RSS, or "did not finish in N s".

(Over 600 lines: the seven parts share their synthetic tasks, cost models and timers, and a user runs any mix of
them in one command; each part is one function, `part_<name>`.)

Cost models: trained checkpoints when given (--compute_model, and
--comm_models per device count); otherwise synthetic ones, built here with
hand-set weights plus a seeded random part, at the scale of PLATFORM.md's
CPU FBGEMM timings (10 tables x dim 64 x pooling 16 ~ 60 ms):
compute(shard) ~ 1 ms + 0.005 ms x sum(dim x pooling) + 0.01 ms x sum(dim)
+ a seeded random non-linear term (a few %); bw[r] ~ 0.3 ms + 0.01 ms x
dims[r] + 0.002 ms x sum(dims); fw[r] ~ the same + 0.5 x (mean skew -
skew[r]) (a rank that is ready early waits for the others); beyond 8 devices
(the scale part) only the all-device terms. Synthetic tables:
rows log-uniform in [1e2, 2e6], pooling uniform in [1, 30], random locality
bins, dims drawn from {8, ..., 128}.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import resource
import time

import numpy as np
import torch

from neuroshard.cli import run_main
from neuroshard.formats.io import write_json_atomic
from neuroshard.planner.costs.cost_models import (
    CostModels,
    load_comm_model,
    load_compute_model,
)
from neuroshard.planner.costs.features import NUM_FEATURES
from neuroshard.planner.costs.nets import (
    CommCostModel,
    ComputeCostModel,
    CostEnsemble,
    feature_stats,
    linear_comm_model,
    table_features,
)
from neuroshard.planner.costs.scorer import get_scorer, single_threaded_blas
from neuroshard.planner.costs.uncertainty import NO_NOISE, NoiseModel
from neuroshard.planner.search.beam import SearchConfig, grid_search, search
from neuroshard.planner.search.plus import PlusConfig, search_plus
from neuroshard.planner.simulator import mem_cap_elements, score_placements, simulate
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import apply_column_steps
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import ShardTable, TableConfig, can_split

DIMS = (8, 16, 32, 64, 128)


# --------------------------------------------------------------------------- inputs


def random_config(rng) -> TableConfig:
    return TableConfig(int(10 ** rng.uniform(2, math.log10(2e6))), float(rng.uniform(1, 30)),
                       tuple(float(x) for x in rng.dirichlet(np.ones(17))))


def random_task(rng, T: int) -> list[ShardTable]:
    return [ShardTable(i, i, random_config(rng).with_dim(int(rng.choice(DIMS)))) for i in range(T)]


def synthetic_compute_model(seed: int = 0, noise: float = 0.2) -> ComputeCostModel:
    """compute ~ 1 + 0.005 x sum(dim x pooling) + 0.01 x sum(dim) ms, plus a seeded random term."""
    rng = np.random.default_rng(seed)
    sample = [random_config(rng).with_dim(int(d)) for _ in range(200) for d in DIMS]
    mean, std = feature_stats(table_features(sample))
    m = ComputeCostModel(mean, std, target_scale=1.0)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        l1, l2 = m.table_mlp[0], m.table_mlp[2]
        h1, h2 = m.head[0], m.head[2]
        l1.weight.normal_(0, 1 / math.sqrt(NUM_FEATURES), generator=g)
        l1.bias.zero_()
        # channels 0 and 1 carry dim x pooling (feature 3) and dim (feature 0) unchanged
        for ch, f in ((0, 3), (1, 0)):
            l1.weight[ch].zero_()
            l1.weight[ch, f] = std[f]
            l1.bias[ch] = mean[f]
        l2.weight.normal_(0, 1 / math.sqrt(126), generator=g)
        l2.weight[:, :2] = 0
        l2.weight[:2] = 0
        l2.weight[0, 0] = l2.weight[1, 1] = 1.0
        l2.bias.zero_()
        h1.weight.normal_(0, 1 / math.sqrt(30), generator=g)
        h1.weight[:, :2] = 0
        h1.weight[:2] = 0
        h1.weight[0, 0] = h1.weight[1, 1] = 1.0
        h1.bias.zero_()
        h2.weight.normal_(0, noise / math.sqrt(62), generator=g)
        h2.weight[0, 0], h2.weight[0, 1] = 0.005, 0.01
        h2.bias[0] = 1.0
    return m.eval()


def synthetic_comm_model(kind: str, n: int) -> CommCostModel:
    """bw[r] = 0.3 + 0.01 dims[r] + 0.002 sum(dims); fw adds 0.5 x (mean skew - skew[r]) (ms)."""
    most = 8 if kind == "fw" else 16  # inputs pass through the 16-unit hidden layer one by one
    if n > most:
        raise NeuroShardError(f"synthetic comm models pass inputs through 16 units: at most {most} "
                              f"devices, got {n}; give --comm_models for more")
    weight = np.full((n, n), 0.002) + 0.01 * np.eye(n)
    if kind == "fw":
        weight = np.hstack([weight, np.full((n, n), 0.5 / n) - 0.5 * np.eye(n)])
    return linear_comm_model(kind, n, weight, np.full(n, 0.3))


def synthetic_comm_for_scale(kind: str, n: int) -> CommCostModel:
    """For more than 8 devices: only the all-device terms of the formulas (0.3 + 0.002 x sum(dims),
    fw + 0.5 x mean skew); per-device inputs cannot pass the MLP's 16-unit layer one by one."""
    n_in = 2 * n if kind == "fw" else n
    m = CommCostModel(kind, n, torch.zeros(n_in), torch.ones(n_in))
    linears = [layer for layer in m.mlp if isinstance(layer, torch.nn.Linear)]
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        # unit 0: sum(dims); unit 1: sum(skew) (both >= 0), carried through the hidden layers
        linears[0].weight[0, :n] = 1.0
        if kind == "fw":
            linears[0].weight[1, n:] = 1.0
        for layer in linears[1:-1]:
            layer.weight[0, 0] = layer.weight[1, 1] = 1.0
        last = linears[-1]
        last.weight[:, 0] = 0.002
        if kind == "fw":
            last.weight[:, 1] = 0.5 / n
        last.bias[:] = 0.3
    return m.eval()


def load_models(args, n: int, seed: int) -> CostModels:
    compute = load_compute_model(args.compute_model) if args.compute_model else synthetic_compute_model(seed)
    paths = dict(args.comm_models or {})
    if n in paths:
        fw, bw = paths[n]
        return CostModels(compute, load_comm_model(fw, n, "fw"), load_comm_model(bw, n, "bw"))
    if n <= 8:
        return CostModels(compute, synthetic_comm_model("fw", n), synthetic_comm_model("bw", n))
    return CostModels(compute, synthetic_comm_for_scale("fw", n), synthetic_comm_for_scale("bw", n))


def parse_comm_models(text: str):
    try:
        n, paths = text.split(":")
        fw, bw = paths.split(",")
        return int(n), (fw, bw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N:FW_PATH,BW_PATH, got {text!r}") from None


# --------------------------------------------------------------------------- parts


def ensemble_models(args, n: int, seed: int, k: int) -> CostModels:
    """K-member ensembles of each cost (`nets.CostEnsemble`): synthetic compute members of seeds seed..seed+k-1
    (or the trained compute model k times), the comm models k times; for timing, the weights do not matter."""
    one = load_models(args, n, seed)
    compute = [one.compute] * k if args.compute_model else [synthetic_compute_model(seed + i) for i in range(k)]
    return CostModels(CostEnsemble(compute), CostEnsemble([one.fw] * k), CostEnsemble([one.bw] * k),
                      noise=args.noise)


NOISE_FIELDS = ("compute", "bw", "fw", "shared", "rank")


def parse_noise(text: str) -> NoiseModel:
    """--noise "C,B,F,SHARED,RANK" (fractions) as a NoiseModel, or "none"."""
    if text.strip().lower() == "none":
        return NO_NOISE
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != len(NOISE_FIELDS) or not all(0 <= v <= 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected {len(NOISE_FIELDS)} fractions in [0, 1] "
                                         f"({','.join(NOISE_FIELDS).upper()}) or none, got {text!r}")
    return NoiseModel(**dict(zip(NOISE_FIELDS, vals)))


def _best_ms(fn, reps: int = 2) -> tuple[float, float, float]:
    """(wall ms, CPU ms, plan cost) of the fastest of `reps` runs of fn() -> cost (inf when nothing fits)."""
    best_w = best_c = math.inf
    cost = math.inf
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            cost = fn()
        except OutOfMemoryError:
            cost = math.inf
        best_w = min(best_w, time.perf_counter() - t0)
        best_c = min(best_c, time.process_time() - c0)
    return 1e3 * best_w, 1e3 * best_c, cost


def part_speed(args, out: dict) -> None:
    k = args.ensemble
    print("== speed: search time per task (default settings), min of 2 runs per task ==")
    if k > 1:
        print(f"   with --ensemble {k}: NeuroShard with {k}-member ensembles of every cost timed beside it (target "
              f"<= 1.5x), and NeuroShard+ (robust objective, lambda {PlusConfig().plus_lambda:g}) with them "
              "(target <= 3x NeuroShard with them); the three in turn on each task")
        print(f"   NeuroShard+'s noise model: {args.noise if not args.noise.zero else 'none (no sampled spread)'}")
    res = {}
    for n, target in ((4, 50.0), (8, 100.0)):
        models = load_models(args, n, args.seed)
        ens = ensemble_models(args, n, args.seed, k) if k > 1 else None
        rng = np.random.default_rng(args.seed + n)
        walls, cpus, rows = [], [], []
        ens_walls, plus_walls = [], []
        for T in range(10, 61, 10):
            w_t, c_t, costs, e_t, p_t = [], [], [], [], []
            for _ in range(args.tasks_per_size):
                tables = random_task(rng, T)
                w, c, cost = _best_ms(lambda: search(tables, Problem(n, args.max_mem), models).cost)
                w_t.append(w)
                c_t.append(c)
                costs.append(cost)
                if ens is not None:
                    e_t.append(_best_ms(lambda: search(tables, Problem(n, args.max_mem), ens).cost)[0])
                    p_t.append(_best_ms(lambda: search_plus(tables, Problem(n, args.max_mem, args.seed), ens).cost)[0])
            walls += w_t
            cpus += c_t
            ens_walls += e_t
            plus_walls += p_t
            row = {"T": T, "median_wall_ms": float(np.median(w_t)), "median_cpu_ms": float(np.median(c_t)),
                   "plan_costs": costs}
            # the plan costs to the last digit: a change to the search's speed must leave them as they are
            line = (f"  {n} devices, T={T:2d}: median {np.median(w_t):7.1f} ms wall, {np.median(c_t):7.1f} ms CPU; "
                    f"plan costs {' '.join(repr(c) for c in costs)} ms")
            if ens is not None:
                row.update(ensemble_wall_ms=float(np.median(e_t)), plus_wall_ms=float(np.median(p_t)))
                line += f"; ensemble {np.median(e_t):7.1f} ms, NeuroShard+ with it {np.median(p_t):7.1f} ms"
            rows.append(row)
            print(line, flush=True)
        med = float(np.median(walls))
        print(f"  {n} devices, all T: median {med:.1f} ms wall ({float(np.median(cpus)):.1f} ms CPU), "
              f"target <= {target:.0f} ms: {'met' if med <= target else 'NOT met'}")
        res[n] = {"per_T": rows, "median_wall_ms": med, "median_cpu_ms": float(np.median(cpus)), "target_ms": target}
        if ens is not None:
            # per-task ratios (same task, same minute), then their median
            e_ratio = float(np.median(np.array(ens_walls) / np.array(walls)))
            p_ratio = float(np.median(np.array(plus_walls) / np.array(ens_walls)))
            print(f"  {n} devices, {k}-member ensembles: median {np.median(ens_walls):.1f} ms, {e_ratio:.2f}x the "
                  f"single models' (per-task median ratio; target <= 1.5x: {'met' if e_ratio <= 1.5 else 'NOT met'});"
                  f" NeuroShard+ {np.median(plus_walls):.1f} ms, {p_ratio:.2f}x NeuroShard with the ensembles "
                  f"(target <= 3x: {'met' if p_ratio <= 3.0 else 'NOT met'})")
            res[n].update(ensemble=k, ensemble_median_wall_ms=float(np.median(ens_walls)), ensemble_ratio=e_ratio,
                          plus_median_wall_ms=float(np.median(plus_walls)), plus_ratio=p_ratio)
    out["speed"] = res


# (tables, devices) -> (seconds, GB) targets of the scale part
SCALE_TARGETS = {(1000, 128): (1.0, None), (10000, 1024): (120.0, 4.0)}


def peak_rss_gb() -> float:
    """Peak resident memory so far of this process and of its waited-for children, GB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 2**20  # ru_maxrss is in KiB on Linux


def part_scale(args, out: dict) -> None:
    sizes = scale_sizes(args.scale_tables, args.scale_devices)
    out["scale"] = []
    for T, n in sizes:
        print(f"== scale: {T} tables on {n} devices ==")
        models = load_models(args, n, args.seed)
        tables, cap = _scale_task(args, T, n)
        total = sum(t.size_gb for t in tables)
        t0, c0 = time.perf_counter(), time.process_time()
        res = search(tables, Problem(n, cap), models)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = peak_rss_gb()
        secs, gb = SCALE_TARGETS.get((T, n), (None, None))
        target = ""
        if secs is not None:
            ok = wall <= secs and (gb is None or peak <= gb)
            target = (f"; target <= {secs:g} s{f' and <= {gb:g} GB' if gb else ''}: "
                      f"{'met' if ok else 'NOT met'}")
        print(f"  max_mem {cap:.3f} GB (total {total:.1f} GB): {wall:.2f} s wall, {cpu:.2f} s CPU, "
              f"{res.states_scored} states, {res.rounds} rounds, {len(res.plan.column_steps)} splits, "
              f"cost {res.cost!r} ms (no-split start {res.start_cost!r} ms); peak RSS {peak:.2f} GB{target}",
              flush=True)
        out["scale"].append({"tables": T, "devices": n, "max_mem_gb": cap, "wall_s": wall, "cpu_s": cpu,
                             "states": res.states_scored, "cost": res.cost, "start_cost": res.start_cost,
                             "peak_rss_gb": peak})


# synthetic runtime-model coefficients (FEATURES order), at the scale of a fitted model's terms
SYNTHETIC_RUNTIME = (20.0, 0.5, 1.0, 0.5, 0.1, 0.1, 0.05, 0.05, 0.05, 0.5, 0.05, 0.05)


# synthetic collective coefficients (a + b x M elements, ms): a reduce-scatter or all-gather of 65536 x 64 is ~2 ms
SYNTHETIC_COLLECTIVES = {"reduce_scatter": (0.05, 0.5), "all_gather": (0.05, 0.5), "all_reduce": (0.05, 0.2)}
# within a host (--local_world_size): the same latency at a quarter of the per-element cost
SYNTHETIC_HOST_COLLECTIVES = {"reduce_scatter": (0.05, 0.125), "all_gather": (0.05, 0.125), "all_reduce": (0.05, 0.05)}


def spread_models(args, n: int, runtime: str):
    """The models of the spread part for `n` devices: under TorchRec's runtime with its runtime model, or on the
    paper's with the collective model (`--runtime_model`, `--collective_model`, else synthetic coefficients)."""
    from dataclasses import replace

    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel
    from neuroshard.planner.costs.runtime_model import TorchRecRuntimeModel

    models = load_models(args, n, args.seed).at_batch(65536)
    if runtime == "paper":
        if args.collective_model:
            return models.with_collectives(args.collective_model)
        fits = {op: CollectiveFit("linear", list(c), 0) for op, c in SYNTHETIC_COLLECTIVES.items()}
        if args.local_world_size:
            fits |= {f"{op}@{args.local_world_size}": CollectiveFit("linear", list(c), 0)
                     for op, c in SYNTHETIC_HOST_COLLECTIVES.items()}
        return replace(models, collectives=CollectiveModel(n, fits))
    if args.runtime_model:
        return replace(models, runtime=TorchRecRuntimeModel.load(args.runtime_model, n))
    return replace(models, runtime=TorchRecRuntimeModel(n, 65536, SYNTHETIC_RUNTIME, types=("row_wise",
                                                                                          "data_parallel")))


# every sharding type's search time on the paper runtime (wall, s); twice this under TorchRec's runtime model
SPREAD_TARGETS_S = {(1000, 128): 1.0, (10000, 1024): 15.0}


def part_spread(args, out: dict) -> None:
    from neuroshard.planner.search.sharding_types import spread_search

    out["spread"] = []
    for (T, n), runtime in ((size, r) for size in scale_sizes(args.scale_tables, args.scale_devices)
                            for r in args.spread_runtimes.split(",")):
        print(f"== spread: {T} tables on {n} devices, {runtime} runtime ==")
        models = spread_models(args, n, runtime)
        tables, cap = _scale_task(args, T, n)
        hosts = args.local_world_size if runtime == "paper" else None
        problem = Problem(n, cap, local_world_size=hosts)
        walls, cpus = {"tw_cw": [], "all_types": []}, {"tw_cw": [], "all_types": []}
        for _ in range(args.spread_reps):  # in turn, so a slow spell of the machine hits both
            t0, c0 = time.perf_counter(), time.process_time()
            base = search(tables, problem, models)
            walls["tw_cw"].append(time.perf_counter() - t0)
            cpus["tw_cw"].append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            plan, cost = spread_search(tables, problem, models)
            walls["all_types"].append(time.perf_counter() - t0)
            cpus["all_types"].append(time.process_time() - c0)
        ratios = [b / a for a, b in zip(walls["tw_cw"], walls["all_types"])]
        kinds = [s.kind for s in plan.spread]
        ratio = float(np.median(ratios))
        target = f"; target <= 2: {'met' if ratio <= 2 else 'NOT met'}" if (T, n) == (1000, 128) else ""
        every = float(np.median(walls["all_types"]))
        limit = SPREAD_TARGETS_S.get((T, n))
        if limit is not None:
            limit *= 2 if runtime == "torchrec" else 1
            target += f"; every type <= {limit:g} s: {'met' if every <= limit else 'NOT met'}"
        print(f"  table-wise + column-wise {np.median(walls['tw_cw']):.2f} s ({np.median(cpus['tw_cw']):.2f} s CPU), "
              f"every type {every:.2f} s ({np.median(cpus['all_types']):.2f} s CPU) (ratio {ratio:.2f}{target}); "
              f"cost {base.cost:.3f} -> {cost:.3f} ms; {kinds.count('row_wise')} row-wise, "
              f"{kinds.count('table_row_wise')} table-row-wise, {kinds.count('data_parallel')} data-parallel tables",
              flush=True)
        out["spread"].append({"tables": T, "devices": n, "runtime": runtime, "local_world_size": hosts,
                              "walls_s": walls, "cpus_s": cpus, "ratio": ratio,
                              "cost_tw_cw": base.cost, "cost_all_types": cost, "spread": kinds,
                              "model": (args.runtime_model if runtime == "torchrec" else args.collective_model)
                              or "synthetic"})


def scale_sizes(tables_text: str, devices_text: str) -> list[tuple[int, int]]:
    """--scale_tables and --scale_devices as (tables, devices) pairs (a single value pairs with all)."""
    try:
        tables = [int(x) for x in tables_text.split(",")]
        devices = [int(x) for x in devices_text.split(",")]
    except ValueError:
        raise NeuroShardError(f"--scale_tables/--scale_devices: expected comma lists of integers, got "
                              f"{tables_text!r} and {devices_text!r}") from None
    if len(tables) == 1:
        tables = tables * len(devices)
    if len(devices) == 1:
        devices = devices * len(tables)
    if len(tables) != len(devices) or min(tables + devices) < 1:
        raise NeuroShardError(f"--scale_tables/--scale_devices: need lists of equal length (or one value) of "
                              f"positive integers, got {tables_text!r} and {devices_text!r}")
    return list(zip(tables, devices))


def exhaustive_best(tables, steps, n: int, max_mem: float, models, chunk: int = 20000) -> float:
    """The lowest simulated cost over every placement of the split state `steps` (inf if none fits)."""
    scorer = get_scorer(models)
    split = apply_column_steps(tables, steps)
    P = len(split)
    proj = scorer.project(scorer.embed([t.config for t in split]))
    size = np.array([t.config.row * t.dim for t in split], dtype=np.int64)
    dim = np.array([t.dim for t in split], dtype=np.float64)
    cap = mem_cap_elements(max_mem)
    best = math.inf
    assignments = itertools.product(range(n), repeat=P)
    while True:
        block = np.array(list(itertools.islice(assignments, chunk)), dtype=np.int64).reshape(-1, P)
        if not len(block):
            return best
        onehot = (block[:, :, None] == np.arange(n)).astype(np.float32)  # [M, P, n]
        mem = np.einsum("mpn,p->mn", onehot.astype(np.float64), size.astype(np.float64))
        fits = (mem <= cap).all(axis=1)
        if not fits.any():
            continue
        onehot = onehot[fits]
        acc = scorer.acc0 + np.einsum("mpn,pa->mna", onehot, proj)
        count = onehot.sum(axis=1)
        compute = np.where(count > 0, scorer.cost_from_acc(acc.reshape(-1, acc.shape[-1])).reshape(count.shape), 0.0)
        dims = np.einsum("mpn,p->mn", onehot.astype(np.float64), dim)
        best = min(best, float(score_placements(scorer, compute, dims)[3].min()))


def split_states(tables):
    """Every state where each table is split at most once (as column-step tuples)."""
    idx = [i for i, t in enumerate(tables) if can_split(t.dim)]
    for r in range(len(idx) + 1):
        yield from itertools.combinations(idx, r)


def _dist(gaps) -> str:
    g = 100 * np.asarray(gaps)
    q = np.percentile(g, [50, 90, 100])
    # within 1e-6 relative counts as optimal: the two sides add the same float32 numbers in other orders
    return (f"optimal {np.mean(np.abs(g) < 1e-4) * 100:.0f}% of tasks, gap mean {g.mean():.2f}%, "
            f"median {q[0]:.2f}%, p90 {q[1]:.2f}%, max {q[2]:.2f}%")


def part_exhaustive(args, out: dict) -> None:
    print("== quality: NeuroShard and NeuroShard+ vs exhaustive search (same cost models) ==")
    no_split_search, no_split_plus = SearchConfig(max_length=0), PlusConfig(plus_splits=False)
    res = {}
    for n in (2, 3):
        models = load_models(args, n, args.seed)
        rng = np.random.default_rng(args.seed + 10 * n)
        gaps, plus_gaps, split_gaps, plus_split_gaps, ns_vs_grid = [], [], [], [], []
        for k in range(args.exhaustive_tasks):
            T = int(rng.integers(4, 9 if n == 2 else 8))
            tables = random_task(rng, T)
            mem = max(1.5 * sum(t.size_gb for t in tables) / n, 1.1 * max(t.size_gb for t in tables))
            try:
                _, grid_cost = grid_search(tables, Problem(n, mem), models)
            except OutOfMemoryError:
                continue
            with single_threaded_blas():
                opt = exhaustive_best(tables, (), n, mem, models)
            gaps.append((grid_cost - opt) / abs(opt))
            plus = search_plus(tables, Problem(n, mem, args.seed), models, no_split_search, no_split_plus).cost
            plus_gaps.append((plus - opt) / abs(opt))
            if T <= (5 if n == 2 else 4):
                ns = search(tables, Problem(n, mem), models).cost
                with single_threaded_blas():
                    opt_split = min(exhaustive_best(tables, s, n, mem, models) for s in split_states(tables))
                split_gaps.append((ns - opt_split) / abs(opt_split))
                plus_split_gaps.append((search_plus(tables, Problem(n, mem, args.seed), models).cost - opt_split)
                                       / abs(opt_split))
                ns_vs_grid.append((ns - grid_cost) / abs(grid_cost))
        what = f"{n} devices, {len(gaps)} tasks of 4-{7 if n == 3 else 8} tables"
        print(f"  {what}, grid search (no splits) vs all placements: {_dist(gaps)}")
        print(f"  {what}, NeuroShard+ without splits vs all placements: {_dist(plus_gaps)}")
        if split_gaps:
            what = f"{n} devices, {len(split_gaps)} tasks of <= {5 if n == 2 else 4} tables"
            print(f"  {what}, NeuroShard vs all placements of all at-most-one-split-per-table states: "
                  f"{_dist(split_gaps)} (negative: better, it may split twice)")
            print(f"  {what}, NeuroShard+ vs the same: {_dist(plus_split_gaps)}")
        res[n] = {"grid_gaps": gaps, "plus_gaps": plus_gaps, "split_gaps": split_gaps,
                  "plus_split_gaps": plus_split_gaps, "neuroshard_vs_grid": ns_vs_grid}
    out["exhaustive"] = res


def part_baselines(args, out: dict) -> None:
    from neuroshard.eval.planning import plan_task, task_seed
    from neuroshard.eval.summary import summarize
    from neuroshard.planner.registry import algorithm_names, is_plain

    print("== quality: NeuroShard, NeuroShard+, NeuroShard's no-split start and the baselines "
          "(simulated cost, common tasks) ==")
    # Plain sharders only: TorchRec has its own part, DreamShard and AutoShard need trained policies.
    algs = [a for a in algorithm_names() if is_plain(a)]
    res = {}
    for n in (4, 8):
        models = load_models(args, n, args.seed)
        rng = np.random.default_rng(args.seed + 100 * n)
        records = []
        for i in range(args.baseline_tasks):
            tables = random_task(rng, int(rng.integers(10, 61)))
            for alg in algs:
                records.append(plan_task(i, tables, alg, Problem(n, args.max_mem, task_seed(args.seed, i)), models))
            try:
                start_plan, _ = grid_search(tables, Problem(n, args.max_mem), models)
            except OutOfMemoryError as e:
                records.append(PlanRecord(i, "neuroshard_no_split", status="oom", message=str(e)))
            else:
                records.append(PlanRecord(i, "neuroshard_no_split", plan=start_plan,
                                          estimate=simulate(tables, start_plan, models, Problem(n, args.max_mem))))
        names = algs + ["neuroshard_no_split"]
        s = summarize(records, names, args.baseline_tasks)
        print(f"  {n} devices, {args.baseline_tasks} tasks (T in 10..60, {args.max_mem:g} GB), "
              f"{s.common_tasks} valid for all:")
        for r in s.algorithms:
            gain = "" if r.alg == "neuroshard" else f"  NeuroShard better by {100 * r.neuroshard_gain:+.1f}%"
            took = "" if r.mean_search_ms is None else f"  search {r.mean_search_ms:.1f} ms"
            print(f"    {r.alg:<20} mean {r.mean_common:.3f} ms  valid {r.valid}/{r.tasks}{took}{gain}")
        p = plus_summary(records, [a for a in algs if a not in ("neuroshard", "neuroshard_plus")])
        if p:
            print(f"    neuroshard_plus vs neuroshard: mean cost {100 * p['gain_vs_neuroshard']:+.2f}% "
                  f"(per task: mean {100 * p['mean_task_gain']:+.2f}%, worst {100 * p['worst_task_gain']:+.2f}%); "
                  f"vs the best baseline of each task: worst {100 * p['worst_vs_best_baseline']:+.2f}%, "
                  f"above it on {p['tasks_above_best_baseline']}/{p['tasks']} tasks; "
                  f"search time {p['time_ratio']:.2f}x neuroshard's")
        res[n] = {**s.to_json(), "plus": p}
    out["baselines"] = res


def plus_summary(records, baselines) -> dict:
    """NeuroShard+ against NeuroShard and the best baseline, over the tasks where all have a plan:
    relative cost differences (negative: NeuroShard+ cheaper) and the ratio of total search times."""
    cost = {(r.alg, r.task): r.estimated_cost for r in records}
    ms = {(r.alg, r.task): r.search_ms for r in records}
    tasks = sorted({r.task for r in records})
    rows = []
    for t in tasks:
        plus, ns = cost.get(("neuroshard_plus", t)), cost.get(("neuroshard", t))
        base = [cost[(a, t)] for a in baselines if cost.get((a, t)) is not None]
        if plus is None or ns is None or not base:
            continue
        rows.append((plus, ns, min(base), ms[("neuroshard_plus", t)], ms[("neuroshard", t)]))
    if not rows:
        return {}
    plus, ns, best, t_plus, t_ns = (np.array(c) for c in zip(*rows))
    return {"tasks": len(rows), "gain_vs_neuroshard": float(plus.mean() / ns.mean() - 1),
            "mean_task_gain": float(np.mean(plus / ns - 1)), "worst_task_gain": float(np.max(plus / ns - 1)),
            "worst_vs_best_baseline": float(np.max(plus / best - 1)),
            "tasks_above_best_baseline": int(np.sum(plus > best)), "time_ratio": float(t_plus.sum() / t_ns.sum())}




def _plan_both(tables, n: int, max_mem: float, models) -> dict:
    """Planning time (ms) and simulated cost (ms, inf when out of memory) of NeuroShard and TorchRec."""
    from neuroshard.planner.shard import shard

    got = {}
    for alg in ("neuroshard", "torchrec"):
        try:
            r = shard(tables, Problem(n, max_mem), models, alg=alg)
            got[alg] = (r.search_ms, r.cost_ms)
        except OutOfMemoryError:
            got[alg] = (math.nan, math.inf)
    return got


def part_torchrec(args, out: dict) -> None:
    from neuroshard.planner.registry import missing_requirement, prepare

    print("== torchrec: TorchRec's planner vs NeuroShard, planning time and simulated cost (same tasks, models) ==")
    if missing_requirement("torchrec"):
        print("  skipped: torchrec is not installed (pip install --no-deps -r requirements-torchrec.txt)")
        return
    prepare("torchrec")  # its import is not planning time
    res = {}
    for n in (4, 8):
        models = load_models(args, n, args.seed)
        rng = np.random.default_rng(args.seed + 7 * n)
        _plan_both(random_task(rng, 10), n, args.max_mem, models)  # warm-up (scorer, lazy imports), not timed
        rows, ratios = [], []
        for T in range(10, 61, 10):
            runs = [_plan_both(random_task(rng, T), n, args.max_mem, models) for _ in range(args.torchrec_tasks)]
            ms = {a: [r[a][0] for r in runs] for a in ("neuroshard", "torchrec")}
            cost = {a: [r[a][1] for r in runs] for a in ("neuroshard", "torchrec")}
            ratio = float(np.median(ms["torchrec"]) / np.median(ms["neuroshard"]))
            ratios.append(ratio)
            rows.append({"T": T, "planning_ms": ms, "cost_ms": cost, "time_ratio": ratio})
            print(f"  {n} devices, T={T:2d}: planning median NeuroShard {np.median(ms['neuroshard']):8.1f} ms, "
                  f"TorchRec {np.median(ms['torchrec']):8.1f} ms (x{ratio:.1f}); mean cost NeuroShard "
                  f"{np.mean(cost['neuroshard']):.3f} ms, TorchRec {np.mean(cost['torchrec']):.3f} ms", flush=True)
        print(f"  {n} devices, all T: planning-time ratio TorchRec / NeuroShard, median over T "
              f"{np.median(ratios):.1f} (range {min(ratios):.1f}-{max(ratios):.1f})")
        res[n] = {"per_T": rows, "median_time_ratio": float(np.median(ratios))}
    res["scale"] = torchrec_at_scale(args)
    out["torchrec"] = res


def part_torchrec_scale(args, out: dict) -> None:
    from neuroshard.planner.registry import missing_requirement

    print("== torchrec_scale: TorchRec's planner vs NeuroShard on the scale task (TorchRec in a child process) ==")
    if missing_requirement("torchrec"):
        print("  skipped: torchrec is not installed (pip install --no-deps -r requirements-torchrec.txt)")
        return
    out["torchrec_scale"] = torchrec_at_scale(args)


def _scale_task(args, T: int, n: int):
    """The scale part's task of T tables for n devices and its memory cap (GB)."""
    tables = random_task(np.random.default_rng(args.seed + 1000), T)
    return tables, max(1.3 * sum(t.size_gb for t in tables) / n, 1.05 * max(t.size_gb for t in tables))


def _torchrec_child(conn, args, T: int, n: int) -> None:
    """In a child process: TorchRec's planner on the scale task; sends ("ready", RSS GB) once torchrec is imported,
    then ("done", planning ms, simulated cost ms (inf: out of memory), CPU s, peak RSS GB)."""
    from neuroshard.planner.registry import prepare
    from neuroshard.planner.shard import shard

    prepare("torchrec")
    models = load_models(args, n, args.seed)
    tables, cap = _scale_task(args, T, n)
    get_scorer(models)
    conn.send(("ready", peak_rss_gb()))
    c0 = time.process_time()
    try:
        r = shard(tables, Problem(n, cap), models, alg="torchrec")
        ms, cost = r.search_ms, r.cost_ms
    except OutOfMemoryError:
        ms, cost = math.nan, math.inf
    conn.send(("done", ms, cost, time.process_time() - c0, peak_rss_gb()))


def _vm_hwm_gb(pid: int) -> float | None:
    """Peak resident memory of a live process so far (VmHWM), GB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of a live process so far; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def torchrec_at_scale(args) -> dict:
    """NeuroShard (table-wise + column-wise) in this process and TorchRec's planner in a child process given
    --torchrec_timeout s of planning after its imports, on the first scale task: planning time, simulated cost,
    TorchRec's peak RSS (its process's, the imports included)."""
    import multiprocessing

    T, n = scale_sizes(args.scale_tables, args.scale_devices)[0]
    models = load_models(args, n, args.seed)
    tables, cap = _scale_task(args, T, n)
    get_scorer(models)  # built once per model set, as the evaluation does before timing
    t0 = time.perf_counter()
    ns = search(tables, Problem(n, cap), models)
    ns_s = time.perf_counter() - t0
    print(f"  {T} tables on {n} devices, max_mem {cap:.3f} GB: NeuroShard {ns_s:.2f} s, cost {ns.cost!r} ms",
          flush=True)
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_torchrec_child, args=(theirs, args, T, n), daemon=True)
    child.start()
    theirs.close()
    got, peak, start = {}, None, None
    while child.is_alive() or ours.poll():
        if ours.poll(0.2):
            msg = ours.recv()
            if msg[0] == "ready":
                start, got["rss_after_imports_gb"] = time.perf_counter(), msg[1]
            else:
                got.update(planning_ms=msg[1], cost_ms=msg[2], cpu_s=msg[3], peak_rss_gb=msg[4])
                break
        peak = _vm_hwm_gb(child.pid) or peak
        if start is not None and time.perf_counter() - start > args.torchrec_timeout:
            got["cpu_s"] = _cpu_s(child.pid)  # its imports included
            child.kill()
            break
    child.join()
    row = {"tables": T, "devices": n, "max_mem_gb": cap, "neuroshard_s": ns_s, "neuroshard_cost_ms": ns.cost,
           "timeout_s": args.torchrec_timeout, **got}
    if "planning_ms" in got:
        print(f"  TorchRec's planner {got['planning_ms'] / 1e3:.2f} s ({got['cpu_s']:.2f} s CPU), cost "
              f"{got['cost_ms']!r} ms, peak RSS {got['peak_rss_gb']:.2f} GB ({got['rss_after_imports_gb']:.2f} GB "
              f"after its imports); planning-time ratio TorchRec / NeuroShard "
              f"{got['planning_ms'] / 1e3 / ns_s:.1f}")
    else:
        why = (f"did not finish in {args.torchrec_timeout:g} s" if start is not None
               else f"stopped before planning (exit code {child.exitcode})")
        cpu = f" ({got['cpu_s']:.0f} s CPU with its imports)" if got.get("cpu_s") is not None else ""
        print(f"  TorchRec's planner {why}{cpu}; peak RSS so far {peak or math.nan:.2f} GB")
        row.update(finished=False, peak_rss_gb=peak)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="speed,scale,exhaustive,baselines,torchrec",
                   help="what to measure (default: %(default)s)")
    add_flag(p, "compute_model", None, help="trained compute model (default: synthetic)")
    p.add_argument("--comm_models", type=parse_comm_models, action="append", default=None,
                   help="N:FW_PATH,BW_PATH trained comm models for N devices (repeatable; default: synthetic)")
    Problem.add_args(p, skip=("ndevices",),
                     helps={"max_mem": "GB per device for the speed and baseline tasks",
                            "local_world_size": "spread, paper runtime: ranks per host of the scale tasks' devices "
                                                "(table-row-wise searched too)"})
    p.add_argument("--tasks_per_size", type=int, default=5, help="speed: tasks per table count (default: 5)")
    add_flag(p, "ensemble", help="speed: also time K-member ensembles of the cost models (NeuroShard and "
                                 "NeuroShard+)")
    p.add_argument("--noise", type=parse_noise, default=NO_NOISE,
                   help="speed, with --ensemble: the noise model NeuroShard+'s robust objective samples, as "
                        "COMPUTE,BW,FW,SHARED,RANK fractions (uncertainty.NoiseModel; e.g. "
                        "0.08,0.15,0.07,0.93,0.14) or none: the ensemble's spread alone, the fastest case")
    p.add_argument("--scale_tables", default="1000", help="scale: tables per task (comma list, paired with "
                                                          "--scale_devices) (default: 1000)")
    p.add_argument("--scale_devices", default="128", help="scale: devices (comma list) (default: 128)")
    add_flag(p, "runtime_model", help="spread: a fitted TorchRec runtime model for --scale_devices ranks "
                                      "(default: synthetic coefficients)")
    add_flag(p, "collective_model", help="spread, paper runtime: a fitted collective model for --scale_devices "
                                         "ranks (default: synthetic coefficients)")
    p.add_argument("--spread_runtimes", default="torchrec,paper",
                   help="spread: the runtimes whose every-type search is timed (default: torchrec,paper)")
    p.add_argument("--spread_reps", type=int, default=2, help="spread: timings of each search (default: 2)")
    p.add_argument("--exhaustive_tasks", type=int, default=60, help="per device count (default: 60)")
    p.add_argument("--baseline_tasks", type=int, default=20, help="per device count (default: 20)")
    p.add_argument("--torchrec_tasks", type=int, default=3,
                   help="torchrec: tasks per table count and device count (default: 3)")
    p.add_argument("--torchrec_timeout", type=float, default=600.0,
                   help="torchrec, torchrec_scale: seconds TorchRec's planner may plan the scale task (default: 600)")
    add_flag(p, "out_json")
    args = parse_flags(p, argv, __file__)
    if args.ensemble < 1:
        raise NeuroShardError(f"--ensemble: at least 1 member, got {args.ensemble}")
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    known = {"speed": part_speed, "scale": part_scale, "exhaustive": part_exhaustive, "baselines": part_baselines,
             "torchrec": part_torchrec, "spread": part_spread, "torchrec_scale": part_torchrec_scale}
    bad = [x for x in parts if x not in known]
    if bad:
        raise NeuroShardError(f"--parts: unknown {', '.join(bad)}; choose from {', '.join(known)}")
    wrong = [r for r in args.spread_runtimes.split(",") if r not in ("torchrec", "paper")]
    if wrong:
        raise NeuroShardError(f"--spread_runtimes: expected torchrec and/or paper, got {', '.join(wrong)}")
    if not args.noise.zero and (args.ensemble < 2 or "speed" not in parts):
        raise NeuroShardError(f"--noise: only the speed part's NeuroShard+ with --ensemble 2 or more samples it "
                              f"(got --parts {args.parts}, --ensemble {args.ensemble})")
    print(f"cost models: {'trained' if args.compute_model else 'synthetic (see --help)'}; "
          f"torch {torch.__version__}, numpy {np.__version__}")
    out = {"config": {**vars(args), "noise": args.noise.to_json()}}
    for x in parts:
        known[x](args, out)
    if args.out_json:
        write_json_atomic(args.out_json, out)
    return 0


if __name__ == "__main__":
    run_main(main)
