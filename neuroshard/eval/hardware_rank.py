"""One rank of the hardware evaluation job (run by torchrun through `eval.hardware.HardwareJob`).

Per plan, every rank r:

1. builds its shard's table-batched embedding op with the real lookups of
   its tables (a column-split half reuses its table's lookups) and times
   forward + backward with `bench.compute.ShardBenchmark` — the ranks take
   turns (a barrier between turns), so ranks sharing a host do not slow each
   other down; a rank without tables costs 0;
2. times the backward all-to-all (gradients) and the forward all-to-all of
   real tensors of the plan's per-rank dim sums (`bench.comm.bench_sample`).
   The forward exchange runs with each rank delayed by its measured skew,
   ``skew[r] = compute[r] + bw[r] - min_q (compute[q] + bw[q])``, which is
   exactly how the simulator (DESIGN §7) and the forward comm model's
   training data define the forward cost: a rank that is ready early pays
   for waiting on the late ones. The forward time without delays is recorded
   too (``fw_comm_nosleep``); ``fw_sleep="none"`` makes it the one counted;
3. optionally (``end_to_end``) times the real step sequence per iteration —
   forward compute -> forward all-to-all -> backward all-to-all -> backward
   compute — on all ranks at once, so straggler waits (and, on a shared CPU
   host, contention between ranks) are included. The step's time is the
   slowest rank's; the plan's end-to-end cost is the median over iterations.

Rank 0 reads the plans and tasks and hands them to every rank with a
broadcast (on several nodes only node 0 has them; each node reads its own
copy of the dataset, which must match node 0's). Every rank's numbers are
all-gathered; the first rank of each node streams one JSON line per plan to
its node's launcher (node 0's are the results). Times are in ms.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Sequence

import numpy as np

from neuroshard.bench.torchrun import (DEFAULT_TIMEOUT_S, RESULTS_FILE, barrier, fail_rank, init_group, local_lead,
                                       start_rank)
from neuroshard.eval.hardware import JOB_FILE, dataset_fingerprint, runnable, shard_layout


class _Rank:
    """One rank of the job: measures each plan's share of this rank."""

    def __init__(self, args, rank: int, world: int, device: str, state: dict):
        import torch

        from neuroshard.bench.compute import ShardBenchmark
        from neuroshard.formats import read_dataset, read_plans, read_tasks

        self.rank, self.world, self.device, self.state = rank, world, device, state
        with open(os.path.join(args.job_dir, JOB_FILE)) as f:
            mine = json.load(f)  # this node's job file: on nodes other than node 0, only its data_dir
        state["phase"] = "loading dataset"
        # Ranks share one memory-mapped data.pt; the benchmark checks each table's index range itself.
        # Every node reads its own copy (the same --data_dir path), checked against node 0's below.
        self.dataset = read_dataset(mine["data_dir"], validate=False)
        fingerprint = dataset_fingerprint(self.dataset)
        state["phase"] = "receiving the plans from rank 0"
        box = [None]
        if rank == 0:
            box[0] = {"job": mine, "dataset": fingerprint, "tasks": read_tasks(mine["task_path"],
                                                                               num_tables=len(self.dataset)),
                      "items": runnable(read_plans(mine["plans"]))}
        self.gather_from_rank0(box)
        shared = box[0]
        differ = [f"{k} {fingerprint[k]} here, {shared['dataset'][k]} on node 0"
                  for k in fingerprint if fingerprint[k] != shared["dataset"][k]]
        if differ:
            raise ValueError(f"the dataset at {mine['data_dir']} is not node 0's: {'; '.join(differ)}")
        job = self.job = shared["job"]
        self.tasks, self.items = shared["tasks"], shared["items"]
        self.batch = self.dataset.batch_size
        self.warmup, self.iters = int(job["warmup"]), int(job["iters"])
        self.fw_sleep, self.end_to_end = job["fw_sleep"], bool(job["end_to_end"])
        self.bench = ShardBenchmark(self.dataset, device=device, warmup=self.warmup, iters=self.iters,
                                    flush=bool(job["flush"]), seed=int(job["seed"]) * 1009 + rank)
        self._gen = torch.Generator().manual_seed(int(job["seed"]) * 1009 + rank)

    def gather_from_rank0(self, box: list) -> None:
        """Rank 0's `box[0]` into every rank's `box` (node 0 alone has the plan and task files)."""
        import torch.distributed as dist

        dist.broadcast_object_list(box, src=0)

    def barrier(self) -> None:
        import torch.distributed as dist

        barrier(dist, self.device)

    def gather(self, obj):
        """Every rank's `obj`, in rank order, on every rank."""
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def measure(self, k: int) -> dict | None:
        """Measure plan item `k`; returns the record on the first rank of each node (None elsewhere)."""
        from neuroshard.bench.comm import bench_sample
        from neuroshard.bench.compute import bench_tables

        st = self.state
        item = self.items[k]
        task = self.tasks[item.task]
        if item.plan.ndevices != self.world:
            raise ValueError(f"plan for task {item.task} ({item.alg}) has {item.plan.ndevices} "
                             f"devices, the job has {self.world} ranks")
        _, shards, dims = shard_layout(task, self.dataset.configs, item.plan)
        mine = bench_tables(shards[self.rank])

        # 1. compute, one rank at a time
        res = None
        for q in range(self.world):
            st["phase"] = f"compute (turn of rank {q})"
            self.barrier()
            if q == self.rank:
                res = self.bench.measure(mine)
        st["phase"] = "compute (closing barrier)"
        self.barrier()

        # 2. backward all-to-all (and forward without delays), then forward with the skew
        fw0, bw = bench_sample(dims, 0.0, self.rank, self.batch, self.warmup, self.iters, self.device, state=st)
        st["phase"] = "gathering compute and backward times"
        ready = [c + b for c, b in self.gather((res.median_ms, bw))]
        skew = [t - min(ready) for t in ready]
        if self.fw_sleep == "skew":
            fw, _ = bench_sample(dims, skew[self.rank], self.rank, self.batch, self.warmup, self.iters,
                                 self.device, state=st)
        else:
            fw = fw0

        mine_rec = {"compute": res.median_ms, "compute_iters": res.times_ms, "bw": bw, "fw": fw,
                    "fw_nosleep": fw0, "build_s": res.build_s}
        # 3. the real step sequence, all ranks at once
        if self.end_to_end:
            mine_rec["e2e_iters"] = self.step_times(mine, dims)

        st["phase"] = "gathering results"
        every = self.gather(mine_rec)
        if not local_lead():
            return None
        rec = {"i": k, "task": item.task, "alg": item.alg, "dims": dims,
               "ntables": [len(s) for s in shards],
               "compute": [e["compute"] for e in every], "bw_comm": [e["bw"] for e in every],
               "fw_comm": [e["fw"] for e in every], "fw_comm_nosleep": [e["fw_nosleep"] for e in every],
               "skew": skew, "compute_iters": [e["compute_iters"] for e in every],
               "build_s": [e["build_s"] for e in every]}
        if self.end_to_end:
            iters = np.array([e["e2e_iters"] for e in every])  # [ranks, iters]
            rec["e2e"] = {"per_rank": np.median(iters, axis=1).tolist(),
                          "iters": iters.max(axis=0).tolist(),
                          "cost": float(np.median(iters.max(axis=0)))}
        return rec

    def step_times(self, mine, dims: Sequence[int]) -> list[float]:
        """Per-iteration ms of fwd compute -> fwd all-to-all -> bwd all-to-all -> bwd compute on this rank."""
        import torch

        from neuroshard.bench.comm import exchange_backward, exchange_forward
        from neuroshard.bench.timing import benchmark

        st = self.state
        st["phase"] = "end-to-end set-up"
        b, d = self.batch // self.world, dims[self.rank]
        op = indices = offsets = None
        if mine:
            op, indices, offsets, _ = self.bench.prepare(mine)
        recv = torch.empty(b * sum(dims), device=self.device)
        # the upstream gradient of this rank's [B/n, sum(dims)] slice, already in the packed send layout
        grad_out = torch.randn(b * sum(dims), generator=self._gen).to(self.device)
        grad_in = torch.empty(self.batch * d, device=self.device)
        empty = torch.empty(self.batch, 0, device=self.device)

        def before_each():
            st["phase"] = "end-to-end barrier"
            self.barrier()

        def step():
            st["phase"] = "end-to-end step"
            y = op(indices, offsets) if op is not None else empty
            exchange_forward(y.detach(), dims, self.rank, self.batch, out=recv)
            exchange_backward(grad_out, dims, self.rank, self.batch, out=grad_in)
            if op is not None:
                y.backward(grad_in.view(self.batch, d))

        times = benchmark(step, warmup=self.warmup, iters=self.iters, device=self.device, before_each=before_each,
                          flush=self.bench.flush)
        op = None  # noqa: F841 - release the op (and its weights) now, not when the closure goes
        return times


