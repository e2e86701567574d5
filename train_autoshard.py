"""Train an AutoShard policy (the KDD 2022 baseline) on training tasks, against the simulator or hardware.

    python train_autoshard.py --data_dir results/quick/dataset --task_path results/quick/train_tasks/data.txt \
        --eval_task_path results/quick/tasks/data.txt --compute_model results/quick/models/compute.pt \
        --fw_comm_model results/quick/models/comm_4_fw.pt --bw_comm_model results/quick/models/comm_4_bw.pt \
        --ndevices 4 --max_mem 1 --out_path results/quick/models/autoshard.pt
    python eval_simulator.py ... --alg autoshard --autoshard_policy results/quick/models/autoshard.pt

The released IMPALA/V-trace learner (BASELINES.md §2) as one synchronous
learner on CPU: `--batch_size` environments step together for
`--unroll_length` steps, the finished plans are scored by the oracle
(reward: min/max of per-device compute), one V-trace update, then
`--num_cost_updates` cost-head steps from a ring buffer of shard
measurements; `--total_steps` environment steps in all. Writes the
checkpoint (with the training tasks' feature statistics), the training curve
(`<stem>_curve.csv/.png`) and `<stem>_config.json`.
"""

from __future__ import annotations

import argparse

from neuroshard.cli import resolve_device, resolve_ranks, run_main
from neuroshard.eval.train_learned import add_common_args, run_training, summary_line
from neuroshard.planner.autoshard_nets import AutoShardConfig


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train an AutoShard sharding policy (a baseline).")
    add_common_args(p, "models/autoshard.pt", ndevices=8, max_mem=7.0)
    AutoShardConfig.add_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = AutoShardConfig.from_args(args)  # one-line error on a bad value, before any work
    device = "cpu"
    if args.oracle == "hardware":
        device, args.ndevices = resolve_ranks(resolve_device(args.device), args.ndevices, args.gpu_devices)
    print(summary_line(run_training("autoshard", args, cfg, device)))
    return 0


if __name__ == "__main__":
    run_main(main)
