"""TorchRec's planner contract, held by TorchRec's `EmbeddingShardingPlanner` and by `NeuroShardPlanner` alike.

The cases are those of `torchrec/distributed/planner/tests/` in TorchRec's repository that check what a planner
returns, written again here (TorchRec 1.8.0's API): each runs against both planners (the `planner` fixture;
NeuroShardPlanner with synthetic cost models for the topology's ranks and a collective model, as a pipeline
run's `CostModels.load` gives). Where TorchRec's test pins a rank or a value its own planner happens to choose,
the case checks the rule that value stands for instead (said in the case).

Kept (TorchRec's test -> the case here):

* test_planners.py
  - test_tw_solution, test_hidden_rw_solution (sharder offering table-wise and row-wise; TorchRec pins ranks
    [[0], [0], [1], [1]] and [[0], [0, 1], [1]]) -> `test_the_types_given_are_the_types_offered` (rule: every
    table is table-wise or row-wise, and every rank holds what fits its memory);
  - test_never_fit -> `test_tables_larger_than_every_device_together_are_insufficient_storage`;
  - test_fail_then_rerun -> `test_a_table_larger_than_a_device_goes_row_wise_where_allowed` (table-wise only:
    STRICT_CONSTRAINTS; with row-wise offered: row-wise on both ranks);
  - test_no_sharders -> `test_nothing_to_shard_is_an_empty_plan`;
  - test_fused_paramters_from_constraints, test_passing_info_through_constraints (the latter reads the
    planner's private `_best_plan`; restated on the plan) -> `test_constraints_fused_parameters_reach_the_plan`
    (every field TorchRec carries from `ParameterConstraints` into `ParameterSharding`, output_dtype and
    key_value_params too);
  - TestAutoPlannerWithScaleupProposer.test_auto_sharder_solution (TorchRec pins row-wise with the
    fused_uvm_caching kernel, its scale-up proposer's choice) -> `test_a_sharder_offering_every_kernel` (rule:
    the types and kernels given are among those the sharder offers, the cache parameters reach the plan).
* test_enumerators.py, each restated on the returned plan (8 ranks, 4 per host, TorchRec's shard layout):
  - test_dp_sharding, test_tw_sharding, test_rw_sharding, test_uvm_caching_rw_sharding, test_twrw_sharding,
    test_cw_sharding, test_twcw_sharding -> `test_a_sharder_offering_one_type_gets_it` (row-wise and
    table-row-wise: TorchRec's row blocks exactly; column-wise ones: shards tiling the columns, none narrower
    than `min_partition`, table-column-wise and table-row-wise ones on one host);
  - test_filtering -> `test_constraints_filter_the_types_and_kernels`;
  - test_empty -> `test_nothing_to_shard_is_an_empty_plan`;
  - test_throw_ex_no_sharding_option_for_table -> `test_a_table_without_any_option_is_torchrecs_error`.
* test_embeddingbag_utils.py, test_embedding_utils.py (the plan read back into the sharded module):
  test_create_sharding_infos_by_group_override and _combine, for EmbeddingBagCollection and EmbeddingCollection
  -> `test_the_sharded_module_reads_the_plans_fused_parameters`.

Beyond TorchRec's cases, the same contract over every combination of sharding types
(`test_every_combination_of_sharding_types`).

Dropped, and why:

* test_planners.py: test_hash_equality, test_hash_inequality (TorchRec's planner-context hash, an input to its
  own plan cache); test_planner_with_virtual_table (key-value "virtual" tables of 10^15 rows on
  `dram_virtual_table` kernels and TorchRec's stats lines: outside what the cost models price and the memory
  count holds); TestPlanLoaderIntegration (3 cases: TorchRec replaying a stored plan through its `PlanLoader`)
  and TestExtractPlan (5 cases: its internal `extract_plan`): neither checks a planner's result.
* test_enumerators.py: test_virtual_table_rw_sharding_with_buckets, test_uvm_caching_rw_sharding_with_buckets
  (virtual tables' buckets); test_filter_sharding_types_* and test_filter_compute_kernels_* (6 cases: the
  enumerator's private filters; their effect on a plan is `test_constraints_filter_the_types_and_kernels`);
  test_tower_sharding, test_tower_collection_sharding (EmbeddingTower modules, whose tables TorchRec keeps on
  one host together: NeuroShardPlanner refuses them with a PlannerError, `test_planner.py`); the estimator's
  storage numbers of every test_*_sharding (TorchRec's own estimates, not a planner's result).
"""

