"""Measured plan spaces (`eval.regret_search`): enumerated spaces and the hardware-in-the-loop search with a fake
measurer whose plan costs are known (a run interrupted between stages loses nothing and continues to the same
result), then benchmarks/bench_regret.py for real on a tiny run: 2 CPU ranks, tasks of 2 tables, the plan job."""

import json
from pathlib import Path

import numpy as np
import pytest

from neuroshard.eval.regret_search import RegretConfig, SetInputs, measure_runtime
from neuroshard.planner.space import COLUMN_WISE, SpaceSpec, plan_key
from neuroshard.problem import Problem
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import TableConfig, Task

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = Problem(ndevices=4, max_mem=1.0)


def _inputs(tasks) -> SetInputs:
    configs = [TableConfig(1000 * (k + 1), 2.0, tuple([1.0 / 17] * 17)) for k in range(6)]
    return SetInputs("s", Path("ds"), configs, 128, Path("tasks.txt"), tasks)


def _hardware_cost(tables, plan: Plan) -> float:
    """The fake hardware's plan cost: the largest device's dim sum, plus 1 per piece (a kernel's fixed cost)."""
    from neuroshard.types.plan import apply_column_steps

    split = apply_column_steps(tables, plan.column_steps)
    return max(sum(split[i].dim for i in shard) + len(shard) for shard in plan.shards)


class FakeHardware:
    """A `Measure`: round r of a plan costs its `_hardware_cost` x (1 + 0.01 r); a stage, once measured, is read
    back; `fail_at`: the number of stages after which it is killed."""

    def __init__(self, inputs, fail_at=None):
        self.inputs, self.fail_at = inputs, fail_at
        self.finished: dict = {}
        self.measured: list = []

    def __call__(self, inputs, records, rounds, stage):
        if stage in self.finished:
            return self.finished[stage]
        if self.fail_at is not None and len(self.measured) == self.fail_at:
            raise KeyboardInterrupt
        self.measured.append(stage)
        got = {(r.task, r.alg): [_hardware_cost(inputs.tables(r.task), r.plan) * (1 + 0.01 * k) for k in range(rounds)]
               for r in records}
        self.finished[stage] = got
        return got


def _records(inputs):
    """Two algorithms: every table on device 0, and each table on a device of its own."""
    out = []
    for t, task in enumerate(inputs.tasks):
        n = len(task)
        out.append(PlanRecord(t, "pile", plan=Plan((), (tuple(range(n)), (), (), ()))))
        out.append(PlanRecord(t, "spread", plan=Plan((), tuple((k,) if k < n else () for k in range(4)))))
    return out


def _run(hw, inputs, tmp_path, **cfg):
    cfg = RegretConfig(**{"rounds": 2, "search_rounds": 2, "search_batch": 3, "saturation": 6, "search_steps": 8,
                          "final_top": 2, "max_space": 20, **cfg})
    spec = SpaceSpec((COLUMN_WISE,))
    est = {"dims": lambda tables, plan: float(_hardware_cost(tables, plan)),
           "none": lambda tables, plan: None}
    return measure_runtime("paper", inputs, _records(inputs), PROBLEM, (spec, spec), est, "dims", hw,
                           cfg, tmp_path, show=None)


def test_a_small_space_is_measured_whole(tmp_path):
    inputs = _inputs([Task((0, 1), (16, 8))])
    hw = FakeHardware(inputs)
    [space] = _run(hw, inputs, tmp_path)
    assert space.enumerated and space.space_size == 9 and len(space.plans) == 9  # tests/planner/test_space.py
    assert hw.measured == [tmp_path / "final"]
    tables = inputs.tables(0)
    for alg, plan in (("pile", Plan((), ((0, 1), (), (), ()))), ("spread", Plan((), ((0,), (1,), (), ())))):
        assert plan_key(tables, space.plans[space.algs[alg]], PROBLEM) == plan_key(tables, plan, PROBLEM)
    assert space.costs[space.algs["pile"]] == pytest.approx([26.0, 26.26])
    assert space.estimates["none"] == [None] * 9 and len(space.estimates["dims"]) == 9


