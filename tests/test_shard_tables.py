"""tools/shard_tables.py: a user's 6-table CSV gives a valid plan, the per-device table and a TorchRec
plan; every kind of bad row is a one-line error naming its row."""

import json

import pytest

from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.sharding_file import read_torchrec_plan
from neuroshard.planner.costs.cost_models import save_model
from neuroshard.planner.simulator import validate_plan
from neuroshard.problem import Problem
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.plan import plan_pieces
from neuroshard.types.tables import DEFAULT_BINS, ShardTable, TableConfig
from tests.test_api import _hand_models
from tests.test_tools import (
    assert_one_line_error,
    assert_raises_one_line,
    load_tool,
    run,
)

HEADER = "name,rows,dim,pooling_factor"
BINS = ",".join(["bin_" + str(j) for j in range(17)])
ROWS = ["user_id,2000000,128,25", "item_id,500000,64,8", "category,1000,16,1", "city,50000,32,2",
        "query,800000,128,12", "ad_id,300000,64,4"]


def write_csv(path, rows, header=HEADER):
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    m = _hand_models(4)
    for name, model in (("compute.pt", m.compute), ("comm_4_fw.pt", m.fw), ("comm_4_bw.pt", m.bw)):
        save_model(model, d / name)
    return d


def test_six_tables_give_a_valid_plan_the_device_table_and_a_torchrec_plan(tmp_path, models_dir):
    tables_csv = write_csv(tmp_path / "tables.csv", ROWS)
    out, tr = tmp_path / "plan.json", tmp_path / "torchrec_plan.pt"
    res = run("shard_tables.py", "--tables", tables_csv, "--ndevices", 4, "--max_mem", 1, "--models_dir", models_dir,
              "--out", out, "--torchrec_out", tr, "--max_length", 3)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:6] == ["device", "dims", "memory", "GB", "compute", "ms"]
    assert [line.split()[0] for line in lines[1:5]] == ["0", "1", "2", "3"]
    assert lines[5].startswith("neuroshard: plan cost ")
    assert all(name in res.stdout for name in ("user_id", "item_id", "category", "city", "query", "ad_id"))
    assert "6 table(s) without locality bins" in res.stderr
    (rec,) = read_plans(out)
    tables = [ShardTable(i, i, TableConfig(int(r.split(",")[1]), float(r.split(",")[3]), DEFAULT_BINS,
                                           int(r.split(",")[2]))) for i, r in enumerate(ROWS)]
    validate_plan(tables, rec.plan, Problem(4, 1.0))
    assert rec.alg == "neuroshard" and rec.estimated_cost > 0 and rec.num_tables == 6
    assert [v["name"] for v in rec.view] == ["user_id", "item_id", "category", "city", "query", "ad_id"]
    # the per-device totals printed are the estimate's
    totals = [float(line.split()[5]) for line in lines[1:5]]
    assert totals == pytest.approx(rec.estimate.total, abs=1e-3)
    assert sorted(read_torchrec_plan(tr).plan[""]) == sorted(v["name"] for v in rec.view)
    assert [t["table"] for t in json.loads(tr.with_suffix(".json").read_text())["modules"][""]] == [
        v["name"] for v in rec.view]


def test_a_runs_folder_is_loaded_whole(tmp_path, capsys):
    """--models_dir a pipeline run's folder: its on-policy models, the collective model beside the random data's
    (`CostModels.load_run`), said on stderr."""
    from tests.planner.costs.test_cost_models import _write_run

    run_dir = _write_run(tmp_path / "quick")
    tables_csv = write_csv(tmp_path / "tables.csv", ROWS[2:4])
    args = ["--tables", str(tables_csv), "--ndevices", "2", "--max_mem", "1", "--models_dir", str(run_dir),
            "--alg", "size_greedy", "--out", str(tmp_path / "p.json")]
    assert load_tool("shard_tables").main(args) == 0
    assert f"cost models from {run_dir / 'models' / 'onpolicy'} (retrained on on-policy data) for 2 devices: " \
           "compute, comm_2 fw/bw; collective model (reduce_scatter, all_gather, all_reduce)" in capsys.readouterr().err


