"""The collectives of row-wise and data-parallel tables, timed on real ranks (gloo on CPU, NCCL on GPUs).

A row-wise table (and a table-row-wise one, within a host) has every rank of
its group look up its row block for the whole batch B: the B x dim partial
sums are reduce-scattered forward (each rank keeps its B/k samples' sums) and
the gradient's B/k x dim slices are all-gathered backward. A data-parallel
table runs on each rank's own B/k samples; its gradient, rows x dim, is
all-reduced backward. A collective's size `numel` is always the full tensor:
B x dim for reduce-scatter and all-gather (each rank sends or receives numel /
k), rows x dim for all-reduce; fp32.

`run_collective` runs one, `bench_collective` times it on this rank (a
barrier before every iteration, the median of the timed ones). The job that
times many sizes on many ranks is `CollectiveJob` (`collect_collective_cost_data.py`;
a sample over host groups, {"k": ranks per host}, runs on each host's group of k
consecutive ranks, as a step's table-row-wise tables do, one host at a time: `host_turns`;
`planner.costs.collective_model` fits a model to what it measures); the plan job
(`measure.plan_job`) runs the same collectives for the spread tables of a plan.

Times in ms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np

from neuroshard.measure.launch import DEFAULT_STARTUP_TIMEOUT_S, DEFAULT_TIMEOUT_S, LaunchConfig, TorchrunJob
from neuroshard.measure.rank import RankContext, RankWorker
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import ConfigError, InputError
from neuroshard.types.plan import ALL_GATHER, ALL_REDUCE, COLLECTIVES, REDUCE_SCATTER, fit_key, host_groups


def check_sample(op: str, numel: int, k: int) -> None:
    """ValueError unless `op` is a known collective and `numel` positive, for a reduce-scatter or an all-gather
    a multiple of the group's k ranks."""
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(COLLECTIVES)})")
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1:
        raise ValueError(f"{op}: numel must be positive, got {numel!r}")
    if op != ALL_REDUCE and numel % k:
        raise ValueError(f"{op}: numel must be a multiple of the {k} ranks, got {numel}")


