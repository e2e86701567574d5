"""Training the learned baselines (DreamShard, AutoShard) against an oracle: what train_dreamshard.py and
train_autoshard.py run.

The training tasks come from their own task file (`gen_tasks.py` with
another seed, or `--table_pool train` for DreamShard's disjoint table
pools), never the evaluation tasks: `--eval_task_path` makes a task that
appears in both an error. The oracle (`learned.oracle`) is the simulator (the
pre-trained cost models, default) or real kernels and all-to-all. Outputs,
beside the checkpoint `--out_path`: the checkpoint itself (rewritten
atomically after every iteration / logged update, so an interrupted run
leaves the last one), `<stem>_curve.csv` and `_curve.png` (the training
curve), `<stem>_config.json` (every setting, the oracle's plan count and
time, the training time, the final policy's simulated cost on the training
tasks).
"""

from __future__ import annotations

import time
from pathlib import Path

from neuroshard.checks import check_int, check_output_file
from neuroshard.learned.oracle import ORACLES, HardwareOracle, SimulatorOracle
from neuroshard.measure.plan_job import HardwareConfig
from neuroshard.planner.costs.cost_models import add_model_flags, model_paths
from neuroshard.problem import Problem
from neuroshard.settings import add_flag, parse_flags
from neuroshard.types.errors import InputError, NeuroShardError

# what each algorithm's training script defaults to (the released scripts' settings)
DEFAULTS = {"dreamshard": {"out": "models/dreamshard.pt", "ndevices": 4, "max_mem": 5.0},
            "autoshard": {"out": "models/autoshard.pt", "ndevices": 8, "max_mem": 7.0}}
# the measurement flags that make no sense for the oracle (one measurement per plan, no end-to-end step)
_NOT_ORACLE = ("fw_sleep", "end_to_end", "repeats", "launch")


def config_class(kind: str):
    """The training settings class of `kind` (imports its torch module)."""
    if kind == "dreamshard":
        from neuroshard.learned.dreamshard import DreamShardConfig

        return DreamShardConfig
    from neuroshard.learned.autoshard import AutoShardConfig

    return AutoShardConfig


def parse_args(kind: str, argv=None):
    """The flags of train_<kind>.py: the inputs, the oracle (with the hardware oracle's measurement flags)
    and the algorithm's released training settings (`--a-b` aliases where the release spelled them so)."""
    import argparse

    from neuroshard.cli import add_device_arg, add_progress_arg

    d = DEFAULTS[kind]
    parser = argparse.ArgumentParser(description=f"Train a {kind} sharding policy (a baseline).")
    add_flag(parser, "data_dir", help="dataset dir (table_configs.json; data.pt too for --oracle hardware)",
             aliases=("--data-dir",))
    add_flag(parser, "task_path", "data/tasks/train/data.txt", aliases=("--task-path",),
             help="TRAINING task file (gen_tasks.py with a seed other than the evaluation tasks', or "
                  "--table_pool train)")
    add_flag(parser, "eval_task_path")
    add_flag(parser, "max_tasks", help="train on the first N tasks only")
    Problem.add_args(parser, skip=("local_world_size",), defaults={"ndevices": d["ndevices"], "max_mem": d["max_mem"]})
    add_flag(parser, "out_path", d["out"], help="policy checkpoint")
    parser.add_argument("--oracle", choices=ORACLES, default="simulator",
                        help="what measures the rolled-out plans: 'simulator' (the cost models below) or "
                             "'hardware' (real FBGEMM kernels and all-to-all, as eval.py) (default: simulator)")
    add_model_flags(parser)
    add_device_arg(parser)
    HardwareConfig.add_args(parser, skip=_NOT_ORACLE)
    config_class(kind).add_args(parser)
    add_progress_arg(parser)
    return parse_flags(parser, argv, f"train_{kind}.py")


