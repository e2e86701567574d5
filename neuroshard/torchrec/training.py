"""TorchRec training as a measurement: each plan trains a DLRM under DistributedModelParallel, step by step.

One torchrun job (gloo on CPU, NCCL on GPUs) measures a list of plans in the
order the parent gives (shuffled rounds, see `torchrec.training_eval`): the
launcher (`TorchRecTrainJob`) writes the job file and `items.json` (per
measurement: task, algorithm, round, the task's tables and the path of the
plan exported as a TorchRec `ShardingPlan`), and on every rank the rank loop
(`measure.rank`) runs `TorchRecTrainWorker`. Rank 0 reads each item and its
ShardingPlan and hands them to every rank (`read_block`). Per item, every rank:

1. builds the model: the task's tables as one `EmbeddingBagCollection` on
   the meta device (DistributedModelParallel materialises this rank's
   shards), torchrec's DLRM `DenseArch` over `dense_features` dense inputs
   and its `OverArch` (last layer 1: a logit) over the dense output
   concatenated with the pooled embeddings (`ConcatDLRM`). torchrec's
   `DLRM` class itself needs one embedding dim for every table (its
   pairwise dot interaction); the tasks mix dims 4..128, so the interaction
   here is a concatenation, as in DLRM's "cat" variant. The collection is
   sharded by the plan (any sharding type: `all_types_sharder`), a sharded
   table with the fused kernel and an in-backward exact SGD, a
   data-parallel table with the dense kernel, its replicas stepped by the
   dense optimizer; the dense part is data-parallel (DDP) with plain SGD.
   Every table starts from the same seeded weights whatever the plan
   (`seeded_table_weights`), so every plan of a task trains the same model;
2. builds its batch slice: samples [r B / W, (r + 1) B / W) of the dataset's
   real lookups for every task table (a table that appears twice in a task
   reads the same lookups under two names), seeded random dense features and
   0/1 labels; the same batch every iteration;
3. trains `warmup` + `iters` iterations with BCE loss; before each a
   barrier, so every rank starts the step together; a step is forward,
   loss, backward (the embeddings update inside it) and the dense
   optimizer's step. An iteration's step time is the slowest rank's
   (all_reduce MAX); the first `warmup` are dropped. Each rank also times
   its phases (`TorchRecStep.PHASES`: the embedding collection's forward up
   to its pooled output, the rest of the forward and the loss, the backward,
   the dense optimizer's step) and reports their medians. The global
   batch's loss of every iteration is recorded: plans of one task give the
   same losses, up to float rounding (a plan moves the work, not the math).

Each node's first rank writes one `TorchRecStep` per item. Times in ms
(build time in s).

Hosts (`Problem.local_world_size`): TorchRec reads the ranks per host from
`LOCAL_WORLD_SIZE` (and a rank's place in its host from `LOCAL_RANK`) when it
builds a table-row-wise table's intra- and cross-host groups. On several
machines torchrun sets them and they must agree with the problem's; on one
machine standing in for several hosts (its ranks grouped K by K) they are
set to the problem's while the model is sharded (`hosts_env`), and restored.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

from neuroshard.checks import check_float, check_int
from neuroshard.measure.launch import (
    DEFAULT_STARTUP_TIMEOUT_S,
    WATCHDOG_GRACE_S,
    TorchrunJob,
)
from neuroshard.measure.rank import RankContext, RankWorker
from neuroshard.problem import Problem
from neuroshard.settings import Settings, common, setting
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import ConfigError

ITEMS_FILE = "items.json"
MODULE_PATH = "ebc"  # where the EmbeddingBagCollection sits in the model: the ShardingPlan's module path
DEFAULT_TIMEOUT_S = 120.0


@dataclass
class TorchRecStep(Record):
    """One measurement of one plan by TorchRec training: a DLRM whose EmbeddingBagCollection
    DistributedModelParallel shards by the plan, trained for some iterations.

    `index`: the measurement's position in the job; `repeat`: its round; `iters`: each timed
    iteration's step time in ms, the slowest rank's (a barrier before each iteration); `per_rank`:
    each rank's median step ms; `build_s`: the slowest rank's model construction and sharding (s);
    `phases`: per rank, the median ms of each phase of its steps (`PHASES`: the embedding collection's
    forward up to its pooled output, the rest of the forward with the loss, the backward, the dense
    optimizer's step; None in records that predate them); `losses`: the global batch's mean loss at every
    iteration, warmup included (None in records that predate them). Its cost is the median of `iters`.
    """

    PHASES: ClassVar[tuple[str, ...]] = ("embedding_fw", "dense_fw", "backward", "optimizer")

    index: int = json_field(key="i")
    task: int = json_field()
    alg: str = json_field()
    repeat: int = json_field()
    iters: list[float] = json_field()
    per_rank: list[float] = json_field()
    build_s: float = 0.0
    phases: list[dict[str, float]] | None = json_field(None, omit_none=True)
    losses: list[float] | None = json_field(None, omit_none=True)

    def __post_init__(self):
        if not self.iters:
            raise ValueError("a TorchRec step record without timed iterations")
        if self.phases is not None:
            self.phases = [{name: float(p[name]) for name in self.PHASES} for p in self.phases]

    @property
    def cost(self) -> float:
        xs = sorted(self.iters)
        n = len(xs)
        return float(xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def parse_layers(text: str, flag: str, last: int | None = None) -> list[int]:
    """'64,16' -> [64, 16]: positive layer sizes; `last` the size the list must end with. ConfigError naming `flag`."""
    try:
        sizes = [int(x) for x in str(text).split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise ConfigError(flag, f"expected a comma list of positive layer sizes, got {text!r}")
    if last is not None and (len(sizes) < 2 or sizes[-1] != last):
        raise ConfigError(flag, f"expected at least two layers ending in {last} (the logit), got {text!r}")
    return sizes


@dataclass(frozen=True)
class TorchRecTrainConfig(Settings):
    """How the plans are trained (its fields are eval_torchrec.py's flags).

    One rank per device of `problem` on `device` ("cpu": gloo, one process
    per rank; "cuda": NCCL, one GPU per rank); the problem's seed orders the
    rounds and draws the dense features and labels. Per measurement `warmup` untimed and
    `iters` timed training iterations (the plan's cost in that round is
    their median); `repeats` rounds, each training every plan once in a
    seeded shuffled order. `batch_size`: global samples per iteration (the
    first ones of the dataset; default all of its batch), split evenly over
    the ranks. The model: `dense_features` dense inputs, `dense_arch` and
    `over_arch` layer sizes (the over arch ends in 1), learning rate `lr`
    (embeddings and dense part).
    """

    TITLE: ClassVar[str] = "TorchRec training"

    problem: Problem = setting(Problem(), "", cli=False)
    device: str = setting("cpu", "", cli=False)
    gpu_devices: str | None = common("gpu_devices")
    warmup: int = common("warmup", 3, help="untimed training iterations per measurement")
    iters: int = common("iters", 20, help="timed training iterations per measurement (their median is the plan's "
                                          "step time in that round)")
    repeats: int = common("repeats", 3, help="train every plan this many times, in rounds (each round every plan "
                                             "once, in a shuffled order), for 95% intervals and the repeat noise")
    batch_size: int | None = common("batch_size", help="global batch per iteration, split over the ranks: the "
                                                       "dataset's first samples (default: the dataset's whole batch)",
                                    show_default=False)
    dense_features: int = setting(13, "dense input features of the DLRM")
    dense_arch: str = setting("64,16", "layer sizes of the DLRM's dense arch")
    over_arch: str = setting("64,1", "layer sizes of the DLRM's over arch (ending in 1)")
    lr: float = common("lr", 0.01, help="learning rate of the embeddings (fused exact SGD) and the dense part (SGD)")
    timeout: float = common("timeout", DEFAULT_TIMEOUT_S)
    startup_timeout: float = setting(DEFAULT_STARTUP_TIMEOUT_S, "", cli=False)

    @property
    def ndevices(self) -> int:
        """The job's ranks: one per device of the problem."""
        return self.problem.ndevices

    def validate(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ConfigError("--device", f"expected cpu or cuda, got {self.device!r}")
        check_int("--warmup", self.warmup, 0)
        check_int("--iters", self.iters, 1)
        check_int("--repeats", self.repeats, 1)
        if self.batch_size is not None:
            check_int("--batch_size", self.batch_size, self.ndevices)
        check_int("--dense_features", self.dense_features, 1)
        parse_layers(self.dense_arch, "--dense_arch")
        parse_layers(self.over_arch, "--over_arch", last=1)
        check_float("--lr", self.lr, 0.0, lo_open=True)
        check_float("--timeout", self.timeout, 0.0, lo_open=True)



@dataclass(frozen=True)
class TorchRecTrainSpec(Record):
    """The job's settings as the ranks read them from the job file: the dataset (each node's own copy), the
    global batch (resolved: the config's or the dataset's) and how to train (the evaluation's own record)."""

    data_dir: str
    batch_size: int
    training: TorchRecTrainConfig


# =========================================================================== rank side


@contextlib.contextmanager
def hosts_env(local_world_size: int | None, rank: int, world: int):
    """TorchRec's view of the hosts while a model is sharded (module doc): `LOCAL_WORLD_SIZE` = the problem's
    ranks per host and `LOCAL_RANK` = rank mod it, restored afterwards; nothing to do without hosts or where
    torchrun already says so. ValueError where torchrun ran the ranks on machines of another size."""
    if local_world_size is None:
        yield
        return
    launched = int(os.environ.get("LOCAL_WORLD_SIZE", world) or world)
    if launched not in (world, local_world_size):
        raise ValueError(f"the problem has {local_world_size} ranks per host, torchrun ran {launched} per machine")
    keep = {k: os.environ.get(k) for k in ("LOCAL_WORLD_SIZE", "LOCAL_RANK")}
    os.environ["LOCAL_WORLD_SIZE"], os.environ["LOCAL_RANK"] = str(local_world_size), str(rank % local_world_size)
    try:
        yield
    finally:
        for k, v in keep.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def concat_dlrm(ebc, dense_features: int, dense_arch: Sequence[int], over_arch: Sequence[int], device,
                marks: dict | None = None):
    """DLRM with a concatenating interaction: torchrec's `DenseArch` and `OverArch` around the
    EmbeddingBagCollection `ebc` (at `MODULE_PATH`); forward(dense [B, F], kjt) -> logits [B].
    The pooled embeddings are read by feature name, in the collection's feature order: a sharded
    collection lists its output by sharding group, so reading it by position would reorder the
    features whenever a plan mixes sharding types.
    `marks`: if given, each forward stores in it the ms of the embedding lookup (`embedding_ms`: the
    sharded collection's input distribution, kernels and output distribution, up to its pooled values)."""
    import torch
    from torchrec.models.dlrm import DenseArch, OverArch

    from neuroshard.measure.timing import elapsed_ms

    features = [f for c in ebc.embedding_bag_configs() for f in c.feature_names]

    class ConcatDLRM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            setattr(self, MODULE_PATH, ebc)
            self.dense_arch = DenseArch(dense_features, list(dense_arch), device=device)
            pooled = sum(c.embedding_dim * len(c.feature_names) for c in ebc.embedding_bag_configs())
            self.over_arch = OverArch(dense_arch[-1] + pooled, list(over_arch), device=device)

        def forward(self, dense, kjt):
            start = time.perf_counter()
            by_name = getattr(self, MODULE_PATH)(kjt).to_dict()  # waits for the output distribution
            if marks is not None:
                marks["embedding_ms"] = elapsed_ms(start, dense.device)
            pooled = torch.cat([by_name[f] for f in features], dim=1)
            return self.over_arch(torch.cat([self.dense_arch(dense), pooled], dim=1)).squeeze(1)

    return ConcatDLRM()


@functools.cache
def _all_types_sharder_class():
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.types import ShardingType

    class AllTypesEmbeddingBagCollectionSharder(EmbeddingBagCollectionSharder):
        """TorchRec's sharder, offering row-wise and table-row-wise on every device type: TorchRec lists them
        for cuda only, yet their collectives (all-to-all, reduce-scatter) run on gloo CPU ranks too."""

        def sharding_types(self, compute_device_type: str) -> list[str]:
            types = list(super().sharding_types(compute_device_type))
            return types + [t.value for t in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)
                            if t.value not in types]

    return AllTypesEmbeddingBagCollectionSharder


def all_types_sharder(fused_params: dict | None = None):
    """An `EmbeddingBagCollectionSharder` (with `fused_params`) whose sharding types include row-wise and
    table-row-wise on CPU as well, so TorchRec's planner plans them and DistributedModelParallel trains them
    on gloo ranks. A data-parallel table takes the dense kernel (TorchRec offers no other for it)."""
    return _all_types_sharder_class()(fused_params=fused_params)


WEIGHT_BLOCK_ROWS = 4096  # rows drawn by one generator: a shard draws only the blocks it overlaps


def seeded_table_weights(seed: int, table: int, rows: int, dim: int, row0: int = 0, nrows: int | None = None,
                         col0: int = 0, ncols: int | None = None):
    """Rows [row0, row0 + nrows) and columns [col0, col0 + ncols) of task table `table`'s initial weights
    (`rows` x `dim`, TorchRec's default range: uniform in +-sqrt(1 / rows)), the same numbers whichever
    shard asks: blocks of `WEIGHT_BLOCK_ROWS` rows, each from its own generator seeded by (seed, table,
    block)."""
    import numpy as np
    import torch

    nrows = rows - row0 if nrows is None else nrows
    ncols = dim - col0 if ncols is None else ncols
    bound = (1.0 / rows) ** 0.5
    out = torch.empty(nrows, ncols)
    for b in range(row0 // WEIGHT_BLOCK_ROWS, -(-(row0 + nrows) // WEIGHT_BLOCK_ROWS)):
        lo, hi = b * WEIGHT_BLOCK_ROWS, min((b + 1) * WEIGHT_BLOCK_ROWS, rows)
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, table, b]).generate_state(1)[0]))
        block = torch.rand(hi - lo, dim, generator=g).mul_(2 * bound).sub_(bound)
        a, z = max(lo, row0), min(hi, row0 + nrows)
        out[a - row0:z - row0] = block[a - lo:z - lo, col0:col0 + ncols]
    return out


