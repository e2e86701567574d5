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

from neuroshard.cli import run_main
from neuroshard.learned import trainer as train


def main(argv=None) -> int:
    return train.main("dreamshard", argv)


if __name__ == "__main__":
    run_main(main)
