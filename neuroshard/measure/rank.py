"""The rank side of a measurement job (run by torchrun), and the one rank loop every job's ranks run.

A job's launcher (`measure.launch.TorchrunJob`) writes `job.json` into the
job dir and starts ``python -m neuroshard.measure.rank --job_dir DIR`` on
every rank. Settings reach the ranks this one way: each rank reads its own
node's job file (device, collective timeout, the launcher's pid, and the
worker's spec, whose local parts such as a dataset path are this node's),
and rank 0's spec is broadcast to every rank, so node 0's settings rule.

The loop (`main`): record the pid (`start_rank`: the launcher kills by pid;
the rank exits by itself if torchrun or the launcher disappears), join the
process group (`init_group`: NCCL on GPUs, gloo on CPU), build the job's
worker (`WORKERS`: the all-to-all samples of the comm collection, the collectives of spread tables, the
plans of the hardware evaluation, or the plans trained with TorchRec), then take the items block by block (rank
0 reads them from the job dir and broadcasts each block) and measure each;
the first rank of every node appends the record it gets to its node's
`results.jsonl` (node 0's are the results). A rank that fails writes its
report (`fail_rank`: ``rank<r>.error``, and in a multi-node job the job's
TCPStore) and leaves at once: a broken process group can hang in teardown.

A worker is a `RankWorker`: `setup` (once, after the group exists),
`read_block` (rank 0: the next items, or an empty list at the end) and
`measure` (one item on every rank; returns the record on each node's first
rank). Times in s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Callable, Collection, Sequence, TypeVar

JOB_FILE = "job.json"
RESULTS_FILE = "results.jsonl"
LOG_FILE = "torchrun.log"
STORE_TIMEOUT_S = 3.0  # a failing rank's connection to the job's store (multi-node error reports)
REMOTE_REPORT_WAIT_S = 3.0  # how long a rank that lost a peer waits for the culprit's report
MODULE = "neuroshard.measure.rank"
# the job file's "worker" -> the class that measures its items (imported by name: the workers import this module)
WORKERS = {"alltoall": "neuroshard.measure.alltoall_job:AllToAllWorker",
           "collectives": "neuroshard.measure.collectives:CollectiveWorker",
           "plans": "neuroshard.measure.plan_job:PlanWorker",
           "torchrec_memory": "neuroshard.torchrec.memory:TorchRecMemoryWorker",
           "torchrec_train": "neuroshard.torchrec.training:TorchRecTrainWorker"}
T = TypeVar("T")


# --------------------------------------------------------------------------- the rank protocol


def barrier(dist, device: str) -> None:
    """A barrier on the job's process group (on NCCL, on this rank's GPU)."""
    if device.startswith("cuda"):
        import torch

        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()



def _is_peer_failure(exc: BaseException) -> bool:
    """True for errors that mean "a peer is gone or late" rather than a bug on this rank."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(k in text for k in ("timed out", "timeout", "closed by peer", "reset by peer",
                                   "broken pipe", "connection refused", "connection reset",
                                   "distbackenderror", "distnetworkerror", "socket"))


def short_message(exc: BaseException, limit: int = 240) -> str:
    """First line of an exception, without gloo's source-location prefix and advice."""
    text = str(exc).strip()
    text = text.splitlines()[0] if text else ""
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    text = text.split(". This is typically caused")[0]
    return text if len(text) <= limit else text[:limit] + "..."