def main(kind: str, argv=None) -> int:
    """train_<kind>.py: parse and check the flags (a one-line error on a bad value, before any work), train,
    and print one summary line."""
    from neuroshard.cli import resolve_device, resolve_ranks

    args = parse_args(kind, argv)
    cfg = config_class(kind).from_args(args)
    device, fixed = "cpu", {}
    if args.oracle == "hardware":
        device, fixed["ndevices"] = resolve_ranks(resolve_device(args.device), args.ndevices, args.gpu_devices)
    problem = Problem.from_args(args, **fixed)
    print(summary_line(run_training(kind, args, cfg, problem, device)))
    return 0


def _load_training_inputs(args, problem: Problem, kind: str):
    from neuroshard.formats.dataset import read_table_configs
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.learned.policy import require_plain
    from neuroshard.planner.costs.cost_models import CostModels

    require_plain(problem, kind)
    configs = read_table_configs(Path(args.data_dir) / "table_configs.json")
    tasks = read_tasks(args.task_path, num_tables=len(configs))
    if args.max_tasks is not None:
        tasks = tasks[:check_int("--max_tasks", args.max_tasks, 1)]
    if not any(may_fit(t.tables(configs), problem) for t in tasks):
        raise InputError(args.task_path, f"no training task fits {problem.ndevices} devices of "
                                         f"{problem.max_mem:g} GB (a table larger than a device, or more than all of "
                                         "them hold): nothing to train on")
    if args.eval_task_path:
        held_out = set(read_tasks(args.eval_task_path, num_tables=len(configs)))
        seen = [i for i, t in enumerate(tasks) if t in held_out]
        if seen:
            raise InputError(args.task_path, f"{len(seen)} training task(s) (lines {[i + 1 for i in seen[:5]]}) "
                                             f"are evaluation tasks of {args.eval_task_path}")
    compute, fw, bw = model_paths(args, problem.ndevices)
    models = CostModels.from_paths(compute, fw, bw, problem.ndevices)
    return configs, tasks, models, fw, bw


def may_fit(tables, problem: Problem) -> bool:
    """False when the tables cannot fit the problem's devices whatever the plan: one is larger than a device
    (unsplit, as the learned sharders place them), or all of them exceed all devices."""
    from neuroshard.learned.policy import element_sizes

    sizes, cap = element_sizes(tables, problem.max_mem)
    return bool(len(sizes)) and int(sizes.max()) <= cap and int(sizes.sum()) <= problem.ndevices * cap


def _oracle(args, models, device: str, problem: Problem):
    if args.oracle == "simulator":
        return SimulatorOracle(models, problem)
    from neuroshard.formats.dataset import read_dataset

    batch = read_dataset(args.data_dir, validate=False).batch_size
    if batch % problem.ndevices:
        raise InputError(args.data_dir, f"batch size {batch} is not a multiple of the {problem.ndevices} ranks")
    return HardwareOracle(args.data_dir, HardwareConfig.from_args(args, problem=problem, device=device))


