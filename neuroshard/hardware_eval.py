"""Hardware evaluation (DESIGN §10): every plan on real FBGEMM kernels and the real all-to-all.

The plans are computed once, in the parent, by the code that `eval_simulator.py`
uses (`neuroshard.evaluation`), written to ``plans.json`` with
`formats.write_plans`, and handed to ONE torchrun job (gloo on CPU, NCCL on
GPUs) that measures all of them; the launcher, the process-group set-up and
the failure handling are `neuroshard.comm_bench`'s (`TorchrunJob`).

Per plan, every rank r of the job:

1. builds its shard's table-batched embedding op with the real lookups of
   its tables (a column-split half reuses its table's lookups) and times
   forward + backward with `compute_bench.ShardBenchmark` — the ranks take
   turns (a barrier between turns), so ranks sharing a host do not slow each
   other down; a rank without tables costs 0;
2. times the backward all-to-all (gradients) and the forward all-to-all of
   real tensors of the plan's per-rank dim sums (`comm_bench.bench_sample`).
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

Per-rank total = compute + backward comm + forward comm; plan cost = max over
ranks. Rank 0 gathers every rank's numbers with collectives and streams one
JSON line per plan to the launcher. Times are in ms.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.comm_bench import (DEFAULT_STARTUP_TIMEOUT_S, RESULTS_FILE, WATCHDOG_GRACE_S, CommBenchError,
                                   TorchrunJob, _inject, _parse_fault, fail_rank, init_group, start_rank)
from neuroshard.types import CostBreakdown, InputError, NeuroShardError, Plan, Task, apply_column_steps

PLANS_FILE = "plans.json"
RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"
RANKS_CSV = "ranks.csv"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
JOB_FILE = "job.json"

DEFAULT_TIMEOUT_S = 120.0  # collective timeout: a hung rank ends the job after about this
FW_SLEEP_MODES = ("skew", "none")


class HardwareEvalError(CommBenchError):
    """The hardware evaluation job failed: a rank raised, died or hung (message names it)."""


@dataclass(frozen=True)
class HardwareConfig:
    """How the plans are measured.

    `ndevices` ranks on `device` ("cpu": gloo, one process per rank;
    "cuda": NCCL, one GPU per rank, `gpu_devices` picks them). `warmup` and
    `iters`: untimed and timed iterations of every measurement (median kept).
    `fw_sleep`: "skew" delays rank r's forward all-to-all by its measured
    compute+backward skew (the simulator's definition), "none" starts all
    ranks together. `end_to_end`: also time the real step sequence.
    `timeout`: collective timeout in s (a hung rank ends the job after about
    this long). `flush`: evict caches before each timed compute iteration.
    """

    ndevices: int = 4
    device: str = "cpu"
    gpu_devices: str | None = None
    warmup: int = 5
    iters: int = 10
    fw_sleep: str = "skew"
    end_to_end: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    flush: bool = True
    seed: int = 0

    def validate(self) -> None:
        if self.ndevices < 1:
            raise NeuroShardError(f"--ndevices must be >= 1, got {self.ndevices}")
        if self.device not in ("cpu", "cuda"):
            raise NeuroShardError(f"device must be cpu or cuda, got {self.device!r}")
        if self.iters < 1 or self.warmup < 0:
            raise NeuroShardError(f"need --iters >= 1 and --warmup >= 0, got {self.iters} and {self.warmup}")
        if self.fw_sleep not in FW_SLEEP_MODES:
            raise NeuroShardError(f"fw_sleep must be one of {FW_SLEEP_MODES}, got {self.fw_sleep!r}")
        if not self.timeout > 0:
            raise NeuroShardError(f"--timeout must be > 0 s, got {self.timeout}")

    def to_json(self) -> dict:
        return asdict(self)


def runnable(records: Sequence[dict]) -> list[dict]:
    """The plan records the job measures, in job order: those with a plan (others are reported only)."""
    return [rec for rec in records if rec.get("plan") is not None]


def shard_layout(task: Task, configs, plan: Plan):
    """(post-split tables, per-device table lists, per-device dim sums) of a plan for a task."""
    split = apply_column_steps(task.tables(configs), plan.column_steps)
    shards = [[split[i] for i in s] for s in plan.shards]
    return split, shards, [sum(t.dim for t in s) for s in shards]


# =========================================================================== worker


class _Rank:
    """One rank of the job: measures each plan's share of this rank."""

    def __init__(self, args, rank: int, world: int, device: str, state: dict):
        import torch

        from neuroshard.compute_bench import ShardBenchmark
        from neuroshard.formats import read_dataset, read_plans, read_tasks

        self.rank, self.world, self.device, self.state = rank, world, device, state
        with open(os.path.join(args.job_dir, JOB_FILE)) as f:
            job = json.load(f)
        self.job = job
        state["phase"] = "loading dataset"
        # Ranks share one memory-mapped data.pt; the benchmark checks each table's index range itself.
        self.dataset = read_dataset(job["data_dir"], validate=False)
        self.tasks = read_tasks(job["task_path"], num_tables=len(self.dataset))
        self.items = runnable(read_plans(job["plans"]))
        self.batch = self.dataset.batch_size
        self.warmup, self.iters = int(job["warmup"]), int(job["iters"])
        self.fw_sleep, self.end_to_end = job["fw_sleep"], bool(job["end_to_end"])
        self.bench = ShardBenchmark(self.dataset, device=device, warmup=self.warmup, iters=self.iters,
                                    flush=bool(job["flush"]), seed=int(job["seed"]) * 1009 + rank)
        self._gen = torch.Generator().manual_seed(int(job["seed"]) * 1009 + rank)

    def barrier(self) -> None:
        import torch.distributed as dist

        from neuroshard.comm_bench import _barrier

        _barrier(dist, self.device)

    def gather(self, obj):
        """Every rank's `obj`, in rank order, on every rank."""
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def measure(self, k: int) -> dict | None:
        """Measure plan item `k`; returns the record on rank 0 (None elsewhere)."""
        from neuroshard.comm_bench import bench_sample
        from neuroshard.compute_bench import bench_tables

        st = self.state
        item = self.items[k]
        task = self.tasks[item["task"]]
        if item["plan"].ndevices != self.world:
            raise ValueError(f"plan for task {item['task']} ({item.get('alg')}) has {item['plan'].ndevices} "
                             f"devices, the job has {self.world} ranks")
        _, shards, dims = shard_layout(task, self.dataset.configs, item["plan"])
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
        if self.rank != 0:
            return None
        rec = {"i": k, "task": item["task"], "alg": item.get("alg"), "dims": dims,
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

        from neuroshard.comm_bench import exchange_backward, exchange_forward
        from neuroshard.timing import benchmark, flush_cpu_cache, flush_gpu_cache

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
            if self.bench.flush and self.bench.cuda:
                flush_gpu_cache(self.device)
            elif self.bench.flush:
                flush_cpu_cache()
            st["phase"] = "end-to-end barrier"
            self.barrier()

        def step():
            st["phase"] = "end-to-end step"
            y = op(indices, offsets) if op is not None else empty
            exchange_forward(y.detach(), dims, self.rank, self.batch, out=recv)
            exchange_backward(grad_out, dims, self.rank, self.batch, out=grad_in)
            if op is not None:
                y.backward(grad_in.view(self.batch, d))

        times = benchmark(step, warmup=self.warmup, iters=self.iters, device=self.device, before_each=before_each)
        del op
        return times


def worker_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of one rank (run by torchrun through `HardwareJob`)."""
    p = argparse.ArgumentParser(description="hardware evaluation worker (run by torchrun)")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--job_dir", required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    p.add_argument("--parent_pid", type=int, default=None)
    p.add_argument("--fault", default=None, help="testing only: RANK:PLAN:raise|hang|exit")
    args = p.parse_args(argv)

    job_dir = args.job_dir
    rank = start_rank(job_dir, args.parent_pid)
    world = int(os.environ["WORLD_SIZE"])
    fault = _parse_fault(args.fault)
    state = {"sample": None, "phase": "start-up", "item": "plan"}
    try:
        import torch.distributed as dist

        state["phase"] = "process-group init"
        device = init_group(args.device, args.timeout)
        runner = _Rank(args, rank, world, device, state)
        results = open(os.path.join(job_dir, RESULTS_FILE), "a") if rank == 0 else None
        for k in range(len(runner.items)):
            state["sample"] = k
            state["phase"] = "before compute"
            _inject(fault, rank, k)
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


# =========================================================================== launcher


class HardwareJob(TorchrunJob):
    """One torchrun job measuring every runnable plan of a plan file; iterate `records()`."""

    item = "plan"
    job_prefix = "hw_eval_job_"

    def __init__(self, plans_path, data_dir, task_path, num_plans: int, cfg: HardwareConfig, *,
                 work_dir: str | None = None, fault: str | None = None, keep_dir: bool = False):
        cfg.validate()
        self.cfg = cfg
        self.job = {"plans": os.path.abspath(plans_path), "data_dir": os.path.abspath(data_dir),
                    "task_path": os.path.abspath(task_path), "warmup": cfg.warmup, "iters": cfg.iters,
                    "fw_sleep": cfg.fw_sleep, "end_to_end": cfg.end_to_end, "flush": cfg.flush,
                    "seed": cfg.seed}
        # A plan takes one compute turn per rank, each bounded by the collective timeout
        # (the waiting ranks' barrier would fire first), plus the all-to-alls.
        stall = (cfg.ndevices + 2) * cfg.timeout + WATCHDOG_GRACE_S
        super().__init__("neuroshard.hardware_eval", [], cfg.ndevices, num_plans, device=cfg.device,
                         gpu_devices=cfg.gpu_devices, timeout=cfg.timeout, startup_timeout=cfg.startup_timeout,
                         stall_timeout=stall, work_dir=work_dir, fault=fault, keep_dir=keep_dir,
                         error_type=HardwareEvalError)

    def write_inputs(self, job_dir: str) -> None:
        with open(os.path.join(job_dir, JOB_FILE), "w") as f:
            json.dump(self.job, f)


def measure_plans(plans_path, data_dir, task_path, cfg: HardwareConfig, *,
                  on_result: Callable[[dict], None] | None = None, work_dir: str | None = None,
                  fault: str | None = None) -> list[dict]:
    """Measure every plan of `plans_path` (written by `formats.write_plans`) in one job.

    Returns one measurement record per runnable plan (see `runnable`), in file
    order; `on_result(rec)` is called as each arrives. Raises HardwareEvalError
    (naming the failing rank and cause) if any rank fails.
    """
    from neuroshard.formats import read_plans

    items = runnable(read_plans(plans_path))
    if not items:
        return []
    out = []
    with HardwareJob(plans_path, data_dir, task_path, len(items), cfg, work_dir=work_dir, fault=fault) as job:
        for rec in job.records():
            out.append(rec)
            if on_result is not None:
                on_result(rec)
    return out


# =========================================================================== results


def measured_breakdown(rec: dict) -> CostBreakdown:
    """The measured per-rank costs of one plan as a CostBreakdown (total = sum of parts, cost = max)."""
    extra = {k: rec[k] for k in ("dims", "ntables", "skew", "fw_comm_nosleep") if k in rec}
    return CostBreakdown(list(rec["compute"]), list(rec["bw_comm"]), list(rec["fw_comm"]), extra=extra)


def merge_results(records: Sequence[dict], measured: Sequence[dict]) -> list[dict]:
    """One result per plan record (every task x algorithm, run or not), in record order.

    Keeps the plan record's fields (status, message, estimated_cost,
    estimate, search_ms, ...; the plan as JSON and a `plan_key` that is equal
    for equal plans) and adds `cost` (measured plan cost, ms; None when not
    run), `measured` (the per-rank breakdown) and, in end-to-end mode,
    `e2e_cost` and `e2e`. `measured` is `measure_plans`' output for the
    runnable records, in order.
    """
    items = runnable(records)
    if len(measured) != len(items):
        raise NeuroShardError(f"{len(measured)} measurements for {len(items)} runnable plans")
    by_id = {id(rec): m for rec, m in zip(items, measured)}
    results = []
    for rec in records:
        out = {k: v for k, v in rec.items() if k not in ("view", "plan")}
        plan = rec.get("plan")
        out["plan"] = plan.to_json() if plan is not None else None
        out["plan_key"] = json.dumps(out["plan"], separators=(",", ":")) if plan is not None else None
        out["estimated_cost"] = _estimated_cost(rec)
        m = by_id.get(id(rec))
        if m is not None:
            bd = measured_breakdown(m)
            out["status"] = "ok"
            out["cost"] = bd.cost
            out["measured"] = {**bd.to_json(), "compute_iters": m.get("compute_iters"), "build_s": m.get("build_s")}
            if "e2e" in m:
                out["e2e"] = m["e2e"]
                out["e2e_cost"] = m["e2e"]["cost"]
        else:
            out["status"] = rec.get("status") or "invalid"
            out["cost"] = None
        results.append(out)
    return results


def _estimated_cost(rec: dict) -> float | None:
    if rec.get("estimated_cost") is not None:
        return float(rec["estimated_cost"])
    est = rec.get("estimate")
    if isinstance(est, dict) and est.get("cost") is not None:
        return float(est["cost"])
    return None


# =========================================================================== summary


def _finite(x):
    return float(x) if x is not None and math.isfinite(x) else None


def simulator_accuracy(results: Sequence[dict], cost_key: str = "cost") -> dict:
    """How well the simulator's estimates match the hardware, over every measured plan.

    `mape` and `spearman` of estimated vs measured plan cost (`cost_key`:
    "cost" for the sum of parts, "e2e_cost" for the end-to-end step);
    `pair_agreement`: for every task and every pair of algorithms with both
    plans measured, the share where the simulator orders the two plans as
    the hardware does. Pairs with the same plan, or with estimates within
    1e-9 ms, say nothing about ordering and are left out (`pairs_tied`).
    `parts`: MAPE and Spearman of the per-rank compute, backward comm,
    forward comm and total (all ranks of all plans) show where errors come from.
    """
    from neuroshard.training import regression_metrics

    done = [r for r in results if r.get(cost_key) is not None and r.get("estimated_cost") is not None]
    out: dict = {"cost": cost_key, "plans": len(done), "mape": None, "spearman": None,
                 "pair_agreement": None, "pairs": 0, "pairs_tied": 0, "parts": {}}
    if not done:
        return out
    est = np.array([r["estimated_cost"] for r in done])
    meas = np.array([r[cost_key] for r in done])
    m = regression_metrics(est, meas)
    out.update(mape=_finite(m["mape"]), spearman=_finite(m["spearman"]),
               mean_estimated=float(est.mean()), mean_measured=float(meas.mean()))
    if cost_key == "cost":
        for part in ("compute", "bw_comm", "fw_comm", "total"):
            pe, pm = [], []
            for r in done:
                e, mm = r.get("estimate") or {}, r.get("measured") or {}
                if part in e and part in mm and len(e[part]) == len(mm[part]):
                    pe += list(e[part])
                    pm += list(mm[part])
            if pe:
                pm_ = regression_metrics(pe, pm)
                out["parts"][part] = {"mape": _finite(pm_["mape"]), "spearman": _finite(pm_["spearman"]),
                                      "n": pm_["n"]}

    agree = total = tied = 0
    by_task: dict[int, list[dict]] = {}
    for r in done:
        by_task.setdefault(r["task"], []).append(r)
    for rs in by_task.values():
        for a, b in itertools.combinations(rs, 2):
            same_plan = a.get("plan_key") is not None and a.get("plan_key") == b.get("plan_key")
            if same_plan or abs(a["estimated_cost"] - b["estimated_cost"]) <= 1e-9:
                tied += 1
                continue
            total += 1
            agree += (a["estimated_cost"] < b["estimated_cost"]) == (a[cost_key] < b[cost_key])
    out.update(pairs=total, pairs_tied=tied, pair_agreement=agree / total if total else None)
    return out


def summarize(results: Sequence[dict], algs: Sequence[str], num_tasks: int) -> dict:
    """The comparison across algorithms on measured costs, beside the simulator's, and its accuracy.

    The table is `evaluation.summarize`'s (the one eval_simulator.py
    writes) on the measured cost: per algorithm upstream's `average` and
    `valid` / `tasks`, `mean_common` over the tasks valid for every
    algorithm, `rank`, `neuroshard_gain`; each row adds the same figures for
    the simulator's estimate of the same plans (`*_estimated`) and, in
    end-to-end mode, for the end-to-end step (`*_e2e`).
    """
    from neuroshard import evaluation as ev

    hw = ev.summarize(results, algs, num_tasks, cost_key="cost")
    sim = ev.summarize(results, algs, num_tasks, cost_key="estimated_cost")
    e2e = any(r.get("e2e_cost") is not None for r in results)
    e2e_sum = ev.summarize(results, algs, num_tasks, cost_key="e2e_cost") if e2e else None
    for k, row in enumerate(hw["algorithms"]):
        for suffix, other in (("estimated", sim), ("e2e", e2e_sum)):
            if other is None:
                continue
            o = other["algorithms"][k]
            for key in ("average", "mean_common", "rank", "neuroshard_gain"):
                row[f"{key}_{suffix}"] = o.get(key)
    greedy = {a: b for a, b in hw["neuroshard_beats"].items() if a.endswith("_greedy")}
    summary = {**hw, "simulator_ranking": sim["ranking"],
               "neuroshard_beats_every_greedy": all(greedy.values()) if greedy else None,
               "simulator_accuracy": simulator_accuracy(results)}
    if e2e:
        summary["e2e_ranking"] = e2e_sum["ranking"]
        summary["simulator_accuracy_e2e"] = simulator_accuracy(results, "e2e_cost")
        pairs = [(r["e2e_cost"], r["cost"]) for r in results
                 if r.get("e2e_cost") is not None and r.get("cost") is not None]
        if pairs:
            from neuroshard.training import spearman

            e, c = np.array(pairs).T
            summary["e2e_vs_parts"] = {"plans": len(pairs), "mean_ratio": float(np.mean(e / c)),
                                       "spearman": _finite(spearman(e, c))}
    return summary


SUMMARY_COLUMNS = ["alg", "valid", "tasks", "oom", "invalid", "average", "mean_common", "rank", "neuroshard_gain",
                   "average_estimated", "mean_common_estimated", "rank_estimated", "neuroshard_gain_estimated",
                   "average_e2e", "mean_common_e2e", "rank_e2e", "neuroshard_gain_e2e", "median_search_ms",
                   "mean_splits"]


def _pct(x, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def summary_markdown(summary: dict) -> str:
    """The comparison table across algorithms (measured, estimated, end-to-end) and the simulator's accuracy."""
    from neuroshard.evaluation import _fmt

    rows = summary["algorithms"]
    e2e = "e2e_ranking" in summary
    ref = summary.get("reference", "neuroshard")
    head = ["algorithm", "valid", "average ms", f"mean ms (common {summary['common_tasks']})", "rank",
            f"{ref} gain", "estimated ms (common)", "sim rank"]
    if e2e:
        head += ["end-to-end ms (common)", "e2e rank"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["alg"], f"{r['valid']} / {r['tasks']}", _fmt(r["average"]), _fmt(r["mean_common"]),
                 str(r.get("rank", "-")), "" if r["alg"] == ref else _fmt(r.get("neuroshard_gain"), pct=True),
                 _fmt(r.get("mean_common_estimated")), str(r.get("rank_estimated") or "-")]
        if e2e:
            cells += [_fmt(r.get("mean_common_e2e")), str(r.get("rank_e2e") or "-")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for key, what in (("simulator_accuracy", "sum of parts"), ("simulator_accuracy_e2e", "end-to-end")):
        acc = summary.get(key)
        if not acc:
            continue
        lines.append(f"Simulator vs hardware ({what}) over {acc['plans']} measured plans: MAPE {_pct(acc['mape'])}, "
                     f"Spearman {_fmt(acc['spearman'])}, same order as the hardware in "
                     f"{_pct(acc['pair_agreement'])} of {acc['pairs']} (task, algorithm pair) cases "
                     f"({acc['pairs_tied']} ties left out).")
        parts = acc.get("parts") or {}
        if parts:
            lines.append("Per-rank MAPE: " + ", ".join(f"{k} {_pct(v['mape'])}" for k, v in parts.items()) + ".")
    if "e2e_vs_parts" in summary:
        ev = summary["e2e_vs_parts"]
        lines.append(f"End-to-end step / sum-of-parts cost: mean ratio {ev['mean_ratio']:.2f}, "
                     f"Spearman {_fmt(ev['spearman'])} over {ev['plans']} plans.")
    return "\n".join(lines) + "\n"


def format_result(res: dict, num_tasks: int) -> str:
    """One line per task and algorithm: the measured cost, the estimate and the per-rank parts."""
    from neuroshard.evaluation import format_record

    if res.get("cost") is None:
        return format_record(res, num_tasks)
    m = res["measured"]
    ranks = " ".join(f"{c:.2f}/{b:.2f}/{f:.2f}" for c, b, f in zip(m["compute"], m["bw_comm"], m["fw_comm"]))
    est = "-" if res.get("estimated_cost") is None else f"{res['estimated_cost']:.4f}"
    line = (f"Task {res['task'] + 1}/{num_tasks} [{res['alg']}] Latency: {res['cost']:.4f} ms "
            f"(estimated {est} ms; per rank compute/bw/fw ms: {ranks})")
    if res.get("e2e_cost") is not None:
        line += f" end-to-end {res['e2e_cost']:.4f} ms"
    return line


def write_outputs(out_dir, results: Sequence[dict], summary: dict) -> None:
    """results.json/.csv (one row per task x algorithm), ranks.csv (one row per rank of each
    measured plan, measured beside estimated parts), summary.json/.csv/.md."""
    from neuroshard.cli import atomic_write, write_json_atomic
    from neuroshard.evaluation import _csv_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / RESULTS_JSON, list(results))
    with atomic_write(out / RESULTS_CSV) as fh:
        fh.write(_csv_text(
            ["task", "alg", "status", "cost_ms", "estimated_ms", "e2e_ms", "compute_max_ms", "bw_comm_max_ms",
             "fw_comm_max_ms", "search_ms", "num_tables", "num_splits", "message"],
            ([r["task"], r["alg"], r["status"], r.get("cost"), r.get("estimated_cost"), r.get("e2e_cost"),
              *((max(r["measured"][p]) for p in ("compute", "bw_comm", "fw_comm")) if r.get("measured")
                else (None, None, None)),
              r.get("search_ms"), r.get("num_tables"), r.get("num_splits"), r.get("message") or ""]
             for r in results)))
    rank_rows = []
    for r in results:
        m, e = r.get("measured"), r.get("estimate") or {}
        if not m:
            continue
        n = len(m["compute"])

        def est(part, q):
            v = e.get(part)
            return v[q] if isinstance(v, list) and len(v) == n else None

        for q in range(n):
            rank_rows.append([r["task"], r["alg"], q, m["ntables"][q], m["dims"][q], m["compute"][q],
                              m["bw_comm"][q], m["fw_comm"][q], m["total"][q], m["fw_comm_nosleep"][q],
                              m["skew"][q], est("compute", q), est("bw_comm", q), est("fw_comm", q),
                              est("total", q)])
    with atomic_write(out / RANKS_CSV) as fh:
        fh.write(_csv_text(["task", "alg", "rank", "ntables", "dim_sum", "compute_ms", "bw_comm_ms", "fw_comm_ms",
                            "total_ms", "fw_comm_nosleep_ms", "skew_ms", "est_compute_ms", "est_bw_comm_ms",
                            "est_fw_comm_ms", "est_total_ms"], rank_rows))
    write_json_atomic(out / SUMMARY_JSON, summary)
    with atomic_write(out / SUMMARY_CSV) as fh:
        fh.write(_csv_text(SUMMARY_COLUMNS, ([r.get(c) for c in SUMMARY_COLUMNS] for r in summary["algorithms"])))
    with atomic_write(out / SUMMARY_MD) as fh:
        fh.write(summary_markdown(summary))


