"""Comm cost model training: inputs, checkpoint round trip, device-count guard, CLI."""

import json
import os

import numpy as np
import pytest
import torch

from neuroshard.formats.cost_data import CommSample, write_comm_data
from neuroshard.planner.costs.cost_models import load_comm_model
from neuroshard.train.comm_model import comm_tensors, train_comm_models
from neuroshard.train.loop import TrainConfig
from neuroshard.types.errors import InputError
from tests.scripts import run_script


def synthetic_samples(n_samples=240, ndevices=3, seed=0):
    """fw = dims/50 + (max sleep - own sleep), bw = dims/100 + 0.5 (ms)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_samples):
        dims = (rng.integers(1, 64, size=ndevices) * 4).tolist()
        sleeps = rng.uniform(0, 5, size=ndevices)
        sleeps = (sleeps - sleeps.min()).round(3).tolist()
        fw = [d / 50 + max(sleeps) - s for d, s in zip(dims, sleeps)]
        bw = [d / 100 + 0.5 for d in dims]
        out.append(CommSample(dims, sleeps, fw, bw))
    return out


def test_comm_tensors_layout():
    s = [CommSample([4, 8], [0.0, 1.5], [1.0, 2.0], [3.0, 4.0])]
    x, y = comm_tensors(s, "fw")
    assert x.tolist() == [[4.0, 8.0, 0.0, 1.5]] and y.tolist() == [[1.0, 2.0]]
    x, y = comm_tensors(s, "bw")
    assert x.tolist() == [[4.0, 8.0]] and y.tolist() == [[3.0, 4.0]]


@pytest.fixture
def one_thread():
    # Tiny MLPs: extra intra-op threads only add contention on a shared 2-core box.
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_train_checkpoint_round_trip_and_device_guard(tmp_path, one_thread):
    data = tmp_path / "comm"
    data.mkdir()
    samples = synthetic_samples()
    write_comm_data(data, samples)
    (data / "noise_floor.json").write_text(json.dumps({"kind": "comm", "targets": {
        "fw": {"fresh_vs_stored": {"median": 0.1, "mean": 0.12, "n": 8}},
        "bw": {"fresh_vs_stored": {"median": 0.2, "mean": 0.25, "n": 8}}}}))
    fw_path, bw_path = tmp_path / "m" / "comm_3_fw.pt", tmp_path / "m" / "comm_3_bw.pt"
    cfg = TrainConfig(epochs=40, batch_size=64, lr=3e-3, seed=0)
    res = train_comm_models(data, cfg, fw_path, bw_path)
    for kind, path in (("fw", fw_path), ("bw", bw_path)):
        r = res[kind]
        assert set(r["metrics"]["test"]) >= {"mse", "mape", "spearman", "n"}
        assert r["metrics"]["test"]["n"] == 24 * 3  # 10% of 240 samples x 3 devices
        assert r["noise_floor"]["mean"] == (0.12 if kind == "fw" else 0.25)
        assert os.path.exists(r["scatter"]) and os.path.exists(r["metrics_path"])
        # Round trip: the loaded model predicts exactly what the trained one did.
        model = load_comm_model(path, 3, kind)
        assert model.kind == kind and model.ndevices == 3
        assert model.checkpoint_extra["ranges"] == {
            "dim_sum": [min(d for s in samples for d in s.dims), max(d for s in samples for d in s.dims)],
            "sleep": [min(x for s in samples for x in s.sleeps), max(x for s in samples for x in s.sleeps)]}
        dims = np.array([s.dims for s in samples[:5]])
        sleeps = np.array([s.sleeps for s in samples[:5]]) if kind == "fw" else None
        pred = model.predict(dims, sleeps)
        assert pred.shape == (5, 3) and np.isfinite(pred).all()
        model2 = load_comm_model(path, 3, kind)
        assert np.array_equal(pred, model2.predict(dims, sleeps))
        with pytest.raises(InputError, match="ndevices=3, asked for 4"):
            load_comm_model(path, 4, kind)
    with pytest.raises(InputError, match="expected a bw comm model"):
        load_comm_model(fw_path, 3, "bw")
    # The backward target is easy: the model must have learnt it.
    assert res["bw"]["metrics"]["test"]["spearman"] > 0.9
    # By default the forward MLP sees each rank's wait for the last rank (not its sleep), normalised by the
    # waits' mean (over all samples: train, validation and test, as for the sleeps before)
    fw = load_comm_model(fw_path, 3, "fw")
    assert fw.wait_inputs and res["fw"]["wait_inputs"]
    waits = [max(s.sleeps) - x for s in samples for x in s.sleeps]
    np.testing.assert_allclose(fw.x_mean[3:].numpy(), np.mean(np.reshape(waits, (-1, 3)), axis=0), rtol=1e-5)


def test_training_needs_one_device_count(tmp_path):
    data = tmp_path / "comm"
    data.mkdir()
    (data / "data.txt").write_text("4,8 0,1 1,2 1,2\n4,8,4 0,1,0 1,2,3 1,2,3\n")
    with pytest.raises(InputError, match="expected 2"):
        train_comm_models(data, TrainConfig(epochs=1), tmp_path / "fw.pt", tmp_path / "bw.pt")


def test_cli_trains_both_models(tmp_path):
    data = tmp_path / "comm"
    data.mkdir()
    write_comm_data(data, synthetic_samples(60, ndevices=2))
    res = run_script("train_comm_cost_model.py", ["--data_dir", data, "--epochs", 3, "--seed", 1, "--fw_inputs",
                                                  "sleeps"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "forward comm model (2 devices" in res.stdout and "backward comm model" in res.stdout
    assert (tmp_path / "models" / "comm_2_fw.pt").exists()
    assert (tmp_path / "models" / "comm_2_bw_metrics.json").exists()
    bw = torch.load(tmp_path / "models" / "comm_2_bw.pt", weights_only=True)
    assert bw["ndevices"] == 2 and bw["config"]["hidden"] == []  # --bw_linear 1, the default
    fw = torch.load(tmp_path / "models" / "comm_2_fw.pt", weights_only=True)
    assert fw["config"]["wait_inputs"] is False and fw["config"]["wait_term"] is True  # --fw_inputs sleeps


def test_on_policy_rank_noise_reaches_the_checkpoint_and_the_predicted_spread(tmp_path, one_thread):
    from neuroshard.planner.costs.cost_models import CostModels

    data, plan = tmp_path / "comm", tmp_path / "plan_comm"
    write_comm_data(data, synthetic_samples(60, ndevices=2))
    write_comm_data(plan, synthetic_samples(6, ndevices=2))
    (plan / "config.json").write_text(json.dumps({"rank_noise": {"plans": 4, "independent_sd": 0.01,
                                                                 "common_sd": 0.03}}))
    fw, bw = tmp_path / "m" / "comm_2_fw.pt", tmp_path / "m" / "comm_2_bw.pt"
    train_comm_models(data, TrainConfig(epochs=2, seed=0), fw, bw, progress=False, plan_data_dir=plan)
    fw_model = load_comm_model(fw, 2, "fw")
    assert fw_model.checkpoint_extra["rank_noise"] == {"plans": 4, "independent_sd": 0.01, "common_sd": 0.03}
    # 0.03^2 / (0.01^2 + 0.03^2) = 0.9 of a rank's noise variance is shared by the plan's ranks
    assert CostModels(None, fw_model, load_comm_model(bw, 2, "bw")).noise_model.shared == pytest.approx(0.9)
    # without on-policy repeats nothing is shared
    train_comm_models(data, TrainConfig(epochs=2, seed=0), fw, bw, progress=False)
    assert CostModels(None, load_comm_model(fw, 2, "fw"), load_comm_model(bw, 2, "bw")).noise_model.shared == 0.0


def test_malformed_rank_noise_is_an_input_error(tmp_path):
    import torch

    from neuroshard.formats.cost_data import read_rank_noise

    plan = tmp_path / "plan_comm"
    plan.mkdir()
    (plan / "config.json").write_text(json.dumps({"rank_noise": {"plans": 4, "independent_sd": -1,
                                                                 "common_sd": 0.03}}))
    with pytest.raises(InputError, match=r"config.json: \"rank_noise\" must hold"):
        read_rank_noise(plan)
    (plan / "config.json").write_text(json.dumps({"samples": 3}))
    assert read_rank_noise(plan) is None and read_rank_noise(tmp_path / "nowhere") is None
    # a checkpoint whose rank_noise is not two sds
    data = tmp_path / "comm"
    write_comm_data(data, synthetic_samples(30, ndevices=2))
    fw, bw = tmp_path / "fw.pt", tmp_path / "bw.pt"
    train_comm_models(data, TrainConfig(epochs=1, seed=0), fw, bw, progress=False)
    ckpt = torch.load(fw, weights_only=False)
    ckpt["extra"]["rank_noise"] = {"independent_sd": "x"}
    torch.save(ckpt, fw)
    with pytest.raises(InputError, match="malformed checkpoint: \"rank_noise\" must hold sds"):
        load_comm_model(fw, 2, "fw")


def test_the_backward_model_is_linear_by_default_and_learns_a_linear_time(tmp_path, one_thread):
    data = tmp_path / "comm"
    data.mkdir()
    write_comm_data(data, synthetic_samples())  # bw = dims / 100 + 0.5 ms: linear in the dims
    cfg = TrainConfig(epochs=300, batch_size=64, lr=3e-3, seed=0, loss="rel_mse")
    res = train_comm_models(data, cfg, tmp_path / "fw.pt", tmp_path / "bw.pt")
    assert res["bw"]["hidden"] == [] and res["fw"]["hidden"] == [128, 64, 32, 16]
    assert res["bw"]["loss"] == "mse" and res["fw"]["loss"] == cfg.loss == "rel_mse"  # the mean backward time
    bw = load_comm_model(tmp_path / "bw.pt", 3, "bw")
    assert bw.hidden == ()
    np.testing.assert_allclose(bw.predict([[100, 200, 20]]), [[1.5, 2.5, 0.7]], rtol=0.02)
    assert res["bw"]["metrics"]["test"]["mape"] < 0.02
    # bw_linear False: DESIGN's MLP
    res = train_comm_models(data, TrainConfig(epochs=2, seed=0, loss="rel_mse"), tmp_path / "fw.pt",
                            tmp_path / "bw.pt", bw_linear=False)
    assert res["bw"]["hidden"] == [128, 64, 32, 16] and res["bw"]["loss"] == "rel_mse"
    assert load_comm_model(tmp_path / "bw.pt", 3, "bw").hidden == (128, 64, 32, 16)


def world_samples(ndevices: int, n_samples: int, seed: int):
    """An exchange's time as a law of the world's size: fw = (send + recv) / 50 + the wait for the last rank,
    bw = 0.5 + (send + recv) / 100 (ms; send = d (n - 1) / n, recv = (total - d) / n)."""
    rng = np.random.default_rng([seed, ndevices])
    out = []
    for _ in range(n_samples):
        dims = (rng.integers(1, 64, size=ndevices) * 4).tolist()
        sleeps = rng.uniform(0, 5, size=ndevices)
        sleeps = (sleeps - sleeps.min()).round(3).tolist()
        total = sum(dims)
        moved = [d * (ndevices - 1) / ndevices + (total - d) / ndevices for d in dims]
        out.append(CommSample(dims, sleeps, [m / 50 + max(sleeps) - s for m, s in zip(moved, sleeps)],
                              [0.5 + m / 100 for m in moved]))
    return out


def world_dirs(root, sizes, n_samples: int, batch: int = 4032) -> list:
    """A comm collection of `world_samples` per world size in `sizes`, each measured at `batch` (config.json)."""
    from neuroshard.formats.io import write_json_atomic

    dirs = []
    for n in sizes:
        d = root / f"comm_{n}"
        d.mkdir()
        write_comm_data(d, world_samples(n, n_samples, seed=1))
        write_json_atomic(d / "config.json", {"ndevices": n, "batch_size": batch})
        dirs.append(d)
    return dirs


def test_one_model_pair_learns_every_world_size_and_prices_one_it_never_saw(tmp_path, one_thread):
    from neuroshard.train.comm_model import check_world_comm_model, train_world_comm_models, world_tensors

    dirs = world_dirs(tmp_path, (2, 4, 3), 150)
    # padded to the largest world: 2-rank exchanges have NaN targets at ranks 2, 3
    x, counts, y = world_tensors(world_samples(2, 1, 0) + world_samples(4, 1, 0), "fw")
    assert x.shape == (2, 8) and counts.tolist() == [2, 4] and torch.isnan(y[0, 2:]).all() and not y[1].isnan().any()
    cfg = TrainConfig(epochs=150, batch_size=64, lr=3e-3, seed=0)
    res = train_world_comm_models(dirs[:2], cfg, tmp_path / "m" / "comm_fw.pt", tmp_path / "m" / "comm_bw.pt",
                                  progress=False)
    assert res["fw"]["sizes"] == [2, 4] and set(res["fw"]["by_size"]) == {"2", "4"}
    model = load_comm_model(tmp_path / "m" / "comm_bw.pt", 3, "bw")  # a model for any world size loads for 3
    assert model.ndevices is None and model.sizes == (2, 4)
    assert model.checkpoint_extra["batch"] == {"ref": 4032, "sizes": [4032]}  # the collections' batch
    # the backward network finds the law: a world of 3 it never saw priced within 2%
    held = check_world_comm_model(model, dirs[2], "bw")
    assert held["ndevices"] == 3 and held["samples"] == 150 and held["mape"] < 0.02
    fw = check_world_comm_model(load_comm_model(tmp_path / "m" / "comm_fw.pt", 3, "fw"), dirs[2], "fw")
    assert fw["mape"] < 0.08


def test_world_models_refuse_collections_of_two_batches(tmp_path):
    from neuroshard.train.comm_model import train_world_comm_models

    dirs = world_dirs(tmp_path, (2, 4), 4) + world_dirs(tmp_path, (3,), 4, batch=2016)
    with pytest.raises(InputError, match=r"comm_3/config.json: measured at batch 2016, .*comm_2 at 4032"):
        train_world_comm_models(dirs, TrainConfig(epochs=2, seed=0), tmp_path / "fw.pt", tmp_path / "bw.pt",
                                progress=False)
    assert not (tmp_path / "fw.pt").exists()