import functools
import math
from dataclasses import replace

import pytest

pytest.importorskip("torchrec")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torchrec.distributed.embedding import EmbeddingCollectionSharder, ShardedEmbeddingCollection  # noqa: E402
from torchrec.distributed.embeddingbag import (  # noqa: E402
    EmbeddingBagCollectionSharder,
    ShardedEmbeddingBagCollection,
)
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology  # noqa: E402
from torchrec.distributed.planner.proposers import EmbeddingOffloadScaleupProposer  # noqa: E402
from torchrec.distributed.planner.types import PlannerError, PlannerErrorType  # noqa: E402
from torchrec.distributed.types import (  # noqa: E402
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    DataType,
    KeyValueParams,
    ShardingPlan,
)
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection  # noqa: E402

from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel  # noqa: E402
from neuroshard.torchrec.planner import NeuroShardPlanner  # noqa: E402
from tests.planner.search.test_beam import random_models  # noqa: E402

DP, TW, RW, TWRW, CW, TWCW = ("data_parallel", "table_wise", "row_wise", "table_row_wise", "column_wise",
                              "table_column_wise")
ALL_TYPES = (DP, TW, RW, TWRW, CW, TWCW)
MIB = 2**20


# --------------------------------------------------------------------------- the two planners


@functools.lru_cache(maxsize=None)
def contract_models(n: int):
    """Synthetic cost models for n ranks as a pipeline run's load gives them: the compute and comm nets (their
    data's batch recorded, 4096) and a collective model of the three collectives over every rank and over each
    group size that divides the ranks (linear in N; a demo run's coefficients)."""
    import copy

    models = copy.deepcopy(random_models(n, 1))
    for m in (models.compute, models.fw, models.bw):
        m.checkpoint_extra = {"batch": {"ref": 4096, "sizes": [4096]}}
    coef = {"reduce_scatter": [4.8, 17.6], "all_gather": [3.0, 8.7], "all_reduce": [3.6, 14.8]}
    fits = {op: CollectiveFit("linear", c, 20) for op, c in coef.items()}
    fits |= {f"{op}@{k}": CollectiveFit("linear", c, 20) for op, c in coef.items() if op != "all_reduce"
             for k in range(2, n) if n % k == 0}
    return replace(models, collectives=CollectiveModel(n, fits))


@pytest.fixture(params=["torchrec", "neuroshard"])
def planner(request):
    """`make(topology, constraints=None, batch_size=None, proposer=None)`: TorchRec's planner as its tests build
    it, or NeuroShardPlanner with `contract_models` for the topology's ranks."""

    def make(topology, constraints=None, batch_size=None, proposer=None):
        batch = {} if batch_size is None else {"batch_size": batch_size}
        if request.param == "torchrec":
            return EmbeddingShardingPlanner(topology=topology, constraints=constraints,
                                            **({"proposer": proposer} if proposer else {}), **batch)
        return NeuroShardPlanner(topology, models=contract_models(topology.world_size), constraints=constraints,
                                 **batch)

    make.kind = request.param
    return make


# --------------------------------------------------------------------------- models, sharders, the plan read


