import numpy as np
import pytest
import torch

from neuroshard.planner.costs.cost_models import (
    load_comm_model,
    load_compute_model,
    load_model,
    save_model,
)
from neuroshard.planner.costs.features import TABLE_EMBED_DIM
from neuroshard.planner.costs.nets import (
    CommCostModel,
    ComputeCostModel,
    feature_stats,
    linear_comm_model,
    linear_compute_model,
    table_features,
)
from neuroshard.types.errors import InputError
from neuroshard.types.tables import ShardTable, TableConfig

BINS = tuple([0.25] * 4 + [0.0] * 13)


def _configs():
    return [TableConfig(10 ** (2 + i % 4), 1.0 + i, BINS, dim=4 * 2 ** (i % 5)) for i in range(12)]


def _compute_model():
    torch.manual_seed(0)
    mean, std = feature_stats(table_features(_configs()))
    return ComputeCostModel(mean, std, target_scale=7.0).eval()


def test_table_features_hand_values():
    f = table_features([TableConfig(1000, 2.5, BINS, dim=16)])
    assert f.shape == (1, 21)
    assert f[0, :4].tolist() == [16.0, 3.0, 2.5, 40.0]
    assert f[0, 4:8].tolist() == [0.25] * 4


def test_compute_model_sum_structure_and_empty_set():
    m, configs = _compute_model(), _configs()
    sets = [[0, 1, 2], [], [5], [3, 3, 7, 11]]
    fast = m.predict_sets(configs, sets)
    assert fast[1] == 0.0
    feats = table_features(configs)
    padded = torch.zeros(len(sets), 4, feats.shape[1])
    mask = torch.zeros(len(sets), 4, dtype=torch.bool)
    for i, s in enumerate(sets):
        padded[i, :len(s)] = feats[s]
        mask[i, :len(s)] = True
    with torch.no_grad():
        plain = m(padded, mask).numpy()
    np.testing.assert_allclose(fast, plain, rtol=1e-5, atol=1e-5)
    emb = m.predict_tables(configs)
    assert emb.shape == (12, TABLE_EMBED_DIM)
    # the cost of a set only depends on the sum of its members' embeddings
    with torch.no_grad():
        via_sums = m.cost_from_sums(torch.from_numpy(emb[[0, 1, 2]].sum(0, keepdims=True)), torch.tensor([3]))
    assert float(via_sums) == pytest.approx(float(fast[0]), rel=1e-5)


def test_checkpoint_round_trip(tmp_path):
    m, configs = _compute_model(), _configs()
    save_model(m, tmp_path / "c.pt")
    m2 = load_compute_model(tmp_path / "c.pt")
    np.testing.assert_array_equal(m.predict_sets(configs, [[0, 4], [9]]), m2.predict_sets(configs, [[0, 4], [9]]))
    assert not list(tmp_path.glob(".*tmp"))


def test_comm_model_round_trip_and_mismatch(tmp_path):
    torch.manual_seed(1)
    fw = CommCostModel("fw", 4, torch.zeros(8), torch.ones(8), target_scale=2.0)
    save_model(fw, tmp_path / "fw.pt")
    dims = np.array([[64, 32, 0, 128]], dtype=np.float32)
    sleeps = np.array([[0, 1, 2, 3]], dtype=np.float32)
    got = load_comm_model(tmp_path / "fw.pt", 4, "fw").predict(dims, sleeps)
    np.testing.assert_array_equal(got, fw.predict(dims, sleeps))
    assert got.shape == (1, 4)
    with pytest.raises(InputError, match="ndevices=4, asked for 8"):
        load_comm_model(tmp_path / "fw.pt", 8, "fw")
    with pytest.raises(InputError, match="expected a bw comm model"):
        load_comm_model(tmp_path / "fw.pt", 4, "bw")


