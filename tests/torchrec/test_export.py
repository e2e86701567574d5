"""Plan export to TorchRec: TorchRec's constructors give back the planner's own plan, uneven splits become
adjacent equal shards, and DistributedModelParallel on 2 CPU gloo ranks shards an EmbeddingBagCollection
with an exported plan and pools exactly what the unsharded module pools."""

import json
import os
from datetime import timedelta

import pytest

from neuroshard.formats.sharding_file import read_torchrec_plan
from neuroshard.problem import Problem
from neuroshard.torchrec.export import export_torchrec_plan, torchrec_sharding_plan
from neuroshard.torchrec.sharder import (
    TorchRecConfig,
    plan_from_sharding_plan,
    plan_with_torchrec,
    table_names,
)
from neuroshard.types.errors import InvalidPlanError
from neuroshard.types.plan import ColumnPiece, Plan, Spread, plan_pieces, row_blocks
from tests.torchrec.test_sharder import GB_ROWS, tables_of, torchrec_shards
from tests.two_nodes import spawn_ranks

pytest.importorskip("torchrec")


def test_torchrec_plan_round_trips_through_our_plan_and_the_export(tmp_path):
    # 2 devices of 1 GB: table 0 (1.5 GB) must be cut in quarters (column_shards=4) or halves
    tables = tables_of((3 * GB_ROWS // 64 // 2, 64), (GB_ROWS // 16 // 8, 16), (GB_ROWS // 32 // 8, 32), (5000, 8))
    names = table_names(tables)
    planned = plan_with_torchrec(tables, Problem(2, 1.0), TorchRecConfig(batch_size=1024, torchrec_column_shards=4))
    plan = plan_from_sharding_plan(planned, tables, names, 2)
    assert len(plan.column_steps) >= 1
    exported = torchrec_sharding_plan(tables, plan, names, device_type="cuda")
    assert torchrec_shards(exported, names) == torchrec_shards(planned, names)
    for name in names:
        assert exported.plan[""][name].compute_kernel == "fused"
    # through the files: the .pt loads back into the same plan, the JSON names every shard
    pt, js = export_torchrec_plan(tmp_path / "plan.pt", tables, plan, names)
    assert plan_from_sharding_plan(read_torchrec_plan(pt), tables, names, 2) == plan
    view = json.loads(js.read_text())
    assert view["world_size"] == 2 and [t["table"] for t in view["modules"][""]] == names
    for t in view["modules"][""]:
        ps = exported.plan[""][t["table"]]
        assert t["sharding_type"] == ps.sharding_type and t["ranks"] == list(ps.ranks)
        assert [(s["col_offset"], s["cols"], s["rank"]) for s in t["shards"]] == torchrec_shards(exported, names)[
            t["table"]][1]


def test_spread_tables_are_exported_with_torchrecs_types_blocks_and_kernels():
    from torchrec.distributed.sharding_plan import _calculate_rw_shard_sizes_and_offsets

    tables = tables_of((10, 16), (1000, 8), (50, 4), (7, 8))
    names = ["a", "b", "c", "d"]
    plan = Plan((0,), ((0,), (4,), (), ()), (Spread(1, "row_wise", (0, 1, 2, 3)),
                                              Spread(2, "data_parallel", (0, 1, 2, 3)),
                                              Spread(3, "table_row_wise", (2, 3))))
    for device_type in ("cpu", "cuda"):
        exported = torchrec_sharding_plan(tables, plan, names, device_type=device_type, local_size=2).plan[""]
        assert (exported["a"].sharding_type, exported["a"].compute_kernel) == ("column_wise", "fused")
        b, c, d = exported["b"], exported["c"], exported["d"]
        assert (b.sharding_type, b.compute_kernel, b.ranks) == ("row_wise", "fused", [0, 1, 2, 3])
        assert [s.shard_sizes[0] for s in b.sharding_spec.shards] == row_blocks(1000, 4) == [250] * 4
        assert (c.sharding_type, c.compute_kernel, c.ranks) == ("data_parallel", "dense", [0, 1, 2, 3])
        assert (d.sharding_type, d.compute_kernel, d.ranks) == ("table_row_wise", "fused", [2, 3])
        assert [(s.placement.rank(), s.shard_offsets[0], s.shard_sizes[0]) for s in d.sharding_spec.shards] == [
            (2, 0, 4), (3, 4, 3)]
    for rows, k in [(10, 4), (5, 4), (1000, 3), (7, 2), (1, 8)]:  # our blocks are TorchRec's own
        assert row_blocks(rows, k) == [size[0] for size in _calculate_rw_shard_sizes_and_offsets(rows, k, 8)[0]]
    with pytest.raises(InvalidPlanError, match=r"table 3 \(d\) is table_row_wise over ranks \[2, 3\], not one "
                                               "host of 4 ranks"):
        torchrec_sharding_plan(tables, plan, names, device_type="cpu")


def test_unpooled_tables_are_exported_as_an_embedding_collections_plan():
    """Pooled tables go to the EmbeddingBagCollection's module plan, unpooled ones to the EmbeddingCollection's (its
    path given), each made by its own sharder; a plan of both kinds needs the second path, and an unpooled table
    cannot be table-row-wise (TorchRec's EmbeddingCollectionSharder has no such sharding)."""
    from dataclasses import replace

    from neuroshard.types.errors import ConfigError

    tables = tables_of((100, 16), (200, 8), (300, 16))
    tables[1] = replace(tables[1], config=replace(tables[1].config, pooled=False))
    names = ["a", "s", "b"]
    plan = Plan((), ((0,), (1, 2)))
    exported = torchrec_sharding_plan(tables, plan, names, device_type="cpu", module_path="sparse.ebc",
                                      sequence_path="sparse.ec").plan
    assert {p: sorted(m) for p, m in exported.items()} == {"sparse.ebc": ["a", "b"], "sparse.ec": ["s"]}
    assert (exported["sparse.ec"]["s"].sharding_type, exported["sparse.ec"]["s"].ranks) == ("table_wise", [1])
    assert exported["sparse.ec"]["s"].compute_kernel == "fused"
    only = torchrec_sharding_plan([replace(tables[1], origin=0)], Plan((), ((), (0,))), ["s"], device_type="cpu").plan
    assert list(only) == [""] and list(only[""]) == ["s"]
    with pytest.raises(ConfigError, match=r"--sequence_module_path: the plan has pooled and unpooled \(sequence\) "
                                          r"tables \(s, ...\)"):
        torchrec_sharding_plan(tables, plan, names, device_type="cpu")
    with pytest.raises(ConfigError, match="'x' is the EmbeddingBagCollection's path too"):
        torchrec_sharding_plan(tables, plan, names, device_type="cpu", module_path="x", sequence_path="x")
    with pytest.raises(InvalidPlanError, match=r"table 1 \(s\) is unpooled and table_row_wise"):
        torchrec_sharding_plan(tables, Plan((), ((0,), (2,)), (Spread(1, "table_row_wise", (0, 1)),)), names,
                               device_type="cpu", sequence_path="ec")


def test_uneven_split_is_exported_as_adjacent_equal_shards():
    tables = tables_of((1000, 16), (500, 32), (200, 32))
    names = ["user_id", "item", "ad"]
    # t2 split unevenly: [0,16) on 0, [16,24) on 1, [24,32) on 0; post-split 2 = [0,16), 3 = [16,32) -> 3 = [16,24),
    # 4 = [24,32); t1 in halves: 1 = [0,16) on 0, 5 = [16,32) on 1
    plan = Plan((2, 3, 1), ((1, 2, 4), (0, 3, 5)))
    exported = torchrec_sharding_plan(tables, plan, names, device_type="cpu")
    got = torchrec_shards(exported, names)
    assert got["user_id"] == ("table_wise", [(0, 16, 1)])
    assert got["item"] == ("column_wise", [(0, 16, 0), (16, 16, 1)])
    assert got["ad"] == ("column_wise", [(0, 8, 0), (8, 8, 0), (16, 8, 1), (24, 8, 0)])
    assert str(exported.plan[""]["ad"].sharding_spec.shards[0].placement) == "rank:0/cpu"
    # back: the same columns on the same devices, the wide piece as two shards
    back = plan_from_sharding_plan(exported, tables, names, 2)
    assert plan_pieces(tables, back)[2] == [ColumnPiece(0, 8, 0), ColumnPiece(8, 8, 0), ColumnPiece(16, 8, 1),
                                            ColumnPiece(24, 8, 0)]
    with pytest.raises(InvalidPlanError, match="distinct table names"):
        torchrec_sharding_plan(tables, plan, ["a", "a", "b"])
    with pytest.raises(InvalidPlanError, match="placed"):
        torchrec_sharding_plan(tables, Plan((), ((0, 1), (1, 2))), names)


# --------------------------------------------------------------------------- DistributedModelParallel

DMP_TABLES = [(50, 16), (40, 32), (30, 32)]  # (rows, dim)
DMP_NAMES = ["user_id", "item", "ad"]
# user_id table-wise on rank 1; item in halves on 0 and 1; ad split unevenly: [0,16) on 0, [16,24) on 1,
# [24,32) on 0 (exported as column_wise(ranks=[0, 0, 1, 0]))
DMP_PLAN = Plan((2, 3, 1), ((1, 2, 4), (0, 3, 5)))


def _dmp_rank(rank: int, world: int, port: int, plan_path: str, out_dir: str) -> None:
    """One gloo rank: shard the EmbeddingBagCollection with the exported plan, give every shard the
    unsharded module's weights, and compare the pooled embeddings of this rank's batch."""
    import torch
    import torch.distributed as dist
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from neuroshard.torchrec.sharder import embedding_bag_collection

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    tables = tables_of(*DMP_TABLES)
    torch.manual_seed(0)  # the same unsharded weights on every rank
    unsharded = embedding_bag_collection(tables, DMP_NAMES, device="cpu")
    for p in unsharded.parameters():
        torch.nn.init.uniform_(p, -1.0, 1.0)
    plan = read_torchrec_plan(plan_path)
    model = DistributedModelParallel(embedding_bag_collection(tables, DMP_NAMES), device=torch.device("cpu"),
                                     plan=plan, sharders=[EmbeddingBagCollectionSharder()])
    full = unsharded.state_dict()
    local = {}
    for key, value in model.state_dict().items():
        for shard in value.local_shards():
            (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.detach().copy_(full[key][r0:r0 + nr, c0:c0 + nc])
            local.setdefault(key.split(".")[-2], []).append([c0, nc])
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batch of 4 samples
    batch = 4
    lengths = torch.randint(0, 4, (len(tables) * batch,), generator=g)
    values = torch.cat([torch.randint(0, rows, (int(lengths[t * batch:(t + 1) * batch].sum()),), generator=g)
                        for t, (rows, _) in enumerate(DMP_TABLES)])
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=DMP_NAMES, values=values, lengths=lengths)
    got = model(kjt)
    got = got.wait() if hasattr(got, "wait") else got
    want = unsharded(kjt)
    diff = {k: float((got[k] - want[k]).abs().max()) for k in DMP_NAMES}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump({"diff": diff, "shape": list(got.values().shape), "local": local,
                   "norm": float(want.values().abs().sum())}, fh)
    dist.destroy_process_group()


def test_distributed_model_parallel_accepts_the_exported_plan(tmp_path):
    tables = tables_of(*DMP_TABLES)
    pt, _ = export_torchrec_plan(tmp_path / "plan.pt", tables, DMP_PLAN, DMP_NAMES, device_type="cpu")
    spawn_ranks(_dmp_rank, str(pt), str(tmp_path), seconds=120, what="DistributedModelParallel ranks")
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for res in results:
        assert res["shape"] == [4, 16 + 32 + 32] and res["norm"] > 0
        assert res["diff"] == {"user_id": 0.0, "item": 0.0, "ad": 0.0}
    # each rank holds exactly the shards of the plan: (first column, columns) per table
    assert results[0]["local"] == {"item": [[0, 16]], "ad": [[0, 8], [8, 8], [24, 8]]}
    assert results[1]["local"] == {"user_id": [[0, 16]], "item": [[16, 16]], "ad": [[16, 8]]}
