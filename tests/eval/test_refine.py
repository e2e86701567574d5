"""Hardware in the loop (`eval.refine`): the candidates of a task (the algorithm's own best, NeuroShard's plan,
the best plain baseline's), the measured best kept, the time counted as planning, and the evaluation measuring
the chosen plan afresh: fake measurers record what they are asked."""

import pytest

from neuroshard.eval import hardware
from neuroshard.eval.refine import (
    RefineConfig,
    candidates,
    choose,
    paired_noise,
    refine_records,
    refine_summary,
)
from neuroshard.eval.summary import summarize
from neuroshard.formats.io import write_json_atomic
from neuroshard.formats.plan_file import read_plans, write_plans
from neuroshard.measure import plan_job
from neuroshard.measure.plan_job import HardwareConfig
from neuroshard.planner.shard import shard
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import ConfigError
from neuroshard.types.records import (
    PlanMeasurement,
    PlanRecord,
    RefineCandidate,
    RefineRecord,
)
from neuroshard.types.tables import TableConfig, Task
from tests.planner.test_simulator import BINS, hand_models

CONFIGS = [TableConfig(1000, 1.0 + i, BINS) for i in range(6)]
TASKS = [Task((0, 1, 2, 3), (32, 16, 8, 16)), Task((4, 5, 1), (16, 32, 8))]


def test_candidates_hold_the_algorithms_choice_neuroshards_plan_and_the_best_baselines():
    tables = TASKS[0].tables(CONFIGS)
    models = hand_models(2)
    got = candidates(tables, "neuroshard_plus", Problem(2, 1.0, 0), models, {}, 5)
    sources = [s for s, _ in got]
    plans = [p for _, p in got]
    assert sources[0] == "neuroshard_plus" and len(set(map(repr, plans))) == len(plans) <= 5
    assert plans[0] == shard(tables, Problem(2, 1.0), models=models, alg="neuroshard_plus").plan
    ns = shard(tables, Problem(2, 1.0), models=models, alg="neuroshard").plan
    assert ns in plans  # always, whatever its rank
    best_base = min((shard(tables, Problem(2, 1.0), models=models, alg=a) for a in
                     ("random", "dim_greedy", "lookup_greedy", "size_greedy", "size_lookup_greedy")),
                    key=lambda r: r.cost_ms).plan
    assert best_base in plans
    assert len(candidates(tables, "neuroshard", Problem(2, 1.0, 0), models, {}, 1)) >= 1


def _measurement(i, rec, ms):
    return PlanMeasurement(index=i, task=rec.task, alg=rec.alg, dims=[8, 8], ntables=[1, 1], compute=[ms, 1.0],
                           bw_comm=[0.0, 0.0], fw_comm=[0.0, 0.0], fw_comm_nosleep=[0.0, 0.0], skew=[0.0, 0.0])


