"""The dataset and task tools end to end, including bad input.

Bad input must give one line `error: ...` on stderr, a non-zero exit and no
traceback. Each tool runs as its command line runs it (its `main` through
`run_main`, in this process: `tests.scripts`) for the main paths and one bad
input each; the other bad inputs call the tool's `main` and check for a
one-line NeuroShardError, which `run_main` turns into that one line.
"""

import importlib.util
import json
import math
import shutil

import numpy as np
import pytest
import torch

from neuroshard.problem import Problem
from neuroshard.types.errors import InputError
from tests.data.test_public import check_tiny_configs, write_tiny_public
from tests.data.test_stats import REFERENCE
from tests.scripts import run_script, script_path


def run(tool, *args, cwd=None):
    """A tool or step script run as its command line runs it (`tests.scripts.run_script`)."""
    return run_script(tool, args, cwd)


def load_tool(name):
    spec = importlib.util.spec_from_file_location(f"tool_{name}", script_path(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_raises_one_line(tool, argv, *fragments):
    from neuroshard.types.errors import NeuroShardError

    with pytest.raises(NeuroShardError) as err:
        load_tool(tool).main([str(a) for a in argv])
    msg = str(err.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, msg


def assert_one_line_error(res, *fragments):
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    res = run("gen_dlrm_data.py", "--synthetic", "--num_tables", 8, "--batch_size", 128,
              "--max_rows", 20000, "--seed", 3, "--out-dir", out, "--no_progress")
    assert res.returncode == 0, res.stderr
    return out


def test_gen_dlrm_data_synthetic(synthetic_dir):
    cfg = json.loads((synthetic_dir / "config.json").read_text())
    assert cfg["source"] == "synthetic" and cfg["num_tables"] == 8 and cfg["seed"] == 3
    configs = json.loads((synthetic_dir / "table_configs.json").read_text())
    assert len(configs) == 8
    assert set(configs[0]) == {"row", "pooling_factor", "row_lookups"} | {f"bin_{j}" for j in range(17)}
    # where the lookups fall over the rows, from the ids: 64 ranges' shares of them
    assert len(configs[0]["row_lookups"]) == 64 and sum(configs[0]["row_lookups"]) == pytest.approx(1, abs=1e-3)
    data = torch.load(synthetic_dir / "data.pt")
    assert [len(o) for o in data["offsets"]] == [129] * 8


def test_help_states_defaults():
    res = run("gen_dlrm_data.py", "--help")
    assert res.returncode == 0
    for text in ("--num_tables", "(default: 150)", "(default: 4096)", "(default: 1000000)", "--out-dir"):
        assert text in res.stdout


def test_gen_dlrm_data_public(tmp_path):
    src = write_tiny_public(tmp_path / "tiny.pt.gz")
    res = run("gen_dlrm_data.py", "--data", src, "--out_dir", tmp_path / "ds", "--no_progress")
    assert res.returncode == 0, res.stderr
    from neuroshard.formats.dataset import read_dataset

    ds = read_dataset(tmp_path / "ds")
    check_tiny_configs(ds.configs)
    assert ds.offsets[2].tolist() == [0, 10, 20, 30, 43]
    # the uncompressed file, in-process
    load_tool("gen_dlrm_data").main(["--data", str(write_tiny_public(tmp_path / "tiny.pt")),
                                     "--out_dir", str(tmp_path / "ds2"), "--no_progress"])
    assert (tmp_path / "ds2" / "data.pt").read_bytes() == (tmp_path / "ds" / "data.pt").read_bytes()
    assert json.loads((tmp_path / "ds2" / "config.json").read_text())["source"] == "public"


def test_gen_dlrm_data_bad_inputs(tmp_path):
    assert_one_line_error(run("gen_dlrm_data.py", "--data", tmp_path / "missing.pt"), "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_text("not a torch file\n")
    out = tmp_path / "o"
    assert_raises_one_line("gen_dlrm_data", ["--data", junk, "--out_dir", out], "junk.pt")
    two = tmp_path / "two.pt"
    torch.save((torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)), two)
    assert_raises_one_line("gen_dlrm_data", ["--data", two, "--out_dir", out], "two.pt", "expected a tuple")
    assert_raises_one_line("gen_dlrm_data", ["--synthetic", "--num_tables", 0, "--out_dir", out],
                           "--num_tables")
    with pytest.raises(SystemExit) as err:  # neither --data nor --synthetic: argparse usage error
        load_tool("gen_dlrm_data").main(["--out_dir", str(out)])
    assert err.value.code == 2
    assert not out.exists()


def test_gen_tasks(synthetic_dir, tmp_path):
    out = tmp_path / "tasks"
    res = run("gen_tasks.py", "--data_dir", synthetic_dir, "--out_dir", out, "--data_size", 30,
              "--T_range", "2,6", "--max_mem", 0.05, "--ndevices", 2, "--max_dim", 32, "--seed", 1)
    assert res.returncode == 0, res.stderr
    from neuroshard.formats.dataset import read_table_configs
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.types.tables import size_gb

    configs = read_table_configs(synthetic_dir / "table_configs.json")
    tasks = read_tasks(out / "data.txt", num_tables=len(configs))
    assert len(tasks) == 30 and all(2 <= len(t) <= 6 for t in tasks)
    for t in tasks:
        sizes = [size_gb(configs[i].row, d) for i, d in zip(t.table_ids, t.dims)]
        assert set(t.dims) <= {32, 16, 8, 4} and max(sizes) <= 0.05 and sum(sizes) <= 0.1
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["T_range"] == [2, 6] and cfg["problem"]["ndevices"] == 2 and cfg["data_size"] == 30


def test_gen_tasks_bad_inputs(synthetic_dir, tmp_path):
    out = tmp_path / "t"
    assert_one_line_error(run("gen_tasks.py", "--data_dir", synthetic_dir, "--out_dir", out,
                              "--T_range", "a,b"), "--T_range")
    assert_raises_one_line("gen_tasks", ["--data_dir", tmp_path / "nope", "--out_dir", out],
                           "table_configs.json")
    assert_raises_one_line("gen_tasks", ["--data_dir", synthetic_dir, "--out_dir", out,
                                         "--T_range", "6,2"], "--T_range")
    assert_raises_one_line("gen_tasks", ["--data_dir", synthetic_dir, "--out_dir", out,
                                         "--max_dim", 100], "--max_dim")
    assert_raises_one_line("gen_tasks", ["--data_dir", synthetic_dir, "--out_dir", out,
                                         "--max_mem", 1e-6, "--max_tries", 20], "after 20 tries")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "table_configs.json").write_text('[{"row": 10, "pooling_factor": "x"}]')
    assert_raises_one_line("gen_tasks", ["--data_dir", bad, "--out_dir", out],
                           "table_configs.json", "table 0")
    assert not out.exists()


def test_dataset_stats(synthetic_dir, tmp_path):
    res = run("dataset_stats.py", synthetic_dir, "--published", REFERENCE, "--json", tmp_path / "s.json")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for text in ("Locality stats after processing 1 batches of size 128", "Avg # of unique cols:",
                 "Histogram of col sizes:", "Ratio of index distribution at different column sizes:",
                 "(32768+:", "Tables: 8", "pooling factor:", "Reference: fbgemm_t856_bs65536.pt",
                 "L1 distance"):
        assert text in out
    js = json.loads((tmp_path / "s.json").read_text())
    assert js["tables"]["num_tables"] == 8 and len(js["stats"]["col_hist"]) == 17
    assert 0 <= js["reference"]["col_hist_l1"] <= 2 and js["reference"]["block"] == 0


def test_dataset_stats_bad_inputs(synthetic_dir, tmp_path):
    bad_ref = tmp_path / "ref.txt"
    bad_ref.write_text("x\nLocality stats after processing 1 batches of size 4\nAvg # of indices: lots\n")
    assert_one_line_error(run("dataset_stats.py", synthetic_dir, "--published", bad_ref),
                          "ref.txt:3", "lots")
    assert_raises_one_line("dataset_stats", [tmp_path / "none"], "none")
    if REFERENCE.exists():
        assert_raises_one_line("dataset_stats", [synthetic_dir, "--published", REFERENCE,
                                                 "--published_block", 99], "block 99")


def test_calibrate_band_records_the_plan_error_in_the_forward_checkpoint(tmp_path):
    from neuroshard.formats.dataset import write_table_configs
    from neuroshard.formats.plan_file import write_plans
    from neuroshard.formats.task_file import write_tasks
    from neuroshard.planner.costs.cost_models import CostModels, save_model
    from neuroshard.planner.costs.nets import linear_compute_model
    from neuroshard.planner.costs.uncertainty import plan_normals
    from neuroshard.planner.simulator import simulate
    from neuroshard.types.costs import CostBreakdown
    from neuroshard.types.plan import Plan
    from neuroshard.types.records import PlanRecord
    from neuroshard.types.tables import TableConfig, Task
    from tests.planner.test_simulator import diagonal_comm_model

    configs = [TableConfig(100 + i, 1.0, tuple([0.0] * 16 + [1.0])) for i in range(4)]
    write_table_configs(tmp_path / "table_configs.json", configs)
    tasks = [Task((0, 1), (8, 16)), Task((2, 3), (16, 8))]
    write_tasks(tmp_path / "train.txt", tasks)
    write_tasks(tmp_path / "eval.txt", [Task((1, 2), (8, 8))])
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    save_model(linear_compute_model(0.01, 0.5), models_dir / "compute.pt")
    save_model(diagonal_comm_model("fw", 2, 0.01, 0.5, 0.2), models_dir / "comm_2_fw.pt", extra={"kept": 1})
    save_model(diagonal_comm_model("bw", 2, 0.02, 0.0, 0.1), models_dir / "comm_2_bw.pt")
    models = CostModels.load(models_dir, 2)
    plans = [Plan((), ((0,), (1,))), Plan((), ((1,), (0,)))]
    bds = [simulate(t.tables(configs), p, models, Problem(p.ndevices, 1.0)) for t, p in zip(tasks, plans)]
    est = [bd.cost for bd in bds]
    # measured 1.2x the estimates (each rank's compute too: no per-rank error), one repeat 10% above that:
    # 3 of 4 on the point after dividing out 1.2
    got = [[1.2 * est[0], 1.2 * est[0]], [1.2 * est[1], 1.32 * est[1]]]
    write_plans(tmp_path / "results.json", [
        PlanRecord(i, "neuroshard", plan=p, repeat_costs=c,
                   measured=CostBreakdown([1.2 * x for x in bd.compute], [1.0, 1.0], [1.0, 1.0]))
        for i, (p, c, bd) in enumerate(zip(plans, got, bds))])
    argv = ["--data_dir", tmp_path, "--task_path", tmp_path / "train.txt", "--eval_task_path",
            tmp_path / "eval.txt", "--results", tmp_path / "results.json", "--models", models_dir,
            "--ndevices", 2, "--max_mem", 1.0]
    assert load_tool("calibrate_band").main([str(a) for a in argv]) == 0
    report = json.loads((models_dir / "plan_error_2.json").read_text())["plan_error"]
    q90 = float(np.quantile(plan_normals(), 0.9))
    assert report["measurements"] == 4 and report["speed"] == pytest.approx(1.2)
    assert report["rank"] == pytest.approx(0.0, abs=1e-9) and report["ranks"] == 4
    assert report["coverage_before"] == pytest.approx(0.75) and report["coverage_after"] == 1.0
    assert report["sd"] == pytest.approx(math.ceil(0.1 / q90 / 0.0025 - 1e-9) * 0.0025)
    again = CostModels.load(models_dir, 2)
    assert again.fw.checkpoint_extra["kept"] == 1 and again.fw.checkpoint_extra["plan_error"] == report
    assert again.noise_model.plan == report["sd"] and again.noise_model.rank == report["rank"]
    wide = simulate(tasks[0].tables(configs), plans[0], again, Problem(plans[0].ndevices, 1.0))
    assert wide.cost == pytest.approx(est[0]) and wide.spread.q90 > est[0] > wide.spread.q10
    # run again: calibrated afresh (not on top of the recorded error), the same figure
    assert load_tool("calibrate_band").main([str(a) for a in argv]) == 0
    assert json.loads((models_dir / "plan_error_2.json").read_text())["plan_error"] == report
    # taken under held-out models (a copy of the same here: the same figure), written into --models, and said
    shutil.copytree(models_dir, tmp_path / "heldout")
    assert load_tool("calibrate_band").main([str(a) for a in argv + ["--heldout_models", tmp_path / "heldout"]]) == 0
    side = json.loads((models_dir / "plan_error_2.json").read_text())
    assert side["plan_error"] == report and side["plan_level_heldout"] is True
    assert side["rank_error_models"] == str(tmp_path / "heldout")
    assert CostModels.load(models_dir, 2).fw.checkpoint_extra["plan_error"] == report
    # an evaluation task among the training tasks, and a malformed recorded error, are one-line errors
    write_tasks(tmp_path / "eval.txt", [tasks[1]])
    assert_raises_one_line("calibrate_band", argv, "evaluation tasks", "lines [2]")
    assert_raises_one_line("calibrate_band", [*argv[:8], "--models", tmp_path / "nowhere", *argv[10:]],
                           "nowhere", "models directory not found")
    ckpt = torch.load(models_dir / "comm_2_fw.pt", weights_only=False)
    ckpt["extra"]["plan_error"] = {"sd": 2.0}
    torch.save(ckpt, models_dir / "comm_2_fw.pt")
    with pytest.raises(InputError, match="malformed checkpoint: \"plan_error\" must hold"):
        CostModels.load(models_dir, 2)


def write_summary(path, gains, **kw):
    from tests.eval.test_pooling import summary

    path.mkdir(parents=True, exist_ok=True)
    (path / "summary.json").write_text(json.dumps(summary(gains, **kw).to_json()))
    return path


def test_combine_runs_pools_the_runs_verdicts(tmp_path):
    a = write_summary(tmp_path / "a" / "hw", {"autoshard": (0.04, 0.01), "torchrec": (0.08, 0.01)}).parent
    b = write_summary(tmp_path / "b", {"autoshard": (0.02, 0.01), "torchrec": (0.06, 0.01)})
    res = run("combine_runs.py", a, b / "summary.json", "--out_path", tmp_path / "pooled.json")
    assert res.returncode == 0, res.stderr
    lines = {line.split(" | ")[0].strip("| "): line for line in res.stdout.splitlines()}
    # autoshard: 0.04 and 0.02 with se 0.01 -> Q 2, tau2 1e-4, random effects +3.0% [+1.0%, +5.0%] (pooling's test)
    assert "+3.0% [+1.0%, +5.0%]" in lines["autoshard"] and "**beats**" in lines["autoshard"]
    assert "Q 2.00 (p 0.16), I² 50%" in lines["autoshard"] and "2.8%" in lines["autoshard"]
    out = json.loads((tmp_path / "pooled.json").read_text())
    assert out["runs"] == [str(a / "hw" / "summary.json"), str(b / "summary.json")] and out["reference"] == "neuroshard"
    auto = next(r for r in out["rows"] if r["alg"] == "autoshard")
    assert auto["pooled"]["mean"] == pytest.approx(0.03) and auto["pooled"]["tau2"] == pytest.approx(1e-4)
    assert_one_line_error(run("combine_runs.py", a), "RUN", "two or more runs")


def test_combine_runs_heads_the_ablation_with_the_runs_that_have_it(tmp_path):
    from tests.eval.test_pooling import Z

    runs = []
    for seed, (name, gain) in enumerate((("r0", 0.04), ("r1", None), ("r2", 0.02))):  # r1: no report, no ablation
        write_summary(tmp_path / name / "hw", {"autoshard": (0.03 + seed / 100, 0.01)})
        ablation = None if gain is None else {"effects": [{"name": "search", "base": "a", "other": "b", "gain": gain,
                                                           "gain_lo": gain - Z * 0.01, "gain_hi": gain + Z * 0.01}]}
        (tmp_path / name / "config.json").write_text(json.dumps({"seed": seed, "ablation": ablation}))
        runs.append(tmp_path / name)
    res = run("combine_runs.py", *runs)
    assert res.returncode == 0, res.stderr
    text = res.stdout.split("The cost-model ablation's effects", 1)[1]
    assert f"(without {runs[1]}: no ablation figures)" in text.splitlines()[0]
    header, _, row = [line for line in text.splitlines() if line.startswith("|")]
    assert header == f"| effect | {runs[0]} | {runs[2]} | pooled (random effects) | verdict |"
    # 0.04 and 0.02 with se 0.01 pool to +3.0% [+1.0%, +5.0%] (pooling's test)
    assert row.startswith("| search (`a` vs `b`) | +4.0% [") and "| +3.0% [+1.0%, +5.0%] | **beats** |" in row


def test_combine_runs_bad_inputs(tmp_path):
    a = write_summary(tmp_path / "a", {"autoshard": (0.04, 0.01)})
    sim = write_summary(tmp_path / "sim", {"autoshard": (0.04, 0.02)}, cost="estimated_cost")
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "bad.json").write_text("{\"tasks\": 3}")
    nan = write_summary(tmp_path / "nan", {"autoshard": (float("nan"), 0.01)})
    cases = [([a, tmp_path / "missing"], ["missing", "not found"]),
             ([a, empty], ["empty", "no hw/summary.json or summary.json"]),
             ([a, a / "summary.json"], ["the same evaluation as"]),
             ([a, sim], ["its cost is 'estimated_cost'", "do not compare the same thing"]),
             ([a, tmp_path / "bad.json"], ["bad.json", "not an evaluation summary"]),
             ([a, nan], ["autoshard's gain nan", "cannot be pooled"]),
             ([a, sim, "--out_path", tmp_path], ["--out_path", "is a directory"])]
    for argv, fragments in cases:
        assert_raises_one_line("combine_runs", argv, *fragments)


def test_combine_runs_pools_the_calibrated_plan_cost_error(tmp_path):
    from dataclasses import replace

    from neuroshard.formats.plan_file import write_plans
    from neuroshard.types.plan import Plan, Spread
    from tests.eval.test_round_calibration import _measured, _rescaled

    est = ((1.0, 1.0), (0.5, 0.5), (0.5, 0.5))
    a = _measured(7, "anchor:a", est, [((1.2, 1.2), (0.6, 0.6), (0.6, 0.6)), est])  # rounds at 1.2x, 1.0x
    b = _measured(8, "anchor:b", est, [est, est])  # rounds at 1.0x
    rows = Plan((), ((0,), ()), (Spread(1, "row_wise", (0, 1)),))
    # run 1: a row-wise plan measured 3.96, 3.0 (moved estimates 3.6, 3.0; d = 0.3 / 3.15); run 2: a table-wise
    # plan measured at its estimate (errors 0, d = 0) and a row-wise one at 2.5 twice (errors 0.2, d = 0)
    runs = {"r1": ([replace(_rescaled("torchrec_full", 0, [3.96, 3.0]), plan=rows)], [a, a]),
            "r2": ([_rescaled("neuroshard", 0, [3.0, 3.0]), replace(_rescaled("torchrec_full", 1, [2.5, 2.5]),
                                                                      plan=rows)], [b, b])}
    for seed, (name, (records, anchors)) in enumerate(runs.items()):
        hw = write_summary(tmp_path / name / "hw", {"torchrec_full": (0.04 - 0.02 * seed, 0.01)})
        (hw / "config.json").write_text(json.dumps({"seed": seed}))
        write_plans(hw / "results.json", records)
        write_plans(hw / "round_anchors.json", anchors)
    res = run("combine_runs.py", tmp_path / "r1", tmp_path / "r2", "--accuracy", "--out_path", tmp_path / "acc.json")
    assert res.returncode == 0, res.stderr
    out = json.loads((tmp_path / "acc.json").read_text())["accuracy"]
    every, new = out["every plan"]["pooled"], out["with the new types"]["pooled"]
    assert every["mape"] == pytest.approx((0.36 / 3.96 + 0.4) / 6) and every["plans"] == 3
    assert every["floor"] == pytest.approx(0.3 / 3.15 / 3 / 2 ** 0.5)
    assert new["mape"] == pytest.approx((0.36 / 3.96 + 0.4) / 4) and new["plans"] == 2
    assert new["floor"] == pytest.approx(0.3 / 3.15 / 2 / 2 ** 0.5)
    # run 2 alone has no floor (its plans' rounds agree): its cell has no ratio
    assert out["with the new types"]["runs"][1]["floor"] == 0.0
    [line] = [x for x in res.stdout.splitlines() if x.startswith("| with the new types")]
    assert "| 20.0% / 0.0% = -, 1 plans |" in line and "**12.3% / 3.4% = 3.64x (3.64-3.64), 2 plans**" in line
    # where the new-type plans' error sits, each run's parts moved by its own rounds: run 1's at 1.32 / 1.2 and
    # 1.0 / 1.0 of the estimate, run 2's at 2.5 / 3.0 twice (its table-wise plan's at 1.0, in brackets)
    assert "| compute | 1.05x | 0.83x (1.00x) |" in res.stdout
    assert "| compute by rank | 1.05, 1.05 | 0.83, 0.83 |" in res.stdout
    parts = json.loads((tmp_path / "acc.json").read_text())["new_type_parts"]
    assert parts[0]["new_types"]["fw_alltoall"] == pytest.approx(1.05) and parts[0]["others"] == {}
    # bad inputs: a run without its anchors, the simulator's runs, TorchRec training runs
    (tmp_path / "r2" / "hw" / "round_anchors.json").unlink()
    assert_raises_one_line("combine_runs", [tmp_path / "r1", tmp_path / "r2", "--accuracy"],
                           "round_anchors.json", "not found: --accuracy needs")
    assert_raises_one_line("combine_runs", [tmp_path / "r1", tmp_path / "r2", "--accuracy", "--sim"],
                           "--accuracy", "leave out --sim")


def test_combine_runs_pools_torchrec_training_runs(tmp_path):
    from tests.eval.test_pooling import training_summary

    runs = []
    for name, seed, gain in (("a", 0, 0.04), ("b", 1, 0.02)):
        path = tmp_path / name / "torchrec"
        path.mkdir(parents=True)
        (path / "summary.json").write_text(json.dumps(training_summary({"torchrec_full": (gain, 0.01)})))
        (path / "config.json").write_text(json.dumps({"seed": seed, "repeats": 4}))
        runs.append(path)
    res = run("combine_runs.py", *runs, "--out_path", tmp_path / "pooled.json")
    assert res.returncode == 0, res.stderr
    assert "step time over neuroshard[torchrec]'s, less 1" in res.stdout
    assert "| neuroshard[torchrec] vs |" in res.stdout
    [line] = [x for x in res.stdout.splitlines() if x.startswith("| torchrec_full")]
    # ratios 1.04 and 1.02 with se 0.01: +3.0% [+1.0%, +5.0%] (as the evaluations' pooling)
    assert "+3.0% [+1.0%, +5.0%]" in line and "**beats**" in line
    out = json.loads((tmp_path / "pooled.json").read_text())
    assert out["training"] is True and out["reference"] == "neuroshard[torchrec]" and out["ablation"] == []
    assert [r["repeats"] for r in out["rows"][0]["runs"]] == [4, 4]
    evaluation = write_summary(tmp_path / "e", {"torchrec_full": (0.04, 0.01)})
    assert_raises_one_line("combine_runs", [runs[0], evaluation], "is a plan evaluation", "do not compare the same")
    assert_raises_one_line("combine_runs", [*runs, "--accuracy"], "--accuracy", "not TorchRec training runs")


def test_combine_runs_warns_about_runs_of_one_seed(tmp_path, capsys):
    runs = [write_summary(tmp_path / n, {"autoshard": (g, 0.01)}) for n, g in (("a", 0.04), ("b", 0.02))]
    for r in runs:
        (r / "config.json").write_text(json.dumps({"seed": 1}))
    assert load_tool("combine_runs").main([str(r) for r in runs]) == 0
    err = capsys.readouterr().err
    assert "were both made with seed 1" in err and "counts them as independent" in err
