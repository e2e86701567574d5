"""The scorer of ensembles (`planner.costs.scorer.EnsembleScorer`): the members' mean and spread on hand-made
models, all members in one pass equal to each member scored alone, and ensemble checkpoints."""

import numpy as np
import pytest

from neuroshard.planner.costs.cost_models import CostModels, load_model, save_model
from neuroshard.planner.costs.nets import CostEnsemble, linear_compute_model
from neuroshard.planner.costs.scorer import EnsembleScorer, PlanScorer, get_scorer
from neuroshard.planner.search.beam import search
from neuroshard.planner.simulator import score_placements, simulate
from neuroshard.problem import Problem
from neuroshard.types.plan import Plan
from tests.planner.test_simulator import diagonal_comm_model, random_models, tables_of
from tests.train.test_comm_model import one_thread  # noqa: F401 - a fixture


def hand_ensemble() -> CostModels:
    """Two members: compute 0.5 + 0.01 x dims and 0.7 + 0.02 x dims; bw 0.02 x dims + 0.1 and
    0.04 x dims + 0.1; fw 0.01 x dims + 0.5 x sleep + 0.2 (both)."""
    compute = CostEnsemble([linear_compute_model(0.01, 0.5), linear_compute_model(0.02, 0.7)])
    fw = CostEnsemble([diagonal_comm_model("fw", 2, 0.01, 0.5, 0.2), diagonal_comm_model("fw", 2, 0.01, 0.5, 0.2)])
    bw = CostEnsemble([diagonal_comm_model("bw", 2, 0.02, 0.0, 0.1), diagonal_comm_model("bw", 2, 0.04, 0.0, 0.1)])
    return CostModels(compute, fw, bw)


def test_member_plan_costs_mean_and_spread_by_hand():
    tables = tables_of([16, 32, 8])
    bd = simulate(tables, Plan((), ((0, 2), (1,))), hand_ensemble(), Problem(2, 1.0))  # dims 24 | 32
    # member 1: compute .74 .82, bw .58 .74, ready 1.32 1.56 -> skew 0 .24 (the late rank's start delay),
    #   fw .24+.2=.44, .32+.12+.2=.64; totals 1.76 2.2 -> plan 2.2
    # member 2: compute 1.18 1.34, bw 1.06 1.38, ready 2.24 2.72 -> skew 0 .48, fw .44, .32+.24+.2=.76;
    #   totals 2.68 3.48 -> plan 3.48
    np.testing.assert_allclose(bd.member_costs, [2.2, 3.48], atol=1e-5)
    assert bd.cost_sd == pytest.approx(np.std([2.2, 3.48], ddof=1), abs=1e-5)
    # the breakdown is the members' mean compute and comm; each member's wait from the mean compute and its bw
    np.testing.assert_allclose(bd.compute, [0.96, 1.08], atol=1e-5)
    np.testing.assert_allclose(bd.bw_comm, [0.82, 1.06], atol=1e-5)
    # ready .96+.58=1.54, 1.08+.74=1.82 -> skew 0 .28 -> fw .44, .32+.14+.2=.66
    # ready .96+1.06=2.02, 1.08+1.38=2.46 -> skew 0 .44 -> fw .44, .32+.22+.2=.74
    np.testing.assert_allclose(bd.fw_comm, [0.44, 0.70], atol=1e-5)
    assert bd.cost == pytest.approx(max(0.96 + 0.82 + 0.44, 1.08 + 1.06 + 0.70), abs=1e-5)


