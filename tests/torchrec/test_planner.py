"""NeuroShardPlanner inside TorchRec: tables found at any module path, constraints honoured, memory as TorchRec
counts it, TorchRec's error with the numbers, and a model with two collections trained by
DistributedModelParallel on 2 gloo ranks with the planner's plan (every sharding type among them; and beside them
an EmbeddingCollection's unpooled tables, planned as one problem), losses equal to the unsharded model's.
TorchRec's own planner contract: test_planner_contract.py."""

import json
import os
from datetime import timedelta

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torchrec.distributed.embedding import EmbeddingCollectionSharder  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import ParameterConstraints, Topology  # noqa: E402
from torchrec.distributed.planner.types import PlannerError, Shard  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection  # noqa: E402

from neuroshard.torchrec.planner import NeuroShardPlanner  # noqa: E402
from neuroshard.torchrec.training import all_types_sharder  # noqa: E402
from neuroshard.types.errors import (
    ConfigError,
    InputError,  # noqa: E402
)
from tests.planner.search.test_beam import random_models  # noqa: E402
from tests.two_nodes import spawn_ranks  # noqa: E402

A_TABLES = [(60, 16), (50, 32), (40, 8)]  # (rows, dim) of sparse.ebc_a's a0, a1, a2
B_TABLES = [(70, 32), (30, 16)]  # ebc_b's b0, b1
C_TABLES = [(80, 16), (50, 16), (40, 16)]  # the EmbeddingCollection's c0, c1, c2 (unpooled; one dim, as it needs)
CONSTRAINTS = {"a1": ParameterConstraints(sharding_types=["table_wise"], pooling_factors=[3.0]),
               "b0": ParameterConstraints(pooling_factors=[2.0])}


def collection(prefix, specs, device="meta"):
    return EmbeddingBagCollection(tables=[EmbeddingBagConfig(name=f"{prefix}{i}", embedding_dim=d, num_embeddings=r,
                                                             feature_names=[f"{prefix}{i}"])
                                          for i, (r, d) in enumerate(specs)], device=torch.device(device))


class TwoCollections(nn.Module):
    """Two EmbeddingBagCollections at different paths; the output is the sum of every pooled embedding."""

    def __init__(self, device="meta"):
        super().__init__()
        self.sparse = nn.Module()
        self.sparse.ebc_a = collection("a", A_TABLES, device)
        self.ebc_b = collection("b", B_TABLES, device)

    def forward(self, kjt_a, kjt_b):
        a, b = self.sparse.ebc_a(kjt_a), self.ebc_b(kjt_b)
        return torch.cat([a.values(), b.values()], dim=1).sum(dim=1)


class Mixed(TwoCollections):
    """`TwoCollections` and an EmbeddingCollection (`ec`, unpooled): per sample, the sum of its pooled embeddings
    and of every row its sequences looked up."""

    def __init__(self, device="meta"):
        super().__init__(device)
        self.ec = EmbeddingCollection(tables=[EmbeddingConfig(name=f"c{i}", embedding_dim=d, num_embeddings=r,
                                                              feature_names=[f"c{i}"])
                                              for i, (r, d) in enumerate(C_TABLES)], device=torch.device(device))

    def forward(self, kjt_a, kjt_b, kjt_c):
        out = super().forward(kjt_a, kjt_b)
        for seq in self.ec(kjt_c).values():  # a JaggedTensor per feature: its rows, the samples' lengths
            sample = torch.repeat_interleave(torch.arange(len(seq.lengths())), seq.lengths())
            out = out.index_add(0, sample, seq.values().sum(dim=1))
        return out


def topology(cap=2**30, world=2, device="cpu"):
    return Topology(world_size=world, compute_device=device, hbm_cap=cap, ddr_cap=cap)


def sharders():
    return [EmbeddingBagCollectionSharder()]


def test_finds_every_collection_and_honours_the_constraints():
    # NeuroShard+ under random models splits freely; a1 is limited to table-wise and must stay whole
    planner = NeuroShardPlanner(topology(), models=random_models(2, 3), constraints=CONSTRAINTS,
                                alg="neuroshard_plus")
    plan = planner.plan(TwoCollections(), sharders())
    assert set(plan.plan) == {"sparse.ebc_a", "ebc_b"}
    assert set(plan.plan["sparse.ebc_a"]) == {"a0", "a1", "a2"} and set(plan.plan["ebc_b"]) == {"b0", "b1"}
    assert plan.plan["sparse.ebc_a"]["a1"].sharding_type == "table_wise"
    for module_plan in plan.plan.values():
        for ps in module_plan.values():
            assert ps.sharding_type in ("table_wise", "column_wise") and set(ps.ranks) <= {0, 1}
    # the tables as the planner saw them: rows, dims, pooling from the constraints (1.0 where none)
    tables, _ = planner._tables(TwoCollections(), sharders())
    seen = {t.name: (t.table.row, t.table.dim, t.table.pooling_factor, t.splittable) for t in tables}
    assert seen == {"a0": (60, 16, 1.0, True), "a1": (50, 32, 3.0, False), "a2": (40, 8, 1.0, True),
                    "b0": (70, 32, 2.0, True), "b1": (30, 16, 1.0, True)}
    assert planner.last_result is not None and planner.last_seconds > 0


