"""The oracles of the learned baselines: the simulator's breakdowns, and the hardware oracle's job
over a batch of plans (per-rank parts; a rank without tables computes nothing)."""

import pytest

from neuroshard.learned.oracle import HardwareOracle, SimulatorOracle
from neuroshard.measure.plan_job import HardwareConfig
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.plan import Plan
from tests.measure.test_plan_job import tiny  # noqa: F401
from tests.planner.test_simulator import hand_models, tables_of


def test_simulator_oracle_is_the_simulator():
    tables = tables_of([16, 32, 8])
    plans = [Plan((), ((0, 2), (1,))), Plan((), ((0, 1, 2), ()))]
    oracle = SimulatorOracle(hand_models(2), Problem(2, 1.0))
    got = oracle([(tables, p) for p in plans])
    assert [bd.to_json() for bd in got] == [simulate(tables, p, hand_models(2), Problem(2, 1.0)).to_json()
                                            for p in plans]
    assert got[0].cost == pytest.approx(2.20, rel=1e-6)  # tests/planner/test_simulator.py, by hand
    assert oracle.plans == 2 and oracle.seconds > 0


def test_hardware_oracle_measures_a_batch_in_one_job(tiny):  # noqa: F811
    d, configs, tasks = tiny
    oracle = HardwareOracle(d / "ds", HardwareConfig(problem=Problem(2), warmup=1, iters=2), work_dir=str(d))
    items = [(tasks[0].tables(configs), Plan((), ((0, 3), (1, 2)))), (tasks[1].tables(configs), Plan((), ((0, 1), ())))]
    a, b = oracle(items)
    assert len(a.compute) == 2 and min(a.compute) > 0 and a.cost > 0
    assert b.compute[1] == 0.0 and b.compute[0] > 0  # rank 1 holds no table
    assert oracle.plans == 2 and not list(d.glob("oracle_*"))  # its temporary folder is gone
    with pytest.raises(NeuroShardError, match="unsplit task tables only"):
        oracle([(tasks[0].tables(configs), Plan((2,), ((0, 4), (1, 2, 3))))])
