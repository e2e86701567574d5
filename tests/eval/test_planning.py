"""Plans from a file (eval.py --plans): checked against the task file, estimates simulated again."""

import json

import numpy as np
import pytest

from neuroshard.eval.planning import EvalInputs, check_plans, plans_from_file
from neuroshard.formats.plan_file import plan_view, write_plans
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.costs.nets import linear_comm_model, linear_compute_model
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import InputError
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import TableConfig, Task

BINS = (1.0,) + (0.0,) * 16
CONFIGS = [TableConfig(1000 * (i + 1), 2.0, BINS) for i in range(5)]
TASKS = [Task((0, 1, 2, 3), (16, 8, 32, 16)), Task((4, 1), (8, 8)), Task((2,), (8,))]


def hand_models(n=2) -> CostModels:
    """compute = 0.5 + 0.01 x dim sum; comm = 0.1 + 0.02 x dims (+ 0.5 x sleep for fw), ms."""
    return CostModels(linear_compute_model(0.01, 0.5),
                      linear_comm_model("fw", n, np.hstack([0.02 * np.eye(n), 0.5 * np.eye(n)]), np.full(n, 0.1)),
                      linear_comm_model("bw", n, 0.02 * np.eye(n), np.full(n, 0.1)))


def stale(cost: float, n: int = 2) -> CostBreakdown:
    return CostBreakdown([cost] + [0.0] * (n - 1), [0.0] * n, [0.0] * n)


def test_plans_are_checked_and_estimates_simulated_again():
    models = hand_models()
    records = [PlanRecord(1, "a", plan=Plan((), ((0, 1), ())), estimate=stale(1.0)),
               PlanRecord(1, "b", plan=Plan((), ((0,), (1,), ())), estimate=stale(1.0, 3)),
               PlanRecord(0, "c", status="oom", message="no room")]
    fits, wrong, oom = check_plans(records, CONFIGS, TASKS, Problem(2, 1.0), models=models)
    # the estimate in the file (1.0) is not trusted: dims 16 | 0 -> compute 0.66 | 0, bw 0.42 | 0.1,
    # ready 1.08 | 0.1 so skew 0.98 | 0, fw 0.1 + 0.32 + 0.49 = 0.91 | 0.1, totals 1.99 | 0.2
    assert fits.plan is not None and fits.estimated_cost == pytest.approx(1.99, abs=1e-5)
    assert fits.estimate.compute == pytest.approx([0.66, 0.0], abs=1e-5)
    assert fits.view == plan_view(TASKS[1].tables(CONFIGS), fits.plan)
    assert wrong.status == "invalid" and wrong.plan is None and "3 devices" in wrong.message
    assert oom.status == "oom" and oom.estimated_cost is None
    tight = check_plans(records[:1], CONFIGS, TASKS, Problem(2, 1e-6), models=models)[0]
    assert (tight.status, tight.plan, tight.estimated_cost) == ("oom", None, None)


def _inputs(max_tasks=None) -> EvalInputs:
    return EvalInputs(CONFIGS, TASKS[:max_tasks] if max_tasks else TASKS, hand_models(), len(TASKS))


def _record(task: int, alg: str, plan: Plan) -> PlanRecord:
    tables = TASKS[task].tables(CONFIGS)
    return PlanRecord(task, alg, plan=plan, view=plan_view(tables, plan), estimate=stale(9.0))


def test_plan_file_errors_name_the_record(tmp_path):
    path = tmp_path / "plans.json"
    good = [_record(0, "x", Plan((2,), ((0, 1, 4), (2, 3)))), _record(1, "x", Plan((), ((0,), (1,))))]

    def check(records, *fragments, **kw):
        write_plans(path, records)
        with pytest.raises(InputError) as err:
            plans_from_file(path, _inputs(**kw), "tasks.txt", "all", Problem(2, 1.0))
        for f in fragments:
            assert f in str(err.value)

    check([], "no plan records")
    check(good + [_record(0, "x", Plan((), ((0, 1), (2, 3))))], "record 2 (task 0, x): duplicates record 0")
    beyond = PlanRecord(7, "x", plan=Plan((), ((0,), ())))
    check(good + [beyond], "record 2 (task 7, x): the task file tasks.txt has 3 tasks")
    # the same plan recorded for task 2 of another task file: its view says 4 tables of other dims
    other = PlanRecord(2, "x", plan=good[0].plan, view=good[0].view)
    check(good + [other], "record 2 (task 2, x): its tables do not match task 2 of tasks.txt")


