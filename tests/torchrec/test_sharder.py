"""`--alg torchrec`: TorchRec's planner in our plan space, its plans mapped to ours exactly, out of memory
reported as such, and a one-line error (and a skip in `--alg all`) without torchrec."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import neuroshard as ns
from neuroshard.eval.planning import plan_task
from neuroshard.planner.simulator import validate_plan
from neuroshard.problem import Problem
from neuroshard.torchrec.sharder import (
    TorchRecConfig,
    column_shards_for,
    plan_from_sharding_plan,
    plan_with_torchrec,
    table_names,
)
from neuroshard.types.errors import ConfigError, InvalidPlanError, OutOfMemoryError
from neuroshard.types.plan import ColumnPiece, Plan, plan_pieces
from neuroshard.types.tables import ShardTable, TableConfig

pytest.importorskip("torchrec")
ROOT = Path(__file__).resolve().parents[2]
GB_ROWS = 2**28  # rows of a 1 GB table at dim 1: a table of GB_ROWS // d rows and dim d is 1 GB


def tables_of(*rows_dims, table_ids=None):
    """Task tables of (rows, dim); pooling factor 2, the default locality bins."""
    ids = table_ids or range(len(rows_dims))
    return [ShardTable(i, tid, TableConfig(r, 2.0, ns.DEFAULT_BINS, d))
            for i, (tid, (r, d)) in enumerate(zip(ids, rows_dims))]


def torchrec_shards(sharding_plan, names):
    """Per table: (sharding type, [(col offset, cols, rank)]) of a TorchRec ShardingPlan (module "")."""
    out = {}
    for name in names:
        ps = sharding_plan.plan[""][name]
        out[name] = (ps.sharding_type, [(s.shard_offsets[1], s.shard_sizes[1], s.placement.rank())
                                        for s in ps.sharding_spec.shards])
    return out


def test_table_names_column_shards_and_settings():
    tables = tables_of((100, 8), (100, 8), (100, 8), (100, 8), table_ids=[3, 17, 17, 3])
    assert table_names(tables) == ["t3", "t17", "t17_1", "t3_1"]
    # the most halving shards (<= the setting) whose width stays a multiple of 4
    assert [column_shards_for(d, 2) for d in (128, 64, 8, 4, 12, 24)] == [2, 2, 2, 1, 1, 2]
    assert [column_shards_for(d, 4) for d in (128, 16, 8, 24)] == [4, 4, 2, 2]
    cfg = TorchRecConfig.from_options({"batch_size": 4096, "torchrec_column_shards": 4, "beam_k": 3})
    assert (cfg.batch_size, cfg.torchrec_column_shards) == (4096, 4)
    assert TorchRecConfig.from_options({"batch_size": None}).batch_size == 65536
    with pytest.raises(ConfigError, match="power of two"):
        TorchRecConfig(torchrec_column_shards=3)
    with pytest.raises(ConfigError, match="batch_size"):
        TorchRecConfig(batch_size=0)


def test_hand_made_torchrec_plan_maps_to_our_plan_exactly():
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.sharding_plan import (
        column_wise,
        construct_module_sharding_plan,
        table_wise,
    )
    from torchrec.distributed.types import ShardingPlan

    from neuroshard.torchrec.sharder import embedding_bag_collection

    tables = tables_of((1000, 16), (500, 32), (200, 64))
    names = table_names(tables)
    module_plan = construct_module_sharding_plan(
        embedding_bag_collection(tables, names),
        {"t0": table_wise(rank=1), "t1": column_wise(ranks=[0, 1]), "t2": column_wise(ranks=[1, 0, 0, 1])},
        sharder=EmbeddingBagCollectionSharder(), local_size=2, world_size=2, device_type="cuda")
    plan = plan_from_sharding_plan(ShardingPlan({"": module_plan}), tables, names, 2)
    # by hand: t1 split (1 -> 1 [0,16) | 3 [16,32)); t2 split into quarters depth-first:
    # 2 -> 2 [0,32) | 4 [32,64); 2 -> 2 [0,16) | 5 [16,32); 4 -> 4 [32,48) | 6 [48,64)
    assert plan == Plan((1, 2, 2, 4), ((1, 4, 5), (0, 2, 3, 6)))
    assert plan_pieces(tables, plan)[2] == [ColumnPiece(0, 16, 1), ColumnPiece(16, 16, 0),
                                            ColumnPiece(32, 16, 0), ColumnPiece(48, 16, 1)]
    with pytest.raises(InvalidPlanError, match="no table 't9'"):
        plan_from_sharding_plan(ShardingPlan({"": module_plan}), tables, ["t0", "t1", "t9"], 2)
    with pytest.raises(InvalidPlanError, match="device 1"):
        plan_from_sharding_plan(ShardingPlan({"": module_plan}), tables, names, 1)


def test_torchrec_planner_plan_maps_exactly_and_fits():
    # 2 devices of 1 GB; table 0 is 1.5 GB: TorchRec must split it column-wise (halves), one per device
    tables = tables_of((3 * GB_ROWS // 64 // 2, 64), (GB_ROWS // 16 // 8, 16), (GB_ROWS // 32 // 8, 32))
    sharding_plan = plan_with_torchrec(tables, Problem(2, 1.0), TorchRecConfig(batch_size=1024))
    names = table_names(tables)
    shards = torchrec_shards(sharding_plan, names)
    assert shards["t0"][0] == "column_wise" and [s[:2] for s in shards["t0"][1]] == [(0, 32), (32, 32)]
    assert sorted(s[2] for s in shards["t0"][1]) == [0, 1]
    plan = plan_from_sharding_plan(sharding_plan, tables, names, 2)
    validate_plan(tables, plan, Problem(2, 1.0))
    for t, name in enumerate(names):  # every TorchRec shard is one of our pieces: columns and device
        assert [tuple(p) for p in plan_pieces(tables, plan)[t]] == sorted(shards[name][1])
    # the registered sharder gives the same plan, and the library call records its planning time
    result = ns.shard(tables, ns.Problem(2, 1.0), alg="torchrec", batch_size=1024)
    assert result.plan == plan and result.search_ms > 0


def test_per_rank_batch_and_pooling_factors_reach_the_planner(monkeypatch):
    import torchrec.distributed.planner as tp

    seen = {}
    real = tp.EmbeddingShardingPlanner

    class Spy(real):
        def __init__(self, **kwargs):
            seen.update(batch=kwargs["batch_size"], constraints=kwargs["constraints"])
            super().__init__(**kwargs)

    monkeypatch.setattr(tp, "EmbeddingShardingPlanner", Spy)
    tables = tables_of((1000, 64), (1000, 4))
    ns.shard(tables, ns.Problem(4, 1.0), alg="torchrec", batch_size=4096, torchrec_column_shards=4)
    assert seen["batch"] == 1024
    c0, c1 = seen["constraints"]["t0"], seen["constraints"]["t1"]
    assert (c0.min_partition, c0.sharding_types, c0.compute_kernels, c0.pooling_factors) == \
        (16, ["table_wise", "column_wise"], ["fused"], [2.0])
    assert (c1.min_partition, c1.sharding_types) == (None, ["table_wise"])  # dim 4 cannot be split


def test_no_plan_within_memory_is_out_of_memory():
    too_much = tables_of((GB_ROWS // 64, 64), (GB_ROWS // 64, 64), (GB_ROWS // 64, 64))  # 3 GB on 2 x 1 GB
    with pytest.raises(OutOfMemoryError, match="TorchRec found no plan within max_mem 1 GB"):
        ns.shard(too_much, ns.Problem(2, 1.0), alg="torchrec")
    # 1.5 GB at dim 4 cannot be split, though the 2 devices hold 2 GB
    unsplittable = tables_of((3 * GB_ROWS // 4 // 2, 4), (100, 8))
    rec = plan_task(0, unsplittable, "torchrec", Problem(2, 1.0), models=None)
    assert rec.status == "oom" and "TorchRec found no plan" in rec.message and "\n" not in rec.message


def test_without_torchrec_one_line_error_and_alg_all_skips_it(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['torchrec'] = None  # as if torchrec were not installed\n"
        "import json, neuroshard as ns\n"
        "from neuroshard.eval.planning import resolve_algs\n"
        "t = [ns.TableConfig(100, 1.0, ns.DEFAULT_BINS, 8)]\n"
        "try:\n"
        "    ns.shard(t, ns.Problem(2, 1.0), alg='torchrec')\n"
        "except ns.NeuroShardError as e:\n"
        "    err = str(e)\n"
        "print(json.dumps({'error': err, 'all': resolve_algs('all'), 'named': 'torchrec' in ns.algorithm_names()}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    got = json.loads(out.stdout)
    assert "torchrec is not available" in got["error"] and "pip install" in got["error"]
    assert "\n" not in got["error"]
    assert "torchrec" not in got["all"] and got["all"][0] == "neuroshard" and got["named"]
    assert "skipping torchrec: torchrec is not installed" in out.stderr
