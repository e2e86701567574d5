"""The one training loop: seeded splits, learning known costs, the relative loss, ensembles."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from neuroshard.planner.costs.nets import CommCostModel, CostEnsemble
from neuroshard.train.loop import (
    TrainConfig,
    split_indices,
    train_ensemble,
    train_model,
)
from neuroshard.train.metrics import scatter_plot
from neuroshard.types.errors import ConfigError


def test_split_is_seeded_and_disjoint():
    cfg = TrainConfig(seed=3)
    a = split_indices(100, cfg)
    b = split_indices(100, cfg)
    assert [len(x) for x in a] == [80, 10, 10]
    assert all((x == y).all() for x, y in zip(a, b))
    assert len(set(np.concatenate(a))) == 100
    assert [len(x) for x in split_indices(100, TrainConfig(num_samples=50))] == [40, 5, 5]


def test_train_model_learns_linear_comm_costs(tmp_path):
    # bw cost of device r = 0.1 ms per dim: a learnable map; must beat a constant predictor
    rng = np.random.default_rng(0)
    dims = torch.tensor(rng.integers(0, 512, size=(1200, 2)), dtype=torch.float32)
    y = 0.1 * dims + 1.0
    model = CommCostModel("bw", 2, dims.mean(0), dims.std(0))
    rep = train_model(model, (dims,), y, TrainConfig(epochs=60, batch_size=64, seed=0, lr=3e-3))
    const_mse = float(((y - y.mean()) ** 2).mean())
    assert rep.metrics["test"]["mse"] < 0.02 * const_mse
    assert rep.metrics["test"]["spearman"] > 0.98
    assert rep.test_pred.shape == (120, 2)
    scatter_plot(rep.test_pred, rep.test_true, tmp_path / "s.png", "bw")
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_relative_loss_fits_costs_spanning_orders_of_magnitude():
    # cost = 0.01 ms per dim on device 0's input, from 0.1 ms to 40 ms: the relative loss must
    # keep the small costs accurate too
    rng = np.random.default_rng(1)
    dims = torch.tensor(np.exp(rng.uniform(np.log(10), np.log(4000), size=(1000, 1))), dtype=torch.float32)
    y = 0.01 * dims
    model = CommCostModel("bw", 1, dims.mean(0), dims.std(0))
    rep = train_model(model, (dims,), y, TrainConfig(epochs=80, batch_size=64, seed=0, lr=3e-3, loss="rel_mse"))
    assert rep.metrics["test"]["mape"] < 0.15
    with pytest.raises(ConfigError, match="--loss: must be one of"):
        TrainConfig(loss="l1").validate()


class _Constant(torch.nn.Module):
    """One learnt number for every sample: what each loss's optimum is can be worked out by hand."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return self.c.expand(len(x), 4)


@pytest.mark.parametrize("loss, optimum", [
    ("mse", (1 + 1 + 1 + 10) / 4),                  # the mean
    ("rel_mse", (3 + 1 / 10) / (3 + 1 / 100)),        # sum(1/y) / sum(1/y^2)
    ("rel_l1", 1.0),                                  # the median weighted by 1/y: the outlier does not move it
])
def test_each_loss_converges_to_its_hand_computed_constant(loss, optimum):
    # every sample's four targets are 1, 1, 1 and 10 (one slow outlier): each split holds the same mix
    y = torch.tensor([[1.0, 1.0, 1.0, 10.0]] * 20)
    model = _Constant()
    cfg = TrainConfig(epochs=400, batch_size=20, seed=0, lr=0.02, loss=loss, patience=None)
    train_model(model, (torch.zeros(len(y), 1),), y, cfg, progress=False)
    assert model.c.item() == pytest.approx(optimum, abs=0.03)


def test_an_ensemble_is_member_zero_plus_bootstrap_members_and_predicts_their_mean():
    rng = np.random.default_rng(2)
    dims = torch.tensor(rng.integers(0, 512, size=(300, 2)), dtype=torch.float32)
    y = 0.1 * dims + 1.0

    def build():
        return CommCostModel("bw", 2, dims.mean(0), dims.std(0))

    cfg = TrainConfig(epochs=5, batch_size=64, seed=0, lr=3e-3)
    single, rep1 = train_ensemble(build, (dims,), y, cfg)
    ens, rep3 = train_ensemble(build, (dims,), y, replace(cfg, ensemble=3))
    assert isinstance(ens, CostEnsemble) and len(ens.members) == 3 and not isinstance(single, CostEnsemble)
    # member 0 is exactly the model trained alone; the others differ (own seed, bootstrap resample)
    for a, b in zip(single.state_dict().values(), ens.members[0].state_dict().values()):
        assert torch.equal(a, b)
    assert not torch.equal(ens.members[0].mlp[0].weight, ens.members[1].mlp[0].weight)
    with torch.no_grad():
        assert torch.allclose(ens(dims), torch.stack([m(dims) for m in ens.members]).mean(0))
    assert len(rep3.members) == 3 and rep3.members[0] == rep1.metrics and rep3.test_pred.shape == (30, 2)
    with pytest.raises(ConfigError, match="--ensemble: must be >= 1"):
        TrainConfig(ensemble=0).validate()


def test_missing_targets_weigh_nothing():
    # targets 1, 1, 1 and a missing one (NaN, a padded rank): the mse optimum is their mean, 1, not pulled anywhere
    y = torch.tensor([[1.0, 1.0, 1.0, float("nan")]] * 20)
    model = _Constant()
    cfg = TrainConfig(epochs=300, batch_size=20, seed=0, lr=0.02, loss="mse", patience=None)
    report = train_model(model, (torch.zeros(len(y), 1),), y, cfg, progress=False)
    assert model.c.item() == pytest.approx(1.0, abs=0.02) and report.metrics["test"]["n"] == 3 * len(report.test_true)