def test_plan_file_keeps_tasks_within_max_tasks_and_picks_algorithms(tmp_path):
    path = tmp_path / "plans.json"
    records = [_record(0, "x", Plan((), ((0, 1), (2, 3)))), _record(0, "y", Plan((), ((0, 2), (1, 3)))),
               _record(2, "x", Plan((), ((0,), ())))]
    write_plans(path, records)
    got, algs = plans_from_file(path, _inputs(max_tasks=1), "tasks.txt", "all", Problem(2, 1.0))
    assert [(r.task, r.alg) for r in got] == [(0, "x"), (0, "y")] and algs == ["x", "y"]
    want = simulate(TASKS[0].tables(CONFIGS), records[0].plan, hand_models(), Problem(2, 1.0)).cost
    assert got[0].estimated_cost == pytest.approx(want) and want != 9.0
    assert json.loads(path.read_text())[0]["estimated_cost"] == 9.0  # the file itself is left as it was


def test_plans_carry_their_task_and_are_refused_for_other_tables(tmp_path):
    """Issue 24: a plan records its task's table ids and dims; the same dims over other tables is refused
    (the view alone could not tell), and an old file without the keys still loads."""
    from neuroshard.eval.planning import plan_task

    path = tmp_path / "plans.json"
    rec = plan_task(1, TASKS[1].tables(CONFIGS), "dim_greedy", Problem(2, 1.0), hand_models())
    assert (rec.table_ids, rec.dims) == ((4, 1), (8, 8))
    write_plans(path, [rec])
    other = EvalInputs(CONFIGS, [TASKS[0], Task((3, 1), (8, 8))], hand_models(), 2)  # same dims, table 3
    with pytest.raises(InputError, match=r"record 0 \(task 1, dim_greedy\): its tables do not match task 1 of "
                                         r"t.txt: table 0 is dataset table 4 in the plan, dataset table 3 here"):
        plans_from_file(path, other, "t.txt", "all", Problem(2, 1.0))
    got, _ = plans_from_file(path, _inputs(), "tasks.txt", "all", Problem(2, 1.0))
    assert (got[0].table_ids, got[0].dims) == ((4, 1), (8, 8))
    # an old file (no identity keys): loads; the view's dims and the table count are still checked
    raw = json.loads(path.read_text())
    path.write_text(json.dumps([{k: v for k, v in raw[0].items() if k not in ("table_ids", "dims")}]))
    got, _ = plans_from_file(path, _inputs(), "tasks.txt", "all", Problem(2, 1.0))
    assert got[0].plan == rec.plan and (got[0].table_ids, got[0].dims) == ((4, 1), (8, 8))
    wider = EvalInputs(CONFIGS, [TASKS[0], Task((4, 1), (8, 16))], hand_models(), 2)
    with pytest.raises(InputError, match="table 1 has dim 8 in the plan, dim 16 here"):
        plans_from_file(path, wider, "t.txt", "all", Problem(2, 1.0))


def test_an_estimate_far_from_the_recorded_one_is_warned_about(capsys):
    models = hand_models()
    plan = Plan((), ((0,), (1,)))
    want = simulate(TASKS[1].tables(CONFIGS), plan, models, Problem(plan.ndevices, 1.0)).cost
    check_plans([PlanRecord(1, "a", plan=plan, estimate=stale(want))], CONFIGS, TASKS, Problem(2, 1.0), models)
    assert capsys.readouterr().err == ""
    check_plans([PlanRecord(1, "a", plan=plan, estimate=stale(3 * want))], CONFIGS, TASKS, Problem(2, 1.0), models)
    err = capsys.readouterr().err
    assert err.startswith("warning: task 1 [a]: the plan's estimate re-simulated is") and "the file recorded" in err