def test_embedding_bag_and_embedding_collections_are_planned_as_one_problem(caplog):
    """Two EmbeddingBagCollections and an EmbeddingCollection (`Mixed`): every table found, the EC's unpooled (said
    once, in one line naming them), in a module plan of its own. The plan's dim sums are what the devices send
    per sample: 56 + 48 floats of the bags' dims, and of the EC's tables dim x pooling factor (16 x 1.5 + 16 + 16)."""
    import logging

    cons = {**CONSTRAINTS, "c0": ParameterConstraints(pooling_factors=[1.5])}
    planner = NeuroShardPlanner(topology(), models=random_models(2, 3), constraints=cons, alg="neuroshard")
    sharders = [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]
    with caplog.at_level(logging.WARNING, logger="neuroshard.torchrec.planner"):
        plan = planner.plan(Mixed(), sharders)
    notes = [r.getMessage() for r in caplog.records if "unpooled" in r.getMessage()]
    assert set(plan.plan) == {"sparse.ebc_a", "ebc_b", "ec"} and set(plan.plan["ec"]) == {"c0", "c1", "c2"}
    tables, _ = planner._tables(Mixed(), sharders)
    assert {t.name: t.table.pooled for t in tables} == {**{n: True for n in ("a0", "a1", "a2", "b0", "b1")},
                                                         "c0": False, "c1": False, "c2": False}
    assert len(notes) == 1 and notes[0].startswith("NeuroShardPlanner: c0, c1, c2: unpooled (sequence) tables")
    assert sum(planner.last_result.breakdown.dims) == 56 + 48 + 24 + 16 + 16


def test_memory_counted_as_torchrec_counts_it():
    # four 1000 x 64 tables on 2 CPU ranks of 800,000 B less 10%: 720,000 B each. Their fp32 weights (256,000 B
    # each, two per device) fit; TorchRec's count at batch 512 (weights + input and output buffers: 526,336 B per
    # table, 267,264 B per half) does not, whatever the split; nor does the planner's, which adds a CPU step's
    # buffers: 7 more times TorchRec's input and output buffers (270,336 B a table, 139,264 B a half)
    model = collection("t", [(1000, 64)] * 4)
    weights = NeuroShardPlanner(topology(800_000), alg="size_greedy", memory="weights")
    plan = weights.plan(model, sharders())
    assert sorted(len([n for n, ps in plan.plan[""].items() if ps.ranks == [r]]) for r in (0, 1)) == [2, 2]
    full = NeuroShardPlanner(topology(800_000), alg="size_greedy")
    tables, _ = full._tables(model, sharders())
    whole, half = [Shard(size=[1000, 64], offset=[0, 0])], [Shard(size=[1000, 32], offset=[0, 32 * k]) for k in (0, 1)]
    assert full._estimate(tables[0], "table_wise", whole, count="estimator") == [526336.0]
    assert full._estimate(tables[0], "column_wise", half, count="estimator") == [267264.0] * 2
    assert full._storage(tables[0], [64]) == [526336.0 + 7 * 270336] == [2418688.0]
    assert full._storage(tables[0], [32, 32]) == [267264.0 + 7 * 139264] * 2
    with pytest.raises(PlannerError, match=r"cannot place 4 tables on 2 devices of 0.0007451 GB each \(the "
                                           r"topology's, 10% reserved; torchrec count\): they need 0.00901 GB in "
                                           r"all, the largest \(t0\) 0.002253 GB; the buffers and optimizer state"):
        full.plan(model, sharders())
    # with room for three tables per device (7,290,000 B against 3 x 2,418,688), the plan fits in the count
    roomy = NeuroShardPlanner(topology(8_100_000), alg="size_greedy")
    plan = roomy.plan(model, sharders())
    used = roomy.device_storage(tables, roomy.last_result.plan)
    assert sum(used) == pytest.approx(4 * 2418688) and max(used) <= 0.9 * 8_100_000


def test_an_unplaceable_table_is_torchrecs_error_with_the_numbers():
    with pytest.raises(PlannerError, match=r"they need 0\.002159 GB in all, the largest \(big0\) 0\.002159 GB"):
        NeuroShardPlanner(topology(1_000_000, device="cuda"), alg="size_greedy").plan(collection("big", [(8000, 64)]),
                                                                                      sharders())


def test_bad_settings_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="memory"):
        NeuroShardPlanner(topology(), memory="fp16")
    with pytest.raises(ConfigError, match="3 devices, the topology has 2"):
        NeuroShardPlanner(topology(), models=random_models(3, 0))
    with pytest.raises(Exception, match="unknown"):
        NeuroShardPlanner(topology(), alg="nope")
    bad = tmp_path / "stats.json"
    bad.write_text(json.dumps({"a0": [0.5, 0.5]}))
    with pytest.raises(InputError, match="table 'a0': expected 17 non-negative bins"):
        NeuroShardPlanner(topology(), table_stats=bad)
    with pytest.raises(InputError, match="not found"):
        NeuroShardPlanner(topology(), table_stats=tmp_path / "missing.json")
    for batch in (0, -4, 2.5, True):  # was: 0 silently became the default 512
        with pytest.raises(ConfigError, match=rf"batch_size: per-rank batch must be an integer >= 1, got {batch!r}"):
            NeuroShardPlanner(topology(), batch_size=batch)
    nan = {"a0": ParameterConstraints(pooling_factors=[float("nan")])}
    with pytest.raises(ConfigError, match=r"constraints\['a0'\].pooling_factors: must be finite numbers >= 0, "
                                          r"got \[nan\]"):
        NeuroShardPlanner(topology(), constraints=nan, alg="size_greedy").plan(collection("a", [(100, 8)]),
                                                                               sharders())