def run_training(kind: str, args, cfg, problem: Problem, device: str = "cpu") -> dict:
    """Train `kind` ("dreamshard" / "autoshard") with settings `cfg` on the script's inputs; writes
    the checkpoint, the curve (CSV + PNG) and the config; returns the config written."""
    import torch

    from neuroshard.formats.io import write_json_atomic
    from neuroshard.planner.simulator import simulate

    check_output_file("--out_path", args.out_path)  # before any training, not after it
    configs, tasks, models, fw, bw = _load_training_inputs(args, problem, kind)
    oracle = _oracle(args, models, device, problem)
    train_tables = [t.tables(configs) for t in tasks]
    out = Path(args.out_path)
    stem = out.with_suffix("")
    curve_csv, curve_png, config_json = (Path(f"{stem}_curve.csv"), Path(f"{stem}_curve.png"),
                                         Path(f"{stem}_config.json"))
    meta = {"train_task_path": str(args.task_path), "train_tasks": len(tasks), "oracle": args.oracle,
            "data_dir": str(args.data_dir), "compute_model": str(args.compute_model), "fw_comm_model": fw,
            "bw_comm_model": bw}
    rows: list[dict] = []

    def checkpoint(step, policy, row):
        rows.append(row)
        if not oracle.plans:  # a policy that learned from nothing is not written
            return
        policy.meta["trained_steps"] = step + 1
        policy.save(out)
        write_curve(curve_csv, rows)

    torch.set_num_threads(1)  # a 2-core machine shared with others; the networks are small
    t0 = time.perf_counter()
    if kind == "dreamshard":
        from neuroshard.learned import dreamshard as nets

        policy, _ = nets.train(train_tables, problem, oracle, cfg, meta, progress=not args.no_progress,
                               on_iteration=checkpoint)
        x = "iteration"
    else:
        from neuroshard.learned import autoshard as nets

        log_every = max(1, cfg.num_updates // 50)
        policy, _ = nets.train(train_tables, problem, oracle, cfg, meta, progress=not args.no_progress,
                               on_update=checkpoint, log_every=log_every)
        x = "steps"
    seconds = time.perf_counter() - t0
    if not oracle.plans:
        raise NeuroShardError(f"{kind} training measured no plan (every rolled-out plan was out of memory on "
                              f"{problem.ndevices} devices of {problem.max_mem:g} GB); nothing written to {out}")
    # the trained policy's greedy plans on the training tasks, in the simulator
    costs = []
    for tables in train_tables:
        try:
            costs.append(simulate(tables, policy.plan(tables, problem), models, problem).cost)
        except NeuroShardError:
            pass
    plot_curve(curve_png, rows, x, kind)
    config = {"algorithm": kind, **{k: v for k, v in vars(args).items() if k != "no_progress"},
              "problem": problem.to_json(),
              "config": cfg.to_json(), "train_tasks": len(tasks), "training_s": round(seconds, 2),
              "oracle_plans": oracle.plans, "oracle_s": round(oracle.seconds, 2),
              "train_greedy_sim_ms": sum(costs) / len(costs) if costs else None,
              "train_greedy_valid": len(costs), "curve_csv": str(curve_csv), "curve_png": str(curve_png)}
    write_json_atomic(config_json, config)
    return config


def write_curve(path, rows: list[dict]) -> None:
    """The training curve as CSV (one row per iteration / logged update), written atomically."""
    from neuroshard.formats.io import write_csv

    header = list(dict.fromkeys(k for r in rows for k in r))
    write_csv(path, header, ([r.get(k) for k in header] for r in rows))


def plot_curve(path, rows: list[dict], x: str, kind: str) -> None:
    """Plan cost measured by the oracle (and the policy's entropy) over training, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(r[x], r["mean_measured_ms"]) for r in rows if r.get("mean_measured_ms") is not None]
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=120)
    if pts:
        ax.plot(*zip(*pts), marker="o", ms=3, label="rolled-out plans (oracle ms)")
    ax.set_xlabel(x)
    ax.set_ylabel("mean plan cost (ms)")
    ax2 = ax.twinx()
    ent = [(r[x], r["entropy"]) for r in rows if r.get("entropy") is not None]
    if ent:
        ax2.plot(*zip(*ent), color="tab:gray", ls="--", label="policy entropy")
    ax2.set_ylabel("entropy (nats)")
    ax2.ticklabel_format(axis="y", useOffset=False)
    ax.set_title(f"{kind} training")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def summary_line(config: dict) -> str:
    """What a training script prints at the end."""
    def ms(x):
        return "-" if x is None else f"{x:.3f}"

    return (f"{config['algorithm']}: trained in {config['training_s']:.1f} s, {config['oracle_plans']} plans measured "
            f"by the {config['oracle']} oracle in {config['oracle_s']:.1f} s; greedy policy on the training tasks: "
            f"{ms(config['train_greedy_sim_ms'])} ms simulated ({config['train_greedy_valid']}/"
            f"{config['train_tasks']} valid); wrote {config['out_path']}")