class SparseNN(nn.Module):
    """One collection at `sparse.ebc` (`sparse.ec` for unpooled tables), as TorchRec's TestSparseNN holds it."""

    def __init__(self, specs, pooled=True, prefix="table_"):
        super().__init__()
        self.sparse = nn.Module()
        if pooled:
            self.sparse.ebc = EmbeddingBagCollection(device=torch.device("meta"), tables=[
                EmbeddingBagConfig(name=f"{prefix}{i}", embedding_dim=d, num_embeddings=r,
                                   feature_names=[f"feature_{i}"]) for i, (r, d) in enumerate(specs)])
        else:
            self.sparse.ec = EmbeddingCollection(device=torch.device("meta"), tables=[
                EmbeddingConfig(name=f"{prefix}{i}", embedding_dim=d, num_embeddings=r,
                                feature_names=[f"feature_{i}"]) for i, (r, d) in enumerate(specs)])


def offering(types, kernels=("fused",), name=None):
    """An EmbeddingBagCollectionSharder offering only `types` and `kernels` (a list, or one per type: TorchRec's
    tests' TWSharder, RWSharder, ...), named `name` (TorchRec's error names the sharder's class)."""

    def sharding_types(self, compute_device_type):
        return list(types)

    def compute_kernels(self, sharding_type, compute_device_type):
        return list(kernels[sharding_type] if isinstance(kernels, dict) else kernels)

    cls = type(name or "OfferingSharder", (EmbeddingBagCollectionSharder,),
               {"sharding_types": sharding_types, "compute_kernels": compute_kernels})
    return cls()


def module_plan(plan: ShardingPlan, path="sparse.ebc") -> dict:
    return dict(plan.plan[path])


def shard_layout(ps) -> list[tuple[list[int], list[int], int]]:
    """(sizes, offsets, rank) of each shard of a ParameterSharding."""
    return [(list(s.shard_sizes), list(s.shard_offsets), s.placement.rank()) for s in ps.sharding_spec.shards]


def assert_fits(plan: ShardingPlan, model: nn.Module, topology: Topology) -> None:
    """Every rank's fp32 weights (its shards, a data-parallel table whole) fit its memory."""
    kind = "hbm" if topology.compute_device == "cuda" else "ddr"
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    used = [0.0] * topology.world_size
    for path, mp in plan.plan.items():
        for name, ps in mp.items():
            if ps.sharding_type == DP:
                shape = next(s for k, s in shapes.items() if k.endswith(f".{name}.weight"))
                for r in ps.ranks:
                    used[r] += 4.0 * math.prod(shape)
            else:
                for sizes, _, rank in shard_layout(ps):
                    used[rank] += 4.0 * math.prod(sizes)
    for r, u in enumerate(used):
        assert u <= getattr(topology.devices[r].storage, kind), (r, u)


def assert_columns_tiled(ps, rows: int, dim: int, min_partition: int | None) -> None:
    """A column-wise sharding's shards cover [0, dim) once, every one `rows` high and none narrower than
    `min_partition` (a table narrower than it is one shard)."""
    layout = sorted(shard_layout(ps), key=lambda x: x[1][1])
    assert all(sizes[0] == rows and off[0] == 0 for sizes, off, _ in layout)
    assert [off[1] for _, off, _ in layout] == [sum(s[1] for s, _, _ in layout[:k]) for k in range(len(layout))]
    assert sum(sizes[1] for sizes, _, _ in layout) == dim
    assert all(sizes[1] >= min(min_partition or 0, dim) for sizes, _, _ in layout)


# --------------------------------------------------------------------------- test_planners.py

TWO_SMALL = Topology(world_size=2, hbm_cap=2 * MIB, compute_device="cuda")