# --------------------------------------------------------------------------- DistributedModelParallel, 2 ranks


def _batch(rank: int, step: int, case: str = "plain"):
    """Each collection's KeyedJaggedTensor of this rank's 4 samples at `step` (0 to 3 ids per feature), and the
    targets."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(1000 * step + rank)
    out = []
    for prefix, specs in (("a", A_TABLES), ("b", B_TABLES), ("c", C_TABLES))[:3 if case in MODELS else 2]:
        lengths = torch.randint(0, 4, (len(specs) * 4,), generator=g)
        values = torch.cat([torch.randint(0, rows, (int(lengths[t * 4:(t + 1) * 4].sum()),), generator=g)
                            for t, (rows, _) in enumerate(specs)])
        out.append(KeyedJaggedTensor.from_lengths_sync(keys=[f"{prefix}{i}" for i in range(len(specs))],
                                                       values=values, lengths=lengths))
    target = torch.randn(4, generator=g)
    return out, target


def _types_constraints():
    """Each table limited to one type (the `types` case): a0 row-wise, a1 table-column-wise, a2 column-wise, b0
    table-row-wise (with a bounds-check mode for its kernel), b1 data-parallel."""
    from torchrec.distributed.types import BoundsCheckMode

    limited = {"a0": "row_wise", "a1": "table_column_wise", "a2": "column_wise", "b0": "table_row_wise",
               "b1": "data_parallel"}
    return {name: ParameterConstraints(sharding_types=[kind], pooling_factors=[2.0],
                                       bounds_check_mode=BoundsCheckMode.WARNING if name == "b0" else None)
            for name, kind in limited.items()}


# the wider case: b1 limited to data-parallel, b0 to rank 1, a0 and a2 on one rank together
CASES = {"plain": lambda: {"constraints": {**CONSTRAINTS, "c0": ParameterConstraints(pooling_factors=[1.5])}},
         "wide": lambda: {"constraints": {**CONSTRAINTS, "b1": ParameterConstraints(sharding_types=["data_parallel"],
                                                                                   pooling_factors=[2.0])},
                          "ranks": {"b0": [1]}, "colocate": [["a0", "a2"]]},
         "types": lambda: {"constraints": _types_constraints()}}
MODELS = {"plain": Mixed}  # the model of a case: TwoCollections unless named here


def _dmp_rank(rank: int, world: int, port: int, out_dir: str, case: str = "plain") -> None:
    """One gloo rank: plan with NeuroShardPlanner.collective_plan (the `CASES` settings; `types` with TorchRec's
    sharder offering row-wise and table-row-wise on CPU too), shard with DistributedModelParallel, give the
    shards the reference weights, train three steps (fused exact SGD; a data-parallel table's gradient averaged
    over the ranks by DistributedDataParallel, then the same SGD step) and record the losses."""
    import torch.distributed as dist
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.model_parallel import DistributedModelParallel

    from neuroshard.torchrec.training import all_types_sharder

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    fused = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1}
    sharders = [all_types_sharder(fused) if case == "types" else EmbeddingBagCollectionSharder(fused_params=fused),
                EmbeddingCollectionSharder(fused_params=fused)]
    planner = NeuroShardPlanner(topology(), models=random_models(2, 3), alg="neuroshard", **CASES[case]())
    kind = MODELS.get(case, TwoCollections)
    model = kind()
    plan = planner.collective_plan(model, sharders, dist.group.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=sharders,
                                   init_data_parallel=case != "plain")
    torch.manual_seed(0)  # the reference weights, the same on every rank
    reference = kind(device="cpu")
    for p in reference.parameters():
        torch.nn.init.uniform_(p, -0.5, 0.5)
    full = reference.state_dict()
    with torch.no_grad():
        for key, value in dmp.state_dict().items():
            if not hasattr(value, "local_shards"):  # a data-parallel table: the whole table on every rank
                value.copy_(full[key.replace("_dmp_wrapped_module.module.", "")])
                continue
            for shard in value.local_shards():
                (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                shard.tensor.detach().copy_(full[key][r0:r0 + nr, c0:c0 + nc])
    losses = []
    for step in range(3):
        kjts, target = _batch(rank, step, case)
        loss = ((dmp(*kjts) - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():  # the dense (data-parallel) weights: their averaged gradient, one SGD step
            for p in dmp.parameters():
                if p.grad is not None:
                    p -= 0.1 * p.grad
                    p.grad = None
        losses.append(float(loss))
    kinds = {name: ps.sharding_type for mp in plan.plan.values() for name, ps in mp.items()}
    ranks = {name: ps.ranks for mp in plan.plan.values() for name, ps in mp.items()}
    checks = {name: getattr(ps.bounds_check_mode, "name", None) for mp in plan.plan.values() for name, ps in mp.items()}
    warned = planner.last_result.warnings if rank == 0 else []
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump({"losses": losses, "kinds": kinds, "ranks": ranks, "paths": sorted(plan.plan), "checks": checks,
                   "warned": warned}, fh)
    dist.destroy_process_group()


def _reference_losses(world: int, case: str = "plain") -> list[list[float]]:
    """The unsharded model trained on the same batches: each step, every rank's loss, then one SGD step on their
    mean (what the sharded embeddings' fused update does: the gradients of all ranks' samples, summed by the
    backward exchange and divided by the world size, as data parallelism averages dense gradients)."""
    torch.manual_seed(0)
    model = MODELS.get(case, TwoCollections)(device="cpu")
    for p in model.parameters():
        torch.nn.init.uniform_(p, -0.5, 0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = [[] for _ in range(world)]
    for step in range(3):
        opt.zero_grad()
        total = 0.0
        for rank in range(world):
            kjts, target = _batch(rank, step, case)
            loss = ((model(*kjts) - target) ** 2).mean()
            out[rank].append(loss.item())
            total = total + loss
        (total / world).backward()
        opt.step()
    return out


def _train(tmp_path, case: str) -> list[dict]:
    spawn_ranks(_dmp_rank, str(tmp_path), case, seconds=180, what="DistributedModelParallel ranks")
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert results[0]["kinds"] == results[1]["kinds"] and results[0]["ranks"] == results[1]["ranks"]
    assert results[0]["paths"] == ["ebc_b", *(["ec"] if case in MODELS else []), "sparse.ebc_a"]
    want = _reference_losses(2, case)
    for rank, res in enumerate(results):
        assert res["losses"] == pytest.approx(want[rank], rel=1e-5, abs=1e-6)
    assert want[0][0] != want[0][2]  # the steps trained
    return results


def test_distributed_model_parallel_trains_with_the_planners_plan(tmp_path):
    """Two EmbeddingBagCollections and an EmbeddingCollection (unpooled tables) planned as one problem, the EC's
    module plan made with its own sharder: DistributedModelParallel trains all three on 2 gloo ranks with the
    unsharded model's losses."""
    results = _train(tmp_path, "plain")
    assert results[0]["kinds"]["a1"] == "table_wise"
    assert set(results[0]["kinds"]) == {"a0", "a1", "a2", "b0", "b1", "c0", "c1", "c2"}