def test_refine_keeps_the_measured_best_and_the_evaluation_measures_it_afresh(tmp_path, monkeypatch):
    models = hand_models(2)
    records = [shard_record(t, alg, models) for t in range(2) for alg in ("neuroshard", "size_greedy")]
    asked = []

    def fake_selection(items, data_dir, task_path, cfg, work_dir, labels, num_tasks, config=None, show=None):
        asked.append(list(items))
        assert cfg.repeats == 3  # refine_repeats
        results = []
        for rec in items:  # the last candidate of each task is the cheapest: 5 ms, the others 9 ms
            last = max(int(r.alg.split("@")[1]) for r in items if r.task == rec.task)
            ms = 5.0 if int(rec.alg.split("@")[1]) == last else 9.0
            results.append(PlanRecord(rec.task, rec.alg, plan=rec.plan, estimate=CostBreakdown([1.0], [0.0], [0.0]),
                                      measured=CostBreakdown([ms, 1.0], [0.0, 0.0], [0.0, 0.0]),
                                      repeat_costs=[ms] * 3))
        write_plans(work_dir / "results.json", results)  # as run_evaluation writes them
        write_json_atomic(work_dir / "config.json", config)
        return results, summarize(results, labels, num_tasks, cost_key="cost", reference=labels[0])

    refine = RefineConfig(refine=3, refine_repeats=3)
    hw = HardwareConfig(problem=Problem(2, 1.0))
    out = refine_records(records, TASKS, CONFIGS, models, refine, hw, "ds", "tasks.txt", tmp_path / "refine",
                         Problem(2, 1.0, 0), {}, run=fake_selection)
    [items] = asked  # one measuring job for every task's candidates
    assert {r.task for r in items} == {0, 1} and all(r.alg.startswith("neuroshard@") for r in items)
    for k, rec in enumerate(out):
        if rec.alg != "neuroshard":
            assert rec == records[k]  # only NeuroShard and NeuroShard+ are refined
            continue
        cands = [r for r in items if r.task == rec.task]
        assert rec.refine.chosen == len(cands) - 1 and rec.plan == cands[-1].plan
        assert rec.refine.candidates[-1].measured_costs == [5.0] * 3
        assert rec.search_ms == pytest.approx(records[k].search_ms + 1e3 * rec.refine.seconds)
        assert rec.estimated_cost is not None and rec.view is not None
        assert all(c.estimated_cost is not None for c in rec.refine.candidates)

    # a rerun after a crash past the measuring job reuses its finished results; other settings measure again
    again = refine_records(records, TASKS, CONFIGS, models, refine, hw, "ds", "tasks.txt", tmp_path / "refine",
                           Problem(2, 1.0, 0), {}, run=fake_selection)
    assert len(asked) == 1 and [r.plan for r in again] == [r.plan for r in out]
    refine_records(records, TASKS, CONFIGS, models, RefineConfig(refine=3, refine_repeats=2), hw, "ds", "tasks.txt",
                   tmp_path / "refine", Problem(2, 1.0, 0), {},
                   run=lambda *a, **k: asked.append(a) or fake_results(a[0]))
    assert len(asked) == 2

    # the evaluation measures every chosen plan again, in its own job: 7 ms now, never the selection's 5 ms
    measured_plans = []

    def fake_measure(plans_path, data_dir, task_path, cfg, on_result=None, work_dir=None, worker_module=None):
        for i, rec in enumerate(read_plans(plans_path)):
            measured_plans.append((rec.task, rec.alg, rec.plan))
            on_result(_measurement(i, rec, 7.0))

    monkeypatch.setattr(plan_job, "measure_plans", fake_measure)
    results, _ = hardware.run_evaluation(out, "ds", "tasks.txt", HardwareConfig(problem=Problem(2, 1.0)),
                                         tmp_path / "hw",
                                         ["neuroshard", "size_greedy"], 2, show=None)
    for rec, res in zip(out, results):
        assert (rec.task, rec.alg, rec.plan) in measured_plans
        assert res.repeat_costs == [7.0] and res.refine == rec.refine


def fake_results(items):
    return [PlanRecord(r.task, r.alg, plan=r.plan, measured=CostBreakdown([3.0], [0.0], [0.0]), repeat_costs=[3.0] * 2)
            for r in items], None


def shard_record(task, alg, models):
    r = shard(TASKS[task].tables(CONFIGS), Problem(2, 1.0), models=models, alg=alg)
    return PlanRecord(task, alg, plan=r.plan, estimate=r.breakdown, search_ms=r.search_ms, view=r.view)


def test_refine_settings_are_checked():
    with pytest.raises(ConfigError, match="--refine_repeats: must be >= 1"):
        RefineConfig(refine=2, refine_repeats=0).validate()
    with pytest.raises(ConfigError, match="--refine: must be >= 0"):
        RefineConfig(refine=-1).validate()
    with pytest.raises(ConfigError, match="--refine_algs: 'torchrec' cannot be refined"):
        RefineConfig(refine=2, refine_algs="neuroshard,torchrec").validate()
    assert RefineConfig().algs() == ("neuroshard", "neuroshard_plus")
    # a --refine that refines none of the run's algorithms is an error, not a silent no-op
    with pytest.raises(ConfigError, match="--refine: refines neuroshard_plus, and none of them is in --alg "
                                          "neuroshard,torchrec"):
        RefineConfig(refine=2, refine_algs="neuroshard_plus").check_algs(["neuroshard", "torchrec"])
    RefineConfig(refine=0, refine_algs="neuroshard_plus").check_algs(["neuroshard"])  # off: nothing to check
    RefineConfig(refine=2).check_algs(["neuroshard", "torchrec"])


def test_refine_algs_leaves_the_others_as_the_models_chose(tmp_path):
    models = hand_models(2)
    records = [shard_record(t, alg, models) for t in range(2) for alg in ("neuroshard", "neuroshard_plus")]
    asked = []

    def fake_selection(items, data_dir, task_path, cfg, work_dir, labels, num_tasks, config=None, show=None):
        asked.extend(items)
        results = [PlanRecord(r.task, r.alg, plan=r.plan, estimate=CostBreakdown([1.0], [0.0], [0.0]),
                              measured=CostBreakdown([3.0], [0.0], [0.0]), repeat_costs=[3.0, 3.0]) for r in items]
        return results, None

    out = refine_records(records, TASKS, CONFIGS, models, RefineConfig(refine=3, refine_algs="neuroshard_plus"),
                         HardwareConfig(problem=Problem(2, 1.0)), "ds", "tasks.txt", tmp_path, Problem(2, 1.0, 0), {},
                         run=fake_selection)
    assert asked and all(r.alg.startswith("neuroshard_plus@") for r in asked)
    for rec, before in zip(out, records):
        if rec.alg == "neuroshard":
            assert rec == before
        else:
            assert rec.refine is not None and rec.refine.chosen == 0  # all equal: the first (own) candidate