@pytest.mark.parametrize("ntables", [4, 3])
def test_the_types_given_are_the_types_offered(planner, ntables):
    """TorchRec's test_tw_solution / test_hidden_rw_solution: a sharder offering table-wise and row-wise on two
    ranks of 2 MiB; TorchRec's own ranks are its estimator's choice, the rule is: each table table-wise or
    row-wise, once, within each rank's memory."""
    model = SparseNN([(100, 64)] * ntables)
    plan = planner(TWO_SMALL).plan(model, [offering([RW, TW])])
    mp = module_plan(plan)
    assert sorted(mp) == [f"table_{i}" for i in range(ntables)]
    assert {ps.sharding_type for ps in mp.values()} <= {TW, RW}
    for ps in mp.values():
        assert ps.compute_kernel == "fused"
        assert ps.ranks == ([0, 1] if ps.sharding_type == RW else ps.ranks) and len(ps.ranks) in (1, 2)
    assert_fits(plan, model, TWO_SMALL)


def test_tables_larger_than_every_device_together_are_insufficient_storage(planner):
    """TorchRec's test_never_fit."""
    model = SparseNN([(10_000_000, 10_000_000)] * 2)
    with pytest.raises(PlannerError) as e:
        planner(TWO_SMALL).plan(model, [offering([RW, TW])])
    assert e.value.error_type == PlannerErrorType.INSUFFICIENT_STORAGE


def test_a_table_larger_than_a_device_goes_row_wise_where_allowed(planner):
    """TorchRec's test_fail_then_rerun: a 2 MiB table and ranks of 2 MiB. Table-wise only, it fits the ranks
    together but no one rank: the constraints' fault (STRICT_CONSTRAINTS); with row-wise offered, row-wise on
    both ranks."""
    model = SparseNN([(4096, 128)])
    make = planner(TWO_SMALL)
    with pytest.raises(PlannerError) as e:
        make.plan(model, [offering([TW])])
    assert e.value.error_type == PlannerErrorType.STRICT_CONSTRAINTS
    ps = module_plan(make.plan(model, [offering([RW, TW])]))["table_0"]
    assert (ps.sharding_type, ps.ranks) == (RW, [0, 1])
    assert shard_layout(ps) == [([2048, 128], [0, 0], 0), ([2048, 128], [2048, 0], 1)]


@pytest.mark.parametrize("sharders", [[], None], ids=["no_sharders", "no_module_of_theirs"])
def test_nothing_to_shard_is_an_empty_plan(planner, sharders):
    """TorchRec's test_no_sharders and (enumerators) test_empty; also a sharder whose module the model lacks."""
    model = SparseNN([(100, 64)] * 4)
    sharders = [EmbeddingCollectionSharder()] if sharders is None else sharders
    assert planner(TWO_SMALL).plan(model, sharders) == ShardingPlan({})


FUSED_CONSTRAINTS = {
    "table_0": ParameterConstraints(enforce_hbm=True, cache_params=CacheParams(algorithm=CacheAlgorithm.LFU),
                                    feature_names=["feature_0"]),
    "table_1": ParameterConstraints(enforce_hbm=False, stochastic_rounding=True, feature_names=["feature_1"]),
    "table_2": ParameterConstraints(bounds_check_mode=BoundsCheckMode.FATAL, feature_names=["feature_2"],
                                    output_dtype=DataType.FP16),
    "table_3": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.1,
                                                             reserved_memory=1.0, precision=DataType.FP16),
                                    feature_names=["feature_3"], key_value_params=KeyValueParams(l2_cache_size=4)),
}
FUSED_FIELDS = ("cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode", "output_dtype",
                "key_value_params")


def test_constraints_fused_parameters_reach_the_plan(planner):
    """TorchRec's test_fused_paramters_from_constraints and test_passing_info_through_constraints, with
    TorchRec's default sharders: each field TorchRec carries from a table's ParameterConstraints into its
    ParameterSharding is there, unset ones None."""
    from torchrec.distributed.sharding_plan import get_default_sharders

    plan = planner(TWO_SMALL, constraints=FUSED_CONSTRAINTS).plan(SparseNN([(100, 64)] * 4), get_default_sharders())
    mp = module_plan(plan)
    for name, cons in FUSED_CONSTRAINTS.items():
        assert [getattr(mp[name], f) for f in FUSED_FIELDS] == [getattr(cons, f) for f in FUSED_FIELDS], name