def test_a_data_parallel_table_a_rank_list_and_a_colocated_pair_train(tmp_path):
    """b1 data-parallel (dense kernel, replicated, its gradient all-reduced), b0 on rank 1 only, a0 and a2 whole
    on one rank: planned inside the search, trained by DistributedModelParallel with the unsharded losses."""
    results = _train(tmp_path, "wide")
    kinds, ranks = results[0]["kinds"], results[0]["ranks"]
    assert kinds["b1"] == "data_parallel" and ranks["b1"] == [0, 1]
    assert ranks["b0"] == [1] and kinds["a1"] == "table_wise"
    assert kinds["a0"] == kinds["a2"] == "table_wise" and ranks["a0"] == ranks["a2"]


def test_every_sharding_type_the_planner_gives_trains(tmp_path):
    """One table limited to each of row-wise, table-column-wise, column-wise, table-row-wise and data-parallel:
    the plan gives each its type (those without a table-wise option placed by memory, their cost not modelled
    by models without a collective model: said), and DistributedModelParallel trains it on 2 gloo ranks with
    the unsharded model's losses; the bounds-check mode of b0's constraints reaches its ParameterSharding."""
    results = _train(tmp_path, "types")
    kinds, ranks = results[0]["kinds"], results[0]["ranks"]
    assert kinds == {"a0": "row_wise", "a1": "table_column_wise", "a2": "column_wise", "b0": "table_row_wise",
                     "b1": "data_parallel"}
    assert ranks["a0"] == ranks["b0"] == ranks["b1"] == [0, 1]
    assert results[0]["checks"]["b0"] == "WARNING" and results[0]["checks"]["a0"] is None
    (note,) = [w for w in results[0]["warned"] if "not modelled" in w]
    assert note.startswith("a0 (row_wise), b0 (table_row_wise), b1 (data_parallel): placed by memory")