def worker_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of one rank (run by torchrun through `HardwareJob`)."""
    p = argparse.ArgumentParser(description="hardware evaluation worker (run by torchrun)")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--job_dir", required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    p.add_argument("--parent_pid", type=int, default=None)
    args = p.parse_args(argv)

    job_dir = args.job_dir
    rank = start_rank(job_dir, args.parent_pid)
    world = int(os.environ["WORLD_SIZE"])
    state = {"sample": None, "phase": "start-up", "item": "plan"}
    try:
        import torch.distributed as dist

        state["phase"] = "process-group init"
        device = init_group(args.device, args.timeout)
        runner = _Rank(args, rank, world, device, state)
        results = open(os.path.join(job_dir, RESULTS_FILE), "a") if local_lead() else None
        for k in range(len(runner.items)):
            state["sample"] = k
            state["phase"] = "before compute"
            rec = runner.measure(k)
            if results is not None:
                results.write(json.dumps(rec) + "\n")
                results.flush()
        state["sample"] = None
        state["phase"] = "shutdown"
        runner.barrier()
        if results is not None:
            results.close()
        dist.destroy_process_group()
    except BaseException as exc:  # report, then leave at once: a broken group can hang in teardown
        fail_rank(job_dir, rank, state, exc, prog="hardware_eval")


if __name__ == "__main__":
    worker_main()