def buffers(op: str, numel: int, k: int, device: str = "cpu"):
    """(input, output) fp32 tensors of one collective over k ranks (output None: in place)."""
    import torch

    check_sample(op, numel, k)
    if op == REDUCE_SCATTER:
        return torch.rand(numel, device=device), torch.empty(numel // k, device=device)
    if op == ALL_GATHER:
        return torch.rand(numel // k, device=device), torch.empty(numel, device=device)
    return torch.rand(numel, device=device), None


def run_collective(op: str, inp, out, group=None) -> None:
    """One `op` on the buffers of `buffers` over `group` (None: every rank).

    On gloo (CPU tensors) the reduce-scatter is an all-reduce of a copy of the input and a copy of this rank's
    chunk: what the installed torch's gloo `reduce_scatter_tensor` does, and as fast at every size, but that call
    keeps most of its input's bytes on one rank or another, call after call; a job timing many of them grew to
    gigabytes and its reduce-scatters ran 2-3 times as long until it was killed for memory. gloo's chunked
    `reduce_scatter` has no growth but runs another algorithm, 2-3 times as slow below a few million elements
    (`benchmarks/bench_collective_regime.py`). On GPUs (NCCL) it is `reduce_scatter_tensor` itself."""
    import torch.distributed as dist

    if op == REDUCE_SCATTER and not inp.is_cuda:
        k = dist.get_world_size(group)
        full = inp.clone()
        dist.all_reduce(full, group=group)
        out.copy_(full.chunk(k)[dist.get_rank(group)])
    elif op == REDUCE_SCATTER:
        dist.reduce_scatter_tensor(out, inp, group=group)
    elif op == ALL_GATHER:
        dist.all_gather_into_tensor(out, inp, group=group)
    else:
        dist.all_reduce(inp, group=group)


def bench_collective(op: str, numel: int, k: int, warmup: int, iters: int, device: str, group=None,
                     state: dict | None = None) -> float:
    """This rank's median ms of `op` on `numel` elements over `group` of k ranks (None: every rank), a
    barrier on the group before every iteration."""
    import torch.distributed as dist

    from neuroshard.measure.timing import benchmark, median

    inp, out = buffers(op, numel, k, device)

    def before_each():
        if state is not None:
            state["phase"] = f"{op} barrier"
        dist.barrier(group=group)

    def once():
        if state is not None:
            state["phase"] = op
        run_collective(op, inp, out, group)

    return median(benchmark(once, warmup=warmup, iters=iters, device=device, before_each=before_each))


def host_turns(groups: Sequence[tuple[int, ...]], world: int) -> tuple[tuple[int, ...] | None, list[tuple[int, ...]]]:
    """How collectives over `groups` (rank tuples) are timed on `world` ranks: (every rank's tuple when a
    collective runs over all ranks, else None; the smaller groups, a host's, in order of first appearance, one
    turn each). One machine standing in for several hosts runs every host's ranks on the same cores: two hosts'
    collectives at once slow each other down as separate hosts would not (and by how much depends on what the
    other host sends), so each host's group takes its turn (`RankContext.take_turns`)."""
    every = tuple(range(world))
    return (every if every in groups else None), list(dict.fromkeys(g for g in groups if g != every))


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class CollectiveSpec(Record):
    """The job's settings as the ranks read them: the samples ({"op", "numel"} over every rank, with "k" over
    each host's group of k ranks), untimed and timed iterations of each."""

    samples: list
    warmup: int
    iters: int


@dataclass
class CollectiveResult(Record):
    """One sample's per-rank median ms."""

    index: int = json_field(key="i")
    op: str = json_field()
    numel: int = json_field()
    ms: list = json_field()
    k: int | None = json_field(default=None, omit_none=True)  # ranks per host group (None: every rank)


class CollectiveWorker(RankWorker):
    """One rank of the job: times each sample's collective over every rank (or over its host's group, one
    host at a time: `host_turns`); each node's first rank records every rank's median."""

    item = "sample"
    first_phase = "before the collective"

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        self.spec = CollectiveSpec.from_json(ctx.spec)
        self._groups: dict[int, object] = {}  # ranks per host -> this rank's host group

    def host_group(self, k: int):
        """This rank's group of k consecutive ranks; every host's group made on every rank, in the same order,
        as torch.distributed needs."""
        import torch.distributed as dist

        if k not in self._groups:
            for ranks in host_groups(k, self.ctx.world):
                group = dist.new_group(list(ranks))
                if self.ctx.rank in ranks:
                    self._groups[k] = group
        return self._groups[k]

    def read_block(self, done: int) -> list:
        return self.spec.samples[done:]

    def measure(self, k: int, sample) -> dict | None:
        from neuroshard.measure.rank import local_lead

        ctx = self.ctx
        host = sample.get("k")
        group = None if host is None else self.host_group(int(host))

        def timed(_turn=None) -> float:
            return bench_collective(sample["op"], int(sample["numel"]), int(host or ctx.world), self.spec.warmup,
                                    self.spec.iters, ctx.device, group=group, state=ctx.state)

        # over host groups, one host at a time, as the plan job times a plan's (`host_turns`)
        ms = timed() if host is None else ctx.take_turns(host_groups(int(host), ctx.world), timed, sample["op"])[0]
        ctx.state["phase"] = "gathering medians"
        every = ctx.gather(ms)
        if not local_lead():
            return None
        return CollectiveResult(k, sample["op"], int(sample["numel"]), [float(x) for x in every], host).to_json()


class CollectiveJob(TorchrunJob):
    """One torchrun job timing `samples` ({"op", "numel"}, and "k" for host groups) over `ndevices` ranks;
    iterate `results()`."""

    item: ClassVar[str] = "sample"
    job_prefix: ClassVar[str] = "collective_job_"

    def __init__(self, samples: Sequence[dict], ndevices: int, *, warmup: int = 3, iters: int = 7,
                 device: str = "cpu", gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, work_dir: str | None = None,
                 launch: LaunchConfig | None = None, worker_module: str | None = None):
        if ndevices < 2:
            raise ConfigError("--ndevices", f"a collective needs at least 2 ranks, got {ndevices}")
        samples = [{"op": s["op"], "numel": int(s["numel"])} | ({"k": int(s["k"])} if s.get("k") else {})
                   for s in samples]
        for i, s in enumerate(samples):
            try:
                k = s.get("k", ndevices)
                if not 2 <= k <= ndevices or ndevices % k:
                    raise ValueError(f"a group of {k} ranks: it must have 2 to {ndevices} and divide the "
                                     f"{ndevices} ranks")
                check_sample(s["op"], s["numel"], k)
            except ValueError as e:
                raise ConfigError("samples", f"sample {i}: {e}") from None
        spec = CollectiveSpec(samples, warmup, iters)
        super().__init__("collectives", spec, ndevices, len(samples), device=device, gpu_devices=gpu_devices,
                         timeout=timeout, startup_timeout=startup_timeout, work_dir=work_dir, launch=launch,
                         worker_module=worker_module)

    def results(self):
        """Each sample's `CollectiveResult`, in sample order, as rank 0 writes it."""
        for rec in self.records():
            yield CollectiveResult.from_json(rec)


# --------------------------------------------------------------------------- the collection

DATA_FILE, NOISE_FILE = "data.jsonl", "noise.jsonl"
HOST_TIMING = {"timing": "turns"}  # on a host-group sample's line: the hosts took turns (`host_turns`)


def draw_samples(num: int, ndevices: int, batch_size: int, max_dim: int, max_numel: int, seed: int,
                 host: int | None = None) -> list[dict]:
    """`num` seeded samples over what plans send: each collective in turn; a reduce-scatter or all-gather of
    B x d elements (d a multiple of 4, log-uniform in [4, max_dim]: a row-wise group's dims), an all-reduce of
    N elements log-uniform in [1,000, max_numel] (a data-parallel table's rows x dim). With `host` (ranks per
    host, fewer than `ndevices`), `num` more after them over the hosts' groups ({"k": host}), drawn apart (the
    first `num` are the same with or without them): a table-row-wise group's reduce-scatters and all-gathers
    (and all-reduces, the same sizes as over every rank)."""
    out = _draws(num, ndevices, batch_size, max_dim, max_numel, np.random.default_rng(seed))
    if host is not None and host < ndevices:
        out += [s | {"k": host} for s in _draws(num, host, batch_size, max_dim, max_numel,
                                                   np.random.default_rng([seed, host]))]
    return out


def _draws(num: int, k: int, batch_size: int, max_dim: int, max_numel: int, rng) -> list[dict]:
    out = []
    for j in range(num):
        op = COLLECTIVES[j % len(COLLECTIVES)]
        if op == ALL_REDUCE:
            n = int(np.exp(rng.uniform(np.log(1000), np.log(max(max_numel, 1000)))))
        else:
            d = 4 * max(1, int(round(np.exp(rng.uniform(np.log(4), np.log(max(max_dim, 4)))) / 4)))
            n = batch_size * d
        out.append({"op": op, "numel": n if op == ALL_REDUCE else max(k, n - n % k)})
    return out


def collect(out_dir, samples: Sequence[dict], ndevices: int, *, warmup: int, iters: int, device: str = "cpu",
            gpu_devices: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, noise_samples: int = 0,
            progress: bool = True) -> tuple[list[dict], list[tuple[str, float, float]]]:
    """Time `samples` (those `out_dir/data.jsonl` does not hold yet, appended as they arrive: an interrupted
    collection resumes), then the first `noise_samples` of those over every rank and of those over host groups
    again (`noise.jsonl`, after all of data.jsonl, so minutes apart); (every sample {"op", "numel", "ms": the
    ranks' mean, "ranks_ms"}, with "k" over host groups; the re-measured (`fit_key`, ms, ms again)). Whatever
    either file lacks is timed in one job, the noise samples last."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = [i for i, s in enumerate(samples) if not s.get("k")]
    hosts = [i for i, s in enumerate(samples) if s.get("k")]
    picked = world[:noise_samples] + hosts[:noise_samples]
    rows, again = _resume([(out / DATA_FILE, list(samples)), (out / NOISE_FILE, [samples[i] for i in picked])],
                          ndevices, progress=progress, warmup=warmup, iters=iters, device=device,
                          gpu_devices=gpu_devices, timeout=timeout)
    return rows, [(fit_key(a["op"], a.get("k"), ndevices), rows[i]["ms"], a["ms"]) for i, a in zip(picked, again)]


def read_collection(out_dir) -> tuple[int, list[dict], list[tuple[str, float, float]]]:
    """A finished collection as `collect` returns it, with its ranks: (ndevices, its samples' rows, the
    re-measured (`fit_key`, ms, ms again)), read from `out_dir` (config.json, data.jsonl, noise.jsonl: the first
    `noise_samples` of the every-rank and of the host-group samples timed again); InputError naming a missing or
    malformed file."""
    from neuroshard.formats.io import load_json

    out = Path(out_dir)
    config = load_json(out / "config.json")
    try:
        ndevices, noise_samples = int(config["ndevices"]), int(config["noise_samples"])
    except (KeyError, TypeError, ValueError):
        raise InputError(out / "config.json", "not a collective collection's settings (ndevices, noise_samples)") \
            from None
    rows = _read_rows(out / DATA_FILE)
    if not rows:
        raise InputError(out / DATA_FILE, "no samples")
    picked = [r for r in rows if not r.get("k")][:noise_samples] + [r for r in rows if r.get("k")][:noise_samples]
    again = _held_rows(out / NOISE_FILE, picked)
    return ndevices, rows, [(fit_key(a["op"], a.get("k"), ndevices), r["ms"], a["ms"]) for r, a in zip(picked, again)]


def _resume(files: Sequence[tuple[Path, Sequence[dict]]], ndevices: int, progress: bool, **job) -> list[list[dict]]:
    """For each (line file, samples): the samples' rows. Those a file holds are checked to be the same samples;
    the others, of every file in the order given, are timed in one job and appended to their file as they
    arrive."""
    from contextlib import ExitStack

    from tqdm import tqdm

    from neuroshard.formats.io import append_line, open_append

    done = [_held_rows(path, samples) for path, samples in files]
    todo = [(f, s) for f, ((_, samples), rows) in enumerate(zip(files, done)) for s in samples[len(rows):]]
    if not todo:
        return done
    bar = tqdm(total=len(todo), desc="collectives", unit="sample", disable=None if progress else True)
    try:
        with ExitStack() as stack:
            logs = {f: stack.enter_context(open_append(files[f][0], exclusive=True)) for f in {f for f, _ in todo}}
            run = stack.enter_context(CollectiveJob([s for _, s in todo], ndevices, **job))
            for (f, _), res in zip(todo, run.results()):
                row = {"op": res.op, "numel": res.numel} | ({"k": res.k} | HOST_TIMING if res.k else {}) | \
                    {"ms": float(np.mean(res.ms)), "ranks_ms": res.ms}
                append_line(logs[f], json.dumps(row))
                done[f].append(row)
                bar.update(1)
    finally:
        bar.close()
    return done


def _held_rows(path: Path, samples: Sequence[dict]) -> list[dict]:
    """The rows the line file `path` holds for `samples` (its first lines), each checked to be its sample;
    InputError naming the line otherwise."""
    rows = _read_rows(path)[:len(samples)]
    for k, row in enumerate(rows):
        want = samples[k]
        if (row["op"], int(row["numel"]), row.get("k")) != (want["op"], want["numel"], want.get("k")):
            raise InputError(path, f"line {k + 1}: {_said(row)}, this collection draws {_said(want)} "
                                   "(another --seed, sizes or --local_world_size?)")
        if row.get("k") and row.get("timing") != HOST_TIMING["timing"]:
            raise InputError(path, f"line {k + 1}: {_said(row)} was timed on every host at once, as collections "
                                   "did before the hosts took turns; collect into a new --out_dir")
    return rows


def _said(sample: dict) -> str:
    """A sample in words: "reduce_scatter of 4096 elements" (over host groups: "... on groups of 2 ranks")."""
    return f"{sample['op']} of {sample['numel']} elements" + (f" on groups of {sample['k']} ranks"
                                                              if sample.get("k") else "")


def _read_rows(path: Path) -> list[dict]:
    """The samples of a data.jsonl / noise.jsonl (none when missing); InputError naming the file and line."""
    if not path.exists():
        return []
    rows = []
    for k, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            check_sample(row["op"], int(row["numel"]), 1)
            if row.get("k") is not None and (isinstance(row["k"], bool) or not isinstance(row["k"], int)
                                             or row["k"] < 2):
                raise ValueError(f"k (ranks per host group) must be an integer >= 2, got {row['k']!r}")
            if not float(row["ms"]) > 0:
                raise ValueError(f"ms must be > 0, got {row['ms']}")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise InputError(path, f"line {k + 1}: {e}") from None
        rows.append(row)
    return rows