def test_calibration_scales_the_models_by_the_measured_drift(tmp_path):
    from neuroshard.eval.drift import DRIFT_COMM
    from neuroshard.eval.planning import calibrate
    from tests.eval.test_drift import _write

    _write(tmp_path, 2.0, 2.0, 0.5)  # the machine: compute and fw take twice their recorded times, bw half
    inputs = calibrate(_inputs(), tmp_path)
    assert (inputs.calibration["compute"], inputs.calibration["fw_comm"], inputs.calibration["bw_comm"]) == \
        pytest.approx((2.0, 2.0, 0.5))
    plan = Plan((), ((0, 1), ()))
    # test_plans_are_checked_and_estimates_simulated_again's plan, scaled: compute 1.32 | 0, bw 0.21 | 0.05,
    # ready 1.53 | 0.05 so skew 1.48 | 0, fw 2 x (0.1 + 0.32 + 0.74) = 2.32 | 2 x 0.1, totals 3.85 | 0.25
    est = simulate(TASKS[1].tables(CONFIGS), plan, inputs.models, Problem(plan.ndevices, 1.0))
    assert est.compute == pytest.approx([1.32, 0.0], abs=1e-5) and est.bw_comm == pytest.approx([0.21, 0.05])
    assert est.fw_comm == pytest.approx([2.32, 0.2], abs=1e-5) and est.cost == pytest.approx(3.85, abs=1e-5)
    assert simulate(TASKS[1].tables(CONFIGS), plan, _inputs().models, Problem(2, 1.0)).cost == pytest.approx(1.99,
                                                                                                        abs=1e-5)
    (tmp_path / DRIFT_COMM).unlink()
    with pytest.raises(InputError, match="drift_comm.json: calibration file not found"):
        calibrate(_inputs(), tmp_path)
    with pytest.raises(InputError, match="nowhere: calibration directory not found"):
        calibrate(_inputs(), tmp_path / "nowhere")


def test_plan_speed_scales_the_calibrated_models_further(tmp_path):
    from neuroshard.eval.planning import calibrate, scale_to_plan_speed
    from tests.eval.test_drift import _plan_speed_dir, _write

    _write(tmp_path, 2.0, 2.0, 0.5)
    inputs = calibrate(_inputs(), tmp_path)
    # the anchors, measured under the same calibration: compute 0.9x, fw 1.2x, bw 1x their estimates
    sped = scale_to_plan_speed(inputs, _plan_speed_dir(tmp_path / "anchors", inputs.calibration))
    assert sped.plan_speed == pytest.approx({"compute": 0.9, "fw_comm": 1.2, "bw_comm": 1.0, "plans": 3})
    assert sped.calibration == inputs.calibration
    plan = Plan((), ((0, 1), ()))
    # test_calibration_scales_the_models_by_the_measured_drift's plan, compute x0.9 and fw x1.2 more:
    # compute 1.188 | 0, bw 0.21 | 0.05, ready 1.398 | 0.05 so skew 1.348 | 0,
    # fw 1.2 x 2 x (0.1 + 0.32 + 0.5 x 1.348) = 2.6256 | 1.2 x 0.2 = 0.24, totals 4.0236 | 0.29
    est = simulate(TASKS[1].tables(CONFIGS), plan, sped.models, Problem(plan.ndevices, 1.0))
    assert est.compute == pytest.approx([1.188, 0.0], abs=1e-5) and est.bw_comm == pytest.approx([0.21, 0.05])
    assert est.fw_comm == pytest.approx([2.6256, 0.24], abs=1e-5) and est.cost == pytest.approx(4.0236, abs=1e-5)
    with pytest.raises(InputError, match="calibration factor compute=2.0, this evaluation's --calibration gives None"):
        scale_to_plan_speed(_inputs(), tmp_path / "anchors")


def _planning(tmp_path, name: str, tasks, records, seed: int, **settings) -> tuple:
    """An eval_simulator.py out dir (plans.json + config.json) for a gen_tasks.py task dir; returns the paths."""
    from neuroshard.data.task_gen import TaskSpec
    from neuroshard.formats.task_file import write_tasks

    task_dir, sim = tmp_path / f"tasks_{name}", tmp_path / f"sim_{name}"
    task_dir.mkdir()
    sim.mkdir()
    write_tasks(task_dir / "data.txt", tasks)
    # what gen_tasks.py writes: the generator's settings, its problem (and seed) nested
    spec = TaskSpec(data_size=len(tasks), T_range=(1, 4), problem=Problem(seed=seed))
    (task_dir / "config.json").write_text(json.dumps({"data_dir": "ds", **spec.to_json()}))
    write_plans(sim / "plans.json", records)
    config = {"compute_model": "m.pt", "plus_lambda": 1.0, "task_path": str(task_dir / "data.txt"),
              "max_tasks": len(tasks), "out_dir": str(sim), **settings}
    (sim / "config.json").write_text(json.dumps(config))
    return sim / "plans.json", task_dir / "data.txt"


