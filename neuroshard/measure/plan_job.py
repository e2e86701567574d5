"""Plan measurement (DESIGN §10): every plan of a plans file on real FBGEMM kernels and the real all-to-all.

One torchrun job (gloo on CPU, NCCL on GPUs) measures many plans: the
launcher (`PlanJob`, through `measure_plans`) writes the job file, and on
every rank the rank loop (`measure.rank`) runs `PlanWorker`. Per plan,
every rank r:

1. builds its shard's table-batched embedding op with the real lookups of
   its tables (a column-split half reuses its table's lookups; of a
   row-wise or table-row-wise table its row block, the ids in its range for
   every sample; of a data-parallel table the whole table for its B/k
   samples: `kernel.spread_bench_tables`) and times
   forward + backward with `kernel.ShardBenchmark`; the ranks take turns
   (a barrier between turns), so ranks sharing a host do not slow each
   other down (two ranks a turn share the cores and measure their compute
   higher); a rank without tables costs 0;
2. times the backward all-to-all (gradients) and the forward all-to-all of
   real tensors of the plan's per-rank dim sums (`alltoall.bench_sample`).
   The forward exchange runs again with each rank delayed by its measured
   skew (the backward exchange is not timed a second time),
   ``skew[r] = compute[r] + bw[r] - min_q (compute[q] + bw[q])``, which is
   exactly how the simulator (DESIGN §7) and the forward comm model's
   training data define the forward cost: a rank that is ready early pays
   for waiting on the late ones. The forward time without delays is recorded
   too (`fw_comm_nosleep`); ``fw_sleep="none"`` makes it the one counted.
   The spread tables' collectives (`types.plan.spread_collectives`) are
   timed each on its own (`measure.collectives`), those over a host's group
   one host at a time (`collectives.host_turns`): the all-gathers and
   all-reduces count in the backward exchange and in the skew, the
   reduce-scatters in the forward one;
3. optionally (`end_to_end`) times the real step sequence per iteration —
   forward compute -> forward all-to-all -> backward all-to-all -> backward
   compute — on all ranks at once, so straggler waits (and, on a shared CPU
   host, contention between ranks) are included. The step's time is the
   slowest rank's; the plan's end-to-end cost is the median over iterations.

Rank 0 reads the plans and tasks and hands them to every rank (on several
nodes only node 0 has them; each node reads its own copy of the dataset,
which must match node 0's). Every rank's numbers are all-gathered; each
node's first rank writes one `types.PlanMeasurement` per plan. Per-rank
total = compute + backward comm + forward comm; plan cost = max over ranks
(`CostBreakdown.cost`). Times in ms.

On several nodes (`HardwareConfig.launch`) eval.py runs on every node: node 0
plans, writes and measures; the others only lend their ranks to its job
(`follow`), reading their own copy of the dataset and writing nothing but the
job's scratch dir in the system temp dir.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from neuroshard.checks import check_choice, check_float, check_int
from neuroshard.measure.launch import (
    DEFAULT_STARTUP_TIMEOUT_S,
    WATCHDOG_GRACE_S,
    LaunchConfig,
    TorchrunJob,
)
from neuroshard.measure.rank import RankContext, RankWorker
from neuroshard.measure.timing import CLOCKS
from neuroshard.problem import Problem
from neuroshard.settings import Settings, common, setting
from neuroshard.types.codec import Record
from neuroshard.types.errors import ConfigError
from neuroshard.types.plan import Plan, apply_column_steps
from neuroshard.types.records import EndToEnd, PlanMeasurement, PlanRecord
from neuroshard.types.tables import Task

DEFAULT_TIMEOUT_S = 120.0  # collective timeout: a hung rank ends the job after about this
FW_SLEEP_MODES = ("skew", "none")


@dataclass(frozen=True)
class HardwareConfig(Settings):
    """How the plans are measured (its fields are eval.py's measurement flags).

    `ndevices` ranks on `device` ("cpu": gloo, one process per rank;
    "cuda": NCCL, one GPU per rank, `gpu_devices` picks them). `warmup` and
    `iters`: untimed and timed iterations of every measurement (median kept).
    `fw_sleep`: "skew" delays rank r's forward all-to-all by its measured
    compute+backward skew (the simulator's definition), "none" starts all
    ranks together. `end_to_end`: also time the real step sequence.
    `timeout`: collective timeout in s (a hung rank ends the job after about
    this long). `flush`: evict caches before each timed compute iteration.
    `repeats`: measurements of every plan, in rounds (every plan once per
    round, the tasks in a seeded shuffled order and each task's plans one
    after another, `eval.hardware.measurement_order`), so that a slow spell
    of the machine hits all algorithms alike. `problem`: what the plans are
    for (its `ndevices` ranks; its seed orders the rounds). `launch`: where
    the ranks run (default: all on this machine).
    """

    TITLE: ClassVar[str] = "measurement"

    problem: Problem = setting(Problem(), "", cli=False)
    device: str = setting("cpu", "", cli=False)
    gpu_devices: str | None = common("gpu_devices")
    warmup: int = common("warmup")
    iters: int = common("iters")
    fw_sleep: str = setting("skew", "forward all-to-all: 'skew' delays each rank by its measured compute+backward "
                                    "skew, as the simulator assumes; 'none' starts all ranks together",
                            choices=FW_SLEEP_MODES)
    end_to_end: bool = setting(False, "also time the real step per iteration (fwd compute -> fwd all-to-all -> bwd "
                                      "all-to-all -> bwd compute, all ranks at once) and report it beside the "
                                      "sum-of-parts cost", switch=True)
    clock: str = common("clock", help="clock of the kernel (compute) timings on CPU ranks: cpu = the benchmark "
                                      "thread's CPU time, as the compute cost data is collected by default (time a "
                                      "rank sits descheduled by other processes is left out), wall = elapsed time; "
                                      "GPUs use CUDA events")
    timeout: float = common("timeout", DEFAULT_TIMEOUT_S)
    startup_timeout: float = setting(DEFAULT_STARTUP_TIMEOUT_S, "", cli=False)
    flush: bool = setting(True, "", cli=False)
    repeats: int = common("repeats", help="measure every plan this many times, in rounds (each round every plan "
                                          "once, the tasks in a shuffled order, a task's plans together) so drift "
                                          "hits all algorithms alike; the summary then gives 95% intervals and says "
                                          "beats / loses to / no significant difference from them")
    launch: LaunchConfig = LaunchConfig()

    @property
    def ndevices(self) -> int:
        """The job's ranks: one per device of the problem."""
        return self.problem.ndevices

    def validate(self) -> None:
        self.launch.validate()
        self.launch.for_world(self.ndevices)
        check_choice("--device", self.device, ("cpu", "cuda"))
        check_int("--warmup", self.warmup, 0)
        check_int("--iters", self.iters, 1)
        check_choice("--fw_sleep", self.fw_sleep, FW_SLEEP_MODES)
        check_choice("--clock", self.clock, CLOCKS)
        check_float("--timeout", self.timeout, 0.0, lo_open=True)
        check_int("--repeats", self.repeats, 1)



@dataclass(frozen=True)
class PlanJobSpec(Record):
    """The plan-measurement job's settings, as the ranks read them from the job file: the dataset (each
    node's own copy), node 0's plans and task files, and how to measure (the evaluation's own record)."""

    data_dir: str
    hardware: HardwareConfig
    plans: str | None = None
    task_path: str | None = None


def runnable(records: Sequence[PlanRecord]) -> list[PlanRecord]:
    """The plan records the job measures, in job order: those with a plan (others are reported only)."""
    return [rec for rec in records if rec.plan is not None]


def dataset_fingerprint(dataset) -> dict:
    """What every node's copy of the dataset must share with node 0's: batch, table count, table stats."""
    configs = json.dumps([[c.row, c.pooling_factor, list(c.bins)] for c in dataset.configs])
    return {"batch size": dataset.batch_size, "tables": len(dataset.configs),
            "table configs (sha1)": hashlib.sha1(configs.encode()).hexdigest()[:12]}


def shard_layout(task: Task, configs, plan: Plan):
    """(post-split tables, per-device table lists, per-device dim sums) of a plan for a task. ValueError for a
    task with an unpooled (sequence) table: the job's exchanges are pooled outputs, B/n x the dims."""
    unpooled = [t for t in task.table_ids if not configs[t].pooled]
    if unpooled:
        raise ValueError(f"dataset table {unpooled[0]} is unpooled (sequence): the plan job exchanges pooled "
                         "outputs only (TorchRec training runs EmbeddingCollections)")
    split = apply_column_steps(task.tables(configs), plan.column_steps)
    shards = [[split[i] for i in s] for s in plan.shards]
    return split, shards, [sum(t.dim for t in s) for s in shards]


# =========================================================================== rank side


class PlanWorker(RankWorker):
    """One rank of the job: measures each plan's share of this rank (module doc)."""

    item = "plan"
    first_phase = "before compute"

    def __init__(self, ctx: RankContext):
        import torch

        from neuroshard.formats.dataset import read_dataset
        from neuroshard.formats.plan_file import read_plans
        from neuroshard.formats.task_file import read_tasks
        from neuroshard.measure.kernel import ShardBenchmark

        super().__init__(ctx)
        st = ctx.state
        spec = self.spec = PlanJobSpec.from_json(ctx.spec)
        hw = self.hw = spec.hardware
        local_dir = ctx.local["spec"]["data_dir"]  # this node's copy of the dataset
        st["phase"] = "loading dataset"
        # Ranks share one memory-mapped data.pt; the benchmark checks each table's index range itself.
        self.dataset = read_dataset(local_dir, validate=False)
        fingerprint = dataset_fingerprint(self.dataset)
        st["phase"] = "receiving the plans from rank 0"
        shared = ctx.broadcast({"dataset": fingerprint,
                                "tasks": read_tasks(spec.task_path, num_tables=len(self.dataset)),
                                "items": runnable(read_plans(spec.plans))} if ctx.rank == 0 else None)
        differ = [f"{k} {fingerprint[k]} here, {shared['dataset'][k]} on node 0"
                  for k in fingerprint if fingerprint[k] != shared["dataset"][k]]
        if differ:
            raise ValueError(f"the dataset at {local_dir} is not node 0's: {'; '.join(differ)}")
        self.tasks, self.items = shared["tasks"], shared["items"]
        self.batch = self.dataset.batch_size
        seed = hw.problem.seed * 1009 + ctx.rank
        clock = hw.clock if ctx.device == "cpu" else "wall"  # GPUs time kernels with CUDA events
        self.bench = ShardBenchmark(self.dataset, device=ctx.device, warmup=hw.warmup, iters=hw.iters,
                                    flush=hw.flush, seed=seed, clock=clock)
        self._gen = torch.Generator().manual_seed(seed)
        self._groups: dict = {}  # rank tuple -> process group of the spread tables' collectives (`groups`)

    def read_block(self, done: int) -> list:
        return self.items[done:]  # rank 0 holds every plan from the start: one block

    def measure(self, k: int, item: PlanRecord) -> dict | None:
        """Measure plan `k`; returns its `PlanMeasurement` record on the first rank of each node."""
        from neuroshard.measure.alltoall import bench_sample
        from neuroshard.measure.kernel import bench_tables, spread_bench_tables
        from neuroshard.measure.rank import local_lead
        from neuroshard.types.plan import spread_collectives

        ctx, hw, st = self.ctx, self.hw, self.ctx.state
        # a record that names its tables (a plan of another task file: the evaluation's per-round anchors)
        # is measured on them; others on their task of the job's task file
        task = Task(item.table_ids, item.dims) if item.table_ids is not None and item.dims is not None else \
            self.tasks[item.task]
        if item.plan.ndevices != ctx.world:
            raise ValueError(f"plan for task {item.task} ({item.alg}) has {item.plan.ndevices} "
                             f"devices, the job has {ctx.world} ranks")
        _, shards, dims = shard_layout(task, self.dataset.configs, item.plan)
        tables = task.tables(self.dataset.configs)
        spread = spread_bench_tables(tables, item.plan.spread, ctx.rank, self.batch)
        mine = bench_tables(shards[ctx.rank]) + spread
        collectives = spread_collectives([t.dim for t in tables], [t.config.row for t in tables], item.plan.spread,
                                         self.batch)
        groups = self.groups([c.ranks for c in collectives])

        # 1. compute, one rank at a time
        [res] = ctx.take_turns([(q,) for q in range(ctx.world)], lambda q: self.bench.measure(mine), "compute")

        # 2. backward all-to-all (and forward without delays) and the spread tables' backward collectives, then
        # forward with the skew and the spread tables' reduce-scatters (no all-to-all when no rank holds a table
        # in the shard lists)
        exchanged = any(dims)
        fw0, bw = bench_sample(dims, 0.0, ctx.rank, self.batch, hw.warmup, hw.iters, ctx.device, state=st) \
            if exchanged else (0.0, 0.0)
        spread_bw = self.time_collectives([c for c in collectives if c.backward], groups)
        st["phase"] = "gathering compute and backward times"
        ready = [c + b for c, b in ctx.gather((res.median_ms, bw + spread_bw))]
        skew = [t - min(ready) for t in ready]
        if hw.fw_sleep == "skew" and exchanged:
            fw, _ = bench_sample(dims, skew[ctx.rank], ctx.rank, self.batch, hw.warmup, hw.iters, ctx.device,
                                 state=st, backward=False)
        else:
            fw = fw0
        spread_fw = self.time_collectives([c for c in collectives if not c.backward], groups)
        mine_rec = {"compute": res.median_ms, "compute_iters": res.times_ms, "bw": bw + spread_bw,
                    "fw": fw + spread_fw, "fw_nosleep": fw0 + spread_fw, "build_s": res.build_s,
                    "compute_wall": res.wall_median_ms, "collectives": [spread_fw, spread_bw]}
        # 3. the real step sequence, all ranks at once
        if hw.end_to_end:
            mine_rec["e2e_iters"] = self.step_times(mine, dims, len(spread), collectives, groups)

        st["phase"] = "gathering results"
        every = ctx.gather(mine_rec)
        if not local_lead():
            return None
        e2e = None
        if hw.end_to_end:
            iters = np.array([e["e2e_iters"] for e in every])  # [ranks, iters]
            e2e = EndToEnd(np.median(iters, axis=1).tolist(), iters.max(axis=0).tolist(),
                           float(np.median(iters.max(axis=0))))
        return PlanMeasurement(
            index=k, task=item.task, alg=item.alg, dims=dims, ntables=[len(s) for s in shards],
            compute=[e["compute"] for e in every], bw_comm=[e["bw"] for e in every], fw_comm=[e["fw"] for e in every],
            fw_comm_nosleep=[e["fw_nosleep"] for e in every], skew=skew,
            compute_iters=[e["compute_iters"] for e in every], build_s=[e["build_s"] for e in every],
            e2e=e2e, compute_wall=[e["compute_wall"] for e in every],
            collectives=[e["collectives"] for e in every] if collectives else None).to_json()

    def groups(self, ranks: Sequence[tuple[int, ...]]) -> dict:
        """The process group of each rank tuple (None: every rank); made on every rank in the same order, as
        torch.distributed needs, and kept for the next plans."""
        import torch.distributed as dist

        for r in ranks:
            if r != tuple(range(self.ctx.world)) and r not in self._groups:
                self._groups[r] = dist.new_group(list(r))
        return {r: self._groups.get(r) for r in ranks}

    def time_collectives(self, collectives, groups: dict) -> float:
        """This rank's ms of the given spread collectives, each timed on its own (those of groups without
        this rank cost it nothing): those over every rank on all ranks at once, those of smaller groups (a
        host's table-row-wise tables) one group at a time (`host_turns`)."""
        from neuroshard.measure.collectives import bench_collective, host_turns

        ctx, hw = self.ctx, self.hw

        def timed(ranks) -> float:
            return sum(bench_collective(c.op, c.numel, len(c.ranks), hw.warmup, hw.iters, ctx.device,
                                        groups[c.ranks], ctx.state)
                       for c in collectives if c.ranks == ranks and ctx.rank in c.ranks)

        every, turns = host_turns([c.ranks for c in collectives], ctx.world)
        ms = timed(every) if every else 0.0
        if turns:
            ms += sum(ctx.take_turns(turns, lambda q: timed(turns[q]), "host collectives"))
        return ms

    def step_times(self, mine, dims: Sequence[int], spread: int = 0, collectives=(), groups=None) -> list[float]:
        """Per-iteration ms of fwd compute -> fwd all-to-all -> the spread tables' reduce-scatters -> bwd
        all-to-all -> their all-gathers and all-reduces -> bwd compute on this rank. `mine`: this rank's shard
        tables, the last `spread` of them its share of the spread tables (columns not exchanged all-to-all)."""
        import torch

        from neuroshard.measure.alltoall import exchange_backward, exchange_forward
        from neuroshard.measure.collectives import buffers, run_collective
        from neuroshard.measure.timing import benchmark

        ctx, st = self.ctx, self.ctx.state
        st["phase"] = "end-to-end set-up"
        b, d = self.batch // ctx.world, dims[ctx.rank]
        extra = sum(t.dim for t in mine[len(mine) - spread:]) if spread else 0
        op = indices = offsets = None
        if mine:
            op, indices, offsets, _ = self.bench.prepare(mine)
        recv = torch.empty(b * sum(dims), device=ctx.device)
        # the upstream gradient of this rank's [B/n, sum(dims)] slice, already in the packed send layout
        grad_out = torch.randn(b * sum(dims), generator=self._gen).to(ctx.device)
        grad_in = torch.empty(self.batch * d, device=ctx.device)
        grad_spread = torch.randn(self.batch, extra, generator=self._gen).to(ctx.device)
        empty = torch.empty(self.batch, 0, device=ctx.device)
        mine_coll = [(c, groups[c.ranks], *buffers(c.op, c.numel, len(c.ranks), ctx.device)) for c in collectives
                     if ctx.rank in c.ranks]

        def before_each():
            st["phase"] = "end-to-end barrier"
            ctx.barrier()

        def step():
            st["phase"] = "end-to-end step"
            y = op(indices, offsets) if op is not None else empty
            if any(dims):
                exchange_forward(y[:, :d].detach().contiguous(), dims, ctx.rank, self.batch, out=recv)
            for c, group, inp, out in mine_coll:
                if not c.backward:
                    run_collective(c.op, inp, out, group)
            if any(dims):
                exchange_backward(grad_out, dims, ctx.rank, self.batch, out=grad_in)
            for c, group, inp, out in mine_coll:
                if c.backward:
                    run_collective(c.op, inp, out, group)
            if op is not None:
                y.backward(torch.cat([grad_in.view(self.batch, d), grad_spread], dim=1))

        times = benchmark(step, warmup=self.hw.warmup, iters=self.hw.iters, device=ctx.device,
                          before_each=before_each, flush=self.bench.flush)
        op = None  # noqa: F841 - release the op (and its weights) now, not when the closure goes
        return times


# =========================================================================== launcher


class PlanJob(TorchrunJob):
    """One torchrun job measuring every runnable plan of a plan file; iterate `measurements()`.

    On a node other than node 0 of `cfg.launch`, `plans_path`, `task_path` and `num_plans` are
    None: node 0's rank 0 hands the plans and tasks to every rank."""

    item: ClassVar[str] = "plan"
    job_prefix: ClassVar[str] = "hw_eval_job_"

    def __init__(self, plans_path, data_dir, task_path, num_plans: int | None, cfg: HardwareConfig, *,
                 work_dir: str | None = None, keep_dir: bool = False, worker_module: str | None = None):
        cfg.validate()
        self.cfg = cfg
        spec = PlanJobSpec(data_dir=os.path.abspath(data_dir), hardware=cfg,
                           plans=None if plans_path is None else os.path.abspath(plans_path),
                           task_path=None if task_path is None else os.path.abspath(task_path))
        # A plan takes one compute turn per rank, each bounded by the collective timeout
        # (the waiting ranks' barrier would fire first), plus the all-to-alls.
        stall = (cfg.ndevices + 2) * cfg.timeout + WATCHDOG_GRACE_S
        super().__init__("plans", spec, cfg.ndevices, num_plans, device=cfg.device, gpu_devices=cfg.gpu_devices,
                         timeout=cfg.timeout, startup_timeout=cfg.startup_timeout, stall_timeout=stall,
                         work_dir=work_dir, keep_dir=keep_dir, launch=cfg.launch, worker_module=worker_module)

    def measurements(self):
        """Each plan's `PlanMeasurement`, in job order, as soon as rank 0 writes it."""
        for rec in self.records():
            yield PlanMeasurement.from_json(rec)


def measure_plans(plans_path, data_dir, task_path, cfg: HardwareConfig, *,
                  on_result: Callable[[PlanMeasurement], None] | None = None, work_dir: str | None = None,
                  worker_module: str | None = None) -> list[PlanMeasurement]:
    """Measure every plan of `plans_path` (written by `formats.plan_file.write_plans`) in one job.

    Returns one measurement per runnable plan (see `runnable`), in file
    order; `on_result(m)` is called as each arrives. Raises
    `launch.JobError` (naming the failing rank and cause) if any rank fails.
    """
    from neuroshard.formats.plan_file import read_plans

    items = runnable(read_plans(plans_path))
    if not items and not cfg.launch.multi_node:  # (other nodes wait for the job: start it anyway)
        return []
    out = []
    with PlanJob(plans_path, data_dir, task_path, len(items), cfg, work_dir=work_dir,
                 worker_module=worker_module) as job:
        for m in job.measurements():
            out.append(m)
            if on_result is not None:
                on_result(m)
    return out


def follow(data_dir, cfg: HardwareConfig, *, on_result: Callable[[PlanMeasurement], None] | None = None,
           worker_module: str | None = None) -> int:
    """A node other than node 0: lend this node's ranks to node 0's job until it ends (this node's
    `data_dir` must hold the same dataset as node 0's). Returns the number of plans measured."""
    if cfg.launch.writes_outputs:
        raise ConfigError("--node_rank", "node 0 runs the evaluation; follow() is for the other nodes")
    done = 0
    with PlanJob(None, data_dir, None, None, cfg, worker_module=worker_module) as job:
        for m in job.measurements():
            done += 1
            if on_result is not None:
                on_result(m)
    return done

