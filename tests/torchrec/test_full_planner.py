"""`torchrec_full`: TorchRec's planner with every sharding type and its defaults, its cuda plan re-emitted for
the training ranks with the same types, ranks and shards (and the kernels the ranks run), no plan within memory
reported as out of memory, and eval_torchrec.py's one-line errors for it."""

import runpy
from pathlib import Path

import pytest

import neuroshard as ns
from neuroshard.cli import run_main
from neuroshard.problem import Problem
from neuroshard.torchrec.full_planner import (
    for_ranks,
    layout_summary,
    plan_torchrec_full,
)
from neuroshard.torchrec.sharder import TorchRecConfig, plan_from_layout, sharding_layout, table_names
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import InvalidPlanError, OutOfMemoryError
from neuroshard.types.tables import ShardTable, TableConfig

pytest.importorskip("torchrec")
ROOT = Path(__file__).resolve().parents[2]
GB_ROWS = 2**28  # rows of a 1 GB table at dim 1


def tables_of(*rows_dims_pooling):
    return [ShardTable(i, i, TableConfig(r, pf, ns.DEFAULT_BINS, d)) for i, (r, d, pf) in enumerate(rows_dims_pooling)]


# a heavily pooled large table, two large lightly pooled ones and a tiny one: TorchRec spreads the first over the
# rows of every rank, keeps the next whole and replicates the tiny one
MIXED = tables_of((10**6, 64, 30.0), (10**6, 128, 2.0), (10**6, 64, 2.0), (100, 8, 2.0))


@pytest.fixture(scope="module")
def mixed_plan():
    return plan_torchrec_full(MIXED, Problem(2, 1.0), TorchRecConfig(batch_size=4096))


def test_the_full_planner_chooses_beyond_table_and_column_wise(mixed_plan):
    layout = sharding_layout(mixed_plan.plan[""])
    assert list(layout) == table_names(MIXED)
    assert {name: v["sharding_type"] for name, v in layout.items()} == \
        {"t0": "row_wise", "t1": "table_wise", "t2": "table_wise", "t3": "data_parallel"}
    # row-wise: every rank a contiguous block of rows, all columns
    shards = layout["t0"]["shards"]
    assert [s[2] for s in shards] == [0, 1] and sum(s[1][0] for s in shards) == 10**6
    assert all(s[0][1] == 0 and s[1][1] == 64 for s in shards) and shards[1][0][0] == shards[0][1][0]
    assert layout["t3"]["shards"] == []  # a replica on every rank
    assert layout_summary(mixed_plan.plan[""])["types"] == {"row_wise": 1, "table_wise": 2, "data_parallel": 1}
    # planned for GPUs, as a user would
    assert all(str(s.placement).endswith(f"cuda:{s.placement.rank()}")
               for ps in mixed_plan.plan[""].values() if ps.sharding_spec for s in ps.sharding_spec.shards)
    # and read back as the project's plan: t0 row-wise and t3 data-parallel spread tables, t1 and t2 whole
    plan = plan_from_layout(layout, MIXED, table_names(MIXED), 2)
    assert [(s.table, s.kind, s.ranks) for s in plan.spread] == [(0, "row_wise", (0, 1)), (3, "data_parallel", (0, 1))]
    assert sorted(i for shard in plan.shards for i in shard) == [1, 2] and plan.column_steps == ()
    uneven = {**layout, "t0": {**layout["t0"], "shards": [layout["t0"]["shards"][1], layout["t0"]["shards"][0]]}}
    with pytest.raises(InvalidPlanError, match="'t0': row_wise blocks .* are not TorchRec's blocks"):
        plan_from_layout(uneven, MIXED, table_names(MIXED), 2)