def test_one_model_set_for_any_world_size_plans_every_count(tmp_path, capsys):
    """--models_dir a folder of comm models for any world size: 2, 3 and 6 ranks planned with them, each rank's
    exchanges priced as the hand models say."""
    from tests.planner.costs.test_cost_models import hand_comm, write_world_models

    folder = write_world_models(tmp_path)
    (folder / "collectives.json").unlink()  # table-wise plans: the hand exchanges alone
    tables_csv = write_csv(tmp_path / "tables.csv", ROWS[1:])
    for n in (2, 3, 6):
        args = ["--tables", str(tables_csv), "--ndevices", str(n), "--max_mem", "1", "--models_dir", str(folder),
                "--max_length", "2", "--out", str(tmp_path / f"p{n}.json")]
        assert load_tool("shard_tables").main(args) == 0
        assert f"cost models from {folder} (the random data's) for {n} devices: compute, comm models for any world " \
               "size (trained on 2, 8)" in capsys.readouterr().err
        (rec,) = read_plans(tmp_path / f"p{n}.json")
        assert rec.plan.ndevices == n and rec.num_tables == 5
        bw, fw = hand_comm(rec.estimate.dims, rec.estimate.compute)
        assert rec.estimate.bw_comm == pytest.approx(bw, abs=1e-3) and rec.estimate.fw_comm == pytest.approx(fw,
                                                                                                               abs=1e-3)


def test_other_algorithms_plan_without_models(tmp_path, capsys):
    tables_csv = write_csv(tmp_path / "tables.csv", [r + "," + ",".join(["0.1"] * 10 + ["0"] * 7) for r in ROWS],
                           header=HEADER + "," + BINS)
    for alg in ("size_greedy", "torchrec"):
        out = tmp_path / f"{alg}.json"
        assert load_tool("shard_tables").main(["--tables", str(tables_csv), "--max_mem", "1", "--alg", alg,
                                               "--batch_size", "4096", "--out", str(out)]) == 0
        (rec,) = read_plans(out)
        assert rec.alg == alg and rec.estimate is None and rec.plan.ndevices == 4
    captured = capsys.readouterr()
    assert "without locality bins" not in captured.err and "  -  " in captured.out  # no models: no ms


BAD_ROWS = [
    ("user_id,lots,128,25", "tables.csv:2: table 'user_id': rows is not an integer: 'lots'"),
    ("user_id,1000,30,25", "tables.csv:2: table 'user_id': dim must be a positive multiple of 4 (FBGEMM), got 30"),
    ("user_id,1000,64,x", "tables.csv:2: table 'user_id': pooling_factor is not a number: 'x'"),
    # 2^30 rows at dim 8: split to dim 4 it is still 16 GB > 1 GB
    ("user_id,1073741824,8,1", "tables.csv:2: table 'user_id' (32 GB) does not fit a device of 1 GB even split "
                               "column-wise down to dim 4 (16 GB)"),
    ("user.id,1000,64,1", "tables.csv:2: name must be letters, digits, '_' or '-', got 'user.id'"),
    ("item_id,1000,64,1", "tables.csv:3: table name 'item_id' used twice"),
    ("user_id,1000,64,1,7", "tables.csv:2: 1 more cell(s) than header columns"),
]


@pytest.mark.parametrize("row,message", BAD_ROWS)
def test_bad_rows_are_one_line_errors_naming_the_row(tmp_path, row, message):
    tables_csv = write_csv(tmp_path / "tables.csv", [row, "item_id,1000,8,1"])
    assert_raises_one_line("shard_tables", ["--tables", tables_csv, "--max_mem", 1, "--alg", "dim_greedy",
                                            "--out", tmp_path / "p.json"], message.replace("tables.csv", str(tables_csv)))
    assert not (tmp_path / "p.json").exists()