def test_a_large_space_is_searched_until_saturation_and_an_interrupted_run_continues(tmp_path):
    inputs = _inputs([Task((0, 1, 2, 3), (16, 16, 16, 16)), Task((2, 3), (8, 8))])
    whole = FakeHardware(inputs)
    spaces = _run(whole, inputs, tmp_path / "a", max_space=10)
    searched, small = spaces
    assert not searched.enumerated and small.enumerated
    curve = searched.search
    assert curve[0]["best"] == 1.0 and curve[-1]["stopped"] in ("saturated", "exhausted", "steps")
    assert [c["measured"] for c in curve[:-1]] == sorted(c["measured"] for c in curve[:-1])
    # each table on its own device (17 each) is the best; the search starts there (the "spread" plan) and finds
    # nothing better: the best's measured cost is the minimum, and the algorithms' plans are measured again
    means = np.mean(searched.costs, axis=1)
    assert means[searched.algs["spread"]] == min(means) and means[searched.algs["pile"]] > min(means)
    assert curve[-2]["best"] == 1.0 and not any(c.get("improved") for c in curve[:-1])
    stages = [p.name for p in whole.measured]
    assert stages[0] == "search_0" and stages[-1] == "final"
    # killed after two stages, run again: the finished stages are read back, the rest measured, the same result
    hw = FakeHardware(inputs, fail_at=2)
    with pytest.raises(KeyboardInterrupt):
        _run(hw, inputs, tmp_path / "b", max_space=10)
    hw.fail_at = None
    again = _run(hw, inputs, tmp_path / "b", max_space=10)
    assert [p.name for p in hw.measured] == stages
    assert [s.to_json() for s in again] == [s.to_json() for s in spaces]


def test_the_search_moves_to_a_better_neighbour(tmp_path):
    # starting from every table on one device (the only algorithm), the search must leave it
    inputs = _inputs([Task((0, 1, 2, 3), (16, 16, 16, 16))])
    hw = FakeHardware(inputs)
    records = [r for r in _records(inputs) if r.alg == "pile"]
    cfg = RegretConfig(rounds=2, search_rounds=2, search_batch=4, saturation=8, search_steps=6, final_top=2,
                       max_space=10)
    spec = SpaceSpec((COLUMN_WISE,))
    est = {"dims": lambda tables, plan: float(_hardware_cost(tables, plan))}
    [space] = measure_runtime("paper", inputs, records, PROBLEM, (spec, spec), est, "dims", hw, cfg, tmp_path)
    assert any(c.get("improved") for c in space.search[:-1]) and space.search[-2]["best"] < 0.7
    means = np.mean(space.costs, axis=1)
    assert means[space.algs["pile"]] == max(means)


# --------------------------------------------------------------------------- the script, for real


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
    from neuroshard.formats.dataset import write_dataset
    from tests.test_eval import _linear_models

    d = tmp_path_factory.mktemp("regret_run")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=6, batch_size=128, max_rows=20_000, seed=3),
                                              progress=False)
    write_dataset(d / "dataset", configs, idx, off)
    (d / "tasks").mkdir()
    (d / "tasks" / "config.json").write_text(json.dumps({"problem": {"ndevices": 2, "max_mem": 1.0}, "max_dim": 16}))
    (d / "models").mkdir()
    _linear_models(d / "models", 2)
    return d


def _script():
    import runpy

    return runpy.run_path(str(ROOT / "benchmarks" / "bench_regret.py"), run_name="bench_regret")


def test_bench_regret_measures_a_tiny_run_and_reads_it_back(tiny_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["--models", str(tiny_run), "--out_dir", str(out), "--tasks_per_set", "2", "--tables_per_task", "2,2",
            "--alg", "neuroshard,size_lookup_greedy,random", "--runtimes", "paper", "--rounds", "2",
            "--max_space", "40", "--search_rounds", "1", "--search_steps", "1", "--search_batch", "2",
            "--saturation", "2", "--final_top", "1", "--warmup", "1", "--iters", "2", "--no_progress"]
    assert _script()["main"](args) == 0
    summary = json.loads((out / "summary.json").read_text())["paper"]
    assert summary["tasks"] == 2 and summary["rounds"] == 2
    assert {r["alg"] for r in summary["algorithms"]} == {"neuroshard", "size_lookup_greedy", "random",
                                                         "neuroshard@random"}
    results = json.loads((out / "results.json").read_text())
    for s in results:
        assert all(len(c) == 2 and min(c) > 0 for c in s["costs"])
        assert set(s["estimates"]) == {"neural", "neural_random", "torchrec_default"}
    assert (out / "results.csv").read_text().count("\n") == 1 + 2 * 4
    assert json.loads((out / "config.json").read_text())["regret"]["rounds"] == 2
    printed = capsys.readouterr().out
    assert "## Runtime: paper" in printed
    # run again: every stage is read back, nothing measured
    from neuroshard.eval import hardware

    def no_job(*a, **k):
        raise AssertionError("measured again")

    monkeypatch.setattr(hardware, "run_evaluation", no_job)
    assert _script()["main"](args) == 0
    assert json.loads((out / "results.json").read_text()) == results
