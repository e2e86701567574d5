"""TorchRec's planner on other costs: its own estimator with the fitted coefficients prices every table-wise
and column-wise shard as `planner.costs.analytic` computes it, and the neural estimator prices shards with the
neural models; the `torchrec_fitted` and `torchrec_neural` algorithms plan valid plans."""

import numpy as np
import pytest

pytest.importorskip("torchrec")

import neuroshard as ns  # noqa: E402
from neuroshard.planner.costs.analytic import AnalyticModel  # noqa: E402
from neuroshard.planner.simulator import validate_plan  # noqa: E402
from neuroshard.problem import Problem  # noqa: E402
from neuroshard.torchrec.estimators import fitted_estimator  # noqa: E402
from neuroshard.torchrec.sharder import embedding_bag_collection, table_names  # noqa: E402
from neuroshard.types.tables import ShardTable, TableConfig  # noqa: E402
from tests.test_api import _hand_models as hand_models  # noqa: E402

MODEL = AnalyticModel(4, (0.002, 0.03, 0.2, 0.3), 1.5e6, 4096)


def _tables():
    rng = np.random.default_rng(0)
    return [ShardTable(i, i, TableConfig(int(rng.integers(1000, 200_000)), float(rng.uniform(0.3, 20)),
                                         ns.DEFAULT_BINS, int(d)))
            for i, d in enumerate((4, 16, 32, 48, 64, 96, 128, 256))]


def _options(tables, ndevices=4, batch=4096):
    """TorchRec's table-wise and column-wise sharding options of the tables (one collection), estimated."""
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig

    names = table_names(tables)
    topology = TopologyFactory.create_topology(TrainerConfig(world_size=ndevices, local_world_size=ndevices,
                                                             hbm_cap_bytes=2**34, ddr_cap_bytes=0),
                                               kernel_config=KernelConfig(compute_device="cuda"))
    constraints = {n: ParameterConstraints(sharding_types=["table_wise", "column_wise"],
                                           compute_kernels=[EmbeddingComputeKernel.FUSED.value],
                                           pooling_factors=[t.config.pooling_factor]) for n, t in zip(names, tables)}
    est = fitted_estimator(MODEL, topology, constraints)
    enum = EmbeddingEnumerator(topology=topology, batch_size=batch // ndevices, constraints=constraints,
                               estimator=[est])
    return names, enum.enumerate(embedding_bag_collection(tables, names), [EmbeddingBagCollectionSharder()])


def test_torchrecs_estimator_with_the_fitted_config_is_the_analytic_formula():
    tables = _tables()
    names, options = _options(tables)
    by_name = dict(zip(names, tables))
    seen = set()
    for opt in options:
        t = by_name[opt.name]
        for shard in opt.shards:
            width = int(shard.size[1])
            want_compute = MODEL.table_compute([t.config.with_dim(width)], 4096)[0]
            got = shard.perf
            assert got.fwd_compute + got.bwd_compute == pytest.approx(want_compute, rel=1e-9)
            assert got.fwd_comms == pytest.approx(MODEL.comm_per_dim(4096) * width, rel=1e-9)
            assert got.bwd_comms == pytest.approx(MODEL.comm_per_dim(4096) * width, rel=1e-9)
            assert got.input_dist_comms == 0.0 and got.prefetch_compute == 0.0
            seen.add((opt.sharding_type, width))
    assert {kind for kind, _ in seen} == {"table_wise", "column_wise"}


def test_the_fitted_and_neural_torchrec_planners_plan_valid_plans(tmp_path):
    MODEL.save(tmp_path / "est.json")
    tables = _tables()
    models = hand_models(4)
    for alg, options in (("torchrec_fitted", {"torchrec_estimator": str(tmp_path / "est.json")}),
                         ("torchrec_neural", {}), ("neuroshard_fitted", {"torchrec_estimator": str(tmp_path /
                                                                                                   "est.json")})):
        res = ns.shard(tables, Problem(4, 1.0), models=models, alg=alg, **options)
        validate_plan(tables, res.plan, Problem(4, 1.0))
        assert res.cost_ms > 0
    with pytest.raises(ns.ConfigError, match="--torchrec_estimator: torchrec_fitted prices plans with TorchRec's "
                                             "estimator fitted to the cost data: give --torchrec_estimator"):
        ns.shard(tables, Problem(4, 1.0), models=models, alg="torchrec_fitted")
    with pytest.raises(ns.InputError, match="fitted for 4 ranks, the plans are for 2"):
        ns.shard(tables, Problem(2, 1.0), alg="torchrec_fitted", torchrec_estimator=str(tmp_path / "est.json"))


def test_torchrecs_default_estimator_is_its_own_figures():
    from torchrec.distributed.planner import constants

    from neuroshard.planner.costs import analytic

    assert analytic.TORCHREC_HBM_MEM_BW == pytest.approx(constants.HBM_MEM_BW)
    assert analytic.TORCHREC_INTRA_NODE_BANDWIDTH == pytest.approx(constants.INTRA_NODE_BANDWIDTH)
    model = AnalyticModel.torchrec_default(4, 4096)
    table = TableConfig(1000, 2.0, ns.DEFAULT_BINS, 128)
    # TorchRec's forward compute of a 128-wide shard: (IR + LU + OW) / HBM bandwidth, backward twice that
    ir, lu, ow = np.ceil(8 * 4096 * 2.0), 4 * 4096 * 2.0 * 128, 4 * 4096 * 128
    assert model.table_compute([table])[0] == pytest.approx(3 * (ir + lu + ow) / constants.HBM_MEM_BW)
