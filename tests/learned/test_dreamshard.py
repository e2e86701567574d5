"""DreamShard: features, labels, masking and out-of-memory, determinism, and that a tiny training run
improves the policy's simulated cost on its training tasks."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from neuroshard.learned import dreamshard as dn
from neuroshard.learned.oracle import SimulatorOracle
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.nets import linear_compute_model
from neuroshard.planner.simulator import mem_cap_elements, simulate, validate_plan
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import OutOfMemoryError
from neuroshard.types.tables import ShardTable, TableConfig
from tests.planner.test_simulator import diagonal_comm_model

BINS = tuple([1 / 17] * 17)
N = 4
MAX_MEM = 1.0
PROBLEM = Problem(N, MAX_MEM)
# A few seconds of training: 3 iterations, 12 measured plans, 90 cost steps, 12 policy steps.
TINY = dn.DreamShardConfig(num_iterations=3, bench_steps=4, bench_training_steps=30, batch_size=16,
                           rl_num_batches=4, rl_batch_size=6)


def models4() -> CostModels:
    """Hand-set linear models for 4 devices: compute 0.5 + 0.05 x dims; comm grows with dims."""
    return CostModels(linear_compute_model(0.05, 0.5), diagonal_comm_model("fw", N, 0.01, 0.5, 0.2),
                      diagonal_comm_model("bw", N, 0.02, 0.0, 0.1))


def random_tasks(seed: int, count: int, lo: int = 8, hi: int = 16) -> list[list[ShardTable]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        T = int(rng.integers(lo, hi + 1))
        out.append([ShardTable(i, int(rng.integers(100)), TableConfig(
            int(10 ** rng.uniform(2, 5)), float(rng.uniform(1, 30)), tuple(rng.dirichlet(np.ones(17))),
            int(rng.choice([4, 8, 16, 32, 64, 128])))) for i in range(T)])
    return out


def tight_task(count: int) -> tuple[list[ShardTable], float]:
    """`count` equal tables, exactly two of which fill a device (cap 32000 fp32 elements)."""
    max_mem = 2 * 1000 * 16 * 4 / 2**30
    assert mem_cap_elements(max_mem) == 32000
    return [ShardTable(i, i, TableConfig(1000, 1.0 + i, BINS, 16)) for i in range(count)], max_mem


def mean_sim_cost(policy, tasks, models) -> float:
    problem = Problem(N, MAX_MEM)
    return float(np.mean([simulate(t, policy.plan(t, problem), models, problem).cost for t in tasks]))


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    tasks, models = random_tasks(0, 6), models4()
    policy, curve = dn.train(tasks, PROBLEM, SimulatorOracle(models, PROBLEM), TINY, progress=False)
    return tasks, models, policy, curve


def test_features_are_z_scored_per_task_with_a_guard():
    tables = [ShardTable(0, 0, TableConfig(100, 1.0, BINS, 16)), ShardTable(1, 1, TableConfig(300, 3.0, BINS, 32))]
    x = dn.task_features(tables)
    # dim / 16 raw; row 100, 300 -> -1, 1; pooling 1, 3 -> -1, 1; size 1600, 9600 -> -1, 1; bins raw
    np.testing.assert_allclose(x[:, :4], [[1, -1, -1, -1], [2, 1, 1, 1]], rtol=1e-6)
    np.testing.assert_allclose(x[:, 4:], [BINS, BINS], rtol=1e-6)
    same = dn.task_features([tables[0], tables[0]])  # std 0: mean-centred only, no NaN
    np.testing.assert_allclose(same[:, 1:4], 0.0)


def test_oracle_labels_fill_dreamshards_four_columns():
    cols, overall = dn.oracle_labels(CostBreakdown([3.0, 1.0], [0.5, 0.25], [0.75, 2.0]))
    # [fwd compute, fwd comm, bwd comm, bwd compute] = [compute, fw_comm, bw_comm, 0]
    np.testing.assert_allclose(cols, [[3.0, 0.75, 0.5, 0.0], [1.0, 2.0, 0.25, 0.0]])
    assert overall == pytest.approx(4.25)  # max(3 + 0.75 + 0.5, 1 + 2 + 0.25) = the plan cost


@pytest.mark.parametrize("seed", range(5))
def test_policy_never_picks_a_device_without_room(seed):
    torch.manual_seed(seed)
    policy = dn.DreamShardPolicy(dn.DreamShardNet(), {})
    tables, max_mem = tight_task(8)  # feasible only with exactly two tables per device
    plan = policy.plan(tables, Problem(N, max_mem))
    validate_plan(tables, plan, Problem(N, max_mem))
    assert sorted(len(s) for s in plan.shards) == [2, 2, 2, 2]
    # sampled episodes are masked too
    task = policy.task(tables, max_mem)
    ep = dn.rollout(policy.net, task, N, 20, greedy=False, gen=torch.Generator().manual_seed(seed))
    assert (ep.failed < 0).all()
    assert ep.legal.gather(2, ep.actions[..., None]).all()


def test_no_legal_device_is_out_of_memory():
    torch.manual_seed(0)
    policy = dn.DreamShardPolicy(dn.DreamShardNet(), {})
    tables, max_mem = tight_task(9)  # 9 tables, room for 8
    with pytest.raises(OutOfMemoryError, match="fits on no device"):
        policy.plan(tables, Problem(N, max_mem))


def test_same_seed_same_policy_and_plans(trained):
    tasks, models, policy, curve = trained
    again, curve2 = dn.train(tasks, PROBLEM, SimulatorOracle(models, PROBLEM), TINY, progress=False)
    for k, v in policy.net.state_dict().items():
        assert torch.equal(v, again.net.state_dict()[k]), k
    held_out = random_tasks(1, 3)
    assert [policy.plan(t, PROBLEM) for t in held_out] == [again.plan(t, PROBLEM) for t in held_out]
    assert [r["mean_measured_ms"] for r in curve] == [r["mean_measured_ms"] for r in curve2]
    other, _ = dn.train(tasks, PROBLEM, SimulatorOracle(models, PROBLEM), replace(TINY, seed=1), progress=False)
    assert not torch.equal(other.net.logit.weight, policy.net.logit.weight)


def test_tiny_training_improves_the_simulated_cost_on_the_training_tasks(trained):
    tasks, models, policy, curve = trained
    torch.manual_seed(TINY.seed)
    start = dn.DreamShardPolicy(dn.DreamShardNet(), {})  # the untrained start of the same run
    before, after = mean_sim_cost(start, tasks, models), mean_sim_cost(policy, tasks, models)
    assert after < 0.9 * before, (before, after)
    assert len(curve) == TINY.num_iterations and sum(r["plans_measured"] for r in curve) == 12
    assert policy.meta["ndevices"] == N and policy.meta["max_mem"] == MAX_MEM


def test_checkpoint_round_trip(trained, tmp_path):
    tasks, _, policy, _ = trained
    policy.save(tmp_path / "ds.pt")
    loaded = dn.load_policy(tmp_path / "ds.pt")
    assert loaded.meta["config"] == TINY.to_json()
    assert [loaded.plan(t, Problem(N, MAX_MEM)) for t in tasks] == [policy.plan(t, Problem(N, MAX_MEM)) for t in tasks]