def test_readme_example_runs_as_written(tmp_path):
    """The README's "Use with TorchRec" example, outside torchrun, on hand-made 4-device models saved where
    `make demo` writes its own."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from neuroshard.planner.costs.cost_models import save_model
    from tests.test_api import _hand_models

    root = Path(__file__).resolve().parents[2]
    section = (root / "README.md").read_text().split("## Use with TorchRec", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    models = _hand_models(4)
    for name, m in (("compute.pt", models.compute), ("comm_4_fw.pt", models.fw), ("comm_4_bw.pt", models.bw)):
        save_model(m, tmp_path / "results" / "quick" / "models" / name)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    rows = [line.split(" ", 3) for line in lines[:-1]]
    assert sorted((path, name) for path, name, _, _ in rows) == sorted(
        [("user", f"user_{i}") for i in range(3)] + [("item.ebc", f"item_{i}") for i in range(4)])
    assert all(kind in ("table_wise", "column_wise") for _, _, kind, _ in rows)
    assert next(kind for _, name, kind, _ in rows if name == "item_0") == "table_wise"
    assert lines[-1].startswith("simulated cost ") and "planned in" in lines[-1]
    assert "no locality stats (table_stats) for" in out.stderr  # said, not silently assumed


# --------------------------------------------------------------------------- constraints inside the search

TW_SPECS = [(105062, 32), (71113, 16), (50782, 16), (27524, 16), (37526, 64), (84941, 64), (70362, 32), (117074, 64)]
TW_POOLING = [11.3, 18.8, 16.5, 1.1, 17.3, 1.6, 14.9, 4.3]
MIB = 2**20


def _tw_constraints():
    return {f"t{i}": ParameterConstraints(sharding_types=["table_wise"] if i < 3 else None,
                                          pooling_factors=[TW_POOLING[i]]) for i in range(8)}


@pytest.mark.parametrize("alg", ["neuroshard", "neuroshard_plus", "size_greedy", "random", "torchrec"])
def test_table_wise_only_tables_are_kept_whole_while_searching(alg):
    # 2 ranks of 60 MiB, t0-t2 limited to table-wise. Planned as if unconstrained and then gathered, device 0
    # held 0.05175 GB against its 0.05063 GB; searched with the constraint, every algorithm keeps them whole
    # and fits TorchRec's count on both ranks
    cap = 60 * MIB
    planner = NeuroShardPlanner(topology(cap, device="cuda"), models=random_models(2, 3), constraints=_tw_constraints(),
                                alg=alg)
    model = collection("t", TW_SPECS)
    plan = planner.plan(model, sharders())
    assert all(plan.plan[""][f"t{i}"].sharding_type == "table_wise" for i in range(3))
    tables, _ = planner._tables(model, sharders())
    used = planner.device_storage(tables, planner.last_result.plan)
    assert max(used) <= 0.9 * cap


def test_an_infeasible_constraint_names_the_table_and_the_devices_memory():
    cons = _tw_constraints()
    planner = NeuroShardPlanner(topology(60 * MIB), constraints=cons, alg="size_greedy",
                                ranks={f"t{i}": [1] for i in range(8)})  # 0.09 GB on one rank of 60 MiB
    with pytest.raises(PlannerError, match=r"on 2 devices of 0.05859 GB each \(the topology's, 10% reserved; "
                                           r"torchrec count\).* 't\d' could not be placed; size_greedy found no "
                                           r"placement within the constraints"):
        planner.plan(collection("t", TW_SPECS), sharders())
    with pytest.raises(ConfigError, match=r"ranks\['t0'\]: expected a non-empty list of ranks in 0..1, got \[2\]"):
        NeuroShardPlanner(topology(), ranks={"t0": [2]})
    with pytest.raises(ConfigError, match="colocate: table 'a0' is in two groups"):
        NeuroShardPlanner(topology(), colocate=[["a0", "a1"], ["a0", "a2"]])
    with pytest.raises(ConfigError, match="colocate: no table 'zz' in the model"):
        NeuroShardPlanner(topology(), colocate=[["a0", "zz"]], alg="size_greedy").plan(TwoCollections(), sharders())


def test_each_rank_has_its_own_memory():
    # a 256 MiB rank and a 24 MiB rank: the 195 MiB table must go to rank 0 (planned as if both had the
    # smallest, nothing fitted)
    topo = topology(256 * MIB)
    topo.devices[1].storage.ddr = topo.devices[1].storage.hbm = 24 * MIB
    model = collection("u", [(800_000, 64), (40_000, 64), (30_000, 32), (20_000, 16)])
    for alg in ("neuroshard", "size_greedy"):
        planner = NeuroShardPlanner(topo, models=random_models(2, 3), alg=alg)
        plan = planner.plan(model, sharders())
        assert plan.plan[""]["u0"].ranks == [0]
        tables, _ = planner._tables(model, sharders())
        used = planner.device_storage(tables, planner.last_result.plan)
        assert used[0] <= 0.9 * 256 * MIB and used[1] <= 0.9 * 24 * MIB


def test_optimizer_state_of_fused_params_is_counted():
    # four 1000 x 64 tables (256,000 B of weights each; TorchRec's count at batch 512 526,336 B) on 2 GPUs of
    # 2,000,000 B (1,800,000 after the reservation): they fit with exact SGD; with Adam's two fp32 moments
    # (512,000 B more per table, which TorchRec's estimator does not count from fused_params) they need
    # 4 x 1,038,336 B = 0.003868 GB and are refused with the numbers
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    model = collection("t", [(1000, 64)] * 4)
    sgd = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_SGD})
    adam = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.ADAM})
    NeuroShardPlanner(topology(2_000_000, device="cuda"), alg="size_greedy").plan(model, [sgd])
    planner = NeuroShardPlanner(topology(2_000_000, device="cuda"), alg="size_greedy")
    tables, _ = planner._tables(model, [adam])
    assert planner._storage(tables[0], [64]) == [526336.0 + 512000.0]
    assert planner._storage(tables[0], [32, 32]) == [267264.0 + 256000.0] * 2
    with pytest.raises(PlannerError, match=r"they need 0.003868 GB in all, the largest \(t0\) 0.000967 GB"):
        planner.plan(model, [adam])
    # row-wise Adagrad keeps one value per row of each shard: 4,000 B per 1000-row shard
    rowwise = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD})
    tables, _ = planner._tables(model, [rowwise])
    assert planner._storage(tables[0], [32, 32]) == [267264.0 + 4000.0] * 2
    # given through apply_optimizer_in_backward, TorchRec counts it itself: the same bytes, not twice
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    counted = collection("t", [(1000, 64)] * 4)
    apply_optimizer_in_backward(torch.optim.Adam, counted.parameters(), {"lr": 0.1})
    tables, _ = planner._tables(counted, [sgd])
    assert planner._storage(tables[0], [64]) == [526336.0 + 512000.0]


def test_the_users_batch_reaches_the_costs():
    # models whose data was measured at global batch 1024: per-rank 16, 512 and 8192 on 2 ranks cost the plan
    # at 32, 1024 and 16384 (without a batch: the models' own, as 512 per rank is here)
    import copy

    models = copy.deepcopy(random_models(2, 3))
    for m in (models.compute, models.fw, models.bw):
        m.checkpoint_extra = {"batch": {"ref": 1024, "sizes": [1024]}}
    costs = {}
    for batch in (16, 512, 8192, None):
        planner = NeuroShardPlanner(topology(), models=models, batch_size=batch, alg="size_greedy")
        planner.plan(TwoCollections(), sharders())
        costs[batch] = planner.last_result.cost_ms
        outside = [w for w in planner.last_result.warnings if "extrapolated by lookup volume" in w]
        assert bool(outside) == (batch in (16, 8192))
    assert costs[512] == pytest.approx(costs[None]) and len({costs[16], costs[512], costs[8192]}) == 3


def test_row_wise_and_data_parallel_tables_where_the_runtime_model_says_they_pay():
    # hot0 (100 x 4, 200 lookups a sample) costs 8.1 ms on one rank; data-parallel, 4.1 on each (half the batch
    # each) and 0.04 to all-reduce; row-wise, the same kernels and 0.4 to reduce-scatter. On a GPU topology
    # TorchRec's sharder offers every type: the plan makes hot0 data-parallel (TorchRec's dense kernel); with
    # its sharding types table-wise and row-wise, row-wise. hot1 (cold) is table-wise or column-wise only
    from tests.planner.search.test_sharding_types import models

    m = models(n=2, compute_max=1.0, allreduce=100.0, reduce=0.1)
    model = collection("hot", [(100, 4), (100, 4)] + [(1000, 16)] * 4)

    def plan_with(hot0_types):
        cons = {f"hot{i}": ParameterConstraints(pooling_factors=[200.0 if i == 0 else 1.0],
                                                sharding_types={0: hot0_types, 1: ["table_wise", "column_wise"]}
                                                .get(i)) for i in range(6)}
        planner = NeuroShardPlanner(topology(device="cuda"), models=m, constraints=cons, memory="weights")
        return planner, planner.plan(model, sharders()).plan[""]

    planner, plan = plan_with(None)
    assert (plan["hot0"].sharding_type, plan["hot0"].compute_kernel, plan["hot0"].ranks) == ("data_parallel",
                                                                                              "dense", [0, 1])
    assert [(s.table, s.kind) for s in planner.last_result.plan.spread] == [(0, "data_parallel")]
    assert plan["hot1"].sharding_type in ("table_wise", "column_wise")
    _, plan = plan_with(["table_wise", "row_wise"])
    assert (plan["hot0"].sharding_type, plan["hot0"].compute_kernel, plan["hot0"].ranks) == ("row_wise", "fused",
                                                                                              [0, 1])
    # TorchRec's storage count of a spread table: a replica on every rank, or its row blocks
    from neuroshard.types.plan import Spread

    tables, _ = planner._tables(model, sharders())
    replica = planner._spread_storage(tables[0], Spread(0, "data_parallel", (0, 1)))
    blocks = planner._spread_storage(tables[2], Spread(2, "row_wise", (0, 1)))
    assert len(replica) == 2 and replica[0] == replica[1] >= 100 * 4 * 4
    assert len(blocks) == 2 and blocks[0] >= 500 * 16 * 4 and blocks[0] < planner._storage(tables[2], [16])[0]
    used = planner.device_storage(tables, planner.last_result.plan)
    assert min(used) >= replica[0]  # the replica is counted on both ranks


def test_a_topology_of_two_hosts_gets_a_table_row_wise_table_where_the_collective_model_says_it_pays():
    # 4 GPUs on 2 hosts; the paper runtime's models with a collective model whose fits over a host's 2 ranks are
    # far cheaper than over all 4 (tests.planner.search.test_sharding_types: hot0 goes table-row-wise there)
    from tests.planner.search.test_sharding_types import host_models

    m = host_models()
    model = collection("hot", [(100, 4)] + [(1000, 16)] * 7)
    cons = {f"hot{i}": ParameterConstraints(pooling_factors=[200.0 if i == 0 else 1.0]) for i in range(8)}
    hosts = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=2**30)
    planner = NeuroShardPlanner(hosts, models=m, constraints=cons, memory="weights", table_stats={
        f"hot{i}": [1 / 17] * 17 for i in range(8)})
    plan = planner.plan(model, sharders()).plan[""]
    assert (plan["hot0"].sharding_type, plan["hot0"].compute_kernel) == ("table_row_wise", "fused")
    assert plan["hot0"].ranks in ([0, 1], [2, 3])
    assert [s.kind for s in planner.last_result.plan.spread if s.table == 0] == ["table_row_wise"]
    # on one host of 4 GPUs it is not searched: every rank's collectives cost more than the table whole
    one = NeuroShardPlanner(Topology(world_size=4, compute_device="cuda", hbm_cap=2**30), models=m,
                            constraints=cons, memory="weights", table_stats={f"hot{i}": [1 / 17] * 17
                                                                              for i in range(8)})
    assert one.plan(model, sharders()).plan[""]["hot0"].sharding_type == "table_wise"


def test_a_table_without_a_table_wise_option_is_placed_by_memory_and_priced_where_the_models_can():
    """t0 limited to row-wise, the others to table-wise and column-wise (a sharder offering row-wise on CPU): t0
    is row-wise over both ranks before the search. With a collective model its reduce-scatter and all-gather are in the estimate; without one, the
    same plan is costed without t0 and a warning says its cost is not modelled."""
    from dataclasses import replace

    from tests.torchrec.test_planner_contract import contract_models

    priced = contract_models(2)
    model = collection("t", [(1000, 16), (800, 32), (600, 16), (400, 8)])
    cons = {f"t{i}": ParameterConstraints(sharding_types=["row_wise"] if i == 0 else ["table_wise", "column_wise"],
                                          pooling_factors=[4.0]) for i in range(4)}
    results = {}
    for name, m in (("priced", priced), ("unpriced", replace(priced, collectives=None))):
        planner = NeuroShardPlanner(topology(), models=m, constraints=cons, alg="size_greedy")
        plan = planner.plan(model, [all_types_sharder()]).plan[""]
        assert (plan["t0"].sharding_type, plan["t0"].ranks) == ("row_wise", [0, 1])
        results[name] = planner.last_result
    assert results["priced"].plan == results["unpriced"].plan
    assert results["priced"].plan.spread_of(0).kind == "row_wise"
    assert not [w for w in results["priced"].warnings if "not modelled" in w]
    (note,) = [w for w in results["unpriced"].warnings if "not modelled" in w]
    assert note == ("t0 (row_wise): placed by memory; their cost is not modelled (the cost models price no "
                    "row-wise, table-row-wise or data-parallel tables), so the estimate leaves them out")
    # the collective model's reduce-scatter (forward) and all-gather (backward) of 512 x 2 x 16 elements
    assert results["priced"].cost_ms > results["unpriced"].cost_ms + 4.8 + 3.0


def test_models_from_a_runs_folder(tmp_path):
    """`models=` a pipeline run's folder: the planner loads everything the run plans with (`CostModels.load_run`),
    the collective model too, so a table larger than a rank goes row-wise with its cost in the estimate."""
    from tests.planner.costs.test_cost_models import _write_run

    run = _write_run(tmp_path / "quick")
    planner = NeuroShardPlanner(topology(cap=2**21), models=run, alg="size_greedy", memory="weights",
                                constraints={"t0": ParameterConstraints(sharding_types=["table_wise", "row_wise"])})
    assert planner._models.collectives is not None and planner._models.torchrec_runtime is not None
    plan = planner.plan(collection("t", [(8000, 64), (100, 8)]), [all_types_sharder()]).plan[""]  # t0: 2 MB
    assert (plan["t0"].sharding_type, plan["t0"].ranks) == ("row_wise", [0, 1])
    assert not [w for w in planner.last_result.warnings if "not modelled" in w]


def test_one_model_set_for_any_world_size_plans_every_topology(tmp_path):
    """`models=` a folder of comm models for any world size, or those models loaded: topologies of 2, 3 and 6 ranks
    planned with them, the estimate's exchanges as the hand models price them."""
    from neuroshard.planner.costs.cost_models import CostModels
    from tests.planner.costs.test_cost_models import hand_comm, write_world_models

    folder = write_world_models(tmp_path)
    (folder / "collectives.json").unlink()  # table-wise plans: the hand exchanges alone
    specs = [(1000, 8), (2000, 16), (500, 32), (3000, 8), (800, 16), (1500, 4), (700, 24)]
    for n, models in ((2, folder), (3, CostModels.load(folder)), (6, folder)):
        planner = NeuroShardPlanner(topology(world=n), models=models, max_length=2)
        assert planner._models.ndevices == n
        plan = planner.plan(collection("t", specs), sharders()).plan[""]
        assert len(plan) == len(specs) and {r for p in plan.values() for r in p.ranks} <= set(range(n))
        est = planner.last_result.breakdown
        bw, fw = hand_comm(est.dims, est.compute)
        assert est.bw_comm == pytest.approx(bw, abs=1e-3) and est.fw_comm == pytest.approx(fw, abs=1e-3)


