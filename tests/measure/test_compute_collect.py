import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.cost_data import read_compute_data
from neuroshard.formats.dataset import read_table_configs, write_dataset
from neuroshard.measure.compute_collect import (
    ERRORS_TXT,
    ComputeCollectConfig,
    FbgemmMeasurer,
    ShardSampler,
    augment_table_configs,
    augmented_bench_tables,
    collect,
    measure_noise_floor,
)
from neuroshard.types.errors import InputError, NeuroShardError
from neuroshard.types.tables import TableConfig
from tests.measure.test_pool import count_call
from tests.two_nodes import interruptible

ROOT = Path(__file__).resolve().parents[2]
MAX_MEM = 0.001  # GB: keeps the workers' weight arenas small


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("dataset")
    configs, _, indices, offsets = generate_synthetic(
        SyntheticSpec(num_tables=6, batch_size=16, max_rows=800, mean_pooling=2.0), progress=False)
    write_dataset(d, configs, indices, offsets)
    return d


# The subprocess tests time 20 iterations per shard (each after a cache flush), so that a shard takes
# long enough for a kill or Ctrl-C to land mid-run.
SLOW_ITERS = 20


def config(**kw):
    return ComputeCollectConfig(**{"max_tables": 4, "max_mem": MAX_MEM, "max_dim": 16, "warmup": 1, "iters": 2,
                                   **kw})


class FaultyMeasurer:
    """The real FBGEMM measurer, except that the `fail`-th call in the whole run raises and the
    `crash`-th kills its worker (calls counted across workers in a locked file)."""

    def __init__(self, dataset_dir, counter, fail: int, crash: int):
        configs = read_table_configs(Path(dataset_dir) / "table_configs.json")
        self.real = FbgemmMeasurer(dataset_dir, augmented_bench_tables(augment_table_configs(configs, 16),
                                                                       len(configs)), warmup=1, iters=2)
        self.counter, self.fail, self.crash = str(counter), fail, crash

    def __call__(self, device, seed):
        measure = self.real(device, seed)

        def faulty(ids):
            call = count_call(self.counter)
            if call == self.fail:
                raise RuntimeError("poisoned sample")
            if call == self.crash:
                os._exit(3)
            return measure(ids)

        return faulty


def check_lines(out_dir, n):
    """data.txt holds exactly n complete, well-formed, distinct samples that fit max_mem."""
    raw = (Path(out_dir) / "data.txt").read_bytes()
    assert raw.endswith(b"\n")
    aug, samples = read_compute_data(out_dir)
    assert len(samples) == n
    for ids, cost, _ in samples:
        assert 1 <= len(ids) <= 4 and cost > 0
        assert sum(aug[i].size_gb for i in ids) <= MAX_MEM
    assert len(set(raw.splitlines())) == n
    return raw.splitlines()


def test_augmented_list_is_dim_major():
    configs = [TableConfig(100 + i, 1.0, (0.0,) * 17) for i in range(3)]
    aug = augment_table_configs(configs, 16)
    assert [(c.row, c.dim) for c in aug] == [(r, d) for d in (16, 8, 4) for r in (100, 101, 102)]
    # an unpooled dataset table stays unpooled at every dim, and is timed so
    aug = augment_table_configs([configs[0], TableConfig(50, 1.0, (0.0,) * 17, pooled=False)], 8)
    assert [(t.table_id, t.dim, t.pooled) for t in augmented_bench_tables(aug, 2)] == [
        (0, 8, True), (1, 8, False), (0, 4, True), (1, 4, False)]


def test_sampler_respects_limits_and_seed():
    configs = [TableConfig(10 ** (2 + i % 4), 1.0, (0.0,) * 17) for i in range(8)]
    aug = augment_table_configs(configs, 32)
    a = ShardSampler(aug, 5, 0.002, seed=[0, 0])
    shards = [a.sample() for _ in range(300)]
    assert {len(s) for s in shards} == {1, 2, 3, 4, 5}
    assert all(sum(aug[i].size_gb for i in s) <= 0.002 for s in shards)
    b = ShardSampler(aug, 5, 0.002, seed=[0, 0])
    assert [b.sample() for _ in range(300)] == shards
    c = ShardSampler(aug, 5, 0.002, seed=[0, 300])  # a resumed run draws other shards
    assert [c.sample() for _ in range(300)] != shards
    with pytest.raises(NeuroShardError, match="no table fits"):
        ShardSampler(aug, 5, 1e-9, seed=0)


