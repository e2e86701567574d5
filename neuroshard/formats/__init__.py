"""Readers and writers of every NeuroShard file format (DESIGN.md §3), one module per family.

=====================  =================================  =========================================
format                 reader                             writer
=====================  =================================  =========================================
table configs          dataset.read_table_configs,        dataset.write_table_configs
                       dataset.read_dataset_configs
dataset dir            dataset.read_dataset               dataset.write_dataset
public DLRM file       dataset.read_public_dlrm           dataset.write_public_dlrm
task file              tasks.read_tasks                   tasks.write_tasks
compute cost data dir  cost_data.read_compute_data        cost_data.write_compute_data, or io.open_append +
                                                          io.append_line + cost_data.format_compute_sample
comm cost data dir     cost_data.read_comm_data           cost_data.write_comm_data, or io.open_append +
                                                          io.append_line + cost_data.format_comm_sample
noise floor JSON       cost_data.read_noise_floor         cost_data.write_noise_floor
plans / results        plans.read_plans                   plans.write_plans (+ plans.plan_view)
measurement log        plans.read_measurements            io.open_append + io.append_line +
                                                          plans.format_measurement
TorchRec plan (+JSON)  torchrec.read_torchrec_plan        torchrec.write_torchrec_plan
user table list        user_tables.read_user_tables       (written by the user)
run config.json        io.check_run_config (reads, compares, writes)
=====================  =================================  =========================================

`io` holds what every format shares (atomic writes, append-only line files,
one-line `InputError`s naming the file, line and value). Importing any of
these modules does not import torch; the readers of torch files do, when called.
"""
