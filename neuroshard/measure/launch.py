"""The parent side of a measurement job: where its ranks run (`LaunchConfig`), the job itself
(`TorchrunJob`) and the failure reports that end it (`JobError`).

A job runs the one rank loop (`measure.rank`) on `ndevices` ranks under
torchrun (`python -m torch.distributed.run`, `measure.agent`: gloo on CPU, NCCL on GPUs). The
launcher writes the job file (`job.json`: the worker, device, collective
timeout, its own pid and the worker's spec) and any input files into a
fresh job dir; rank 0 streams one JSON line per finished item to
`results.jsonl` there; `TorchrunJob.records` yields them as they arrive and
guarantees that a dead or hung rank ends the whole job within a bounded
time with a message naming the rank and the cause (`JobError`), leaving no
process behind.

Where the ranks run is a `LaunchConfig`. By default all of them run on this
machine (one torchrun, a rendezvous on a free local port). On several
machines the same command runs once per node (`--nnodes`, `--node_rank`,
`--nproc_per_node`, `--rdzv_endpoint`, `--rdzv_id`): each node's launcher
starts its own torchrun agent; global rank r runs on node
``r // nproc_per_node``, so rank 0 (which receives every rank's numbers
through collectives) is on node 0, and only node 0's caller writes outputs.
Every node's first local rank streams the same result lines into its own
node's job dir, so each launcher watches progress and stalls the same way.

Failures across nodes: a rank's error report (``rank<r>.error``) lands in
its own node's job dir, which node 0 cannot read without a shared file
system, and a broken process group cannot carry it. So in a multi-node job
a failing rank also posts its report to the job's TCPStore (the one
torchrun's static rendezvous hosts on node 0 at `--rdzv_endpoint`), and a
rank that fails because a peer went away first collects the others'
reports from it: node 0's message names the failing rank, its node and
host, wherever it ran. Each node's own launcher names its own ranks too (a
rank killed by a signal cannot post a report; its node says what happened).
Times in s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from typing import ClassVar, Iterator

from neuroshard.checks import check_float, check_int
from neuroshard.measure.agent import ForkedAgent, start_agent
from neuroshard.measure.process_env import measuring_env
from neuroshard.measure.rank import (
    JOB_FILE,
    LOG_FILE,
    MODULE,
    RESULTS_FILE,
    short_message,
)
from neuroshard.settings import Settings, setting
from neuroshard.types.errors import ConfigError, NeuroShardError

DEFAULT_TIMEOUT_S = 60.0  # process-group (collective) timeout
# Extra time the launcher grants beyond the collective timeout before it
# declares the job hung: the ranks' own timeout fires first and names the cause.
WATCHDOG_GRACE_S = 30.0
DEFAULT_STARTUP_TIMEOUT_S = 180.0  # torchrun + `import torch` x n on a loaded 2-core box
# How long the nodes of a multi-node job wait for each other at the rendezvous. Node 0 plans
# (eval.py) before it joins, so the others wait that long too: give eval.py --plans to keep it short.
DEFAULT_JOIN_TIMEOUT_S = 300.0
DEFAULT_RDZV_ID = "neuroshard"


class JobError(NeuroShardError):
    """A torchrun job failed: a rank raised, died or hung (the message names it)."""


# --------------------------------------------------------------------------- where the ranks run


def parse_endpoint(text: str, flag: str = "--rdzv_endpoint") -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port); ConfigError naming `flag` otherwise."""
    host, sep, port = str(text).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(flag, f"expected HOST:PORT of node 0 with a port in 1..65535 (the same on every "
                                f"node), got {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class LaunchConfig(Settings):
    """Where a job's ranks run, in torchrun's vocabulary (its fields are the flags of every script that
    starts a torchrun job).

    Default: one node, today's single-node job (`nproc_per_node` ranks here,
    a rendezvous on a free local port). With `rdzv_endpoint` (required when
    `nnodes` > 1) the same command runs once on each of `nnodes` machines,
    each with its own `node_rank`; the job has ``nnodes x nproc_per_node``
    ranks and global rank r runs on node ``r // nproc_per_node``. The
    rendezvous is torchrun's *static* backend: it honours `--node_rank`
    (torchrun's c10d backend orders nodes by hostname and pid instead, so
    global rank 0, and with it the outputs, could land on any node) and its
    TCPStore lives on node 0 at `rdzv_endpoint`, as long as node 0's agent.
    A node that has not joined within `join_timeout` s ends the others.
    `nproc_per_node` stays None until the world size is known (`for_world`).
    """

    TITLE: ClassVar[str] = ("several machines (torchrun): run the same command on every node, each with its "
                            "--node_rank; node 0 writes the outputs")

    nnodes: int = setting(1, "number of machines (default: 1, this one)", show_default=False)
    node_rank: int = setting(0, "this machine's index, 0..nnodes-1; node 0 holds global rank 0 and writes the "
                                "outputs, the others only lend their ranks")
    nproc_per_node: int | None = setting(None, "ranks on each machine (default: the --gpu_devices count, or "
                                               "--ndevices / --nnodes)")
    rdzv_endpoint: str | None = setting(None, "node 0's address and a free port, the same on every node (needed "
                                              "with --nnodes > 1; default: one machine, a free local port)",
                                        metavar="HOST:PORT")
    rdzv_id: str = setting(DEFAULT_RDZV_ID, "job id shared by the nodes")
    join_timeout: float = setting(DEFAULT_JOIN_TIMEOUT_S, "s the nodes wait for each other at the rendezvous; a "
                                                          "node that has not joined by then ends the others with "
                                                          "a message")

    @property
    def multi_node(self) -> bool:
        """True when the job's rendezvous is at `rdzv_endpoint` (one command per node)."""
        return self.rdzv_endpoint is not None

    @property
    def writes_outputs(self) -> bool:
        """Node 0 holds global rank 0: only its caller writes output files."""
        return self.node_rank == 0

    def validate(self) -> None:
        check_int("--nnodes", self.nnodes, 1)
        check_int("--node_rank", self.node_rank, 0, self.nnodes - 1)
        if self.nproc_per_node is not None:
            check_int("--nproc_per_node", self.nproc_per_node, 1)
        if self.nnodes > 1 and self.rdzv_endpoint is None:
            raise ConfigError("--rdzv_endpoint", f"needed with --nnodes {self.nnodes}: HOST:PORT of node 0, "
                                                 "the same on every node")
        if self.rdzv_endpoint is not None:
            parse_endpoint(self.rdzv_endpoint)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", str(self.rdzv_id)):
            raise ConfigError("--rdzv_id", f"expected letters, digits, '_', '.', '-' (at most 64), "
                                           f"got {self.rdzv_id!r}")
        check_float("--join_timeout", self.join_timeout, 0.0, lo_open=True)

    def for_world(self, world: int) -> "LaunchConfig":
        """This launch for a job of `world` ranks: fills `nproc_per_node` (world / nnodes)."""
        check_int("--ndevices", world, 1)
        nproc = self.nproc_per_node if self.nproc_per_node is not None else world // self.nnodes
        if nproc < 1 or nproc * self.nnodes != world:
            raise ConfigError("--ndevices", f"{world} ranks do not fill --nnodes {self.nnodes} x "
                                            f"--nproc_per_node {nproc}")
        return replace(self, nproc_per_node=nproc)

    def node_of(self, rank: int) -> int:
        return rank // self.nproc_per_node

    def local_ranks(self) -> range:
        """The global ranks that run on this node."""
        return range(self.node_rank * self.nproc_per_node, (self.node_rank + 1) * self.nproc_per_node)

    def layout(self) -> dict:
        """The node layout, for run configs that must not mix measurements: an all-to-all across
        machines is not one inside a machine. Empty on one node, so single-node configs stay as they were."""
        return {"nnodes": self.nnodes, "nproc_per_node": self.nproc_per_node} if self.nnodes > 1 else {}


    def torchrun_args(self, rdzv_id: str | None = None) -> list[str]:
        """torchrun's rendezvous flags for this node (`rdzv_id`: the single-node job's own id)."""
        if not self.multi_node:  # a free port per job on this machine
            return [f"--nproc_per_node={self.nproc_per_node}", "--nnodes=1", "--rdzv_backend=c10d",
                    "--rdzv_endpoint=127.0.0.1:0", f"--rdzv_id={rdzv_id or uuid.uuid4().hex}"]
        return [f"--nproc_per_node={self.nproc_per_node}", f"--nnodes={self.nnodes}",
                f"--node_rank={self.node_rank}", "--rdzv_backend=static", f"--rdzv_endpoint={self.rdzv_endpoint}",
                f"--rdzv_id={self.rdzv_id}", f"--rdzv_conf=timeout={max(1, round(self.join_timeout))}"]


# --------------------------------------------------------------------------- launcher


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class TorchrunJob:
    """One torchrun job of the rank loop (`measure.rank`) whose rank 0 streams results as JSON lines.

    `worker` names what the ranks measure (a key of `rank.WORKERS`) and
    `spec` its settings (a dataclass with `to_json`, written into the job
    file with the device, the collective timeout and this process's pid);
    the ranks run ``python -m <worker_module> --job_dir DIR`` (default: the
    rank loop; a test may hand in a module that wraps it). Each rank writes
    ``rank<r>.pid`` and, on failure, ``rank<r>.error``; rank 0 appends one
    JSON object per finished item, ``{"i": index, ...}``, to
    ``results.jsonl``. Subclasses write further input files in
    :meth:`write_inputs`.

    Use as a context manager and iterate :meth:`records`. Any failure (a rank
    raising, dying or hanging; torchrun exiting early; no record within
    `stall_timeout` seconds, default ``timeout + WATCHDOG_GRACE_S``, or
    `startup_timeout` for the first) raises :class:`JobError` naming the
    rank and cause; on exit every process of the job is gone.

    `launch` (default: every rank on this machine) places the ranks on
    several nodes; `ndevices` is then the world size. On a node other than
    node 0 the job only lends its ranks: its inputs come from node 0, its
    records are node 0's (written by its first local rank, for progress),
    `num_items` is unknown (None) and the job ends when torchrun does.
    """

    item: ClassVar[str] = "sample"  # what one result line is about, for messages
    job_prefix: ClassVar[str] = "job_"  # temp dir name prefix

    def __init__(self, worker: str, spec, ndevices: int, num_items: int | None, *,
                 device: str = "cpu", gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, stall_timeout: float | None = None,
                 work_dir: str | None = None, keep_dir: bool = False, launch: LaunchConfig | None = None,
                 worker_module: str | None = None):
        if ndevices < 1:
            raise ConfigError("--ndevices", f"need at least 1 rank, got {ndevices}")
        launch = launch or LaunchConfig()
        launch.validate()
        launch = launch.for_world(ndevices)
        if device == "cuda" and gpu_devices is not None:
            if len(gpu_devices.split(",")) != launch.nproc_per_node:
                raise ConfigError("--gpu_devices", f"{gpu_devices!r} names "
                                 f"{len(gpu_devices.split(','))} GPUs, expected {launch.nproc_per_node}")
        self.worker, self.spec, self.worker_module = worker, spec, worker_module or MODULE
        self.ndevices, self.device, self.launch = ndevices, device, launch
        self.num_items = num_items if launch.writes_outputs else None
        self.gpu_devices, self.timeout, self.startup_timeout = gpu_devices, timeout, startup_timeout
        self.stall_timeout = stall_timeout if stall_timeout is not None else timeout + WATCHDOG_GRACE_S
        self.work_dir, self.keep_dir = work_dir, keep_dir
        self.job_dir: str | None = None
        self.proc: subprocess.Popen | ForkedAgent | None = None
        self._log = None
        self._failed = False
        self._started = 0.0

    # -- lifecycle

    def job_file(self) -> dict:
        """What the ranks read from `job.json` (the one way settings reach them, see `measure.rank`)."""
        return {"worker": self.worker, "device": self.device, "timeout": self.timeout, "parent_pid": os.getpid(),
                "spec": self.spec.to_json()}

    def write_inputs(self, job_dir: str) -> None:
        """Hook: write the job's input files (besides the job file) into `job_dir` before the ranks start."""

    def top_up(self, done: int) -> None:
        """Hook: called while results arrive (`done` so far); a job whose inputs are produced
        as it runs appends more here."""

    def __enter__(self) -> "TorchrunJob":
        if self.work_dir is not None:
            os.makedirs(self.work_dir, exist_ok=True)
        self.job_dir = tempfile.mkdtemp(prefix=self.job_prefix, dir=self.work_dir)
        with open(os.path.join(self.job_dir, JOB_FILE), "w") as f:
            json.dump(self.job_file(), f)
        self.write_inputs(self.job_dir)
        open(os.path.join(self.job_dir, RESULTS_FILE), "w").close()
        args = [*self.launch.torchrun_args(), "--max_restarts=0", "-m", self.worker_module, "--job_dir", self.job_dir]
        env = measuring_env(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        # Ranks import the same neuroshard as this process, wherever it was started from.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        if self.device == "cuda" and self.gpu_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu_devices
        self._log = open(os.path.join(self.job_dir, LOG_FILE), "w")
        self._started = time.monotonic()
        # Own session/process group: the whole torchrun tree can be signalled at once.
        self.proc = start_agent(args, env, self._log)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()
        if exc_type is not None:
            self._failed = True
        if self.job_dir and not self._failed and not self.keep_dir:
            shutil.rmtree(self.job_dir, ignore_errors=True)

    def close(self) -> None:
        """Stop torchrun and every rank (SIGTERM, then SIGKILL after a grace period)."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Ranks run in their own sessions (torchrun starts them so): kill any survivor.
        for pid in self._worker_pids():
            if _pid_alive(pid) and self.job_dir in _cmdline(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + 10
        for pid in self._worker_pids():
            while _pid_alive(pid) and self.job_dir in _cmdline(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _signal_group(self, sig) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _worker_pids(self) -> list[int]:
        pids = []
        if not self.job_dir or not os.path.isdir(self.job_dir):
            return pids
        for name in os.listdir(self.job_dir):
            if name.startswith("rank") and name.endswith(".pid"):
                try:
                    with open(os.path.join(self.job_dir, name)) as f:
                        pids.append(int(f.read().strip()))
                except (OSError, ValueError):
                    pass
        return pids

    # -- results

    def records(self) -> Iterator[dict]:
        """Yield each item's JSON record (in item order) as soon as rank 0 writes it.

        With `num_items` None (a node other than node 0) records come until torchrun exits."""
        path = os.path.join(self.job_dir, RESULTS_FILE)
        done, pos, buf = 0, 0, ""
        last = time.monotonic()
        stall_limit = self.stall_timeout
        # Several nodes: the first record also waits for the others to join.
        first_limit = self.startup_timeout + (self.launch.join_timeout if self.launch.multi_node else 0.0)
        rendezvous_limit = self.launch.join_timeout + WATCHDOG_GRACE_S
        with open(path, "rb") as f:
            while self.num_items is None or done < self.num_items:
                self.top_up(done)
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
                buf += chunk.decode()
                *lines, buf = buf.split("\n")
                for line in lines:
                    if not line.strip():
                        continue
                    rec = json.loads(line)
                    if rec["i"] != done:
                        raise JobError(f"result for {self.item} {rec['i']} arrived, expected {done}")
                    done += 1
                    last = time.monotonic()
                    yield rec
                if done == self.num_items:
                    break
                rc = self.proc.poll()
                if rc is not None:
                    # A last result may have landed between the read and the poll.
                    if os.path.getsize(path) > pos:
                        continue
                    if self.num_items is None and rc == 0:
                        return
                    total = "" if self.num_items is None else f" of {self.num_items}"
                    self._fail(f"torchrun exited with code {rc} after {done}{total} {self.item}s")
                if (self.launch.multi_node and done == 0 and not self._worker_pids()
                        and time.monotonic() - self._started > rendezvous_limit):
                    self._fail(f"no rank started within {rendezvous_limit:.0f} s; job killed")
                limit = first_limit if done == 0 else stall_limit
                if time.monotonic() - last > limit:
                    what = "start-up" if done == 0 else f"{self.item} {done}"
                    self.close()
                    self._fail(f"no result for {limit:.0f} s ({what}); job killed")
                time.sleep(0.02)
        try:
            rc = self.proc.wait(timeout=stall_limit)
        except subprocess.TimeoutExpired:
            self.close()
            self._fail(f"all {self.item}s measured but torchrun did not exit; job killed")
        if rc != 0:
            self._fail(f"all {self.item}s measured but torchrun exited with code {rc}")

    def _fail(self, what: str):
        self._failed = True
        self.close()
        where = f"node {self.launch.node_rank}: " if self.launch.multi_node else ""
        raise JobError(f"{where}{what}: {self.diagnose()} (logs: {self.job_dir})")

    def _reports(self) -> dict[int, dict]:
        """Every rank's error report this node knows of, by rank: its own ranks' files and, in a
        multi-node job, the reports they collected from the job's store (a rank's own cause wins
        over "lost a peer")."""
        local, remote = [], []
        for name in sorted(os.listdir(self.job_dir)):
            if re.fullmatch(r"rank\d+\.error", name):
                try:
                    with open(os.path.join(self.job_dir, name)) as f:
                        rep = json.load(f)
                except (OSError, ValueError):
                    continue
                local.append(rep)
                remote += rep.pop("remote", [])
        by_rank: dict[int, dict] = {}
        for rep in remote + local:  # local last: a rank's own file is the freshest word on it
            old = by_rank.get(rep["rank"])
            if old is None or old["peer"] or not rep["peer"]:
                by_rank[rep["rank"]] = rep
        return by_rank

    def diagnose(self) -> str:
        """Name the failing rank(s) and the cause from the ranks' error reports."""
        if self.launch.multi_node and not self._worker_pids():
            return self._rendezvous_problem()
        reports = sorted(self._reports().values(), key=lambda rep: rep["rank"])
        reported = {rep["rank"] for rep in reports}
        multi = self.launch.multi_node

        def fmt(rep):
            where = f"{self.item} {rep['sample']}, " if rep["sample"] is not None else ""
            at = f" on node {rep.get('node')} ({rep.get('host')})" if multi else ""
            return f"rank {rep['rank']} ({where}{rep['phase']}){at}: {rep['type']}: {rep['message']}"

        own = [rep for rep in reports if not rep["peer"]]
        peer = [rep for rep in reports if rep["peer"]]
        here = self.launch.local_ranks()
        silent = [r for r in here if r not in reported]
        parts = [fmt(rep) for rep in own]
        if silent and (peer or not own):
            codes = self._exit_codes()
            desc = []
            for r in silent:
                code = codes.get(r)
                if code is None or (peer and code in (-signal.SIGTERM, -signal.SIGKILL)):
                    desc.append(f"rank {r} stopped responding (no report; hung or killed)")
                elif code < 0:
                    desc.append(f"rank {r} died from signal {-code}")
                else:
                    desc.append(f"rank {r} exited with code {code} without a report")
            parts = desc + parts
        away = [r for r in range(self.ndevices) if r not in here and r not in reported]
        if away and not own:
            nodes = sorted({self.launch.node_of(r) for r in away})
            parts.append(f"rank(s) {','.join(map(str, away))} on node(s) {','.join(map(str, nodes))} stopped "
                         "responding (no report reached this node: hung or killed; that node's launcher says more)")
        if peer:
            ranks = ",".join(str(rep["rank"]) for rep in peer)
            parts.append(f"rank(s) {ranks} aborted waiting for peers ({fmt(peer[0])})")
        if not parts:
            parts.append("no rank reported an error; see the log")
        return "; ".join(parts)

    def _rendezvous_problem(self) -> str:
        """Why no rank started on this node of a multi-node job, from torchrun's log."""
        text = self._log_text()
        ep, n, wait = self.launch.rdzv_endpoint, self.launch.nnodes, self.launch.join_timeout
        joined = re.search(r"(\d+)/(\d+) clients joined", text)
        if joined:
            return (f"the rendezvous at {ep} did not complete within {wait:g} s: {joined.group(1)} of "
                    f"{joined.group(2)} nodes joined; the missing node(s) were never started or cannot reach "
                    f"{ep} (start the same command on every node, --node_rank 0..{n - 1})")
        if self.launch.node_rank > 0 and ("trying to connect to" in text or not text.strip()
                                          or "Connection refused" in text):
            return (f"node 0 never answered at {ep} within {wait:g} s: start the same command on node 0 "
                    f"(--node_rank 0), and check that {ep} is node 0's address and reachable from here")
        if "address already in use" in text.lower():
            return f"the port of --rdzv_endpoint {ep} is already in use on node 0: pick a free one"
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith((" ", "frame #"))]
        cause = short_message(Exception(lines[-1])) if lines else "no output"
        return f"the rendezvous at {ep} failed before any rank started ({cause}); see the log"

    def _log_text(self) -> str:
        try:
            with open(os.path.join(self.job_dir, LOG_FILE), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _exit_codes(self) -> dict[int, int]:
        """Exit codes torchrun printed for ranks that it saw fail (not those it killed)."""
        codes = {}
        for m in re.finditer(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*\n\s*exitcode\s*:\s*(-?\d+)",
                             self._log_text()):
            codes[int(m.group(1))] = int(m.group(2))
        return codes