def test_the_plan_re_emitted_for_the_ranks_keeps_types_ranks_and_shards(mixed_plan):
    from torchrec.distributed.sharding_plan import (
        construct_module_sharding_plan,
        data_parallel,
        row_wise,
        table_wise,
    )

    from neuroshard.torchrec.sharder import embedding_bag_collection
    from neuroshard.torchrec.training import all_types_sharder

    planned = mixed_plan.plan[""]
    cpu = for_ranks(mixed_plan, "cpu", "ebc").plan
    assert list(cpu) == ["ebc"] and sharding_layout(cpu["ebc"]) == sharding_layout(planned)
    assert {n: ps.compute_kernel for n, ps in cpu["ebc"].items()} == \
        {"t0": "fused", "t1": "fused", "t2": "fused", "t3": "dense"}
    assert all(str(s.placement) == f"rank:{s.placement.rank()}/cpu"
               for ps in cpu["ebc"].values() if ps.sharding_spec for s in ps.sharding_spec.shards)
    # the same plan from TorchRec's own generators for 2 CPU ranks
    names = table_names(MIXED)
    rank = {n: planned[n].ranks[0] for n in ("t1", "t2")}
    made = construct_module_sharding_plan(
        embedding_bag_collection(MIXED, names),
        {"t0": row_wise(), "t1": table_wise(rank=rank["t1"]), "t2": table_wise(rank=rank["t2"]), "t3": data_parallel()},
        sharder=all_types_sharder(), local_size=2, world_size=2, device_type="cpu")
    assert sharding_layout(made) == sharding_layout(cpu["ebc"])
    # GPU ranks, two per host
    cuda = for_ranks(mixed_plan, "cuda", "sparse.ebc", local_size=1).plan["sparse.ebc"]
    assert sharding_layout(cuda) == sharding_layout(planned)
    assert all(str(s.placement) == f"rank:{s.placement.rank()}/cuda:0"
               for ps in cuda.values() if ps.sharding_spec for s in ps.sharding_spec.shards)