def test_unmeasured_plans_are_simulated_again_and_must_come_from_the_same_planning(tmp_path):
    from neuroshard.eval.planning import unmeasured_plans
    from neuroshard.types.errors import ConfigError

    measured = _planning(tmp_path, "measured", TASKS[:1], [_record(0, "neuroshard", Plan((), ((0, 1), (2, 3)))),
                                                           _record(0, "random", Plan((), ((0, 2), (1, 3))))], seed=0)
    others = [Task((1, 2), (8, 8)), Task((3,), (16,))]

    def rec(task, alg, shards):
        plan = Plan((), shards)
        return PlanRecord(task, alg, plan=plan, view=plan_view(others[task].tables(CONFIGS), plan), estimate=stale(9.0))

    records = [rec(0, "neuroshard", ((0, 1), ())), rec(0, "random", ((0,), (1,))), rec(1, "neuroshard", ((0,), ())),
               rec(1, "random", ((), (0,)))]
    path, task_path = _planning(tmp_path, "other", others, records, seed=1000)
    algs = ["neuroshard", "random"]
    got = unmeasured_plans(path, task_path, _inputs(), measured[0], measured[1], algs, Problem(2, 1.0))
    assert [(r.task, r.alg) for r in got] == [(0, "neuroshard"), (0, "random"), (1, "neuroshard"), (1, "random")]
    want = simulate(others[1].tables(CONFIGS), records[2].plan, hand_models(), Problem(2, 1.0)).cost
    assert got[2].estimated_cost == pytest.approx(want) and want != 9.0  # simulated again, with these models

    def refused(error, fragment, *args):
        with pytest.raises(error, match=fragment):
            unmeasured_plans(*args)

    refused(ConfigError, "needs --plans", path, task_path, _inputs(), None, measured[1], algs, Problem(2, 1.0))
    refused(ConfigError, "is the measured task file", path, measured[1], _inputs(), *measured, algs, Problem(2, 1.0))
    write_plans(tmp_path / "sim_other" / "plans.json", records[:1] + records[2:3])
    refused(InputError, "no plans of random", path, task_path, _inputs(), *measured, algs, Problem(2, 1.0))
    # planned with another lambda: the predictions would not be the measured plans' kind
    _planning(tmp_path, "lam", others, records, seed=1000, plus_lambda=0.5)
    refused(InputError, r"plus_lambda is 0.5, the measured plans' .* 1.0: predictions must come from the same "
                        r"planning", tmp_path / "sim_lam" / "plans.json", task_path, _inputs(), *measured, algs,
            Problem(2, 1.0))
    (tmp_path / "sim_lam" / "config.json").unlink()
    refused(InputError, "config.json: missing", tmp_path / "sim_lam" / "plans.json", task_path, _inputs(), *measured,
            algs, Problem(2, 1.0))
    # the same generator's seed: the same tasks; another T range: another distribution
    for name, seed, extra in (("same_seed", 0, {}), ("range", 1000, {"T_range": [1, 9]})):
        p, t = _planning(tmp_path, name, others, records, seed=seed)
        if extra:
            (t.parent / "config.json").write_text(json.dumps({"T_range": [1, 9], "seed": seed, "data_size": 2}))
        refused(InputError, "is the measured tasks' seed" if not extra else "T_range is .* from the same generator",
                p, t, _inputs(), *measured, algs, Problem(2, 1.0))


def test_with_runtime_loads_the_runtime_model_named_or_beside_the_compute_model(tmp_path):
    import argparse

    from neuroshard.eval.planning import add_runtime_args, with_runtime
    from neuroshard.planner.costs.runtime_model import FEATURES, TorchRecRuntimeModel, default_path

    p = argparse.ArgumentParser()
    add_runtime_args(p)
    model = TorchRecRuntimeModel(2, 64, tuple(1.0 for _ in FEATURES))
    model.save(default_path(tmp_path, 2))  # beside the compute model
    model.save(tmp_path / "named.json")
    compute = str(tmp_path / "compute.pt")
    paper = p.parse_args([])
    paper.compute_model = compute
    inputs = _inputs()
    assert with_runtime(paper, inputs) is inputs  # the paper runtime: as they were
    beside = p.parse_args(["--runtime", "torchrec"])
    beside.compute_model = compute
    named = p.parse_args(["--runtime", "torchrec", "--runtime_model", str(tmp_path / "named.json")])
    named.compute_model = str(tmp_path / "elsewhere" / "compute.pt")
    for args in (beside, named):
        assert with_runtime(args, _inputs()).models.runtime == model
    missing = p.parse_args(["--runtime", "torchrec"])
    missing.compute_model = str(tmp_path / "elsewhere" / "compute.pt")
    with pytest.raises(InputError, match="torchrec_runtime_2.json"):
        with_runtime(missing, _inputs())
