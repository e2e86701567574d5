"""Fit the TorchRec runtime cost model (`--runtime torchrec`) to plans trained in TorchRec.

    python train_torchrec_cost_model.py --data_dir results/quick/dataset \
        --task_path results/quick/train_tasks/data.txt --results results/quick/torchrec_data/results.json \
        --compute_model results/quick/models/onpolicy/compute.pt \
        --fw_comm_model results/quick/models/onpolicy/comm_4_fw.pt --bw_comm_model results/quick/models/onpolicy/comm_4_bw.pt \
        --ndevices 4 --out_path results/quick/models/onpolicy/torchrec_runtime_4.json

Reads collect_torchrec_cost_data.py's results.json (the plans of --task_path's
tasks and their TorchRec step times), computes each plan's terms
(neuroshard/planner/costs/runtime_model.py: per sharding-type group the slowest
rank's kernels by the compute model, ids received, outputs sent; the number of
groups and of the kernels the ranks run; the totals over the ranks), fits
their non-negative weights (least squares of the relative error), first
without --test_share of the tasks to report the error on unseen tasks' plans,
then on all. --extra_results (with --extra_data_dir and --extra_task_path)
adds other collections' plans to the fit (comma lists, one entry per
collection), e.g. of training tasks of the second dataset, whose tables are
larger and hotter than the first's, or NeuroShard's own plans searched with a
first fit (collect_torchrec_cost_data.py --runtime torchrec: the plans a search
picks are where a model's errors flatter them most); trained at another hour,
each ran at another speed, so each gets a speed of its own, fitted with the
weights (the model prices plans at --results' speed). Writes
the model to --out_path and the fit's report beside it (<out_path
stem>_metrics.json).
--check_results also reports the model's error on other plans trained in TorchRec
(eval_torchrec.py's results.json, and TorchRec's full planner's plans in the
torchrec_full.json beside it, read back as the project's plans, where the model
was fitted on their sharding types), and with eval_torchrec.py --round_anchors'
round_anchors.json beside it, the same error with each round's speed taken from
the anchors trained in it (per measurement and of the plans' means, each beside
what a perfect model would score); its tasks index --check_data_dir's tables
(default --data_dir's: give the second dataset's for its tasks' plans). With
--model instead of --results, nothing is fitted: the given model is checked and
--out_path gets the check's report. Collections of one task file share their
task numbers, so a task held out is held out of each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuroshard.cli import run_main
from neuroshard.planner.costs.cost_models import add_model_flags
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Fit the TorchRec runtime cost model to plans trained in TorchRec.")
    add_flag(p, "data_dir", required=True, help="dataset dir with table_configs.json (and data.pt: its batch)")
    add_flag(p, "task_path", required=True, help="the task file the samples' plans were made for")
    add_flag(p, "results", help="collect_torchrec_cost_data.py's results.json (to fit)")
    p.add_argument("--model", default=None, help="check this fitted model on --check_results instead of fitting one "
                                                 "(--out_path: the check's report)")
    add_model_flags(p)
    # the ranks the plans were trained on; the seed of the held-out tasks
    Problem.add_args(p, skip=("max_mem", "local_world_size"))
    add_flag(p, "batch_size", help="global batch the plans were trained with (default: the collection's, else the "
                                   "dataset's)")
    add_flag(p, "test_share", help="share of the tasks held out to measure the error on unseen tasks")
    add_flag(p, "out_path", required=True,
             help="where to write the model (JSON; its fit's report beside it), or with --model the report")
    p.add_argument("--check_results", default=None,
                   help="also report the model's error on these plans: eval_torchrec.py's results.json of other "
                        "tasks (e.g. the evaluation tasks' plans trained in TorchRec), never fitted on")
    p.add_argument("--check_task_path", default=None, help="the task file of --check_results' plans")
    p.add_argument("--check_data_dir", default=None,
                   help="the dataset of --check_results' tasks (default --data_dir), e.g. the second dataset's for "
                        "its evaluation tasks' plans")
    p.add_argument("--extra_results", default=None,
                   help="also fit on these plans: other collections' results.json (a comma list), e.g. of training "
                        "tasks of the second dataset (a table larger than a device and a hot one in each), or "
                        "NeuroShard's plans searched with a first fit, trained with the same batch; with "
                        "--extra_data_dir and --extra_task_path (one entry each per collection)")
    p.add_argument("--extra_data_dir", default=None, help="the dataset of each --extra_results' tasks (comma list)")
    p.add_argument("--extra_task_path", default=None, help="the task file of each --extra_results' plans (comma list)")
    return parse_flags(p, argv, __file__)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_float, check_int
    from neuroshard.eval.planning import inputs_from_args
    from neuroshard.formats.io import write_json_atomic
    from neuroshard.torchrec import runtime_data
    from neuroshard.planner.costs.runtime_model import FEATURES, TorchRecRuntimeModel
    from neuroshard.types.errors import ConfigError, InputError

    problem = Problem.from_args(args)
    check_float("--test_share", args.test_share, 0.0, 0.9)
    if (args.results is None) == (args.model is None):
        raise ConfigError("--results", "give exactly one of --results (fit a model) and --model (check a fitted one)")
    if args.check_results and not args.check_task_path:
        raise ConfigError("--check_results", "needs --check_task_path (the task file of its plans)")
    extra = (args.extra_results, args.extra_data_dir, args.extra_task_path)
    if any(extra) and not all(extra):
        raise ConfigError("--extra_results", "give --extra_results, --extra_data_dir and --extra_task_path together")
    lists = [x.split(",") for x in extra] if all(extra) else []  # per collection: results, dataset, task file
    if len({len(x) for x in lists}) > 1:
        results, data_dirs, task_paths = lists
        raise ConfigError("--extra_results", f"{len(results)} collections, {len(data_dirs)} --extra_data_dir and "
                                             f"{len(task_paths)} --extra_task_path: one each")
    extras = list(zip(*lists))
    if args.extra_results and args.model is not None:
        raise ConfigError("--extra_results", "adds plans to a fit; with --model nothing is fitted")
    inputs = inputs_from_args(args, problem)

    def check(model) -> dict | None:  # the model's error on --check_results' plans, printed; None without it
        if not args.check_results:
            return None
        from neuroshard.formats.side_files import ROUND_ANCHORS_JSON
        from neuroshard.formats.task_file import read_tasks
        from neuroshard.torchrec.training_eval import FULL_JSON

        fitted = model.source  # what the model was fitted on: its plans and their tasks are no check
        same = [f"{flag} {mine}" for key, flag, mine in (("samples", "--check_results", args.check_results),
                                                           ("task_path", "--check_task_path", args.check_task_path),
                                                           ("extra_samples", "--check_results", args.check_results),
                                                           ("extra_task_path", "--check_task_path",
                                                            args.check_task_path))
                if any(Path(f).resolve() == Path(mine).resolve() for f in fitted.get(key, "").split(",") if f)]
        if same:
            raise ConfigError("--check_results", f"{' and '.join(same)}: the model was fitted on these; its error "
                                                 "there is in-sample, not a check (give other tasks' plans)")
        configs = check_configs(args, inputs.configs)
        tasks = read_tasks(args.check_task_path, num_tables=len(configs))
        samples = runtime_data.read_samples(args.check_results, tasks, configs)
        full = Path(args.check_results).with_name(FULL_JSON)  # TorchRec's full planner's plans, beside them
        if full.exists():
            more, outside = runtime_data.read_full_samples(full, tasks, configs, problem.ndevices)
            priced = [x for x in more if {sp.kind for sp in x.plan.spread} <= set(model.types)]
            if outside or len(priced) < len(more):
                print(f"{FULL_JSON}: {len(more) - len(priced)} plans with sharding types the model was not fitted "
                      f"on and {outside} outside the plan space left out", file=sys.stderr)
            samples += priced
        if not samples:
            raise InputError(args.check_results, "no plans to check")
        c = runtime_data.check_model(model, samples, inputs.models)
        print(f"on --check_results' {c['plans']} plans (other tasks, never fitted on): MAPE {c['mape']:.1f}%, "
              f"mean predicted / measured {c['ratio']:.3f}")
        for alg, row in c["by_alg"].items():
            print(f"  {alg}: {row['plans']} plans, MAPE {row['mape']:.1f}%, predicted / measured {row['ratio']:.3f}")
        anchored = Path(args.check_results).with_name(ROUND_ANCHORS_JSON)  # eval_torchrec.py --round_anchors' plans
        if anchored.exists():
            cal = runtime_data.round_check(model, samples, runtime_data.read_samples(anchored, None, configs),
                                           inputs.models)
            c["rounds"] = cal.to_json()
            pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
            speeds = ", ".join(f"{f['cost']:.3f}x" for f in cal.factors)
            print(f"per-round calibration ({cal.anchors} anchors; the rounds ran at {speeds} the model): MAPE "
                  f"{pct(cal.mape)} per measurement (a perfect model: {pct(cal.floor)}; unmoved {pct(cal.raw_mape)}), "
                  f"{pct(cal.mape_mean)} of the plans' means (a perfect model: {pct(cal.floor_mean)})")
        return {"results": str(Path(args.check_results).resolve()), **c}

    if args.model is not None:
        if not args.check_results:
            raise ConfigError("--model", "checks a fitted model: give --check_results and --check_task_path")
        model = TorchRecRuntimeModel.load(args.model, problem.ndevices)
        write_json_atomic(args.out_path, {"model": str(Path(args.model).resolve()), "check": check(model)})
        print(f"wrote {args.out_path}", file=sys.stderr)
        return 0
    samples = runtime_data.read_samples(args.results, inputs.tasks, inputs.configs)
    batch = args.batch_size
    if batch is None:
        batch = collection_batch(args.results) or inputs.batch_size
    if batch is None:
        raise InputError(args.data_dir, "no data.pt and no --batch_size: the batch the plans were trained with")
    check_int("--batch_size", batch, 1)
    source = {"samples": str(Path(args.results).resolve()), "compute_model": str(Path(args.compute_model).resolve()),
              "task_path": str(Path(args.task_path).resolve())}
    collections = [0] * len(samples)
    # a task's number names it across collections (the fit holds out whole tasks): collections of one task file
    # (NeuroShard's on-policy plans of another collection's tasks) share their numbers
    first_task = {task_key(args.data_dir, args.task_path): 0}
    for k, (results, data_dir, task_path) in enumerate(extras, start=1):
        first = first_task.setdefault(task_key(data_dir, task_path), 1 + max((s.task for s in samples), default=-1))
        more = runtime_data.read_extra_samples(results, data_dir, task_path, first_task=first)
        other = collection_batch(results)
        if other is not None and other != batch:
            raise InputError(results, f"trained with batch {other}, the other plans with {batch}: one model "
                                      "prices one batch")
        samples += more
        collections += [k] * len(more)
    if extras:
        source |= {"extra_samples": ",".join(str(Path(e[0]).resolve()) for e in extras),
                   "extra_task_path": ",".join(str(Path(e[2]).resolve()) for e in extras)}
    try:
        res = runtime_data.fit_runtime_model(samples, inputs.models, problem.ndevices, batch, args.test_share,
                                             problem.seed, source=source, collections=collections)
    except ValueError as e:
        raise InputError(args.results, str(e)) from None
    print(f"{len(samples)} plans of {len({s.task for s in samples})} tasks; batch {batch}, {problem.ndevices} ranks")
    print("| term | weight | mean share of a step (ms) |\n|---|---|---|")
    for name, c in zip(FEATURES, res.model.coef):
        print(f"| {name} | {c:.4g} | {res.terms[name]:.2f} |")
    if res.speeds:
        speeds = ", ".join(f"{v:.3f}x" for v in res.speeds[1:])
        print(f"--extra_results' plans trained at {speeds} the step time the model gives them at --results' speed "
              "(one speed per collection, fitted with the weights)")
    test = "-" if res.test_mape is None else f"{res.test_mape:.1f}%"
    print(f"MAPE: {test} on the plans of {len(res.test_tasks)} held-out tasks, {res.fit_mape:.1f}% fitted on all")
    for kind, row in res.by_kind.items():
        t = f", held-out {row['test_mape']:.1f}%" if "test_mape" in row else ""
        print(f"  {kind}: {row['plans']} plans, fitted {row['fit_mape']:.1f}%{t}")
    report = res.to_json()
    checked = check(res.model)
    if checked is not None:
        report["check"] = checked
    res.model.save(args.out_path)
    metrics = Path(args.out_path).with_name(Path(args.out_path).stem + "_metrics.json")
    write_json_atomic(metrics, report)
    print(f"wrote {args.out_path} and {metrics}", file=sys.stderr)
    return 0


def check_configs(args, configs):
    """The table configs of --check_results' tasks: --check_data_dir's, else --data_dir's (`configs`).
    ConfigError when the check's config.json says its plans were trained on another dataset that is here: the
    task file's table ids index either dataset, and the other's tables would price every plan wrong."""
    from neuroshard.formats.dataset import read_table_configs
    from neuroshard.types.errors import ConfigError

    flag, data_dir = ("--check_data_dir", args.check_data_dir) if args.check_data_dir else ("--data_dir",
                                                                                            args.data_dir)
    trained = collection_config(args.check_results).get("data_dir")
    if trained and Path(trained).exists() and Path(trained).resolve() != Path(data_dir).resolve():
        raise ConfigError(flag, f"{data_dir}: --check_results' plans were trained on {trained} (the config.json "
                                f"beside them); give --check_data_dir {trained}")
    return configs if args.check_data_dir is None else read_table_configs(Path(data_dir) / "table_configs.json")


def task_key(data_dir, task_path) -> tuple[str, str]:
    """What names a collection's task file: the file and its dataset, resolved."""
    return str(Path(data_dir).resolve()), str(Path(task_path).resolve())


def collection_config(results) -> dict:
    """The flags a collection's or a check's plans were trained with: the config.json beside their results.json
    (collect_torchrec_cost_data.py and eval_torchrec.py write it), {} without one."""
    from neuroshard.formats.io import RUN_CONFIG, read_json

    path = Path(results).parent / RUN_CONFIG
    return read_json(path) if path.exists() else {}


def collection_batch(results) -> int | None:
    """The batch a collection's plans were trained with, if its config.json says."""
    return collection_config(results).get("batch_size")


if __name__ == "__main__":
    run_main(main)