def test_a_large_table_is_not_replicated_by_choice():
    """t0 (200,000 x 64, 51 MB) and t1 (1,000 x 16) each limited to data-parallel or table-row-wise, on 4 GPUs of 1
    GB on 2 hosts, models that price data-parallel but not table-row-wise: the small table is replicated, the
    large one is table-row-wise (a replica on every rank of more than `simulator.replicable` allows is taken only
    when it is the one kind allowed)."""
    from dataclasses import replace

    from tests.torchrec.test_planner_contract import contract_models

    m = contract_models(4)
    m = replace(m, collectives=replace(m.collectives, fits={k: v for k, v in m.collectives.fits.items()
                                                            if "@" not in k}))
    cons = {n: ParameterConstraints(sharding_types=["data_parallel", "table_row_wise"]) for n in ("t0", "t1")}
    hosts = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=2**30)
    plan = NeuroShardPlanner(hosts, models=m, constraints=cons).plan(collection("t", [(200_000, 64), (1000, 16)]),
                                                                      sharders()).plan[""]
    assert (plan["t0"].sharding_type, plan["t1"].sharding_type) == ("table_row_wise", "data_parallel")


def _one_table(rows, dim, fp16=False):
    from torchrec.modules.embedding_configs import DataType

    return EmbeddingBagCollection(tables=[EmbeddingBagConfig(
        name="t0", embedding_dim=dim, num_embeddings=rows, feature_names=["t0"],
        data_type=DataType.FP16 if fp16 else DataType.FP32)], device=torch.device("meta"))


