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

from neuroshard.cli import run_main
from neuroshard.learned import trainer as train


def main(argv=None) -> int:
    return train.main("autoshard", argv)


if __name__ == "__main__":
    run_main(main)
