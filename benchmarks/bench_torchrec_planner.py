"""NeuroShardPlanner's own overhead inside TorchRec: `plan()` wall time without the cost models' loading.

    python benchmarks/bench_torchrec_planner.py                          # 100 tables, 8 ranks, synthetic models
    python benchmarks/bench_torchrec_planner.py --num_tables 100 --ranks 8 --repeats 5 --alg neuroshard

Builds a model with two EmbeddingBagCollections (the tables split between them, random rows, dims and
pooling factors, on the meta device), a TorchRec `Topology` of `--ranks` GPUs of 16 GB, and plans it
`--repeats` times with fresh planners; prints the median and range of `plan()` (TorchRec's enumeration and
storage estimate, the search, TorchRec's memory check, the ShardingPlan) and of the search alone. Target:
at most 1 s for 100 tables on 8 ranks. Cost models: the synthetic ones of bench_search.py, or trained ones
(--models_dir, for --ranks devices).
"""

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_search import load_models  # noqa: E402
from neuroshard.settings import add_flag, parse_flags  # noqa: E402


def build_model(num_tables: int, seed: int):
    import torch
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    rng = np.random.default_rng(seed)
    configs, constraints = [[], []], {}
    for i in range(num_tables):
        name = f"t{i}"
        configs[i % 2].append(EmbeddingBagConfig(name=name, embedding_dim=int(rng.choice([16, 32, 64, 128])),
                                                 num_embeddings=int(10 ** rng.uniform(3, 6.5)), feature_names=[name]))
        constraints[name] = ParameterConstraints(pooling_factors=[float(rng.uniform(1, 40))])
    model = torch.nn.Module()
    model.sparse = torch.nn.Module()
    model.sparse.ebc = EmbeddingBagCollection(tables=configs[0], device=torch.device("meta"))
    model.ebc = EmbeddingBagCollection(tables=configs[1], device=torch.device("meta"))
    return model, constraints


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "num_tables", 100)
    p.add_argument("--ranks", type=int, default=8, help="ranks of the topology (default: 8)")
    add_flag(p, "repeats", 5, help="plans timed")
    add_flag(p, "alg")
    add_flag(p, "models_dir", help="trained models for --ranks devices (default: synthetic)")
    add_flag(p, "seed")
    add_flag(p, "out_json")
    args = parse_flags(p, argv, __file__)
    import logging

    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import Topology

    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.torchrec.planner import NeuroShardPlanner

    logging.getLogger("neuroshard").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    models = (CostModels.load_run(args.models_dir, args.ranks) if args.models_dir else
              load_models(argparse.Namespace(compute_model=None, comm_models=None), args.ranks, args.seed))
    model, constraints = build_model(args.num_tables, args.seed)
    topology = Topology(world_size=args.ranks, compute_device="cuda", hbm_cap=16 * 2**30)
    plan_s, search_s = [], []
    for _ in range(args.repeats + 1):  # the first run warms up imports and caches, not counted
        planner = NeuroShardPlanner(topology, models=models, constraints=constraints, alg=args.alg,
                                    batch_size=1024)
        t0 = time.perf_counter()
        planner.plan(model, [EmbeddingBagCollectionSharder()])
        plan_s.append(time.perf_counter() - t0)
        search_s.append(planner.last_result.search_ms / 1e3)
    plan_s, search_s = plan_s[1:], search_s[1:]
    result = {"tables": args.num_tables, "ranks": args.ranks, "alg": args.alg, "repeats": args.repeats,
              "plan_s": {"median": statistics.median(plan_s), "min": min(plan_s), "max": max(plan_s)},
              "search_s": {"median": statistics.median(search_s), "min": min(search_s), "max": max(search_s)},
              "target_s": 1.0}
    print(f"NeuroShardPlanner.plan, {args.num_tables} tables on {args.ranks} ranks ({args.alg}, {args.repeats} runs): "
          f"median {result['plan_s']['median']:.3f} s [{min(plan_s):.3f}, {max(plan_s):.3f}], of which the search "
          f"{result['search_s']['median']:.3f} s; target <= 1 s: {'met' if max(plan_s) <= 1.0 else 'MISSED'}")
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
