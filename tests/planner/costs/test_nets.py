"""The cost models' networks: the world-size-aware comm model's features and its padding."""

import numpy as np
import torch

from neuroshard.planner.costs.nets import WORLD_FEATURES, WorldCommModel, world_features


def test_world_features_by_hand():
    # two exchanges padded to 4 ranks: 2 ranks (dims 64, 32; rank 1 starts 5 ms late) and 4 ranks
    dims = torch.tensor([[64.0, 32.0, 0.0, 0.0], [10.0, 20.0, 30.0, 40.0]])
    sleeps = torch.tensor([[0.0, 5.0, 0.0, 0.0], [0.0, 1.0, 3.0, 2.0]])
    f = world_features("fw", dims, sleeps, torch.tensor([2, 4]))
    names = WORLD_FEATURES["fw"]
    row = dict(zip(names, f[0, 0].tolist()))
    # n 2, rank 0 of it, own 64 of 96 (largest 64, smallest 32); sends 64 x 1/2, receives 32 / 2; the most anyone
    # receives: (96 - 32) / 2; it waits 5 ms for rank 1, the longest wait 5, the mean 2.5, the gap to the last rank 5
    assert row == {"n": 2, "rank": 0, "first": 1, "own": 64, "total": 96, "largest": 64, "smallest": 32, "send": 32,
                   "recv": 16, "max_recv": 32, "wait": 5, "max_wait": 5, "mean_wait": 2.5, "gap": 5}
    assert dict(zip(names, f[0, 1].tolist()))["wait"] == 0 and f[0, 2:].abs().sum() == 0  # padded ranks: 0
    assert dict(zip(names, f[0, 1].tolist()))["rank"] == 1  # rank 1 of 2: the last
    assert abs(dict(zip(names, f[1, 2].tolist()))["rank"] - 2 / 3) < 1e-6  # rank 2 of 4
    row = dict(zip(names, f[1, 0].tolist()))
    # waits 3, 2, 0, 1: mean 1.5; the second rank to last started 1 ms before the last
    assert row["send"] == 7.5 and row["recv"] == 22.5 and row["max_recv"] == 22.5
    assert (row["wait"], row["max_wait"], row["mean_wait"], row["gap"]) == (3, 3, 1.5, 1)
    assert world_features("bw", dims, None, torch.tensor([2, 4])).shape == (2, 4, len(WORLD_FEATURES["bw"]))


def test_a_ranks_cost_does_not_depend_on_the_padding_and_padded_ranks_cost_nothing():
    torch.manual_seed(0)
    num = len(WORLD_FEATURES["fw"])
    model = WorldCommModel("fw", torch.zeros(num), torch.full((num,), 50.0), target_scale=2.0).eval()
    dims, sleeps = [[64.0, 32.0, 16.0]], [[0.0, 4.0, 1.0]]
    plain = model.predict(dims, sleeps)  # any width: 3 ranks here
    x = torch.tensor([[64.0, 32.0, 16.0, 0.0, 0.0, 0.0, 4.0, 1.0, 0.0, 0.0]])
    padded = model(x, torch.tensor([3])).detach().numpy()
    assert np.allclose(padded[0, :3], plain[0]) and (padded[0, 3:] == 0).all()
    assert plain.shape == (1, 3) and model.predict([[8.0] * 8], [[0.0] * 8]).shape == (1, 8)
    # the forward time is each rank's wait for the last rank plus the network's transfer: a network that says
    # 0.5 (x the target scale 2: 1 ms) gives waits 4, 0, 3 ms plus 1 ms
    with torch.no_grad():
        for p in model.mlp.parameters():
            p.zero_()
        model.mlp[-1].bias.fill_(0.5)
    assert model.predict(dims, sleeps).tolist() == [[5.0, 1.0, 4.0]]
