"""TorchRec's planner with other cost models: the search half of the cost-model ablation.

* `fitted_estimator`: TorchRec's own `EmbeddingPerfEstimator` (the `estimator` package of TorchRec 1.8)
  with a `HardwarePerfConfig` holding the coefficients `planner.costs.analytic` fitted to this machine's
  cost data: the fitted forward coefficients of table-wise and column-wise shards, the backward as
  TorchRec's multiple of the forward, the device bandwidth they are relative to, the fitted all-to-all
  bandwidth, no input distribution (the measured plan cost has none), and every sample's pooled output
  (TorchRec scales it by min(1, pooling factor), for sparse features; the measured exchange sends it
  whole) — through the config's own hooks (`@input_dist_comms`, `@output_write_size`, `@fwd_comms`,
  `@bwd_comms`).
* `NeuralShardEstimator`: a `ShardEstimator` pricing each shard with the neural cost models, as far as
  TorchRec's interface allows: TorchRec adds up per-shard costs per rank, so a shard's compute is the
  compute model's cost of that shard alone, and its exchanges the comm models' time per unit of dim sum
  at the task's mean load (the neural models price a rank's whole set, which no per-shard number can).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from neuroshard.planner.costs.analytic import BWD_MULTIPLIER, DEVICE_BW, AnalyticModel
from neuroshard.types.tables import ShardTable


def fitted_config(model: AnalyticModel):
    """A TorchRec `HardwarePerfConfig` with `model`'s coefficients (module doc)."""
    from torchrec.distributed.planner.estimator.annotations import (
        bwd_comms,
        fwd_comms,
        input_dist_comms,
        output_write_size,
    )
    from torchrec.distributed.planner.estimator.types import (
        EstimatorPerfCoefficients,
        HardwarePerfConfig,
        PerfCoefficient,
        PerfCoefficientConfig,
    )

    coeff = EstimatorPerfCoefficients(fwd=PerfCoefficient(*model.coef), bwd=None)

    class FittedHardwarePerfConfig(HardwarePerfConfig):
        name = "neuroshard_fitted"
        coefficients = PerfCoefficientConfig(table_wise=coeff, column_wise=coeff, default=coeff,
                                             bwd_compute_multiplier=BWD_MULTIPLIER)
        device_bw = DEVICE_BW
        _bwd_compute_multiplier = BWD_MULTIPLIER

        @output_write_size
        def pooled_output(self, ctx, is_fwd: bool = True) -> float:  # every sample's, in fp32
            return sum(n * b for n, b in zip(ctx.num_poolings, ctx.batch_sizes)) * ctx.world_size * ctx.emb_dim * 4.0

        @fwd_comms
        def forward_exchange(self, ctx) -> float:
            return self.pooled_output(ctx) / model.a2a_bw

        @bwd_comms
        def backward_exchange(self, ctx) -> float:
            return self.pooled_output(ctx) / model.a2a_bw

        @input_dist_comms
        def no_input_dist(self, ctx) -> float:  # the measured plan cost has no input distribution
            return 0.0

    return FittedHardwarePerfConfig()


def fitted_estimator(model: AnalyticModel, topology, constraints):
    """TorchRec's `EmbeddingPerfEstimator` with the fitted config."""
    from torchrec.distributed.planner.estimator.estimator import EmbeddingPerfEstimator

    return EmbeddingPerfEstimator(topology=topology, constraints=constraints, config=fitted_config(model))


def neural_estimator(models, tables: Sequence[ShardTable], names: Sequence[str], batch: int | None):
    """A `ShardEstimator` pricing shards with the neural cost models (module doc)."""
    from torchrec.distributed.planner.types import Perf, ShardEstimator

    from neuroshard.planner.costs.scorer import get_scorer

    scorer = get_scorer(models.at_batch(batch) if batch else models)
    config_of = {name: t.config for name, t in zip(names, tables)}
    n = scorer.ndevices
    mean = max(sum(t.dim for t in tables) / n, 4.0)
    bw, fw = scorer.comm(np.full((1, n), mean), np.zeros((1, n)))
    per_dim_bw, per_dim_fw = float(bw.mean()) / mean, float(fw.mean()) / mean

    class NeuralShardEstimator(ShardEstimator):
        def __init__(self, topology=None, constraints=None):
            self._cache: dict[tuple[str, int], float] = {}

        def _compute(self, name: str, width: int) -> float:
            if (name, width) not in self._cache:
                emb = scorer.embed([config_of[name].with_dim(width)])
                self._cache[name, width] = float(scorer.cost_from_acc(scorer.acc0 + scorer.project(emb))[0])
            return self._cache[name, width]

        def estimate(self, sharding_options, sharder_data_map=None) -> None:
            for option in sharding_options:
                for shard in option.shards:
                    width = int(shard.size[1])
                    shard.perf = Perf(fwd_compute=self._compute(option.name, width), fwd_comms=per_dim_fw * width,
                                      bwd_compute=0.0, bwd_comms=per_dim_bw * width)

    return NeuralShardEstimator()
