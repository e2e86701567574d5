"""Shard your own embedding tables: a plan, its per-device costs, and optionally a TorchRec plan.

    python tools/shard_tables.py --tables my_tables.csv --ndevices 4 --max_mem 4 \
        --models_dir results/quick --out my_plan.json
    python tools/shard_tables.py --tables my_tables.csv --ndevices 4 --max_mem 4 \
        --models_dir results/quick --torchrec_out my_plan.pt       # + my_plan.json for TorchRec
    python tools/shard_tables.py --tables my_tables.json --alg torchrec --batch_size 65536 ...

The table list is a CSV with a header (or a JSON list of objects) with
`name, rows, dim, pooling_factor` and optionally `bin_0` .. `bin_16`, the
locality bins of DESIGN §3; a table without them gets the locality profile
of the public DLRM dataset (`neuroshard.types.DEFAULT_BINS`) and a warning.
Dims must be multiples of 4; a table that fits no device even split
column-wise to its narrowest piece is refused, naming its row. The cost
models are a pipeline run's (`--models_dir`: the run's folder, its models/ or
models/onpolicy/, loaded as `CostModels.load_run` does: the on-policy models,
the collective model, ...; their comm models must be for `--ndevices`, or for
any world size: comm_fw.pt and comm_bw.pt), or the three checkpoints by path; `neuroshard` needs them,
the other algorithms plan without them (then no estimated ms are shown).
`--memory torchrec` plans through `NeuroShardPlanner` so that the plan fits
in what it counts a rank holds in training (TorchRec's storage estimate of
weights, input and output buffers at the per-rank batch `--batch_size /
--ndevices`, TorchRec's 512 without it, and what that estimate misses; within
90% of `--max_mem`); the default, `weights`, counts the fp32 weights.

Prints the plan per device (tables, dim sum, memory, estimated compute,
comm and total ms) and writes it as a one-task plans file (`--out`; the
format of eval_simulator.py's plans.json, with table names in the view).
`--torchrec_out PATH` also writes the TorchRec ShardingPlan (torch.save) and
its readable JSON beside it; see the README for handing it to
DistributedModelParallel.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from neuroshard.cli import run_main
from neuroshard.planner.registry import add_sharder_args
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.torchrec.export import ExportConfig


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Shard your own embedding tables with NeuroShard (or any --alg).")
    add_flag(p, "tables", required=True)
    Problem.add_args(p)
    add_flag(p, "alg")
    add_flag(p, "models_dir")
    add_flag(p, "compute_model", None, help="compute cost model checkpoint (instead of --models_dir)")
    add_flag(p, "fw_comm_model", help="forward comm cost model checkpoint")
    add_flag(p, "bw_comm_model", help="backward comm cost model checkpoint")
    add_flag(p, "calibration")
    add_flag(p, "batch_size", help="global training batch the costs are for (default: the batch of the cost "
                                   "models' data) and TorchRec's (default: 65536, the public dataset's)")
    p.add_argument("--memory", choices=("weights", "torchrec"), default="weights",
                   help="what must fit in --max_mem: the fp32 weights (default), or what NeuroShardPlanner counts "
                        "a rank holds in training (TorchRec's storage count and what it misses, at the per-rank "
                        "batch, a 10%% reservation)")
    add_flag(p, "out", "shard_plan.json", help="plan file to write")
    p.add_argument("--torchrec_out", default=None,
                   help="also write the TorchRec ShardingPlan here (e.g. plan.pt) and its JSON view beside it")
    ExportConfig.add_args(p)
    add_sharder_args(p)
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_int, check_output_file
    from neuroshard.formats.plan_file import write_plans
    from neuroshard.formats.user_tables import read_user_tables
    from neuroshard.planner import user_plan as ut
    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.planner.registry import sharder_options
    from neuroshard.types.errors import ConfigError, NeuroShardError

    problem = Problem.from_args(args)
    ndevices = problem.ndevices
    if args.batch_size is not None:
        check_int("--batch_size", args.batch_size, 1)
        if args.batch_size % ndevices:
            raise ConfigError("--batch_size", f"{args.batch_size} is the global batch: it must split evenly over "
                                              f"the {ndevices} devices (--ndevices)")
    options = sharder_options(args, args.batch_size)  # one-line error on a bad value, before any work
    export = ExportConfig.from_args(args)
    if args.torchrec_out and Path(args.torchrec_out).with_suffix(".json").resolve() == Path(args.out).resolve():
        raise ConfigError("--torchrec_out", f"its JSON view {Path(args.torchrec_out).with_suffix('.json')} would "
                                            f"overwrite --out {args.out}: name them differently")
    check_output_file("--out", args.out)  # before planning, not after it
    if args.torchrec_out:
        check_output_file("--torchrec_out", args.torchrec_out)
    user = read_user_tables(args.tables, max(problem.caps))
    problem = replace(problem, constraints=user.constraints(ndevices, args.tables), batch_size=args.batch_size)
    paths = (args.compute_model, args.fw_comm_model, args.bw_comm_model)
    if any(paths) and not all(paths):
        raise NeuroShardError("give all three of --compute_model, --fw_comm_model, --bw_comm_model "
                                 "(or --models_dir)")
    models = (CostModels.from_paths(*paths, ndevices) if all(paths) else
              CostModels.load_run(args.models_dir, ndevices) if args.models_dir else None)
    if models is not None and args.models_dir:
        print(models.describe(), file=sys.stderr)
    if args.calibration:
        from neuroshard.eval.drift import calibrated, read_calibration

        if models is None:
            raise ConfigError("--calibration", "scales the cost models: give --models_dir or the three model flags")
        factors = read_calibration(args.calibration)
        models = calibrated(models, factors)
        print(f"models scaled by the calibration in {args.calibration}: compute {factors['compute']:.3f}x, "
              f"fw {factors['fw_comm']:.3f}x, bw {factors['bw_comm']:.3f}x", file=sys.stderr)
    if args.memory == "torchrec":
        result = torchrec_counted(user, problem, models, args, options)
    else:
        result = ut.shard_user_tables(user.configs, problem, models, args.alg, options)
    print(ut.device_table(result, user.names))
    if result.breakdown is not None:
        from neuroshard.planner.costs.extrapolation import warnings

        for line in warnings(result.tables, result.plan, result.breakdown, models, user.names):
            print(f"warning: {line}", file=sys.stderr)
    write_plans(args.out, [ut.user_plan_record(result, user.names)])
    print(f"wrote {args.out}", file=sys.stderr)
    if args.torchrec_out:
        written = export.export(args.torchrec_out, result.tables, result.plan, user.names)
        print(f"wrote the TorchRec plan: {' and '.join(map(str, written))}", file=sys.stderr)
    return 0


def torchrec_counted(user, problem: Problem, models, args, options: dict):
    """The user's tables planned by NeuroShardPlanner (one EmbeddingBagCollection, a --torchrec_device topology
    of --max_mem GB per device) so that the plan fits in its memory count; its ShardResult."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.distributed.planner.types import PlannerError, Topology

    from neuroshard.planner.registry import options_for
    from neuroshard.planner.user_plan import user_shard_tables
    from neuroshard.torchrec.planner import NeuroShardPlanner
    from neuroshard.torchrec.sharder import embedding_bag_collection
    from neuroshard.types.errors import OutOfMemoryError

    ndevices = problem.ndevices
    kind = "hbm" if args.torchrec_device == "cuda" else "ddr"
    caps = [int(m * 2**30) for m in problem.caps]
    topology = Topology(world_size=ndevices, compute_device=args.torchrec_device,
                        local_world_size=args.local_world_size or ndevices, **{f"{kind}_cap": min(caps)})
    for device, cap in zip(topology.devices, caps):  # devices of unequal memory
        setattr(device.storage, kind, cap)
    constraints = {n: ParameterConstraints(pooling_factors=[c.pooling_factor],
                                           sharding_types=["table_wise"] if n in user.whole else None)
                   for n, c in zip(user.names, user.configs)}
    planner = NeuroShardPlanner(topology, batch_size=args.batch_size // ndevices if args.batch_size else None,
                                constraints=constraints, alg=args.alg, models=models, ranks=user.ranks,
                                colocate=list(user.groups.values()),
                                table_stats={n: c.bins for n, c in zip(user.names, user.configs)},
                                seed=problem.seed, **{k: v for k, v in options_for(args.alg, options).items()
                                                   if k != "batch_size"})
    try:
        planner.plan(embedding_bag_collection(user_shard_tables(user.configs), user.names),
                     [EmbeddingBagCollectionSharder()])
    except PlannerError as e:
        raise OutOfMemoryError(str(e).strip().splitlines()[0], max_mem=min(problem.caps)) from None
    return planner.last_result


if __name__ == "__main__":
    run_main(main)