def test_one_pass_over_the_members_equals_each_member_alone():
    a, b, c = random_models(4, seed=1), random_models(4, seed=2), random_models(4, seed=3)
    ens = CostModels(*(CostEnsemble([getattr(m, part) for m in (a, b, c)]) for part in ("compute", "fw", "bw")))
    scorer = get_scorer(ens)
    alone = [PlanScorer(m.compute, m.fw, m.bw) for m in (a, b, c)]
    assert isinstance(scorer, EnsembleScorer) and scorer.members == 3
    rng = np.random.default_rng(0)
    tables = tables_of(rng.choice([8, 16, 32, 64], size=12).tolist())
    configs = [t.config for t in tables]
    emb = scorer.embed(configs)
    shards = [[0, 5, 7], [1, 2], [3, 4, 6, 8], [9, 10, 11]]
    member = scorer.member_shard_costs(emb, shards)
    for k, s in enumerate(alone):
        np.testing.assert_allclose(member[k], s.shard_costs(s.embed(configs), shards), rtol=1e-5)
    np.testing.assert_allclose(scorer.shard_costs(emb, shards), member.mean(axis=0), rtol=1e-5)
    dims = rng.integers(0, 300, size=(5, 4)).astype(float)
    compute = rng.uniform(1, 5, size=(3, 5, 4))
    bw, fw = scorer.comm_members(dims, compute)
    for k, s in enumerate(alone):
        sbw, sfw = s.comm(dims, compute[k])
        np.testing.assert_allclose(bw[k], sbw, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(fw[k], sfw, rtol=1e-4, atol=1e-5)
    # the search runs on the ensemble as on one model, and its plan's cost is the simulator's
    res = search(tables, Problem(4, 1.0), ens)
    assert res.cost == pytest.approx(simulate(tables, res.plan, ens, Problem(res.plan.ndevices, 1.0)).cost, rel=1e-6)
    assert score_placements(scorer, compute.mean(axis=0), dims)[3].shape == (5,)


def test_one_pass_over_forward_members_with_wait_inputs_equals_each_member_alone():
    import torch

    from neuroshard.planner.costs.nets import CommCostModel

    n = 4
    models = []
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        models.append(CommCostModel("fw", n, torch.full((2 * n,), 4.0), torch.full((2 * n,), 64.0),
                                    target_scale=2.0, wait_term=True, wait_inputs=True).eval())
    base = random_models(n, seed=1)
    ens = CostModels(base.compute, CostEnsemble(models), base.bw)
    scorer = get_scorer(ens)
    rng = np.random.default_rng(0)
    dims = rng.integers(0, 300, size=(5, n)).astype(float)
    compute = rng.uniform(1, 5, size=(3, 5, n))
    _, fw = scorer.comm_members(dims, compute)
    for k, m in enumerate(models):
        alone = PlanScorer(base.compute, m, base.bw)
        assert alone.uses_numpy  # the NumPy copy reproduced the waits, or it would have fallen back to torch
        np.testing.assert_allclose(fw[k], alone.comm(dims, compute[k])[1], rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("one_thread")  # tiny torch models: extra threads only contend
def test_comm_models_for_any_world_size_run_as_numpy_copies_equal_to_their_networks():
    """A bound model for any world size (one, and an ensemble of three: each member's own) runs as a NumPy copy of
    its per-rank network, equal to the torch model's predictions; the search and the simulator agree on it."""
    from dataclasses import replace

    import torch

    from neuroshard.planner.costs.nets import WORLD_FEATURES, WorldCommModel, at_world

    def world(kind, seed):
        torch.manual_seed(seed)
        f = len(WORLD_FEATURES[kind])
        return WorldCommModel(kind, torch.full((f,), 50.0), torch.full((f,), 80.0), target_scale=2.0,
                              sizes=(2, 8)).eval()

    base = random_models(3, seed=1)
    rng = np.random.default_rng(0)
    for n in (3, 5):
        dims = rng.integers(0, 300, size=(6, n)).astype(float)
        compute = rng.uniform(1, 5, size=(3, 6, n))
        single = PlanScorer(base.compute, at_world(world("fw", 1), n), at_world(world("bw", 2), n))
        assert single.uses_numpy  # or it fell back to torch
        for kind, sleeps in (("bw", None), ("fw", compute[0])):
            np.testing.assert_allclose(single._comm(kind, dims, sleeps), single._torch_comm(kind, dims, sleeps),
                                       rtol=1e-4, atol=1e-5)
        fws, bws = [world("fw", s) for s in (3, 4, 5)], [world("bw", s) for s in (6, 7, 8)]
        ens = CostModels(CostEnsemble([random_models(n, seed=s).compute for s in (1, 2, 3)]), CostEnsemble(fws),
                         CostEnsemble(bws)).for_world(n)
        scorer = get_scorer(ens)
        assert isinstance(scorer, EnsembleScorer) and scorer.uses_numpy
        bw, fw = scorer.comm_members(dims, compute)
        for k in range(3):
            alone = PlanScorer(ens.compute.members[k], at_world(fws[k], n), at_world(bws[k], n))
            sbw, sfw = alone.comm(dims, compute[k])
            np.testing.assert_allclose(bw[k], sbw, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(fw[k], sfw, rtol=1e-4, atol=1e-5)
    tables = tables_of(rng.choice([8, 16, 32, 64], size=9).tolist())
    res = search(tables, Problem(5, 1.0), ens)
    assert res.cost == pytest.approx(simulate(tables, res.plan, ens, Problem(5, 1.0)).cost, rel=1e-6)
    # a layout without a NumPy copy (a tanh): each member's torch model, in the ensemble's scorer too
    for m in fws:
        m.mlp[1] = torch.nn.Tanh()
    scorer = get_scorer(replace(ens, fw=at_world(CostEnsemble(fws), n)))
    assert isinstance(scorer, EnsembleScorer) and not scorer.uses_numpy
    _, fw = scorer.comm_members(dims, compute)
    for k in range(3):
        torch_fw = at_world(fws[k], n).predict(dims, compute[k] + bw[k] - (compute[k] + bw[k]).min(-1, keepdims=True))
        np.testing.assert_allclose(fw[k], torch_fw, rtol=1e-5, atol=1e-6)


def test_ensemble_checkpoints_round_trip(tmp_path):
    ens = hand_ensemble()
    for name, model in (("c.pt", ens.compute), ("fw.pt", ens.fw)):
        save_model(model, tmp_path / name)
        back = load_model(tmp_path / name)
        assert isinstance(back, CostEnsemble) and len(back.members) == 2
        for m, n in zip(model.members, back.members):
            for (k, v), (k2, v2) in zip(m.state_dict().items(), n.state_dict().items()):
                assert k == k2 and np.array_equal(v.numpy(), v2.numpy())
    single = linear_compute_model(0.01, 0.5)
    save_model(single, tmp_path / "one.pt")
    assert not isinstance(load_model(tmp_path / "one.pt"), CostEnsemble)