def test_bad_input_as_a_script_and_other_errors(tmp_path, models_dir):
    tables_csv = write_csv(tmp_path / "tables.csv", ["user_id,1000,30,25"])
    res = run("shard_tables.py", "--tables", tables_csv, "--alg", "dim_greedy", "--out", tmp_path / "p.json")
    assert_one_line_error(res, f"{tables_csv}:2: table 'user_id': dim must be a positive multiple of 4")
    good = write_csv(tmp_path / "good.csv", ROWS)
    assert_raises_one_line("shard_tables", ["--tables", good, "--out", tmp_path / "p.json"],
                           "neuroshard needs the compute, forward and backward cost models")
    assert_raises_one_line("shard_tables", ["--tables", good, "--models_dir", models_dir, "--ndevices", 2],
                           "comm_2_fw.pt")
    assert_raises_one_line("shard_tables", ["--tables", write_csv(tmp_path / "h.csv", ["a,1,4,1"], "name,rows,dim"),
                                            "--alg", "random"], "missing pooling_factor")
    assert_raises_one_line("shard_tables", ["--tables", good, "--alg", "nope"], "unknown sharding algorithm 'nope'")
    assert_raises_one_line("shard_tables", ["--tables", good, "--out", tmp_path / "p.json", "--torchrec_out",
                                            tmp_path / "p.pt"], "would overwrite --out")
    assert_raises_one_line("shard_tables", ["--tables", good, "--alg", "random", "--max_mem", 0.001],
                           "does not fit a device of 0.001 GB")


def test_memory_torchrec_counts_what_torchrec_counts(tmp_path):
    # 16M x 4 fp32 = 256,000,000 B on devices of 0.26 GB (279,172,874 B): the weights fit, TorchRec's count
    # (weights + buffers, within 90% of the device) does not. Kept whole (a dim-4 table cannot be split
    # anyway), it is refused; free, it goes row-wise (128,000,000 B of weights a rank), as TorchRec's planner
    # would have it
    from neuroshard.types.errors import OutOfMemoryError

    tables_csv = write_csv(tmp_path / "tables.csv", ["big,16000000,4,1,1", "small,1000,8,1,0"],
                           header=HEADER + ",whole")
    args = ["--tables", str(tables_csv), "--ndevices", "2", "--max_mem", "0.26", "--alg", "size_greedy"]
    assert load_tool("shard_tables").main(args + ["--out", str(tmp_path / "w.json")]) == 0
    with pytest.raises(OutOfMemoryError, match=r"cannot place 2 tables on 2 devices of 0.26 GB each \(the "
                                               r"topology's, 10% reserved; torchrec count\).* the largest \(big\) "
                                               r"0.2384 GB; 'big' could not be placed"):
        load_tool("shard_tables").main(args + ["--memory", "torchrec", "--out", str(tmp_path / "t.json")])
    args[1] = str(write_csv(tmp_path / "free.csv", ["big,16000000,4,1", "small,1000,8,1"]))
    assert load_tool("shard_tables").main(args + ["--memory", "torchrec", "--out", str(tmp_path / "t.json")]) == 0
    (rec,) = read_plans(tmp_path / "t.json")
    assert [(s.table, s.kind, s.ranks) for s in rec.plan.spread] == [(0, "row_wise", (0, 1))]
    args[1], args[5] = str(tables_csv), "0.3"  # 322,122,547 B: fits whole in TorchRec's count too
    assert load_tool("shard_tables").main(args + ["--memory", "torchrec", "--out", str(tmp_path / "t.json")]) == 0
    (rec,) = read_plans(tmp_path / "t.json")
    assert rec.plan.ndevices == 2 and not rec.plan.spread


