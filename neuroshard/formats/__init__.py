"""Readers and writers of every NeuroShard file format (DESIGN.md §3), one module per family.

=====================  =================================  =========================================
format                 reader                             writer
=====================  =================================  =========================================
table configs          dataset.read_table_configs,        dataset.write_table_configs
                       dataset.read_dataset_configs
dataset dir            dataset.read_dataset               dataset.write_dataset
public DLRM file       dataset.read_public_dlrm           dataset.write_public_dlrm
task file              task_file.read_tasks               task_file.write_tasks
compute cost data dir  cost_data.read_compute_data        cost_data.write_compute_data, or io.open_append +
                                                          io.append_line + cost_data.format_compute_sample
comm cost data dir     cost_data.read_comm_data           cost_data.write_comm_data, or io.open_append +
                                                          io.append_line + cost_data.format_comm_sample
noise floor JSON       cost_data.read_noise_floor         cost_data.write_noise_floor
plans / results        plan_file.read_plans               plan_file.write_plans (+ plan_file.plan_view)
measurement log        plan_file.read_measurements        io.open_append + io.append_line +
                                                          plan_file.format_measurement
user table list        user_tables.read_user_tables       (written by the user)
lambda.json,           side_files.read_side_file          side_files.write_side_file
model_error.json,
plan_error_<n>.json
run config.json        io.check_run_config (reads, compares, writes)
TorchRec plan file     sharding_file.read_torchrec_plan   sharding_file.write_torchrec_plan (+ its JSON
                                                          view)
=====================  =================================  =========================================

`io` holds what every format shares (atomic writes, append-only line files,
one-line `InputError`s naming the file, line and value). Importing any of
these modules does not import torch; the readers and writers of torch files do, when called.
"""
