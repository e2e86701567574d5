"""Train a DreamShard policy (the NeurIPS 2022 baseline) on training tasks, against the simulator or hardware.

    python train_dreamshard.py --data_dir results/quick/dataset --task_path results/quick/train_tasks/data.txt \
        --eval_task_path results/quick/tasks/data.txt --compute_model results/quick/models/compute.pt \
        --fw_comm_model results/quick/models/comm_4_fw.pt --bw_comm_model results/quick/models/comm_4_bw.pt \
        --ndevices 4 --max_mem 1 --out_path results/quick/models/dreamshard.pt
    python train_dreamshard.py ... --oracle hardware            # the 100 plans measured on 4 CPU ranks
    python eval_simulator.py ... --alg dreamshard --dreamshard_policy results/quick/models/dreamshard.pt

The released loop (BASELINES.md §1.4), with its defaults as flags: per
iteration, roll out the current policy on `--bench_steps` random training
tasks and measure the plans with the oracle, fit the cost network
(`--bench_training_steps` steps of `--batch_size`), then `--rl_num_batches`
REINFORCE steps on the estimated MDP (reward: minus the cost network's
overall prediction). Writes the checkpoint (after every iteration), the
training curve (`<stem>_curve.csv/.png`) and `<stem>_config.json`.
"""

from __future__ import annotations

import argparse

from neuroshard.cli import resolve_device, resolve_ranks, run_main
from neuroshard.eval.train_learned import add_common_args, run_training, summary_line
from neuroshard.planner.dreamshard_nets import DreamShardConfig


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a DreamShard sharding policy (a baseline).")
    add_common_args(p, "models/dreamshard.pt", ndevices=4, max_mem=5.0)
    DreamShardConfig.add_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = DreamShardConfig.from_args(args)  # one-line error on a bad value, before any work
    device = "cpu"
    if args.oracle == "hardware":
        device, args.ndevices = resolve_ranks(resolve_device(args.device), args.ndevices, args.gpu_devices)
    print(summary_line(run_training("dreamshard", args, cfg, device)))
    return 0


if __name__ == "__main__":
    run_main(main)