def test_refine_summary_by_hand():
    def rec(task, chosen, own_ms, chosen_ms, fresh_ms, source):
        cands = [RefineCandidate("neuroshard_plus", 10.0, own_ms), RefineCandidate(source, 11.0, chosen_ms)]
        return PlanRecord(task, "neuroshard_plus", measured=CostBreakdown([fresh_ms], [0.0], [0.0]),
                          repeat_costs=[fresh_ms], refine=RefineRecord(cands, chosen, seconds=2.0 + task))

    results = [rec(0, 1, [10.0, 10.0], [8.0, 9.0], 9.35, "neuroshard"),  # chose 8.5 against 10: 15% below
               rec(1, 1, [20.0, 20.0], [19.0, 19.0], 19.0, "size_lookup_greedy"),  # 5% below
               rec(2, 0, [12.0, 12.0], [13.0, 13.0], 12.6, "neuroshard")]  # own kept: 0%
    results.append(PlanRecord(0, "torchrec", repeat_costs=[5.0]))  # not refined: left out
    for task, alg, ms in ((0, "neuroshard", 9.35), (1, "size_lookup_greedy", 19.95), (2, "neuroshard", 13.0)):
        results.append(PlanRecord(task, alg, measured=CostBreakdown([ms], [0.0], [0.0]), repeat_costs=[ms]))
    s = refine_summary(results)
    assert list(s) == ["neuroshard_plus"]
    got = s["neuroshard_plus"]
    assert got["tasks"] == 3 and got["candidates"] == 2.0 and got["seconds"] == pytest.approx(3.0)
    assert got["chosen"] == {"neuroshard": 1, "size_lookup_greedy": 1, "neuroshard_plus": 1}
    assert got["selection_gain"] == pytest.approx((0.15 + 0.05 + 0.0) / 3)
    # fresh / selection: 9.35 / 8.5 = 1.1, 19 / 19 = 1.0, 12.6 / 12 = 1.05: median 1.05
    assert got["fresh_over_selection"] == pytest.approx(1.05)
    # the evaluated plans of neuroshard / size_lookup_greedy against their selection measurements:
    # 9.35 / 8.5 = 1.1, 19.95 / 19 = 1.05, 13 / 13 = 1.0: the drift, median 1.05
    assert got["drift"] == pytest.approx(1.05)
    assert refine_summary(results[3:]) == {}


def test_choose_keeps_the_models_choice_unless_the_rounds_say_otherwise():
    # relative differences from the own choice (10 ms): task 0 -10%, -6% (mean -8%); task 1 -3%, -1% (mean -2%)
    costs = [[[10.0, 10.0], [9.0, 9.4]], [[10.0, 10.0], [9.7, 9.9]]]
    # deviations from each mean: +-2% and +-1% over 2 degrees of freedom: sd = sqrt((2 * 4 + 2 * 1) / 2) % = 2.236%
    noise = paired_noise(costs)
    assert noise == pytest.approx(0.02236, abs=1e-5)
    # one candidate: z = 1.645 at 95%; threshold 1.645 * 2.236% / sqrt(2) = 2.60%: 8% switches, 2% does not
    assert [choose(c, noise, 0.95) for c in costs] == [1, 0]
    assert [choose(c, noise, 0.0) for c in costs] == [1, 1]  # 0: the lowest mean always wins
    # three candidates: z = 2.128 (0.05 / 3); threshold 3.37%: a 3% gap is kept out, a 4% one gets in
    three = [[10.0, 10.0], [9.8, 9.8], [9.7, 9.7], [10.5, 10.5]]
    assert choose(three, noise, 0.95) == 0
    assert choose([[10.0, 10.0], [9.8, 9.8], [9.6, 9.6], [10.5, 10.5]], noise, 0.95) == 2
    assert paired_noise([[[10.0], [9.0]]]) == 0.0 and choose([[10.0], [9.0]], 0.0, 0.95) == 1  # one round
    with pytest.raises(ConfigError, match="--refine_confidence"):
        RefineConfig(refine=2, refine_confidence=1.0).validate()