def _start_orphan_watch(parent_pid: int | None) -> None:
    """Exit this rank if torchrun (our parent) or the launcher process disappears,
    so a SIGKILLed launcher never leaves ranks behind."""
    ppid = os.getppid()

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != ppid:
                os._exit(3)
            if parent_pid:
                try:
                    os.kill(parent_pid, 0)
                except ProcessLookupError:
                    os._exit(3)
                except PermissionError:
                    pass

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def start_rank(job_dir: str, parent_pid: int | None) -> int:
    """First thing a worker rank does: record its pid in `job_dir` (so the launcher
    can kill it) and exit by itself if torchrun or the launcher disappears. Returns RANK."""
    rank = int(os.environ["RANK"])
    with open(os.path.join(job_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    _start_orphan_watch(parent_pid)
    return rank


def init_group(device: str, timeout: float) -> str:
    """Join the job's process group (NCCL on GPUs, gloo on CPU); returns this rank's device."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        torch.cuda.set_device(local_rank)
        device, backend = f"cuda:{local_rank}", "nccl"
    else:
        device, backend = "cpu", "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    return device


def local_lead() -> bool:
    """True on the first rank of each node: the one that streams result lines to its node's launcher."""
    return int(os.environ.get("LOCAL_RANK", os.environ["RANK"])) == 0


def _has_remote_ranks() -> bool:
    """True in a job whose ranks span several nodes (torchrun sets both sizes)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) < int(os.environ.get("WORLD_SIZE", "1"))


def _report_key(rank: int) -> str:
    return f"neuroshard/{os.environ.get('TORCHELASTIC_RUN_ID', 'job')}/error/{rank}"


def _share_report(report: dict) -> list[dict]:
    """Post this rank's report to the job's TCPStore (torchrun's, on node 0) and, if this rank
    only lost a peer, collect the other ranks' reports from it (waiting up to
    REMOTE_REPORT_WAIT_S for one that names a cause). Best effort: the store goes with node 0's agent."""
    try:
        import torch.distributed as dist

        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=timedelta(seconds=STORE_TIMEOUT_S))
        store.set(_report_key(report["rank"]), json.dumps(report))
        if not report["peer"]:
            return []
        deadline = time.monotonic() + REMOTE_REPORT_WAIT_S
        while True:
            found = [json.loads(store.get(_report_key(r))) for r in range(int(os.environ["WORLD_SIZE"]))
                     if r != report["rank"] and store.check([_report_key(r)])]
            if any(not rep["peer"] for rep in found) or time.monotonic() > deadline:
                return found
            time.sleep(0.2)
    except Exception:  # the store is gone or unreachable: the local report still stands
        return []


def _write_report(job_dir: str, report: dict) -> None:
    try:
        with open(os.path.join(job_dir, f"rank{report['rank']}.error"), "w") as f:
            json.dump(report, f)
    except OSError:
        pass


def fail_rank(job_dir: str, rank: int, state: dict, exc: BaseException):
    """Report a rank's failure to the launcher (``rank<r>.error``, stderr), then leave at once:
    a broken process group can hang in teardown. `state` holds the item index ("sample") and
    the phase the rank was in. In a multi-node job the report also goes to the job's store,
    and a rank that lost a peer adds the reports it finds there (``"remote"``) to its own."""
    report = {"rank": rank, "sample": state.get("sample"), "phase": state.get("phase"),
              "type": type(exc).__name__, "message": short_message(exc),
              "peer": _is_peer_failure(exc), "node": int(os.environ.get("GROUP_RANK", "0")),
              "host": socket.gethostname()}
    _write_report(job_dir, report)  # first: torchrun may kill this rank once a local peer has exited
    item = state.get("item", "sample")
    where = f"{item} {report['sample']}, " if report["sample"] is not None else ""
    print(f"{state.get('worker', 'measurement')} rank {rank} failed ({where}{report['phase']}): "
          f"{report['type']}: {report['message']}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if _has_remote_ranks():
        remote = _share_report(report)
        if remote:
            _write_report(job_dir, {**report, "remote": remote})
    os._exit(1)


# --------------------------------------------------------------------------- the rank loop


class RankContext:
    """What a worker knows of its rank: `rank`, `world`, `device` (e.g. "cpu", "cuda:1"), `job_dir`,
    `local` (this node's job file) and `spec` (rank 0's worker spec, the same on every rank); `state`
    holds the item and phase that a failure report names."""

    def __init__(self, rank: int, world: int, device: str, job_dir: str, local: dict, spec: dict, state: dict):
        self.rank, self.world, self.device, self.job_dir = rank, world, device, job_dir
        self.local, self.spec, self.state = local, spec, state

    def broadcast(self, obj):
        """Rank 0's `obj`, on every rank (only node 0 has the job's inputs)."""
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj) -> list:
        """Every rank's `obj`, in rank order, on every rank."""
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        import torch.distributed as dist

        barrier(dist, self.device)

    def take_turns(self, turns: Sequence[Collection[int]], run: Callable[[int], T], what: str) -> list[T]:
        """`run(q)` on the ranks of each turn q in order while the others wait at a barrier, then a closing
        barrier: what ranks sharing one machine's cores would slow each other down in (a rank's compute, a
        host group's collectives) is timed as if each turn had the machine to itself, as separate devices or
        hosts would. This rank's results, in the order of the turns it is in."""
        out = []
        for q, ranks in enumerate(turns):
            self.state["phase"] = f"{what} (turn {q + 1} of {len(turns)}: ranks {', '.join(map(str, ranks))})"
            self.barrier()
            if self.rank in ranks:
                out.append(run(q))
        self.state["phase"] = f"{what} (closing barrier)"
        self.barrier()
        return out


class RankWorker:
    """What a job measures, item by item (see the module doc). `item` names one item in messages,
    `first_phase` the phase a failure report names until `measure` says more."""

    item = "item"
    first_phase = "before measuring"

    def __init__(self, ctx: RankContext):
        self.ctx = ctx

    def read_block(self, done: int) -> list:
        """Rank 0 only: the next items after `done` of them (an empty list when there are no more)."""
        raise NotImplementedError

    def measure(self, k: int, item) -> dict | None:
        """Measure item `k` on this rank; returns its JSON record on each node's first rank, else None."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what `__init__` opened (rank 0's input files)."""


def _worker_class(name: str) -> type:
    if name not in WORKERS:
        raise ValueError(f"job file names an unknown worker {name!r} (known: {', '.join(sorted(WORKERS))})")
    module, cls = WORKERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of one rank (run by torchrun): the loop of the module doc."""
    p = argparse.ArgumentParser(description="a measurement job's rank (run by torchrun)")
    p.add_argument("--job_dir", required=True)
    args = p.parse_args(argv)
    job_dir = args.job_dir
    with open(os.path.join(job_dir, JOB_FILE)) as f:
        local = json.load(f)
    rank = start_rank(job_dir, local.get("parent_pid"))
    world = int(os.environ["WORLD_SIZE"])
    state = {"sample": None, "phase": "start-up", "worker": local["worker"]}
    try:
        import torch.distributed as dist

        cls = _worker_class(local["worker"])
        state["item"] = cls.item
        state["phase"] = "process-group init"
        device = init_group(local["device"], float(local["timeout"]))
        state["phase"] = "receiving the settings from rank 0"
        ctx = RankContext(rank, world, device, job_dir, local, None, state)
        ctx.spec = ctx.broadcast(local["spec"])
        worker = cls(ctx)
        results = open(os.path.join(job_dir, RESULTS_FILE), "a") if local_lead() else None
        done = 0
        while True:
            state["sample"], state["phase"] = done, f"receiving {cls.item}s from rank 0"
            block = ctx.broadcast(worker.read_block(done) if rank == 0 else None)
            if not block:
                break
            for item in block:
                state["sample"], state["phase"] = done, cls.first_phase
                rec = worker.measure(done, item)
                if results is not None:
                    results.write(json.dumps(rec) + "\n")
                    results.flush()
                done += 1
        state["sample"], state["phase"] = None, "shutdown"
        ctx.barrier()
        if results is not None:
            results.close()
        worker.close()
        dist.destroy_process_group()
    except BaseException as exc:  # report, then leave at once: a broken group can hang in teardown
        fail_rank(job_dir, rank, state, exc)
    # Every result is written: leave without the interpreter's teardown, where threads that a library
    # (TorchRec's DistributedModelParallel) left running can abort the process ("terminate called without an
    # active exception") and fail a finished job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
