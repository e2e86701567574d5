"""AutoShard: global feature statistics, masking and out-of-memory, the overflow penalty, determinism,
and that a tiny training run improves the policy's simulated cost on its training tasks."""

import numpy as np
import pytest
import torch

from neuroshard.learned import autoshard as an
from neuroshard.learned.oracle import SimulatorOracle
from neuroshard.planner.simulator import validate_plan
from neuroshard.problem import Problem
from neuroshard.types.errors import OutOfMemoryError
from neuroshard.types.tables import ShardTable, TableConfig
from tests.learned.test_dreamshard import (
    BINS,
    MAX_MEM,
    PROBLEM,
    N,
    mean_sim_cost,
    models4,
    random_tasks,
    tight_task,
)

# A few seconds of training: 12 updates of 4 environments x 25 steps.
TINY = an.AutoShardConfig(total_steps=1200, batch_size=4, unroll_length=25, num_cost_updates=5, cost_batch_size=64)


def untrained(seed: int, tasks) -> an.AutoShardPolicy:
    torch.manual_seed(seed)
    mean, std = an.feature_stats(tasks)
    return an.AutoShardPolicy(an.AutoShardNet(), {"feature_mean": mean, "feature_std": std})


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    tasks, models = random_tasks(0, 6), models4()
    oracle = SimulatorOracle(models, Problem(N, MAX_MEM))
    policy, curve = an.train(tasks, Problem(N, MAX_MEM), oracle, TINY, progress=False)
    return tasks, models, policy, curve, oracle


def test_feature_stats_are_global_with_a_guard():
    a = [ShardTable(0, 0, TableConfig(100, 2.0, BINS, 16)), ShardTable(1, 1, TableConfig(300, 2.0, BINS, 16))]
    b = [ShardTable(0, 2, TableConfig(200, 2.0, BINS, 16))]
    mean, std = an.feature_stats([a, b])
    # over the 3 tables: dim 16 (std 0 -> 1), row mean 200 std sqrt(20000/3), pooling 2 (std 0 -> 1)
    np.testing.assert_allclose(mean, [16, 200, 2])
    np.testing.assert_allclose(std, [1, np.sqrt(20000 / 3), 1])
    x = an.normalised_features(a, mean, std).numpy()
    np.testing.assert_allclose(x[:, :3], [[0, -100 / np.sqrt(20000 / 3), 0], [0, 100 / np.sqrt(20000 / 3), 0]],
                               rtol=1e-5)
    np.testing.assert_allclose(x[:, 3], [100 * 16 * 4 / 2**30, 300 * 16 * 4 / 2**30], rtol=1e-6)  # GB, raw


@pytest.mark.parametrize("seed", range(5))
def test_policy_never_picks_a_device_without_room(seed):
    tables, max_mem = tight_task(8)
    plan = untrained(seed, [tables]).plan(tables, Problem(N, max_mem))
    validate_plan(tables, plan, Problem(N, max_mem))
    assert sorted(len(s) for s in plan.shards) == [2, 2, 2, 2]


def test_no_legal_device_is_out_of_memory():
    tables, max_mem = tight_task(9)
    with pytest.raises(OutOfMemoryError, match="fits on no device"):
        untrained(0, [tables]).plan(tables, Problem(N, max_mem))


def test_episode_without_room_ends_with_the_overflow_penalty():
    tables, max_mem = tight_task(9)
    policy = untrained(0, [tables])
    envs = an._Envs(policy.net, [policy.task(tables, max_mem)], N, 1, np.random.default_rng(0))
    for step in range(7):  # fill the devices with two tables each
        done, reward, plan = envs.act(0, step // 2)
        assert (done, reward, plan) == (False, 0.0, None)
    done, reward, plan = envs.act(0, 3)  # the 8th fills the last device: the 9th has no legal device
    assert done and plan is None
    # penalty (M - GB of the fullest device had the table gone to the least-used) / M = (2 - 3) / 2
    assert reward == pytest.approx(-0.5)


def test_tiny_training_improves_the_simulated_cost_on_the_training_tasks(trained):
    tasks, models, policy, curve, oracle = trained
    before, after = mean_sim_cost(untrained(TINY.seed, tasks), tasks, models), mean_sim_cost(policy, tasks, models)
    assert after < 0.9 * before, (before, after)
    assert curve[-1]["steps"] == 1200 and oracle.plans > 0
    assert policy.meta["feature_mean"] == pytest.approx(an.feature_stats(tasks)[0])


def test_same_seed_same_policy_and_plans(trained, tmp_path):
    tasks, models, policy, curve, _ = trained
    again, curve2 = an.train(tasks, PROBLEM, SimulatorOracle(models, PROBLEM), TINY, progress=False)
    for k, v in policy.net.state_dict().items():
        assert torch.equal(v, again.net.state_dict()[k]), k
    held_out = random_tasks(1, 3)
    assert [policy.plan(t, PROBLEM) for t in held_out] == [again.plan(t, PROBLEM) for t in held_out]
    assert [r["mean_reward"] for r in curve] == [r["mean_reward"] for r in curve2]
    policy.save(tmp_path / "as.pt")
    loaded = an.load_policy(tmp_path / "as.pt")
    assert [loaded.plan(t, PROBLEM) for t in held_out] == [policy.plan(t, PROBLEM) for t in held_out]
