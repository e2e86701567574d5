"""Memory that holds in training (`torchrec.memory`): the resident-size readers against a real allocation, the
tensors a model holds counted by storage, the cases' checks and their warm-up size, and the counts of a case's
plan by hand. The measurement itself (a torchrun job training each case) is benchmarks/bench_train_memory.py's."""

import pytest

from neuroshard.torchrec.memory import (
    FUSED,
    IN_BACKWARD,
    MemoryCase,
    counted,
    held_tensors,
    peak_bytes,
    reset_peak,
    resident_bytes,
    warm_up_case,
)
from neuroshard.types.errors import ConfigError

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
TABLES = [["t0", 1000, 64], ["t1", 1000, 64]]


def test_the_high_water_mark_follows_a_real_allocation_and_resets():
    reset_peak()
    before = resident_bytes()
    x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    assert peak_bytes() - before >= 60 * 2**20 and resident_bytes() - before >= 60 * 2**20
    del x
    reset_peak()
    assert peak_bytes() - resident_bytes() < 8 * 2**20


def test_held_tensors_count_a_storage_once():
    model = torch.nn.Module()
    model.ebc = torch.nn.Linear(100, 10, bias=False)  # under the collection's path: a table
    model.dense = torch.nn.Linear(10, 1, bias=False)
    model.dense.weight.grad = torch.zeros(1, 10)
    opt = torch.optim.Adam(model.dense.parameters())
    opt.state[model.dense.weight] = {"exp_avg": torch.zeros(1, 10), "view": model.ebc.weight.data[:5]}
    assert held_tensors(model, [opt]) == {"tables": 4000.0, "dense": 40.0, "optimizer": 40.0, "grads": 40.0}


def test_cases_are_checked_and_warmed_up_small():
    with pytest.raises(ConfigError, match="optimizer: must be one of sgd, row_wise_adagrad, adam, got 'lamb'"):
        MemoryCase("table_wise", "lamb", FUSED, "fp32", 64, 1, TABLES).validate(2)
    with pytest.raises(ConfigError, match="batch: must split evenly over 2 ranks, got 63"):
        MemoryCase("table_wise", "sgd", FUSED, "fp32", 63, 1, TABLES).validate(2)
    with pytest.raises(ConfigError, match="multiples of 8"):
        MemoryCase("column_wise", "sgd", FUSED, "fp32", 64, 1, [["t", 10, 12]]).validate(2)
    case = MemoryCase("row_wise", "sgd", IN_BACKWARD, "fp16", 8192, 20, TABLES)
    small = warm_up_case(case, 2)
    assert (small.batch, small.pooling, small.tables, small.dtype) == (2, 1, [["t0", 16, 64], ["t1", 16, 64]], "fp16")
    assert not MemoryCase("table_wise", "adam", FUSED, "fp32", 64, 1, TABLES).trains_on_cpu
    assert MemoryCase("data_parallel", "adam", FUSED, "fp32", 64, 1, TABLES).trains_on_cpu


def test_the_counts_of_a_cases_plan():
    # two 1000 x 64 fp16 tables table-wise on 2 CPU ranks, batch 64 (32 a rank), 1 id each, row-wise Adagrad
    # through fused_params. TorchRec's count per table: 128,000 B of weights, 32 x 2 x 8 = 512 B of ids,
    # 32 x 2 x 64 x 2 = 8,192 B of outputs. The planner's: the outputs at fp32 (16,384 B), 4,000 B of state (one
    # fp32 per row), and a CPU step's buffers: 7 more times the ids and outputs (7 x 16,896 B)
    case = MemoryCase("table_wise", "row_wise_adagrad", FUSED, "fp16", 64, 1, TABLES)
    c = counted(case, 2)
    assert c["fp32"] == [256000.0, 256000.0] and c["weights"] == [128000.0, 128000.0]
    assert c["torchrec"] == [128000.0 + 512 + 8192] * 2
    assert c["neuroshard"] == [128000.0 + 4000 + 8 * (512 + 16384)] * 2