def test_a_sharder_offering_every_kernel(planner):
    """TorchRec's test_auto_sharder_solution (TorchRec's planner with its scale-up proposer, which makes every
    table row-wise on the fused_uvm_caching kernel): the rule is that types and kernels come from the sharder's
    offer and the cache parameters reach the plan."""
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel

    kernels = [k.value for k in EmbeddingComputeKernel if k is not EmbeddingComputeKernel.CUSTOMIZED_KERNEL]
    cons = {f"table_{i}": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LRU))
            for i in range(4)}
    model = SparseNN([(100, 64)] * 4)
    make = planner(TWO_SMALL, constraints=cons, proposer=EmbeddingOffloadScaleupProposer())
    mp = module_plan(make.plan(model, [offering([RW, TW], kernels)]))
    for name, ps in mp.items():
        assert ps.sharding_type in (RW, TW) and ps.compute_kernel in kernels
        assert ps.cache_params == CacheParams(algorithm=CacheAlgorithm.LRU)


# --------------------------------------------------------------------------- test_enumerators.py

HOSTS = Topology(world_size=8, local_world_size=4, compute_device="cuda")
ENUM_SPECS = [(100 + 10 * i, 20 + 20 * i) for i in range(4)]
ENUM_MIN_PARTITION = [20, 20, 20, 40]
ENUM_CONSTRAINTS = {f"table_{i}": ParameterConstraints(min_partition=m, pooling_factors=p) for i, (m, p) in
                    enumerate(zip(ENUM_MIN_PARTITION, [[1.0], [1.0, 3.0, 5.0], [8.0, 2.0], [2.0, 1.0, 3.0, 7.0]]))}
# TorchRec's row blocks of each table over 8 ranks, and over one host's 4
RW_ROWS = [[13] * 7 + [9], [14] * 7 + [12], [15] * 8, [17] * 7 + [11]]
TWRW_ROWS = [[25] * 4, [28, 28, 28, 26], [30] * 4, [33, 33, 33, 31]]


def _rows_of(ps) -> list[int]:
    layout = shard_layout(ps)
    assert all(off[1] == 0 for _, off, _ in layout)
    assert [off[0] for _, off, _ in layout] == [sum(s[0] for s, _, _ in layout[:k]) for k in range(len(layout))]
    return [sizes[0] for sizes, _, _ in layout]


@pytest.mark.parametrize("kind,kernel", [(DP, "dense"), (TW, "fused"), (RW, "fused"), (RW, "fused_uvm_caching"),
                                         (TWRW, "fused"), (CW, "fused"), (TWCW, "fused")])