def set_seeded_weights(model, names: Sequence[str], seed: int) -> None:
    """Overwrite the embedding weights of `model` (sharded by DistributedModelParallel or not) with
    `seeded_table_weights`: each local shard of table `names[k]` gets its rows and columns of table k."""
    import torch
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    state = model.state_dict()
    with torch.no_grad():
        for k, name in enumerate(names):
            weight = state[f"{MODULE_PATH}.embedding_bags.{name}.weight"]
            rows, dim = weight.shape
            if isinstance(weight, ShardedTensor):
                for shard in weight.local_shards():
                    (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                    shard.tensor.copy_(seeded_table_weights(seed, k, rows, dim, r0, nr, c0, nc))
            else:
                weight.copy_(seeded_table_weights(seed, k, rows, dim))


def rank_batch(dataset, table_ids: Sequence[int], names: Sequence[str], rank: int, world: int, batch_size: int,
               dense_features: int, seed: int):
    """(dense [b, F], KeyedJaggedTensor, labels [b]) of rank `rank`'s b = batch_size / world samples: the
    dataset's real lookups of samples [rank b, (rank + 1) b) for every task table (a table that appears
    twice reads the same lookups under two names), dense features and 0/1 labels drawn from (seed, rank)."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    b = batch_size // world
    lo, hi = rank * b, (rank + 1) * b
    values, lengths = [], []
    for tid in table_ids:
        idx, off = dataset.lookups(tid)
        off = off[lo:hi + 1].to(torch.int64)
        values.append(idx[int(off[0]):int(off[-1])].to(torch.int64))
        lengths.append(off[1:] - off[:-1])
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=list(names), values=torch.cat(values), lengths=torch.cat(lengths))
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    dense = torch.randn(b, dense_features, generator=g)
    labels = torch.randint(0, 2, (b,), generator=g).float()
    return dense, kjt, labels


class TorchRecTrainWorker(RankWorker):
    """One rank of the job: trains each item's plan and times the steps (module doc)."""

    item = "plan"
    first_phase = "building the model"

    def __init__(self, ctx: RankContext):
        from neuroshard.formats.dataset import read_dataset
        from neuroshard.measure.plan_job import dataset_fingerprint

        super().__init__(ctx)
        st = ctx.state
        self.spec = spec = TorchRecTrainSpec.from_json(ctx.spec)
        self.cfg = spec.training
        local_dir = ctx.local["spec"]["data_dir"]  # this node's copy of the dataset
        st["phase"] = "loading dataset"
        self.dataset = read_dataset(local_dir, validate=False)
        fingerprint = dataset_fingerprint(self.dataset)
        theirs = ctx.broadcast(fingerprint)
        differ = [f"{k} {fingerprint[k]} here, {theirs[k]} on node 0" for k in fingerprint
                  if fingerprint[k] != theirs[k]]
        if differ:
            raise ValueError(f"the dataset at {local_dir} is not node 0's: {'; '.join(differ)}")
        if spec.batch_size % ctx.world or spec.batch_size > self.dataset.batch_size:
            raise ValueError(f"batch {spec.batch_size} does not split over {ctx.world} ranks within the "
                             f"dataset's {self.dataset.batch_size} samples")
        self.items = None
        if ctx.rank == 0:
            with open(os.path.join(ctx.job_dir, ITEMS_FILE)) as f:
                self.items = json.load(f)

    def read_block(self, done: int) -> list:
        from neuroshard.formats.sharding_file import read_torchrec_plan

        if done >= len(self.items):
            return []
        item = dict(self.items[done])
        item["sharding_plan"] = read_torchrec_plan(item.pop("plan_path"))
        return [item]

    def measure(self, k: int, item: dict) -> dict | None:
        """Train item `k`'s plan; returns its `TorchRecStep` record on the first rank of each node."""
        import numpy as np
        import torch
        import torch.distributed as dist
        from fbgemm_gpu.split_embedding_configs import EmbOptimType
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
        from torchrec.modules.embedding_modules import EmbeddingBagCollection
        from torchrec.optim.keyed import KeyedOptimizerWrapper
        from torchrec.optim.optimizers import in_backward_optimizer_filter

        from neuroshard.measure.rank import local_lead
        from neuroshard.measure.timing import elapsed_ms

        ctx, cfg, st = self.ctx, self.cfg, self.ctx.state
        st["phase"] = "building the model"
        t0 = time.perf_counter()
        names, ids = item["names"], item["table_ids"]
        device = torch.device(ctx.device)
        ebc = EmbeddingBagCollection(tables=[
            EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[n], pooling=PoolingType.SUM)
            for n, d, r in zip(names, item["dims"], item["rows"])], device=torch.device("meta"))
        torch.manual_seed(cfg.problem.seed)  # the same dense weights on every rank (DDP also broadcasts rank 0's)
        marks: dict = {}
        model = concat_dlrm(ebc, cfg.dense_features, parse_layers(cfg.dense_arch, "dense_arch"),
                            parse_layers(cfg.over_arch, "over_arch", last=1), device, marks)
        sharder = all_types_sharder({"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": cfg.lr})
        with hosts_env(cfg.problem.local_world_size, ctx.rank, ctx.world):
            dmp = DistributedModelParallel(model, device=device, plan=item["sharding_plan"], sharders=[sharder])
        set_seeded_weights(dmp, names, cfg.problem.seed)
        # the fused tables update inside the backward; the dense optimizer steps the rest, data-parallel
        # tables included
        dense_opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                          lambda params: torch.optim.SGD(params, lr=cfg.lr))
        dense, kjt, labels = (x.to(device) for x in rank_batch(
            self.dataset, ids, names, ctx.rank, ctx.world, self.spec.batch_size, cfg.dense_features,
            cfg.problem.seed))
        loss_fn = torch.nn.BCEWithLogitsLoss()
        build_s = time.perf_counter() - t0
        times, losses, phases = [], [], {name: [] for name in TorchRecStep.PHASES}

        for i in range(cfg.warmup + cfg.iters):
            st["phase"] = f"barrier before iteration {i}"
            ctx.barrier()
            st["phase"] = f"training iteration {i}"
            start = time.perf_counter()
            dense_opt.zero_grad()
            loss = loss_fn(dmp(dense, kjt), labels)
            forward_ms = elapsed_ms(start, device)
            t = time.perf_counter()
            loss.backward()
            backward_ms = elapsed_ms(t, device)
            t = time.perf_counter()
            dense_opt.step()
            optimizer_ms = elapsed_ms(t, device)
            ms = (time.perf_counter() - start) * 1e3
            if i >= cfg.warmup:
                times.append(ms)
                for name, v in zip(TorchRecStep.PHASES, (marks["embedding_ms"], forward_ms - marks["embedding_ms"],
                                                         backward_ms, optimizer_ms)):
                    phases[name].append(v)
            losses.append(float(loss.detach()))
            if not np.isfinite(losses[-1]):
                raise ValueError(f"the loss is {losses[-1]} at iteration {i}")
        st["phase"] = "gathering step times"
        slowest = torch.tensor(times + [build_s], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        mean_loss = torch.tensor(losses, dtype=torch.float64, device=device)  # equal slices: the batch's mean
        dist.all_reduce(mean_loss)
        per_rank = ctx.gather(float(np.median(times)))
        rank_phases = ctx.gather({name: float(np.median(v)) for name, v in phases.items()})
        del dmp, dense_opt, model, ebc, loss, dense, kjt, labels  # free this plan's shards before the next is built
        release_memory()
        if not local_lead():
            return None
        slowest = slowest.cpu().tolist()
        return TorchRecStep(k, int(item["task"]), str(item["alg"]), int(item["repeat"]), slowest[:-1], per_rank,
                            slowest[-1], rank_phases, (mean_loss / ctx.world).cpu().tolist()).to_json()


def release_memory() -> None:
    """Collect the freed model's reference cycles and hand the freed heap back to the system: one process per
    rank trains every plan of a job, and without this each rank keeps the high-water mark of the largest
    plans so far, which on tasks with tables of a device's size outgrows the machine."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the allocator keeps what it keeps
        pass


# =========================================================================== launcher


class TorchRecTrainJob(TorchrunJob):
    """One torchrun job training each item's plan in the order given; iterate `steps()`.

    `items`: per measurement a JSON-able dict with `task`, `alg`, `repeat`,
    the task's `names`, `table_ids`, `dims`, `rows` and `plan_path` (a
    TorchRec ShardingPlan file, module path `MODULE_PATH`)."""

    item: ClassVar[str] = "plan"
    job_prefix: ClassVar[str] = "torchrec_train_job_"

    def __init__(self, items: Sequence[dict], data_dir, batch_size: int, cfg: TorchRecTrainConfig, *,
                 work_dir: str | None = None, keep_dir: bool = False):
        cfg.validate()
        self.cfg, self.items = cfg, [dict(it) for it in items]
        spec = TorchRecTrainSpec(data_dir=os.path.abspath(data_dir), batch_size=batch_size, training=cfg)
        # a plan: its model's construction (a few collectives) and warmup + iters steps, each bounded by the timeout
        stall = 4 * cfg.timeout + WATCHDOG_GRACE_S
        super().__init__("torchrec_train", spec, cfg.ndevices, len(self.items), device=cfg.device,
                         gpu_devices=cfg.gpu_devices, timeout=cfg.timeout, startup_timeout=cfg.startup_timeout,
                         stall_timeout=stall, work_dir=work_dir, keep_dir=keep_dir)

    def write_inputs(self, job_dir: str) -> None:
        with open(os.path.join(job_dir, ITEMS_FILE), "w") as f:
            json.dump(self.items, f)

    def steps(self):
        """Each item's `TorchRecStep`, in job order, as soon as rank 0 writes it."""
        for rec in self.records():
            yield TorchRecStep.from_json(rec)


def train_plans(items: Sequence[dict], data_dir, batch_size: int, cfg: TorchRecTrainConfig, *,
                on_result: Callable[[TorchRecStep], None] | None = None,
                work_dir: str | None = None) -> list[TorchRecStep]:
    """Train every item (see `TorchRecTrainJob`) in one job, in order; `on_result(step)` as each arrives.
    Raises `launch.JobError` (naming the failing rank and cause) if any rank fails."""
    if not items:
        return []
    out = []
    with TorchRecTrainJob(items, data_dir, batch_size, cfg, work_dir=work_dir) as job:
        for step in job.steps():
            out.append(step)
            if on_result is not None:
                on_result(step)
    return out