def _plan_of(ebc, generator, sharder):
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ShardingPlan

    return ShardingPlan({"": construct_module_sharding_plan(ebc, {"t0": generator}, sharder=sharder, local_size=2,
                                                             world_size=2, device_type="cuda")})


def test_training_memory_the_count_adds_to_torchrecs():
    # one 1000 x 64 table on 2 GPUs at batch 512 per rank, pooling 1: TorchRec counts weights, 8,192 B of input
    # ids (512 x 2 ranks x 8 B) and the pooled outputs (512 x 2 x 64 values) at the weights' dtype
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.sharding_plan import column_wise, data_parallel, table_wise
    from torchrec.optim import RowWiseAdagrad
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    planner = NeuroShardPlanner(topology(device="cuda"), alg="size_greedy")
    sgd = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_SGD})
    fp16 = _one_table(1000, 64, fp16=True)
    tw = _plan_of(fp16, table_wise(rank=0, compute_kernel="fused"), sgd)
    # fp16 weights: 128,000 B; TorchRec counts the outputs at 2 B (131,072 B), the kernel writes fp32 (262,144 B)
    assert planner.storage(fp16, [sgd], tw, count="weights") == [128000.0, 0.0]
    assert planner.storage(fp16, [sgd], tw, count="estimator") == [128000.0 + 8192 + 131072, 0.0]
    assert planner.storage(fp16, [sgd], tw) == [128000.0 + 8192 + 262144, 0.0]
    # row-wise Adagrad in backward: FBGEMM keeps one fp32 value per row of each shard (4,000 B); TorchRec counts
    # 1/64 of the shard's fp16 bytes: 2,000 B whole, 1,000 B per half
    for rows_state, generator, counted in ((4000, table_wise(rank=0, compute_kernel="fused"), 2000),
                                           (4000, column_wise(ranks=[0, 1], compute_kernel="fused"), 1000)):
        ebc = _one_table(1000, 64, fp16=True)
        apply_optimizer_in_backward(RowWiseAdagrad, ebc.parameters(), {"lr": 0.1})
        plan = _plan_of(ebc, generator, sgd)
        theirs, ours = planner.storage(ebc, [sgd], plan, count="estimator"), planner.storage(ebc, [sgd], plan)
        shards = [r for r in (0, 1) if theirs[r]]
        outputs = 512 * 2 * (64 // len(shards)) * 2  # the outputs at fp32 beyond TorchRec's fp16
        assert [ours[r] - theirs[r] for r in shards] == [rows_state - counted + outputs] * len(shards)
    # a data-parallel replica (dense kernel) of fp32 weights: its gradient and DDP's all-reduce buffer, 256,000 B
    # each, beside TorchRec's count; with row-wise Adagrad through fused_params also its 4,000 B of state
    fp32 = _one_table(1000, 64)
    rowwise = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD})
    for sharder, state in ((sgd, 0), (rowwise, 4000)):
        dp = _plan_of(fp32, data_parallel(), sharder)
        theirs = planner.storage(fp32, [sharder], dp, count="estimator")
        assert planner.storage(fp32, [sharder], dp) == [t + 2 * 256000 + state for t in theirs]
    with pytest.raises(ConfigError, match="count: must be one of"):
        planner.storage(fp32, [sgd], tw, count="fp32")