def test_calibration_scales_the_models_the_plan_is_costed_with(tmp_path, models_dir):
    from neuroshard.planner.simulator import simulate
    from tests.eval.test_drift import _write

    _write(tmp_path, 2.0, 1.5, 0.5)
    tables_csv = write_csv(tmp_path / "tables.csv", ROWS)
    common = ["--tables", tables_csv, "--ndevices", 4, "--max_mem", 1, "--models_dir", models_dir,
              "--alg", "dim_greedy"]  # a plan that does not depend on the models: only its estimate does
    res = run("shard_tables.py", *common, "--out", tmp_path / "plain.json")
    assert res.returncode == 0, res.stderr
    res = run("shard_tables.py", *common, "--calibration", tmp_path, "--out", tmp_path / "calib.json")
    assert res.returncode == 0, res.stderr
    assert "compute 2.000x, fw 1.500x, bw 0.500x" in res.stderr
    (plain,), (calib,) = read_plans(tmp_path / "plain.json"), read_plans(tmp_path / "calib.json")
    assert calib.plan == plain.plan
    tables = [ShardTable(i, i, TableConfig(int(r.split(",")[1]), float(r.split(",")[3]), DEFAULT_BINS,
                                           int(r.split(",")[2]))) for i, r in enumerate(ROWS)]
    hand = _hand_models(4)
    for rec, models in ((plain, hand), (calib, hand.scaled(2.0, 1.5, 0.5))):
        est = simulate(tables, rec.plan, models, Problem(rec.plan.ndevices, 1.0))
        assert rec.estimate.compute == pytest.approx(est.compute, rel=1e-4)
        assert rec.estimate.fw_comm == pytest.approx(est.fw_comm, rel=1e-4)
    assert calib.estimate.compute == pytest.approx([2 * c for c in plain.estimate.compute], rel=1e-4)
    assert_raises_one_line("shard_tables", ["--tables", tables_csv, "--alg", "random", "--calibration", tmp_path],
                           "--calibration: scales the cost models")
    assert_raises_one_line("shard_tables", [*map(str, common), "--calibration", tmp_path / "nope"],
                           "nope: calibration directory not found")


CONSTRAINED = ["user_id,2000000,128,25,1,,", "item_id,500000,64,8,,1;2,", "category,1000,16,1,,,g",
               "city,50000,32,2,,,g", "query,800000,128,12,0,3,", "ad_id,300000,64,4,,,"]


@pytest.mark.parametrize("memory", ["weights", "torchrec"])
def test_constraint_columns_are_kept_by_every_algorithm(tmp_path, models_dir, memory):
    # user_id (0.95 GB) whole; item_id on devices 1 and 2; category and city together; query on device 3;
    # devices of 2, 2, 1 and 2 GB
    tables_csv = write_csv(tmp_path / "tables.csv", CONSTRAINED, header=HEADER + ",whole,ranks,group")
    user = [r.split(",") for r in CONSTRAINED]
    tables = [ShardTable(i, i, TableConfig(int(r[1]), float(r[3]), DEFAULT_BINS, int(r[2])))
              for i, r in enumerate(user)]
    for alg in ("neuroshard", "neuroshard_plus", "size_greedy", "random"):
        out = tmp_path / f"{alg}.json"
        assert load_tool("shard_tables").main(["--tables", str(tables_csv), "--ndevices", "4", "--max_mem",
                                               "2,2,1,2", "--models_dir", str(models_dir), "--alg", alg,
                                               "--memory", memory, "--max_length", "3", "--out", str(out)]) == 0
        (rec,) = read_plans(out)
        cons = TableConstraints(whole=(0,), devices=((1, (1, 2)), (4, (3,))), colocate=((2, 3),))
        validate_plan(tables, rec.plan, Problem(4, (2.0, 2.0, 1.0, 2.0), constraints=cons))
        pieces = plan_pieces(tables, rec.plan)
        assert len(pieces[0]) == 1 and pieces[2][0].device == pieces[3][0].device
        assert {p.device for p in pieces[4]} == {3}


@pytest.mark.parametrize("row,message", [
    ("user_id,1000,64,1,2,,", "tables.csv:2: table 'user_id': whole must be 0 or 1, got '2'"),
    ("user_id,1000,64,1,,a;b,", "tables.csv:2: table 'user_id': ranks must be device indices (\"0;2\"), got "
                                "'a;b'"),
    ("user_id,1000,64,1,,7,", "table 'user_id': rank 7 is not among the 4 devices"),
    ("user_id,1000,64,1,,,solo", "group 'solo' has one table ('user_id')"),
])
def test_bad_constraint_columns_are_one_line_errors(tmp_path, row, message):
    tables_csv = write_csv(tmp_path / "tables.csv", [row, "item_id,1000,8,1,,,"],
                           header=HEADER + ",whole,ranks,group")
    argv = ["--tables", tables_csv, "--max_mem", 1, "--alg", "dim_greedy", "--out", tmp_path / "p.json"]
    assert_raises_one_line("shard_tables", argv, message.replace("tables.csv", str(tables_csv)))