def print_summary(summary: dict, file=None) -> None:
    """Upstream's closing lines per algorithm (Average, Valid v / N), then the comparison table."""
    from neuroshard.evaluation import print_summary as print_lines

    print_lines(summary, file, table=summary_markdown)


# =========================================================================== the whole run


def check_plans(records: Sequence[dict], configs, tasks: Sequence[Task], ndevices: int, max_mem: float) -> list[dict]:
    """Re-validate plan records read from a file against the tasks (`--plans`): a plan for another
    task file, device count or memory cap becomes "invalid"/"oom" (reported, not run)."""
    from neuroshard.simulator import validate_plan
    from neuroshard.types import InvalidPlanError, OutOfMemoryError

    out = []
    for rec in records:
        rec = dict(rec)
        if rec["task"] >= len(tasks):
            raise InputError("--plans", f"plan for task {rec['task']} but the task file has {len(tasks)} tasks")
        if rec.get("plan") is not None:
            try:
                validate_plan(tasks[rec["task"]].tables(configs), rec["plan"], ndevices, max_mem)
            except OutOfMemoryError as e:
                rec.update(plan=None, status="oom", message=str(e), estimated_cost=None, estimate=None, view=None)
            except InvalidPlanError as e:
                rec.update(plan=None, status="invalid", message=f"plan does not fit task {rec['task']}: {e}",
                           estimated_cost=None, estimate=None, view=None)
        out.append(rec)
    return out