def test_a_sharder_offering_one_type_gets_it(planner, kind, kernel):
    """TorchRec's test_dp/tw/rw/uvm_caching_rw/twrw/cw/twcw_sharding on 8 ranks of 2 hosts, restated on the
    plan: every table gets the one type and kernel offered; row-wise and table-row-wise shards are TorchRec's
    row blocks; column-wise ones tile the columns, none narrower than `min_partition`; table-row-wise and
    table-column-wise shards lie on one host."""
    model = SparseNN(ENUM_SPECS)
    plan = planner(HOSTS, constraints=ENUM_CONSTRAINTS, batch_size=256).plan(model, [offering([kind], [kernel])])
    mp = module_plan(plan)
    assert sorted(mp) == [f"table_{i}" for i in range(4)]
    for i, (rows, dim) in enumerate(ENUM_SPECS):
        ps = mp[f"table_{i}"]
        assert (ps.sharding_type, ps.compute_kernel) == (kind, kernel)
        if kind == DP:
            assert ps.sharding_spec is None and ps.ranks == list(range(8))
        elif kind == TW:
            assert len(ps.ranks) == 1 and shard_layout(ps) == [([rows, dim], [0, 0], ps.ranks[0])]
        elif kind == RW:
            assert _rows_of(ps) == RW_ROWS[i] and ps.ranks == list(range(8))
        elif kind == TWRW:
            assert _rows_of(ps) == TWRW_ROWS[i] and ps.ranks in ([0, 1, 2, 3], [4, 5, 6, 7])
        else:
            assert_columns_tiled(ps, rows, dim, ENUM_MIN_PARTITION[i])
            if kind == TWCW:
                assert len({r // 4 for r in ps.ranks}) == 1
    assert_fits(plan, model, HOSTS)


def test_constraints_filter_the_types_and_kernels(planner):
    """TorchRec's test_filtering: a sharder offering every type and kernel, each table limited to table-row-wise
    or column-wise on two kernels: the plan uses only those. (TorchRec's test allows fused_uvm and dense; its
    planner refuses the dense kernel off data-parallel, INVALID_COMPUTE_KERNEL, so here the second is
    fused_uvm_caching.)"""
    cons = ParameterConstraints(sharding_types=[TWRW, CW], compute_kernels=["fused_uvm", "fused_uvm_caching"])
    sharder = offering(ALL_TYPES, ["dense", "fused", "fused_uvm", "fused_uvm_caching", "quant"])
    plan = planner(HOSTS, constraints={f"table_{i}": cons for i in range(4)}, batch_size=256).plan(
        SparseNN(ENUM_SPECS), [sharder])
    for ps in module_plan(plan).values():
        assert ps.sharding_type in (TWRW, CW) and ps.compute_kernel in ("fused_uvm", "fused_uvm_caching")


def test_a_table_without_any_option_is_torchrecs_error(planner):
    """TorchRec's test_throw_ex_no_sharding_option_for_table: a column-wise sharder and a table limited to
    table-row-wise: TorchRec's own error, word for word."""
    cw = ParameterConstraints(sharding_types=[CW], compute_kernels=["fused"])
    rw = ParameterConstraints(sharding_types=[TWRW], compute_kernels=["fused_uvm_caching"])
    cons = {"table_0": cw, "table_1": rw, "table_2": cw, "table_3": cw}
    with pytest.raises(RuntimeError) as e:
        planner(HOSTS, constraints=cons, batch_size=256).plan(SparseNN(ENUM_SPECS), [offering([CW], name="CWSharder")])
    assert str(e.value) == (
        "No available sharding type and compute kernel combination after applying user provided constraints for "
        "table_1. Module: torchrec.modules.embedding_modules.EmbeddingBagCollection, sharder: CWSharder, compute "
        "device: cuda. To debug, search above for warning logs about no available sharding types/compute kernels "
        "for table: table_1")


# --------------------------------------------------------------------------- test_embedding(bag)_utils.py

UTILS_CONSTRAINTS = {
    "table_0": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LRU, load_factor=0.1,
                                                             reserved_memory=8.0, precision=DataType.FP16),
                                    enforce_hbm=True, stochastic_rounding=False,
                                    bounds_check_mode=BoundsCheckMode.IGNORE),
    "table_1": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.2,
                                                             reserved_memory=0.0, precision=DataType.FP16),
                                    enforce_hbm=True, stochastic_rounding=False,
                                    bounds_check_mode=BoundsCheckMode.NONE),
}


