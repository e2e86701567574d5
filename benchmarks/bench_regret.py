"""Regret: how far each algorithm's plan is from the best plan the hardware has, on both runtimes.

    python benchmarks/bench_regret.py --models results/quick --quick          # within 15 minutes on 2 cores
    python benchmarks/bench_regret.py --models results/quick --out_dir results/regret  # the full setting
    python benchmarks/bench_regret.py --models results/quick --dry_run       # the spaces' sizes, nothing measured

Draws --tasks_per_set small tasks (--tables_per_task tables) from each task set's dataset of a pipeline run
(`--models`, read only: its dataset/ and oversize/dataset/, like the set's own tasks, a table larger than a device
and a hot one where the set has them) with a seed of their own (--draw_seed); plans them with every algorithm
the run can plan with (its final models, calibration, collective model, fitted estimator, learned policies and
NeuroShard+'s lambda; NeuroShard also with the random data's models, `neuroshard@random`, and with the TorchRec
runtime model where the run has one, `neuroshard[torchrec]`); then, per runtime (the paper's plan job, TorchRec
DistributedModelParallel training), measures each task's plan space in shuffled rounds: the whole space where it
holds at most --max_space plans, else the algorithms' plans and a hardware-in-the-loop local search until
--saturation further candidates found nothing better (neuroshard/eval/regret_search.py). Resumable: run the same
command again after a kill and only what is missing is measured. Writes to --out_dir: config.json (the settings),
tasks/, plans/, one folder of measuring jobs per runtime and set, results.json (every measured space, the cost
models' estimates of each plan, the search's saturation curves), results.csv, summary.json and summary.md: per
algorithm its regret (naive and cross-fitted), hit rate, the best against the runner-up per task, and per cost
model its ordering and its own best's regret beside its search's (neuroshard/eval/regret.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from neuroshard.cli import add_progress_arg, run_main
from neuroshard.eval.regret_search import RegretConfig
from neuroshard.planner.registry import add_sharder_args
from neuroshard.settings import add_flag, parse_flags

# --quick: about 10 minutes on 2 idle cores (docs/EXPERIMENTS.md); any of these given on the command line wins
QUICK = {"tasks_per_set": 2, "set_tasks": "oversize=1", "tables_per_task": "2,2", "max_space": 12, "rounds": 2,
         "search_rounds": 1, "search_batch": 3, "saturation": 3, "search_steps": 1, "final_top": 1, "train_iters": 6}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_flag(p, "models", help="a pipeline run folder (results/quick): its datasets, task settings, models, "
                               "calibration, policies; read only", required=True)
    add_flag(p, "out_dir", "results/regret")
    p.add_argument("--quick", action="store_true", help="a small setting that runs within 15 minutes: "
                                                        + ", ".join(f"--{k} {v}" for k, v in QUICK.items()))
    p.add_argument("--task_sets", default="all", help="the run's task sets measured (paper, oversize), or all")
    p.add_argument("--dry_run", action="store_true", help="draw, plan and enumerate, print the spaces' sizes; "
                                                          "measure nothing")
    RegretConfig.add_args(p)
    add_flag(p, "alg", "all", help="the algorithms planned (comma list); all: every one the run can plan with, "
                                   "TorchRec's full planner and torchrec_neural included")
    add_flag(p, "seed", help="seed of the measuring rounds' order and the randomised sharders")
    add_flag(p, "warmup", 2, help="untimed iterations of each plan job measurement")
    add_flag(p, "iters", 5, help="timed iterations of each plan job measurement (their median is kept)")
    add_flag(p, "clock")
    p.add_argument("--train_warmup", type=int, default=3, help="untimed iterations of each TorchRec training "
                                                               "measurement (default: 3)")
    p.add_argument("--train_iters", type=int, default=10, help="timed iterations of each TorchRec training "
                                                               "measurement, their median the step (default: 10)")
    add_sharder_args(p)
    add_progress_arg(p)
    args = parse_flags(p, argv, __file__)
    args.given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
    if args.quick:
        for k, v in QUICK.items():
            if f"--{k}" not in args.given:
                setattr(args, k, v)
    return args


def measurer(runtime: str, args, problem):
    """How plans are measured on `runtime`: the plan job (the pipeline's evaluation settings) or TorchRec
    training (its settings), each on the problem's devices as CPU ranks."""
    from neuroshard.eval.regret_search import plan_job_measure

    if runtime == "paper":
        from neuroshard.measure.plan_job import HardwareConfig

        hw = HardwareConfig(problem=problem, device="cpu", warmup=args.warmup, iters=args.iters, clock=args.clock)
        hw.validate()
        return plan_job_measure(hw, progress=not args.no_progress)
    from neuroshard.torchrec.training import TorchRecTrainConfig
    from neuroshard.torchrec.training_eval import train_measure

    cfg = TorchRecTrainConfig(problem=problem, device="cpu", warmup=args.train_warmup, iters=args.train_iters)
    cfg.validate()
    return train_measure(cfg, progress=not args.no_progress)


def main(argv=None) -> int:
    args = parse_args(argv)
    from neuroshard.checks import check_int
    from neuroshard.eval import regret_search as rs
    from neuroshard.eval.regret import summarize
    from neuroshard.formats.io import read_json, write_json_atomic
    from neuroshard.pipeline.layout import Layout
    from neuroshard.problem import Problem
    from neuroshard.types.errors import ConfigError

    cfg = RegretConfig.from_args(args)
    cfg.validate()
    check_int("--train_iters", args.train_iters, 1)
    check_int("--train_warmup", args.train_warmup, 0)
    run = Layout(Path(args.models))
    first = read_json(run.out / "tasks" / "config.json") if (run.out / "tasks" / "config.json").exists() else None
    if first is None:
        raise ConfigError("--models", f"{args.models} is no pipeline run folder (no tasks/config.json)")
    problem = Problem(**{k: v for k, v in first["problem"].items() if k in ("ndevices", "max_mem")}, seed=args.seed)
    sets = {"paper": run.out, **{d.name: d for d in sorted(run.out.iterdir())
                                 if (d / "dataset").is_dir() and (d / "tasks" / "config.json").exists()}}
    wanted = list(sets) if args.task_sets == "all" else [s.strip() for s in args.task_sets.split(",")]
    for s in wanted:
        if s not in sets:
            raise ConfigError("--task_sets", f"{s!r} is not a task set of {args.models} ({', '.join(sets)})")
    out = Path(args.out_dir)
    models = rs.RunModels.of(run, problem)
    config = {"models": str(run.out.resolve()), "problem": problem.to_json(), "regret": cfg.to_json(),
              "task_sets": wanted, "alg": args.alg, "warmup": args.warmup, "iters": args.iters, "clock": args.clock,
              "train_warmup": args.train_warmup, "train_iters": args.train_iters, "quick": args.quick,
              "run_models": models.paths}
    write_json_atomic(out / "config.json", config)
    show = print
    t0 = time.perf_counter()
    per_set = {}
    for name in wanted:
        inputs = rs.draw_tasks(name, sets[name] / "dataset", read_json(sets[name] / "tasks" / "config.json"), cfg,
                               out / "tasks" / name, train_tasks=sets[name] / "train_tasks" / "data.txt")
        options = models.options(args, inputs.batch_size)
        records = rs.plan_algorithms(inputs, models.algorithms(options, args.alg), problem, models.final, options,
                                     models.variants(), out / "plans" / f"{name}.json", progress=not args.no_progress)
        per_set[name] = (inputs, records)
        show(f"{name}: {len(inputs.tasks)} tasks planned ({time.perf_counter() - t0:.0f} s)")
    spaces, seconds = [], {}
    for runtime in cfg.runtime_list():
        specs = rs.space_spec(cfg, runtime, problem, models.collectives is not None)
        if args.dry_run:
            for name, (inputs, records) in per_set.items():
                rs.print_sizes(inputs, records, problem, specs[0], cfg, runtime)
            continue
        measure = measurer(runtime, args, problem)
        started = time.perf_counter()
        for name, (inputs, records) in per_set.items():
            spaces += rs.measure_runtime(runtime, inputs, records, problem, specs,
                                         models.estimators(problem, inputs.batch_size), models.guide(runtime),
                                         measure, cfg, out / runtime / name, show=show)
            show(f"{runtime} / {name}: measured ({time.perf_counter() - t0:.0f} s)")
        seconds[runtime] = time.perf_counter() - started
    if args.dry_run:
        return 0
    batch = next(iter(per_set.values()))[0].batch_size
    summary = summarize(spaces, models.specs(batch), seed=args.seed)
    for runtime, s in seconds.items():  # this invocation's time: 0 where every stage was read back
        summary[runtime]["seconds"] = s
    write_json_atomic(out / "config.json", {**config, "seconds": time.perf_counter() - t0})
    rs.write_outputs(out, spaces, summary)
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    run_main(main)
