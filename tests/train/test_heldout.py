"""The held-out-table check: the split never puts a table on both sides; the check runs on hand data."""

import json

import numpy as np
import pytest

from neuroshard.data.split import table_halves
from neuroshard.formats.cost_data import ComputeSample, write_compute_data
from neuroshard.measure.compute_collect import ShardSampler, augment_table_configs
from neuroshard.train.heldout import heldout_check, shard_groups
from neuroshard.train.loop import TrainConfig
from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig

N = 12  # dataset tables


def _configs():
    rng = np.random.default_rng(0)
    return [TableConfig(int(10 ** rng.uniform(3, 5)), float(rng.uniform(1, 20)), (1.0,) + (0.0,) * 16)
            for _ in range(N)]


def test_sampler_draws_single_half_shards_and_every_table_alike():
    aug = augment_table_configs(_configs(), 16)  # 12 tables x 3 dims
    halves = table_halves(N, seed=1)
    sampler = ShardSampler(aug, 5, 1.0, seed=0, halves=halves, half_share=0.6)
    samples = [ComputeSample(tuple(sampler.sample()), 1.0) for _ in range(3000)]
    groups = shard_groups(samples, halves)
    single = np.mean(groups != "mixed")
    # 60% drawn from one half, plus the other draws that land in one half by chance: with k uniform in
    # 1..5 tables, P(one half) = mean of 2 x 0.5^k = 0.3875, so 0.6 + 0.4 x 0.3875 = 0.755 expected
    assert 0.73 < single < 0.78
    use = np.bincount([i % N for s in samples for i in s.ids], minlength=N)
    assert use.min() > 0.8 * use.mean()  # every table about equally often


def test_the_split_never_puts_a_table_on_both_sides():
    aug = augment_table_configs(_configs(), 16)
    halves = table_halves(N, seed=1)
    sampler = ShardSampler(aug, 5, 1.0, seed=0, halves=halves, half_share=0.6)
    samples = [ComputeSample(tuple(sampler.sample()), 1.0) for _ in range(500)]
    groups = shard_groups(samples, halves)
    tables = {g: {i % N for s, gg in zip(samples, groups) if gg == g for i in s.ids} for g in ("half0", "half1")}
    assert tables["half0"] and tables["half1"] and not tables["half0"] & tables["half1"]


def _write(tmp_path, half_share):
    configs = _configs()
    aug = augment_table_configs(configs, 16)
    halves = table_halves(N, seed=0)
    sampler = ShardSampler(aug, 5, 1.0, seed=0, halves=halves, half_share=half_share)
    # a smooth cost: 0.5 ms + dim x pooling / 100 per table
    samples = []
    for _ in range(300):
        ids = sampler.sample()
        samples.append((ids, 0.5 + sum(aug[i].dim * aug[i].pooling_factor for i in ids) / 100))
    write_compute_data(tmp_path, aug, samples)
    (tmp_path / "config.json").write_text(json.dumps({"max_dim": 16, "seed": 0, "half_share": half_share}))


def test_check_reports_seen_unseen_and_mixed_mape(tmp_path):
    _write(tmp_path, 0.67)
    res = heldout_check(tmp_path, TrainConfig(epochs=60, loss="rel_mse", seed=0), folds=3)
    assert set(res["mape"]) == {"in_distribution", "unseen_tables", "mixed"}
    assert sum(res["shards"].values()) == 300 and min(res["shards"].values()) >= 20
    assert all(0 <= v < 1 for v in res["mape"].values())
    assert res["unseen_vs_in"] == pytest.approx(res["mape"]["unseen_tables"] / res["mape"]["in_distribution"])


def test_check_needs_half_share_data(tmp_path):
    _write(tmp_path, 0.0)
    with pytest.raises(InputError, match="no --half_share"):
        heldout_check(tmp_path, TrainConfig(epochs=2))


def test_check_refuses_a_config_json_that_does_not_describe_the_data(tmp_path):
    """Issue 24: no `seed` was a KeyError; a `max_dim` of other data gave a MAPE of a wrong split."""
    _write(tmp_path, 0.67)
    run = json.loads((tmp_path / "config.json").read_text())
    for edit, message in (({"seed": None}, "missing 'seed'"), ({"max_dim": 32}, "max_dim 32 does not describe"),
                          ({"max_dim": 8}, "max_dim 8 does not describe"), ({"seed": "0"}, "'seed' must be an")):
        bad = {k: v for k, v in {**run, **edit}.items() if v is not None}
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(InputError, match=message):
            heldout_check(tmp_path, TrainConfig(epochs=2))


def test_check_honours_num_samples_and_bounds_folds(tmp_path):
    from neuroshard.types.errors import ConfigError

    _write(tmp_path, 0.67)
    res = heldout_check(tmp_path, TrainConfig(epochs=2, num_samples=200, seed=0), folds=2, progress=False)
    assert sum(res["shards"].values()) == 200
    with pytest.raises(InputError, match="too few shards per group"):
        heldout_check(tmp_path, TrainConfig(epochs=2, num_samples=5), folds=2)
    with pytest.raises(ConfigError, match="--folds: 100000 folds of"):
        heldout_check(tmp_path, TrainConfig(epochs=2), folds=100000)
    with pytest.raises(ConfigError, match="--folds: must be >= 2"):
        heldout_check(tmp_path, TrainConfig(epochs=2), folds=1)


def _write_batches(tmp_path, batches=(256, 512, 1024), n=300):
    """Shards at several batches of a 1024-sample collection; cost 0.2 ms + dim x pooling x batch / 1e5 per
    table: a law of lookup volume that reading the pooling at batch / 1024 makes the same for every batch."""
    from neuroshard.formats.cost_data import ComputeSample

    aug = augment_table_configs(_configs(), 16)
    sampler = ShardSampler(aug, 5, 1.0, seed=0, batches=list(batches))
    samples = []
    for _ in range(n):
        task = sampler.task()
        cost = 0.2 + sum(aug[i].dim * aug[i].pooling_factor for i in task.ids) * task.batch / 1e5
        samples.append(ComputeSample(task.ids, cost, None if task.batch == 1024 else task.batch))
    write_compute_data(tmp_path, aug, samples)
    (tmp_path / "config.json").write_text(json.dumps({"max_dim": 16, "seed": 0, "batch_size": 1024}))
    return aug, samples


def test_the_held_out_batch_is_predicted_from_the_others(tmp_path):
    from neuroshard.train.heldout import heldout_batch_check

    _write_batches(tmp_path)
    res = heldout_batch_check(tmp_path, TrainConfig(epochs=80, loss="rel_mse", seed=0), 512, progress=False)
    assert res["batches"] == [256, 512, 1024] and res["reference_batch"] == 1024
    assert res["shards"]["heldout_batch"] + res["shards"]["seen_batches_test"] + res["shards"]["train"] == 300
    assert 0 <= res["mape"]["heldout_batch"] < 0.25 and 0 <= res["mape"]["seen_batches"] < 0.25
    assert res["noise_floor"] is None  # no noise_floor.json beside the data
    from neuroshard.types.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--heldout_batch: no shard at batch 2048 .* \(its batches: 256, 512, "
                                          r"1024; collect with --batch_sizes\)"):
        heldout_batch_check(tmp_path, TrainConfig(epochs=1), 2048)
