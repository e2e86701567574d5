"""train_torchrec_cost_model.py end to end on a small workspace: a fit on one collection and a second one, and
which tasks the fit holds out when the second collection trained the first one's task file again."""

import json

import pytest

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.dataset import write_dataset
from neuroshard.formats.task_file import write_tasks
from neuroshard.planner.costs.cost_models import save_model
from neuroshard.types.plan import Plan
from neuroshard.types.tables import Task
from tests.scripts import run_script
from tests.test_bad_inputs import _models

PLANS = (Plan((), ((0, 1), (2,))), Plan((), ((0,), (1, 2))), Plan((), ((1,), (0, 2))))


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A dataset of 6 tables, 8 tasks of 3, models for 2 ranks, and two collections of table-wise plans: 7a's
    (every task, 3 plans each) and one of tasks 4-7 again, trained 1.5x as slow."""
    d = tmp_path_factory.mktemp("trfit")
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=6, batch_size=64, max_rows=5000),
                                              progress=False)
    write_dataset(d / "ds", configs, idx, off)
    configs, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=6, batch_size=64, max_rows=5000, seed=1),
                                              progress=False)
    write_dataset(d / "ds2", configs, idx, off)  # a second dataset: other tables under the same ids
    tasks = [Task(tuple((t + k) % 6 for k in range(3)), (8, 16, 8)) for t in range(8)]
    write_tasks(d / "tasks.txt", tasks)
    write_tasks(d / "tasks_copy.txt", tasks)  # the same tasks under another name: another task file
    write_tasks(d / "tasks_check.txt", tasks[:2])
    m = _models(2)
    for name, net in (("compute.pt", m.compute), ("fw.pt", m.fw), ("bw.pt", m.bw)):
        save_model(net, d / name)

    def rows(task_ids, slow):
        return [{"task": t, "alg": f"random_split[{k}]", "plan": p.to_json(),
                 "step_ms": [slow * (10.0 + t + 2 * k), slow * (10.5 + t + 2 * k)]}
                for t in task_ids for k, p in enumerate(PLANS)]

    (d / "first.json").write_text(json.dumps(rows(range(8), 1.0)))
    (d / "again.json").write_text(json.dumps(rows(range(4, 8), 1.5)))
    (d / "check").mkdir()  # evaluation plans trained on the second dataset, as eval_torchrec.py writes them
    (d / "check" / "results.json").write_text(json.dumps(rows(range(2), 1.0)))
    (d / "check" / "config.json").write_text(json.dumps({"data_dir": str(d / "ds2")}))
    return d


def fit_argv(ws, out, extra_tasks, *more):
    return ["--data_dir", ws / "ds", "--task_path", ws / "tasks.txt", "--results", ws / "first.json",
            "--compute_model", ws / "compute.pt", "--fw_comm_model", ws / "fw.pt", "--bw_comm_model", ws / "bw.pt",
            "--ndevices", "2", "--out_path", ws / out, "--extra_results", ws / "again.json", "--extra_data_dir",
            ws / "ds", "--extra_task_path", ws / extra_tasks, *more]


def fit(ws, out, extra_tasks, *more):
    res = run_script("train_torchrec_cost_model.py", fit_argv(ws, out, extra_tasks, *more))
    assert res.returncode == 0, res.stderr
    return res, json.loads((ws / out).with_name((ws / out).stem + "_metrics.json").read_text())


def test_a_collection_of_the_same_task_file_shares_its_task_numbers(ws):
    """Tasks 4-7 trained again keep numbers 4-7: the fit holds out a quarter of the 8 tasks (2) of each
    collection, and the second's quarter of its 4 (1) counts the shared tasks already held out, so no plan of
    a held-out task is fitted in either collection."""
    res, metrics = fit(ws, "same/model.json", "tasks.txt")
    held = metrics["test_tasks"]
    assert len(held) == 2 and max(held) < 8
    assert "36 plans of 8 tasks" in res.stdout and len(metrics["speeds"]) == 2


def test_another_task_file_is_numbered_apart(ws):
    """The same tasks under another file name are other tasks to the fit: numbered 8-11, one of them held out."""
    res, metrics = fit(ws, "apart/model.json", "tasks_copy.txt")
    held = metrics["test_tasks"]
    assert len([t for t in held if t < 8]) == 2 and len([t for t in held if t >= 8]) == 1
    assert "36 plans of 12 tasks" in res.stdout


def test_a_check_prices_its_plans_on_the_dataset_they_were_trained_on(ws):
    """The check's config.json says ds2: checked on --data_dir's tables (the same ids, other tables) it is a
    one-line error naming the flag to give; with --check_data_dir ds2 its 6 plans are checked."""
    check = ["--check_results", ws / "check" / "results.json", "--check_task_path", ws / "tasks_check.txt"]
    res = run_script("train_torchrec_cost_model.py", fit_argv(ws, "c1/model.json", "tasks.txt", *check))
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "--data_dir" in res.stderr and f"give --check_data_dir {ws / 'ds2'}" in res.stderr
    _, metrics = fit(ws, "c2/model.json", "tasks.txt", *check, "--check_data_dir", ws / "ds2")
    assert metrics["check"]["plans"] == 6 and set(metrics["check"]["by_alg"]) == {f"random_split[{k}]"
                                                                                   for k in range(3)}