@pytest.mark.heavy(15)
def test_two_workers_poisoned_sample_and_dead_worker(dataset_dir, tmp_path):
    out = tmp_path / "c"
    faulty = FaultyMeasurer(dataset_dir, tmp_path / "calls", fail=2, crash=5)
    summary = collect(dataset_dir, out, config(), 10, ["cpu"] * 2, progress=False, make_measurer=faulty)
    assert (summary.new, summary.failed, summary.total) == (10, 2, 10)
    check_lines(out, 10)
    errors = (out / ERRORS_TXT).read_text().splitlines()
    assert len(errors) == 2
    assert any("poisoned sample" in e for e in errors) and any("worker died" in e for e in errors)
    assert len(read_table_configs(out / "table_configs.json")) == 6 * 3
    assert summary.workers.samples == 10 and 0 < summary.workers.kernel_share < 1

    # the noise-floor mode re-measures collected shards with the same pool
    report = measure_noise_floor(out, dataset_dir, 3, ["cpu"], warmup=1, iters=2, progress=False)
    assert report["num_samples"] == 3 and len(report["samples"]) == 3
    for key in ("fresh_vs_stored", "fresh_vs_fresh"):
        assert report["targets"]["cost"][key]["n"] == 3 and report["targets"]["cost"][key]["median"] >= 0


def _start(dataset_dir, out, n):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "collect_compute_cost_data.py"), "--dataset_dir", str(dataset_dir),
           "--out_dir", str(out), "--data_size", str(n), "--max_tables", "4", "--max_mem", str(MAX_MEM),
           "--max_dim", "16", "--warmup", "1", "--iters", str(SLOW_ITERS), "--device", "cpu", "--num_workers", "1",
           "--no_progress"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=interruptible)


def _wait_lines(path, n, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {n} lines within {timeout} s")


def _group_gone(pgid, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_killed_run_resumes_without_duplicates_or_torn_lines_and_keeps_its_settings(dataset_dir, tmp_path):
    out = tmp_path / "c"
    proc = _start(dataset_dir, out, 12)
    _wait_lines(out / "data.txt", 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # parent and workers, mid-run
    proc.wait()
    assert _group_gone(proc.pid)
    with open(out / "data.txt", "ab") as fh:  # what a kill inside a write would leave
        fh.write(b"1,2")
    before = [line for line in (out / "data.txt").read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]
    slow = config(iters=SLOW_ITERS)
    summary = collect(dataset_dir, out, slow, 12, ["cpu"], progress=False)
    assert summary.existing == len(before) and summary.total == 12
    lines = check_lines(out, 12)
    assert [line + b"\n" for line in lines[:len(before)]] == before

    assert collect(dataset_dir, out, slow, 12, ["cpu"], progress=False).new == 0  # already complete
    with pytest.raises(InputError, match="augmented table list differs"):
        collect(dataset_dir, out, config(iters=SLOW_ITERS, max_dim=8), 14, ["cpu"], progress=False)
    with pytest.raises(InputError, match="iters"):
        collect(dataset_dir, out, config(iters=3), 14, ["cpu"], progress=False)
    check_lines(out, 12)


def test_ctrl_c_stops_cleanly(dataset_dir, tmp_path):
    out = tmp_path / "c"
    proc = _start(dataset_dir, out, 1000)
    _wait_lines(out / "data.txt", 2, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole process group
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    assert _group_gone(proc.pid)  # no worker left behind
    raw = (out / "data.txt").read_bytes()
    assert raw.endswith(b"\n")
    n = raw.count(b"\n")
    assert 2 <= n < 1000
    check_lines(out, n)


def test_shards_at_several_batches_name_their_batch(dataset_dir, tmp_path):
    # --batch_sizes 4,16 on a dataset of batch 16: each shard draws one; the dataset's own batch is written
    # as the collection's (no third field), 4 as " 4"; the settings record the list, and the noise floor
    # re-measures each shard at its batch
    import json

    from neuroshard.types.errors import ConfigError

    out = tmp_path / "b"
    summary = collect(dataset_dir, out, config(batch_sizes="16,4"), 12, ["cpu"], progress=False)
    assert summary.new == 12
    _, samples = read_compute_data(out)
    assert {s.batch for s in samples} == {None, 4}
    assert all(len(line.split()) == (3 if line.endswith(" 4") else 2)
               for line in (out / "data.txt").read_text().splitlines())
    assert json.loads((out / "config.json").read_text())["batch_sizes"] == "16,4"
    # the shards are those of a run without batches: the batch is drawn after the shard
    plain = ShardSampler(augment_table_configs(read_table_configs(dataset_dir / "table_configs.json"), 16), 4,
                         MAX_MEM, [0, 0, 0])
    mixed = ShardSampler(augment_table_configs(read_table_configs(dataset_dir / "table_configs.json"), 16), 4,
                         MAX_MEM, [0, 0, 0], batches=[None, 4])
    assert mixed.task().ids == tuple(plain.sample())
    report = measure_noise_floor(out, dataset_dir, 6, ["cpu"], warmup=1, iters=2, progress=False)
    batch_of = {(s.ids, s.cost): s.batch for s in samples}
    assert [r.get("batch") for r in report["samples"]] == [batch_of[tuple(r["ids"]), r["stored_ms"]]
                                                           for r in report["samples"]]
    with pytest.raises(ConfigError, match="--batch_sizes: 32 is more than the dataset's batch 16"):
        collect(dataset_dir, tmp_path / "c", config(batch_sizes="32"), 2, ["cpu"], progress=False)
    with pytest.raises(ConfigError, match="--batch_sizes: expected batches >= 1"):
        config(batch_sizes="0,4").validate()