def test_no_plan_within_memory_and_constraints():
    too_much = tables_of(*[(GB_ROWS // 64, 64, 2.0)] * 3)  # 3 GB on 2 x 1 GB
    with pytest.raises(OutOfMemoryError, match="TorchRec found no plan within max_mem 1 GB") as e:
        plan_torchrec_full(too_much, Problem(2, 1.0), TorchRecConfig(batch_size=4096))
    assert "\n" not in str(e.value)
    # a table kept whole is table-wise or data-parallel only
    kept = Problem(2, 1.0, constraints=TableConstraints(whole=(0,)))
    layout = sharding_layout(plan_torchrec_full(MIXED, kept, TorchRecConfig(batch_size=4096)).plan[""])
    assert layout["t0"]["sharding_type"] in ("table_wise", "data_parallel")
    with pytest.raises(ns.NeuroShardError, match="torchrec_full: TorchRec's planner takes no per-table device"):
        plan_torchrec_full(MIXED, Problem(2, 1.0, constraints=TableConstraints(devices=((0, (1,)),))),
                           TorchRecConfig())


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
    from neuroshard.formats.dataset import write_dataset
    from neuroshard.formats.plan_file import write_plans
    from neuroshard.formats.task_file import write_tasks
    from neuroshard.types.plan import Plan
    from neuroshard.types.records import PlanRecord
    from neuroshard.types.tables import Task

    d = tmp_path_factory.mktemp("full")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=4, batch_size=64, max_rows=2000, seed=0),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    write_tasks(d / "tasks.txt", [Task((0, 1, 2), (16, 8, 32))])
    write_plans(d / "plans.json", [PlanRecord(0, "neuroshard", plan=Plan((), ((0, 1), (2,))), num_tables=3)])
    return d


def run_eval_torchrec(argv, capsys) -> tuple[int, str]:
    main = runpy.run_path(str(ROOT / "eval_torchrec.py"))["main"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: main(list(argv)))
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize("extra, fragment", [
    ([], "--max_mem: torchrec_full plans within the memory per rank"),
    (["--max_mem", "0.000001"], "--max_mem: torchrec_full: TorchRec found no plan within 1e-06 GB per rank for any "
                                "of tasks 0"),
], ids=["no max_mem", "no plan within memory"])
def test_eval_torchrec_bad_input_is_one_line(inputs, capsys, tmp_path, extra, fragment):
    d = inputs
    code, err = run_eval_torchrec(["--data_dir", str(d / "ds"), "--task_path", str(d / "tasks.txt"), "--plans",
                                   str(d / "plans.json"), "--ndevices", "2", "--device", "cpu", "--alg",
                                   "all,torchrec_full", "--out_dir", str(tmp_path / "out"), *extra], capsys)
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert code != 0 and fragment in lines[-1] and "Traceback" not in err, err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_the_files_torchrec_full_plans_give_way_to_the_ones_planned_here(inputs, capsys, tmp_path):
    # the new set's paper-runtime plans (step 5c:oversize) hold torchrec_full's plans too; step 7f passes them with
    # all,torchrec_full: they are left out, and TorchRec's full planner plans here (with no memory to plan in,
    # it then finds no plan: the error is that one, not one about the file)
    from neuroshard.formats.plan_file import write_plans
    from neuroshard.types.plan import Plan
    from neuroshard.types.records import PlanRecord

    d = inputs
    write_plans(tmp_path / "plans.json", [PlanRecord(0, "neuroshard", plan=Plan((), ((0, 1), (2,))), num_tables=3),
                                          PlanRecord(0, "torchrec_full", plan=Plan((), ((0,), (1, 2))),
                                                     num_tables=3)])
    code, err = run_eval_torchrec(["--data_dir", str(d / "ds"), "--task_path", str(d / "tasks.txt"), "--plans",
                                   str(tmp_path / "plans.json"), "--ndevices", "2", "--device", "cpu", "--alg",
                                   "all,torchrec_full", "--max_mem", "0.000001", "--out_dir", str(tmp_path / "out")],
                                  capsys)
    assert code != 0 and "torchrec_full: its plans in --plans are left out" in err
    assert "TorchRec found no plan within 1e-06 GB per rank for any of tasks 0" in err.strip().splitlines()[-1]


def test_eval_torchrec_help_says_what_torchrec_full_is(capsys):
    main = runpy.run_path(str(ROOT / "eval_torchrec.py"))["main"]
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "'torchrec_full': TorchRec's planner with every sharding type" in out
    assert "that torchrec_full is planned within" in out


def test_the_pipeline_trains_torchrec_full_beside_the_plans():
    from neuroshard.pipeline.run import parse_args, run_of
    from neuroshard.pipeline.steps import build_steps

    steps = {s.name: s for s in build_steps(run_of(parse_args(["--preset", "quick", "--torchrec_train"]),
                                                   Path("results/quick")))}
    argv = steps["7f:paper"].argv
    flags = dict(zip(argv[1::2], argv[2::2]))
    assert argv[0] == "eval_torchrec.py" and flags["--alg"] == "all,torchrec_full" and flags["--max_mem"] == "1.0"


def test_torchrec_full_is_a_sharder_the_evaluation_can_name():
    from neuroshard.eval.planning import plan_task
    from neuroshard.planner.registry import ShardingContext, algorithm_names, get_sharder, in_all

    assert "torchrec_full" in algorithm_names() and not in_all("torchrec_full")  # named only
    problem = Problem(2, 1.0)
    plan = get_sharder("torchrec_full")(MIXED, problem, ShardingContext(options={"batch_size": 4096}))
    # the same plan the planner gives, read back: t0 row-wise, t3 data-parallel
    assert [(s.table, s.kind) for s in plan.spread] == [(0, "row_wise"), (3, "data_parallel")]
    # the paper runtime cannot run it: an invalid record naming the table, not an aborted evaluation
    from tests.planner.test_simulator import hand_models

    rec = plan_task(0, MIXED, "torchrec_full", problem, hand_models(2), {"batch_size": 4096})
    assert rec.status == "invalid" and rec.plan is None
    assert "returned an invalid plan: table 0 is row_wise: the paper runtime's cost models price" in rec.message


def test_for_two_hosts_torchrecs_planner_keeps_row_blocks_within_a_host():
    from neuroshard.planner.registry import ShardingContext, get_sharder

    # the same tables on 4 GPUs: on one host TorchRec spreads the three large ones over every rank; on two hosts
    # of 2 it spreads each within one host (table-row-wise), even the tiny one, read back with the host's ranks
    sharder, options = get_sharder("torchrec_full"), ShardingContext(options={"batch_size": 4096})
    one = sharder(MIXED, Problem(4, 1.0), options)
    assert [(s.table, s.kind) for s in one.spread] == [(0, "row_wise"), (1, "row_wise"), (2, "row_wise"),
                                                        (3, "data_parallel")]
    two = sharder(MIXED, Problem(4, 1.0, local_world_size=2), options)
    assert {s.kind for s in two.spread} == {"table_row_wise"} and len(two.spread) == 4
    assert all(s.ranks in ((0, 1), (2, 3)) for s in two.spread)
