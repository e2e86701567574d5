"""Everything that runs on hardware: the one timing helper (`timing`), the FBGEMM kernel benchmark (`kernel`),
the all-to-all benchmark (`alltoall`), the torchrun job's parent side (`launch`) and rank side with the one
rank loop (`rank`), the jobs that measure all-to-all samples (`alltoall_job`) and plans (`plan_job`), the
compute worker pool (`pool`), the environment both start their processes with (`process_env`), the cost-data
collections (`compute_collect`, `comm_collect`) and their noise floor (`noise`)."""
