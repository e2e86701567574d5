import json

import numpy as np
import pytest
import torch

from neuroshard.formats.cost_data import write_compute_data
from neuroshard.planner.costs.cost_models import load_model
from neuroshard.planner.costs.nets import table_features
from neuroshard.train.compute_model import (
    build_model,
    shard_tensors,
    train_compute_model,
)
from neuroshard.train.loop import TrainConfig, companion_paths
from neuroshard.train.metrics import regression_metrics
from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig
from tests.scripts import run_script


def random_tables(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        bins = rng.dirichlet(np.ones(17))
        out.append(TableConfig(int(10 ** rng.uniform(2, 6)), float(rng.uniform(0.5, 40)), tuple(map(float, bins)),
                               int(rng.choice([4, 8, 16, 32, 64, 128]))))
    return out


def additive_data(n_samples=1500, seed=0):
    """Shards whose cost is a sum of known per-table costs (plus a constant): the model's structure."""
    tables = random_tables(60, seed)
    per_table = np.array([0.02 * c.dim * c.pooling_factor + 0.3 * np.log10(c.row) for c in tables])
    rng = np.random.default_rng(seed + 1)
    sets = [list(rng.integers(0, len(tables), size=rng.integers(1, 11))) for _ in range(n_samples)]
    costs = [0.5 + float(per_table[s].sum()) for s in sets]
    return tables, sets, costs


def test_shard_tensors_pad_and_mask():
    feats = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    x, mask = shard_tensors(feats, [[2], [0, 3, 3]])
    assert x.shape == (2, 3, 3) and mask.tolist() == [[True, False, False], [True, True, True]]
    assert torch.equal(x[1], feats[[0, 3, 3]]) and torch.equal(x[0, 1:], torch.zeros(2, 3))


def test_training_on_additive_costs_beats_a_constant_and_round_trips(tmp_path):
    tables, sets, costs = additive_data()
    write_compute_data(tmp_path / "data", tables, list(zip(sets, costs)))
    cfg = TrainConfig(epochs=30, patience=10, seed=0, batch_size=128, lr=3e-3)
    out = tmp_path / "models" / "compute.pt"
    result = train_compute_model(tmp_path / "data", cfg, out)
    test = result["metrics"]["test"]

    y = np.array(costs)
    perm = np.random.default_rng(0).permutation(len(y))
    train_mean = y[perm[:int(0.8 * len(y))]].mean()
    te = perm[int(0.8 * len(y)) + int(0.1 * len(y)):]
    const = regression_metrics(np.full(len(te), train_mean), y[te])
    assert test["n"] == len(te)
    assert test["mse"] < 0.05 * const["mse"]
    assert test["mape"] < 0.25 * const["mape"]
    assert test["spearman"] > 0.97

    scatter, metrics_path = companion_paths(out)
    assert scatter.stat().st_size > 0
    assert json.loads(metrics_path.read_text())["metrics"]["test"]["mse"] == pytest.approx(test["mse"])

    # the checkpoint records the ranges of its training data, for the extrapolation warnings
    model = load_model(out)
    used = sorted({i for s in sets for i in s})
    ranges = model.checkpoint_extra["ranges"]
    assert ranges["rows"] == [min(tables[i].row for i in used), max(tables[i].row for i in used)]
    assert ranges["shard_tables"] == [min(map(len, sets)), max(map(len, sets))]
    assert ranges["shard_dim_sum"][1] == max(sum(tables[i].dim for i in s) for s in sets)

    # checkpoint round trip: identical predictions with no other information
    x, mask = shard_tensors(table_features(tables), sets[:50])
    again = load_model(out)
    assert torch.equal(model(x, mask), again(x, mask))
    trained = build_model(tables)
    trained.load_state_dict(torch.load(out, weights_only=True)["state_dict"])
    trained.eval()
    with torch.no_grad():
        assert torch.equal(trained(x, mask), model(x, mask))


def test_fast_inference_api_equals_plain_forward():
    tables = random_tables(30, seed=3)
    torch.manual_seed(0)
    model = build_model(tables).eval()
    sets = [[0], [3, 3, 7], [], list(range(30)), [29, 1]]
    fast = model.predict_sets(tables, sets)
    x, mask = shard_tensors(table_features(tables), sets)
    with torch.no_grad():
        plain = model(x, mask).numpy()
    np.testing.assert_allclose(fast, plain, rtol=1e-5, atol=1e-6)
    assert fast[2] == 0.0  # the empty shard
    emb = model.predict_tables(tables)
    assert emb.shape == (30, 32)
    sums = torch.from_numpy(emb[[3, 3, 7]].sum(0, keepdims=True))
    np.testing.assert_allclose(model.cost_from_sums(sums, torch.tensor([3.0])).detach().numpy(), plain[1:2],
                               rtol=1e-5)


def test_train_script_end_to_end(tmp_path):
    tables, sets, costs = additive_data(200, seed=5)
    write_compute_data(tmp_path / "data", tables, list(zip(sets, costs)))
    out = tmp_path / "m" / "compute.pt"
    res = run_script("train_compute_cost_model.py", ["--data_dir", tmp_path / "data", "--epochs", 3,
                                                     "--out_path", out, "--seed", 1])
    assert res.returncode == 0, res.stderr
    assert "test: MSE" in res.stdout and "Spearman" in res.stdout
    assert out.exists() and all(p.exists() for p in companion_paths(out))


def test_a_floor_with_its_values_gives_the_ratio_an_interval(tmp_path):
    tables, sets, costs = additive_data(200, seed=5)
    write_compute_data(tmp_path / "data", tables, list(zip(sets, costs)))
    floor = {"median": 0.1, "mean": 0.1, "p90": 0.15, "n": 4, "values": [0.05, 0.05, 0.15, 0.15]}
    (tmp_path / "data" / "noise_floor.json").write_text(json.dumps({"kind": "compute", "targets": {
        "cost": {"fresh_vs_stored": floor}}}))
    out = tmp_path / "m" / "compute.pt"
    res = run_script("train_compute_cost_model.py", ["--data_dir", tmp_path / "data", "--epochs", 3,
                                                     "--out_path", out, "--seed", 1])
    assert res.returncode == 0, res.stderr
    metrics = json.loads(companion_paths(out)[1].read_text())
    ci = metrics["mape_over_floor"]
    assert ci["ratio"] == pytest.approx(metrics["metrics"]["test"]["mape"] / 0.1)
    assert ci["low"] < ci["ratio"] < ci["high"]
    assert f"{ci['ratio']:.2f}x ({ci['low']:.2f}-{ci['high']:.2f}, 95%)" in res.stdout
    # the files keep the floor's statistics, not its values
    assert metrics["noise_floor"] == {k: v for k, v in floor.items() if k != "values"}
    assert load_model(out).checkpoint_extra["noise_floor"] == metrics["noise_floor"]


def test_the_script_trains_on_another_datasets_compute_data_beside_the_first(tmp_path):
    tables, sets, costs = additive_data(200, seed=5)
    write_compute_data(tmp_path / "data", tables, list(zip(sets, costs)))
    big = [TableConfig(4_000_000, 2.0, tables[0].bins, 32), TableConfig(300, 150.0, tables[0].bins, 4)]
    write_compute_data(tmp_path / "other", big, [((0,), 30.0), ((1,), 5.0), ((0, 1), 35.0)])
    out = tmp_path / "m" / "compute.pt"
    res = run_script("train_compute_cost_model.py", ["--data_dir", tmp_path / "data", "--extra_data_dirs",
                                                     tmp_path / "other", "--epochs", 3, "--out_path", out,
                                                     "--seed", 1])
    assert res.returncode == 0, res.stderr
    metrics = json.loads(companion_paths(out)[1].read_text())
    assert metrics["num_samples"] == 203 and metrics["extra_samples"] == 3
    assert metrics["ranges"]["rows"][1] == 4_000_000 and metrics["ranges"]["pooling"][1] == 150.0
    res = run_script("train_compute_cost_model.py", ["--data_dir", tmp_path / "data", "--extra_data_dirs",
                                                     f"{tmp_path / 'other'},", "--epochs", 3, "--out_path", out])
    lines = res.stderr.splitlines()
    assert res.returncode == 1 and len(lines) == 1
    assert lines[0].startswith("error: ") and "--extra_data_dirs" in lines[0]


def test_missing_or_tiny_data_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="directory not found"):
        train_compute_model(tmp_path / "nope", TrainConfig(), tmp_path / "m.pt")
    tables, sets, costs = additive_data(2)
    write_compute_data(tmp_path / "d", tables, list(zip(sets, costs)))
    with pytest.raises(InputError, match="at least 3 samples"):
        train_compute_model(tmp_path / "d", TrainConfig(), tmp_path / "m.pt")


def test_a_sample_at_another_batch_reads_its_tables_at_that_lookup_volume():
    from neuroshard.formats.cost_data import ComputeSample
    from neuroshard.train.compute_model import sample_tensors

    bins = (1.0,) + (0.0,) * 16
    configs = [TableConfig(1000, 4.0, bins, dim=16), TableConfig(100, 1.0, bins, dim=8)]
    samples = [ComputeSample((0, 1), 1.0, 1024), ComputeSample((0,), 2.0, 256), ComputeSample((1,), 3.0)]
    x, mask, y, tables, shards = sample_tensors(configs, samples, ref=1024)
    # ratio 0.25 first (sorted), then 1.0: the 256-batch sample reads table 0 at pooling 1.0
    assert [t.pooling_factor for t in tables] == [1.0, 0.25, 4.0, 1.0]
    assert shards == [[2, 3], [0], [3]]
    assert x[1, 0, 2].item() == 1.0 and x[1, 0, 3].item() == 16.0  # pooling, dim x pooling
    assert x[0, 0, 2].item() == 4.0 and y.tolist() == [1.0, 2.0, 3.0]
    assert mask.tolist() == [[True, True], [True, False], [True, False]]