def run_evaluation(records: Sequence[dict], data_dir, task_path, cfg: HardwareConfig, out_dir, algs: Sequence[str],
                   num_tasks: int, config: dict | None = None, show: Callable[[str], None] | None = print,
                   fault: str | None = None) -> tuple[list[dict], dict]:
    """Write the plans to `out_dir/plans.json`, measure them all in one job, write and return
    (results, summary). Records without a plan (out of memory, invalid) are reported, not run."""
    from neuroshard.cli import write_json_atomic
    from neuroshard.formats import write_plans

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config is not None:
        write_json_atomic(out / "config.json", config)
    plans_path = out / PLANS_FILE
    write_plans(plans_path, records)
    items = runnable(records)
    if show is not None:
        for rec in records:
            if rec.get("plan") is None:
                show(format_result({**rec, "cost": None}, num_tasks))

    stamps = [time.perf_counter()]

    def arrived(m: dict) -> None:
        stamps.append(time.perf_counter())
        if show is not None:
            [res] = merge_results([items[m["i"]]], [m])
            show(format_result(res, num_tasks))

    # the job's scratch dir (kept, with the ranks' logs, if the job fails) lives beside the results
    measured = measure_plans(plans_path, data_dir, task_path, cfg, on_result=arrived, work_dir=str(out),
                             fault=fault)
    results = merge_results(records, measured)
    summary = summarize(results, algs, num_tasks)
    # wall time: the whole job (start-up included) and per plan (time between results after the first)
    job_s = time.perf_counter() - stamps[0]
    per_plan = np.diff(stamps[1:])
    summary["hardware"] = {**cfg.to_json(), "plans_measured": len(items), "job_s": job_s,
                           "first_plan_s": stamps[1] - stamps[0] if len(stamps) > 1 else None,
                           "per_plan_s": float(np.median(per_plan)) if len(per_plan) else None}
    write_outputs(out, results, summary)
    return results, summary


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        worker_main()
    else:
        raise SystemExit("neuroshard.hardware_eval is run by torchrun (--worker); use eval.py")