@pytest.mark.parametrize("pooled", [True, False], ids=["embedding_bag", "embedding"])
def test_the_sharded_module_reads_the_plans_fused_parameters(planner, pooled):
    """TorchRec's test_create_sharding_infos_by_group_override and _combine (embedding-bag and embedding
    collections, one CPU rank): the sharded module's fused parameters come from the plan, where the plan's
    override the sharder's; and with two of them left out of the constraints, the sharder's fill them in."""
    import copy

    topology = Topology(world_size=1, compute_device="cpu")
    specs = [(4, 4), (4, 4)]
    model = (EmbeddingBagCollection if pooled else EmbeddingCollection)(tables=[
        (EmbeddingBagConfig if pooled else EmbeddingConfig)(name=f"table_{i}", feature_names=[f"feature_{i}"],
                                                            embedding_dim=d, num_embeddings=r)
        for i, (r, d) in enumerate(specs)])
    sharded = ShardedEmbeddingBagCollection if pooled else ShardedEmbeddingCollection
    sharder = EmbeddingBagCollectionSharder() if pooled else EmbeddingCollectionSharder()
    prefix = {"prefix": "embedding_bags."} if pooled else {}  # 1.8.0's embedding collection takes none

    def infos(plan, fused):
        return sharded.create_grouped_sharding_infos(model, plan.get_plan_for_module(""), fused_params=fused,
                                                     **prefix)

    def fused_of(groups):
        return {t: [info.fused_params for info in group] for t, group in groups.items()}

    plan = planner(topology, constraints=UTILS_CONSTRAINTS).plan(model, [sharder])
    expected = fused_of(infos(plan, None))
    assert fused_of(infos(plan, {"enforce_hbm": False})) == expected  # the plan's value wins
    assert fused_of(infos(plan, {"ABC": True})) != expected  # a field the plan does not set is added
    partial = copy.deepcopy(UTILS_CONSTRAINTS)
    for cons in partial.values():
        cons.enforce_hbm = cons.stochastic_rounding = None
    plan = planner(topology, constraints=partial).plan(model, [sharder])
    assert fused_of(infos(plan, {"enforce_hbm": True, "stochastic_rounding": False})) == expected
    assert fused_of(infos(plan, {"enforce_hbm": True, "stochastic_rounding": True})) != expected


# --------------------------------------------------------------------------- every combination of types

FOUR_HOSTS = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=40 * MIB)
COMBOS = [tuple(t for k, t in enumerate(ALL_TYPES) if mask >> k & 1) for mask in range(1, 2 ** len(ALL_TYPES))]


def test_every_combination_of_sharding_types(planner):
    """Each of the 63 non-empty sets of sharding types as one table's `sharding_types` (4 ranks of 40 MiB on 2
    hosts, a sharder offering all six on the fused kernel, data-parallel on the dense one): each table gets one
    of its own types, every rank within its memory; the table limited to table-wise and row-wise has 48 MiB, more
    than a rank holds, and goes row-wise."""
    specs = [(1000 + 37 * i, 16 * (1 + i % 4)) for i in range(len(COMBOS))]
    big = COMBOS.index((TW, RW))
    specs[big] = (192 * 1024, 64)  # 48 MiB of fp32 weights
    cons = {f"table_{i}": ParameterConstraints(sharding_types=list(c), min_partition=8)
            for i, c in enumerate(COMBOS)}
    model = SparseNN(specs)
    kernels = {t: ["dense"] if t == DP else ["fused"] for t in ALL_TYPES}
    plan = planner(FOUR_HOSTS, constraints=cons).plan(model, [offering(ALL_TYPES, kernels)])
    mp = module_plan(plan)
    assert mp[f"table_{big}"].sharding_type == RW
    for i, combo in enumerate(COMBOS):
        ps = mp[f"table_{i}"]
        assert ps.sharding_type in combo, (i, combo, ps.sharding_type)
        assert ps.compute_kernel == ("dense" if ps.sharding_type == DP else "fused")
        if ps.sharding_type in (CW, TWCW):
            assert_columns_tiled(ps, specs[i][0], specs[i][1], 8)
        if ps.sharding_type in (TWRW, TWCW):
            assert len({r // 2 for r in ps.ranks}) == 1
    assert_fits(plan, model, FOUR_HOSTS)
