"""The simulator's error on measured plans under several sets of cost models.

    python model_error.py --data_dir results/quick/dataset --task_path results/quick/tasks/data.txt \\
        --results results/quick/hw/results.json --ndevices 4 --max_mem 1 \\
        --model_set random=results/quick/models --model_set onpolicy=results/quick/models/onpolicy \\
        --collective_model results/quick/models/collectives_4.json

Every plan that eval.py measured (its results.json) is re-simulated under each
set of models (a folder with compute.pt, comm_<n>_fw.pt and comm_<n>_bw.pt;
--collective_model prices the collectives of row-wise and data-parallel tables
under every set) and compared with its measurements: plan-cost MAPE and
Spearman, the per-rank compute / backward / forward comm errors, and the share
of measurements inside the predicted 80% band. Writes --out_path (JSON) and
prints a table.

With --round_anchors (eval.py's round_anchors.json beside the results: the
plans it measured in every round for the machine's speed) each set is also
judged after the per-round calibration, as the report judges the models the
plans were made with: the anchors re-simulated under the set give each round's
factors, and the plans' MAPE is set beside a perfect model's floor
(neuroshard/eval/round_calibration.py). --calibration scales every set as
eval.py's --calibration scaled the models it planned with.
"""

import argparse
import sys
from pathlib import Path

from neuroshard.checks import check_output_file
from neuroshard.cli import run_main
from neuroshard.formats.side_files import (
    MODEL_ERROR_JSON,
    ModelErrorReport,
    write_side_file,
)
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import ConfigError, InputError


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "data_dir", required=True, help="dataset dir with table_configs.json")
    add_flag(p, "task_path", required=True, help="the task file the plans were made for")
    add_flag(p, "results", required=True, help="eval.py's results.json (measured plans)")
    Problem.add_args(p, skip=("seed", "local_world_size"),
                     helps={"ndevices": "devices of the plans", "max_mem": "memory per device in GB the plans were "
                                                                           "made for"})
    p.add_argument("--model_set", action="append", required=True, metavar="LABEL=DIR|FILE.json",
                   help="a set of cost models: a folder with compute.pt and comm_<n>_fw.pt / _bw.pt, or a fitted "
                        "TorchRec estimator (fit_torchrec_estimator.py's JSON) (repeatable)")
    add_flag(p, "collective_model", help="the collective model pricing row-wise and data-parallel tables under every "
                                         "set (the one the plans were made with; without it such plans are errors)")
    add_flag(p, "calibration")
    add_flag(p, "round_anchors", help="eval.py's round_anchors.json (the anchors it measured in every round): each "
                                      "set also judged after the per-round calibration")
    add_flag(p, "out_path", help="JSON output (default: model_error.json beside --results)")
    return parse_flags(p, argv, __file__)


def model_sets(specs, ndevices: int) -> dict:
    """{label: (compute, fw, bw) paths, or (the fitted estimator's path,)} from LABEL=DIR (or LABEL=FILE.json, a
    fitted TorchRec estimator) flags, checked."""
    out = {}
    for spec in specs:
        label, sep, folder = spec.partition("=")
        if not sep or not label or not folder:
            raise ConfigError("--model_set", f"expected LABEL=DIR or LABEL=FILE.json, got {spec!r}")
        if label in out:
            raise ConfigError("--model_set", f"label {label!r} given twice")
        if folder.endswith(".json"):
            if not Path(folder).is_file():
                raise ConfigError("--model_set", f"{label}: {folder} not found")
            out[label] = (Path(folder),)
            continue
        paths = tuple(Path(folder) / name for name in ("compute.pt", f"comm_{ndevices}_fw.pt",
                                                       f"comm_{ndevices}_bw.pt"))
        missing = [str(x) for x in paths if not x.is_file()]
        if missing:
            raise ConfigError("--model_set", f"{label}: {', '.join(missing)} not found")
        out[label] = paths
    return out


def read_round_anchors(path, configs) -> list:
    """The measured anchors of eval.py's round_anchors.json; InputError naming the file and record for one that
    does not name its tables (of `configs`) or was not measured."""
    from neuroshard.formats.plan_file import read_plans

    anchors = read_plans(path)
    for k, a in enumerate(anchors):
        if a.table_ids is None or a.dims is None or a.plan is None or not a.repeat_costs:
            raise InputError(path, f"record {k}: an anchor names its tables (table_ids, dims) and holds a plan and "
                                   "its measurements (eval.py's round_anchors.json)")
        if max(a.table_ids) >= len(configs):
            raise InputError(path, f"record {k}: table {max(a.table_ids)} is not in the dataset ({len(configs)} "
                                   "tables)")
    if not anchors:
        raise InputError(path, "no anchors")
    return anchors


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.eval.drift import calibrated, read_calibration
    from neuroshard.eval.onpolicy import model_error
    from neuroshard.formats.dataset import read_table_configs
    from neuroshard.formats.plan_file import read_measured_plans
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.planner.costs.analytic import AnalyticModel
    from neuroshard.planner.costs.cost_models import CostModels

    problem = Problem.from_args(args)
    sets = model_sets(args.model_set, problem.ndevices)
    out_path = Path(args.out_path) if args.out_path else Path(args.results).parent / MODEL_ERROR_JSON
    check_output_file("--out_path", out_path)
    configs = read_table_configs(Path(args.data_dir) / "table_configs.json")
    tasks = read_tasks(args.task_path, num_tables=len(configs))
    records = read_measured_plans(args.results, tasks, configs, args.task_path)
    anchors = read_round_anchors(args.round_anchors, configs) if args.round_anchors else None
    models = {label: (CostModels.analytic_models(AnalyticModel.load(paths[0], problem.ndevices)) if len(paths) == 1
                      else CostModels.from_paths(*paths, problem.ndevices)).with_collectives(args.collective_model)
              for label, paths in sets.items()}
    if args.calibration:
        factors = read_calibration(args.calibration)
        models = {label: calibrated(m, factors) for label, m in models.items()}
    errors, rounds = model_error(records, tasks, configs, models, problem, anchors)
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    print("| models | plans | plan MAPE | expected | compute | bw comm | fw comm | ready spread est / hw (ms) | "
          "in 80% band |")
    for label, acc in errors.items():
        part = lambda k: pct(acc.parts[k].mape) if k in acc.parts else "-"  # noqa: E731
        sp = acc.rank_spread
        spread = f"{sp['estimated']:.2f} / {sp['measured']:.2f}" if sp else "-"
        print(f"| {label} | {acc.plans} | {pct(acc.mape)} | {pct(acc.mape_expected)} | {part('compute')} | "
              f"{part('bw_comm')} | {part('fw_comm')} | {spread} | {pct(acc.calibration)} |")
    if rounds:
        print("\n| models | per-round calibrated MAPE | perfect-model floor | ratio [10th, 90th pct over anchors] |")
        for label, rc in rounds.items():
            ratio = "-" if not rc.mape or not rc.floor else f"{rc.mape / rc.floor:.3f}"
            spread = f" [{rc.ratio_spread[0]:.2f}, {rc.ratio_spread[1]:.2f}]" if rc.ratio_spread else ""
            print(f"| {label} | {pct(rc.mape)} | {pct(rc.floor)} | {ratio}{spread} |")
    write_side_file(out_path, ModelErrorReport(str(args.results), {k: [str(x) for x in v] for k, v in sets.items()},
                                               {k: a.to_json() for k, a in errors.items()},
                                               {k: rc.to_json() for k, rc in rounds.items()}))
    print(f"wrote {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