def test_load_model_bad_files(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_model(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_text("junk")
    with pytest.raises(InputError, match="junk.pt: not a NeuroShard cost model"):
        load_model(tmp_path / "junk.pt")


def test_hand_set_linear_models_compute_their_formulas():
    cm = linear_compute_model(0.01, 0.5)
    configs = [TableConfig(1000, 2.0, BINS, dim=d) for d in (16, 64, 8)]
    np.testing.assert_allclose(cm.predict_sets(configs, [[0, 1], [], [2]]), [0.5 + 0.8, 0.0, 0.5 + 0.08], rtol=1e-6)
    lookups = linear_compute_model(0.01, 0.5, per_lookup=0.001)  # + 0.001 x dim x pooling (2.0 here)
    np.testing.assert_allclose(lookups.predict_sets(configs, [[0, 1], [2]]), [0.5 + 0.8 + 0.16, 0.5 + 0.08 + 0.016],
                               rtol=1e-6)
    w = np.array([[0.02, 0.0, 0.5, 0.0], [0.001, 0.03, 0.0, 0.5]])
    fw = linear_comm_model("fw", 2, w, [0.1, 0.2])
    dims, sleeps = np.array([[64.0, 32.0]]), np.array([[2.0, 0.0]])
    np.testing.assert_allclose(fw.predict(dims, sleeps), w @ [64, 32, 2, 0] + [[0.1, 0.2]], rtol=1e-6)
    with pytest.raises(ValueError, match="too many devices"):
        linear_comm_model("fw", 9, np.zeros((9, 18)), np.zeros(9))


def test_forward_wait_term_adds_the_wait_for_the_last_rank(tmp_path):
    n = 3
    m = CommCostModel("fw", n, torch.zeros(2 * n), torch.ones(2 * n), wait_term=True)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    # MLP output 0: the prediction is max(sleeps) - sleeps, by hand
    assert m.predict([[8, 16, 32]], [[0.0, 5.0, 2.0]]).tolist() == [[5.0, 0.0, 3.0]]
    save_model(m.eval(), tmp_path / "fw.pt")
    back = load_comm_model(tmp_path / "fw.pt", n, "fw")
    assert back.wait_term and back.predict([[8, 16, 32]], [[1.0, 0.0, 0.0]]).tolist() == [[0.0, 1.0, 1.0]]
    with pytest.raises(ValueError, match="only the forward model"):
        CommCostModel("bw", n, torch.zeros(n), torch.ones(n), wait_term=True)


def test_forward_wait_inputs_give_the_mlp_each_ranks_wait_for_the_last(tmp_path):
    n = 3
    dims, sleeps = [[8, 16, 32]], [[0.0, 5.0, 2.0]]
    models = {}
    for wait_inputs in (False, True):
        m = CommCostModel("fw", n, torch.zeros(2 * n), torch.ones(2 * n), hidden=(), wait_inputs=wait_inputs)
        with torch.no_grad():  # linear: output r = the MLP's input n + r (rank r's sleep, or its wait)
            m.mlp[0].weight.zero_()
            m.mlp[0].bias.zero_()
            for r in range(n):
                m.mlp[0].weight[r, n + r] = 1.0
        models[wait_inputs] = m.eval()
    assert models[False].predict(dims, sleeps).tolist() == [[0.0, 5.0, 2.0]]
    assert models[True].predict(dims, sleeps).tolist() == [[5.0, 0.0, 3.0]]  # max 5 - own sleep, by hand
    save_model(models[True], tmp_path / "fw.pt")
    back = load_comm_model(tmp_path / "fw.pt", n, "fw")
    assert back.wait_inputs and back.predict(dims, sleeps).tolist() == [[5.0, 0.0, 3.0]]
    # a checkpoint from before the option (no "wait_inputs" in its config) loads with the sleeps as inputs
    ckpt = torch.load(tmp_path / "fw.pt", weights_only=True)
    del ckpt["config"]["wait_inputs"]
    torch.save(ckpt, tmp_path / "old.pt")
    old = load_comm_model(tmp_path / "old.pt", n, "fw")
    assert not old.wait_inputs and old.predict(dims, sleeps).tolist() == [[0.0, 5.0, 2.0]]
    with pytest.raises(ValueError, match="only the forward model"):
        CommCostModel("bw", n, torch.zeros(n), torch.ones(n), wait_inputs=True)


def test_a_comm_model_without_hidden_layers_is_linear_and_round_trips(tmp_path):
    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.planner.costs.nets import COMM_HIDDEN
    from neuroshard.planner.costs.scorer import get_scorer

    n = 3
    bw = CommCostModel("bw", n, torch.full((n,), 100.0), torch.full((n,), 50.0), target_scale=2.0, hidden=())
    # untrained, it predicts the mean target: weights 0, bias 1 (x target_scale 2 ms)
    assert bw.predict([[8, 16, 32]]).tolist() == [[2.0, 2.0, 2.0]]
    w = np.array([[0.5, 0.1, 0.1], [0.1, 0.5, 0.1], [0.1, 0.1, 0.5]])
    with torch.no_grad():
        bw.mlp[0].weight.copy_(torch.as_tensor(w))
        bw.mlp[0].bias.copy_(torch.tensor([1.0, 1.5, 2.0]))
    dims = np.array([[200.0, 100.0, 50.0]])
    by_hand = 2.0 * (w @ ((dims[0] - 100.0) / 50.0) + [1.0, 1.5, 2.0])  # 2 x (w @ [2, 0, -1] + b)
    np.testing.assert_allclose(bw.predict(dims)[0], by_hand, rtol=1e-6)
    np.testing.assert_allclose(by_hand, [3.8, 3.2, 3.4])
    save_model(bw.eval(), tmp_path / "bw.pt")
    back = load_comm_model(tmp_path / "bw.pt", n, "bw")
    assert back.hidden == () and len(back.mlp) == 1
    np.testing.assert_allclose(back.predict(dims)[0], by_hand, rtol=1e-6)
    # the planner's NumPy copy of it gives the same times
    fw = linear_comm_model("fw", n, np.zeros((n, 2 * n)), np.ones(n))
    scorer = get_scorer(CostModels(linear_compute_model(0.01, 0.5), fw, back))
    assert scorer.uses_numpy
    np.testing.assert_allclose(scorer.comm(dims, np.zeros_like(dims))[0][0], by_hand, rtol=1e-5)
    # a checkpoint written before the hidden layers were recorded is DESIGN's MLP
    ckpt = torch.load(tmp_path / "bw.pt", weights_only=False)
    mlp = CommCostModel("bw", n, torch.zeros(n), torch.ones(n))
    ckpt["config"] = {k: v for k, v in mlp.config().items() if k != "hidden"}
    ckpt["state_dict"] = mlp.state_dict()
    torch.save(ckpt, tmp_path / "old.pt")
    assert load_comm_model(tmp_path / "old.pt", n, "bw").hidden == COMM_HIDDEN
    with pytest.raises(ValueError, match="hidden layer sizes must be >= 1"):
        CommCostModel("bw", n, torch.zeros(n), torch.ones(n), hidden=(16, 0))


def test_scaled_models_multiply_each_part_and_leave_the_originals():
    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.planner.costs.nets import CostEnsemble
    from neuroshard.types.errors import ConfigError

    n = 2
    fw = linear_comm_model("fw", n, np.hstack([0.02 * np.eye(n), 0.5 * np.eye(n)]), np.full(n, 0.1))
    fw.checkpoint_extra = {"noise_floor": {"mean": 0.05}}
    bw = CostEnsemble([linear_comm_model("bw", n, 0.02 * np.eye(n), np.full(n, 0.1)),
                       linear_comm_model("bw", n, 0.04 * np.eye(n), np.full(n, 0.3))])
    models = CostModels(linear_compute_model(0.01, 0.5), fw, bw)
    scaled = models.scaled(compute=2.0, fw=0.5, bw=3.0)
    configs = [TableConfig(1000, 2.0, BINS, dim=16)]
    # compute 0.5 + 0.01 x 16 = 0.66 -> 1.32; fw 0.1 + 0.02 x 16 + 0.5 x 2 = 1.42 -> 0.71;
    # bw members 0.42 and 0.94 -> mean 0.68 -> 2.04
    assert scaled.compute.predict_sets(configs, [[0]])[0] == pytest.approx(1.32)
    assert scaled.fw.predict([[16.0, 0.0]], [[2.0, 0.0]])[0, 0] == pytest.approx(0.71)
    assert scaled.bw.predict([[16.0, 0.0]])[0, 0] == pytest.approx(2.04)
    # the originals predict as before; the checkpoint's records travel with the copy
    assert models.compute.predict_sets(configs, [[0]])[0] == pytest.approx(0.66)
    assert models.bw.predict([[16.0, 0.0]])[0, 0] == pytest.approx(0.68)
    assert scaled.fw.checkpoint_extra == {"noise_floor": {"mean": 0.05}}
    assert scaled.noise_model == models.noise_model
    assert models.scaled() is models
    with pytest.raises(ConfigError, match="fw scale: must be a positive number, got 0"):
        models.scaled(fw=0)


def test_the_batch_scales_the_lookups_and_the_exchanged_bytes():
    """Models whose data was measured at batch 4096, costing a plan at 512 and 8192: the compute model reads
    each table at 1/8 and 2x its pooling, the comm models the dim sums at 1/8 and 2x (by hand: compute =
    0.5 + 0.01 x dims + 0.001 x dim x pooling x r, bw = 0.1 + 0.02 x dims x r)."""
    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.planner.simulator import simulate
    from neuroshard.problem import Problem
    from neuroshard.types.plan import Plan
    from neuroshard.types.tables import ShardTable

    models = CostModels(linear_compute_model(0.01, 0.5, per_lookup=0.001),
                        linear_comm_model("fw", 2, np.hstack([0.02 * np.eye(2), 0.0 * np.eye(2)]), [0.1, 0.1]),
                        linear_comm_model("bw", 2, 0.02 * np.eye(2), [0.1, 0.1]))
    for m in (models.compute, models.fw, models.bw):
        m.checkpoint_extra = {"batch": {"ref": 4096, "sizes": [4096]}}
    tables = [ShardTable(0, 0, TableConfig(1000, 10.0, BINS, dim=64)), ShardTable(1, 1, TableConfig(1000, 2.0, BINS,
                                                                                                     dim=32))]
    plan = Plan((), ((0,), (1,)))
    costs = {}
    for batch, r in ((None, 1.0), (512, 1 / 8), (8192, 2.0)):
        bd = simulate(tables, plan, models.at_batch(batch), Problem(2, 1.0))
        compute = [0.5 + 0.64 + 0.001 * 640 * r, 0.5 + 0.32 + 0.001 * 64 * r]
        comm = [0.1 + 0.02 * 64 * r, 0.1 + 0.02 * 32 * r]
        np.testing.assert_allclose(bd.compute, compute, rtol=1e-5)
        np.testing.assert_allclose(bd.bw_comm, comm, rtol=1e-5)
        costs[batch] = bd.cost
    assert costs[512] < costs[None] < costs[8192]
    assert models.at_batch(8192).batch_ratios == (2.0, 2.0) and models.batch_ratios == (1.0, 1.0)
    # a model that does not record its batch is not moved, and says so
    from neuroshard.planner.costs.extrapolation import batch_warnings

    models.compute.checkpoint_extra = {}
    assert models.at_batch(8192).batch_ratios == (1.0, 2.0)
    assert batch_warnings(models.at_batch(8192)) == [
        "the compute model does not record the batch of its data: its estimate is for that batch, not for batch "
        "8192",
        "the comm model's data was measured at batch 4096: at batch 8192 its estimate is extrapolated by lookup "
        "volume"]
    with pytest.raises(Exception, match="batch_size: expected a global batch >= 1, got 0"):
        models.at_batch(0)


# --------------------------------------------------------------------------- a run's models in one load


def _write_run(root, onpolicy=True, runtime=True):
    """A pipeline run's models for 2 devices as the pipeline lays them out: models/ (the random data's, with the
    collective model beside them) and models/onpolicy/ (their compute model's bias 1 ms higher, the calibrated
    band in the forward checkpoint, the TorchRec runtime model)."""
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel
    from neuroshard.planner.costs.runtime_model import FEATURES, TorchRecRuntimeModel
    from neuroshard.types.costs import PlanError

    models = root / "models"
    for folder, base in ((models, 0.5), (models / "onpolicy", 1.5)):
        if folder.name == "onpolicy" and not onpolicy:
            continue
        band = {"plan_error": PlanError(20, 0.1, 0.6, 0.8).to_json()} if folder.name == "onpolicy" else {}
        save_model(linear_compute_model(0.01, base), folder / "compute.pt")
        save_model(linear_comm_model("fw", 2, np.hstack([0.02 * np.eye(2), 0.5 * np.eye(2)]), np.full(2, 0.1)),
                   folder / "comm_2_fw.pt", extra=band)
        save_model(linear_comm_model("bw", 2, 0.02 * np.eye(2), np.full(2, 0.1)), folder / "comm_2_bw.pt")
    CollectiveModel(2, {op: CollectiveFit("linear", [0.1, 1.0], 8) for op in ("reduce_scatter", "all_gather",
                                                                              "all_reduce")}).save(
        models / "collectives_2.json")
    if runtime:
        TorchRecRuntimeModel(2, 4096, tuple([1.0] + [0.0] * (len(FEATURES) - 1)), types=("row_wise",)).save(
            models / ("onpolicy" if onpolicy else "") / "torchrec_runtime_2.json")
    return root


def _compute_bias(models) -> float:
    """The compute model's ms for nothing (0.5 + 0.01 x dim sum: the random data's, 1.5 + ...: the on-policy)."""
    return float(models.compute.predict_sets([TableConfig(10, 1.0, BINS, 4)], [[0]])[0]) - 0.04


def test_a_runs_models_load_at_once_from_any_of_its_folders(tmp_path, caplog):
    """`CostModels.load(run)`: the on-policy models (their band), the collective model beside the random data's
    models, the TorchRec runtime model held aside for `for_runtime("torchrec")`, the device count read from the
    folder; the same from the run's models/ or models/onpolicy/; and said in one line (and logged)."""
    import logging

    from neuroshard.planner.costs.cost_models import CostModels

    run = _write_run(tmp_path / "quick")
    with caplog.at_level(logging.INFO, logger="neuroshard.planner.costs.cost_models"):
        models = CostModels.load(run)
    assert models.describe() == (
        f"cost models from {run / 'models' / 'onpolicy'} (retrained on on-policy data) for 2 devices: compute, "
        "comm_2 fw/bw; collective model (reduce_scatter, all_gather, all_reduce); calibrated band; TorchRec runtime "
        "model "
        "(for_runtime(\"torchrec\"); fitted on row_wise)")
    assert models.describe() in caplog.text
    assert models.ndevices == 2 and models.runtime is None and models.noise_model.plan == pytest.approx(0.1)
    assert _compute_bias(models) == pytest.approx(1.5, abs=1e-5)
    assert models.for_runtime("torchrec").runtime is models.torchrec_runtime
    assert models.for_runtime("torchrec").for_runtime("paper").runtime is None
    for where in (run / "models", run / "models" / "onpolicy"):
        again = CostModels.load(where)
        assert again.describe() == models.describe() and _compute_bias(again) == pytest.approx(1.5, abs=1e-5)
        assert CostModels.load_run(where, 2).describe() == models.describe()
    assert CostModels.load(run, 2).describe() == models.describe()  # a run's folder holds no checkpoint itself


def test_a_checkpoint_folder_with_its_device_count_loads_as_it_always_did(tmp_path):
    """`CostModels.load(folder, n)` of a folder of checkpoints: those, and a collective model beside them; no
    on-policy models, runtime model or collective model from elsewhere."""
    from neuroshard.planner.costs.cost_models import CostModels

    run = _write_run(tmp_path / "quick")
    random = CostModels.load(run / "models", 2)
    assert _compute_bias(random) == pytest.approx(0.5, abs=1e-5) and random.collectives is not None
    assert random.torchrec_runtime is None and random.origin is None
    onpolicy = CostModels.load(run / "models" / "onpolicy", 2)
    assert _compute_bias(onpolicy) == pytest.approx(1.5, abs=1e-5) and onpolicy.collectives is None
    assert onpolicy.describe() == ("cost models for 2 devices: compute, comm_2 fw/bw; no collective model "
                                   "(row-wise, table-row-wise and data-parallel tables not priced on the paper's "
                                   "runtime); calibrated band; no TorchRec runtime model")


def test_a_run_without_on_policy_models_loads_the_random_datas(tmp_path):
    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.types.errors import ConfigError

    run = _write_run(tmp_path / "quick", onpolicy=False)
    models = CostModels.load(run)
    assert _compute_bias(models) == pytest.approx(0.5, abs=1e-5) and models.torchrec_runtime is not None
    assert models.describe().startswith(f"cost models from {run / 'models'} (the random data's) for 2 devices")
    assert "no calibrated band" in models.describe()
    save_model(linear_comm_model("fw", 4, np.hstack([0.02 * np.eye(4), 0.5 * np.eye(4)]), np.full(4, 0.1)),
               run / "models" / "comm_4_fw.pt")
    with pytest.raises(ConfigError, match="holds comm models for 2, 4 devices: give the device count"):
        CostModels.load(run)
    assert CostModels.load(run, 2).ndevices == 2
    with pytest.raises(InputError, match="no cost models here"):
        CostModels.load(tmp_path)
    with pytest.raises(InputError, match="models directory not found"):
        CostModels.load(tmp_path / "nowhere")


# --------------------------------------------------------------------------- one model set for any world size


def write_world_models(folder, sizes=(2, 8)):
    """A folder of models for any world size, as if trained on `sizes`: the hand compute model (0.5 + 0.01 x dim
    sum ms, its data's batch 4032), hand linear world comm models (per rank: bw 0.1 + 0.01 x (send + recv) ms,
    fw 0.2 + 0.02 x (send + recv) + its wait for the last rank, `hand_comm`) and a collective model for any world
    size."""
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel
    from neuroshard.planner.costs.nets import linear_world_model

    save_model(linear_compute_model(0.01, 0.5), folder / "compute.pt", extra={"batch": {"ref": 4032}})
    save_model(linear_world_model("fw", {"send": 0.02, "recv": 0.02}, 0.2, sizes), folder / "comm_fw.pt")
    save_model(linear_world_model("bw", {"send": 0.01, "recv": 0.01}, 0.1, sizes), folder / "comm_bw.pt")
    CollectiveModel(None, {op: CollectiveFit("world_linear", [0.1, 0.05, 1.0], 8) for op in (
        "reduce_scatter", "all_gather", "all_reduce")}, list(sizes)).save(folder / "collectives.json")
    return folder


def hand_comm(dims, compute):
    """`write_world_models`' (bw, fw) ms per rank of a plan with per-rank dim sums `dims` and compute ms `compute`:
    a rank sends d (n - 1) / n of its dims and receives (total - d) / n; it waits for the last rank to be ready."""
    n, total = len(dims), sum(dims)
    moved = [d * (n - 1) / n + (total - d) / n for d in dims]
    bw = [0.1 + 0.01 * m for m in moved]
    ready = [c + b for c, b in zip(compute, bw)]
    return bw, [0.2 + 0.02 * m + max(ready) - r for m, r in zip(moved, ready)]


WORLD_TABLES = [TableConfig(10 ** (3 + i % 3), 2.0, BINS, dim=4 * (1 + i)) for i in range(8)]


def test_one_model_set_plans_any_world_size(tmp_path):
    """`CostModels.load(folder)` of comm models for any world size: not bound to a count until a plan is made
    (`for_world`); `ns.shard` prices 2, 3 and 6 ranks with them, each rank's exchanges as the hand formula says."""
    from dataclasses import replace

    import neuroshard as ns
    from neuroshard.planner.costs.cost_models import CostModels

    folder = write_world_models(tmp_path)
    models = CostModels.load(folder)
    assert models.any_world and models.ndevices is None and models.world_sizes == (2, 8)
    assert models.describe() == (
        f"cost models from {folder} (the random data's): compute, comm models for any world size (trained on 2, "
        "8); collective model (reduce_scatter, all_gather, all_reduce) for any world size (trained on 2, 8); no "
        "calibrated band; no TorchRec runtime model")
    assert CostModels.load(folder, 3).describe().startswith("cost models for 3 devices: compute, comm models for "
                                                            "any world size (trained on 2, 8); collective model")
    for n in (2, 3, 6):
        bound = models.for_world(n)
        assert bound.ndevices == n and bound.collectives.world == n and bound.for_world(n) is bound
        res = ns.shard([ShardTable(i, i, c) for i, c in enumerate(WORLD_TABLES)], ns.Problem(n, 1.0),
                       models=replace(models, collectives=None), alg="neuroshard", max_length=2)  # table-wise
        b = res.breakdown
        assert len(b.compute) == n and b.compute == pytest.approx([0.5 + 0.01 * d if d else 0.0 for d in b.dims],
                                                                 abs=1e-4)
        bw, fw = hand_comm(b.dims, b.compute)
        assert b.bw_comm == pytest.approx(bw, abs=1e-4) and b.fw_comm == pytest.approx(fw, abs=1e-4)
        assert res.cost_ms == pytest.approx(max(map(sum, zip(b.compute, bw, fw))), abs=1e-4)


def test_a_count_outside_the_trained_sizes_is_a_warning_and_per_count_models_are_kept(tmp_path):
    import warnings

    from neuroshard.planner.costs.cost_models import CostModels
    from neuroshard.planner.costs.scorer import get_scorer
    from neuroshard.types.errors import NeuroShardError

    models = CostModels.load(write_world_models(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models.for_world(3)  # between the trained sizes: no warning
    with pytest.warns(UserWarning) as caught:
        assert models.for_world(16).ndevices == 16
    assert [str(w.message) for w in caught] == ["comm models trained on 2-8 ranks; 16 is extrapolation",
                                                "collective model trained on 2-8 ranks; 16 is extrapolation"]
    with pytest.raises(NeuroShardError, match=r"bind them to the problem's device count first \(CostModels"):
        get_scorer(models)
    for load in (CostModels.load, CostModels.load_run):  # loaded for a count: bound with the collective model
        with pytest.warns(UserWarning) as caught:
            load(tmp_path, 16)
        assert [str(w.message).split()[0] for w in caught] == ["comm", "collective"]
    # a folder with a per-count pair too: that count's own pair, any other count and no count the world pair
    save_model(linear_comm_model("fw", 4, np.hstack([0.02 * np.eye(4), 0.5 * np.eye(4)]), np.full(4, 0.1)),
               tmp_path / "comm_4_fw.pt")
    save_model(linear_comm_model("bw", 4, 0.02 * np.eye(4), np.full(4, 0.1)), tmp_path / "comm_4_bw.pt")
    per = CostModels.load(tmp_path, 4)
    assert not per.any_world and per.ndevices == 4 and per.for_world(4) is per and per.for_world(3) is per
    assert CostModels.load(tmp_path, 3).any_world and CostModels.load(tmp_path).ndevices is None
    with pytest.raises(InputError, match="trained for ndevices=4, not for any world size"):
        load_comm_model(tmp_path / "comm_4_fw.pt", None, "fw")
