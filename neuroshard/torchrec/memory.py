"""Memory that holds in training: what each rank holds while a plan trains under DistributedModelParallel.

One torchrun job (gloo, CPU) measures a list of cases (`MemoryCase`: the
tables, one sharding type for all of them, the optimizer and how it is given,
the weights' dtype, the global batch and pooling factor). Per case, every rank:

1. frees the previous case's model (`training.release_memory`) and reads its
   resident size: the baseline (the interpreter, torch, FBGEMM and TorchRec
   imported, the process group up), subtracted from what follows;
2. builds the model (`training.concat_dlrm` around an `EmbeddingBagCollection`
   on the meta device, sharded by the case's plan: `case_plan`) and its
   optimizers, and reads its resident size (the tables and whatever state the
   optimizers allocate at once) and the high-water mark while building;
   (each case is trained first at a tiny size, `warm_up_case`, so that what
   a process pays once, lazy imports and thread pools, falls in the baseline);
3. resets the high-water mark, builds its batch slice (random ids, the case's
   pooling factor per table) and trains `steps` steps, then reads the
   high-water mark (the peak of a step: input ids and their exchange buffers,
   pooled outputs, gradients, data-parallel all-reduce buffers, optimizer
   state made at the first step) and the resident size after them;
4. sums the bytes of the tensors the model holds (its state dict's local
   shards and replicas), of the optimizers' state (fused, in-backward and
   dense) and of the gradients left on the parameters, beside the resident
   sizes.

Why the resident size and not torch's allocator counters: on CPU torch has no
caching allocator that counts (`torch.cuda.memory_stats` is CUDA's); tensors
come from malloc, as do FBGEMM's table buffers, gloo's send and receive
buffers and TorchRec's index exchange, and what runs a machine out of memory
is the resident size. The high-water mark is the kernel's (VmHWM in
/proc/self/status, reset by writing "5" to /proc/self/clear_refs); Linux only.

Optimizers are given as the sharder's `fused_params` (`FUSED`) or through
`apply_optimizer_in_backward` (`IN_BACKWARD`). A data-parallel table takes
the dense kernel, whatever the fused parameters say: with `fused_params` its
replicas are stepped by a dense optimizer of the same kind (torch's SGD,
TorchRec's RowWiseAdagrad, torch's Adam); the dense layers by SGD.
FBGEMM's CPU kernel refuses Adam ("not supported in CPU mode"), so Adam trains
here only on data-parallel tables. Imports torch and torchrec (rank side).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from typing import ClassVar, Sequence

from neuroshard.measure.launch import DEFAULT_STARTUP_TIMEOUT_S, WATCHDOG_GRACE_S, TorchrunJob
from neuroshard.measure.rank import RankContext, RankWorker
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import ConfigError

ITEMS_FILE = "items.json"
SHARDING_TYPES = ("table_wise", "column_wise", "row_wise", "data_parallel")
OPTIMIZERS = ("sgd", "row_wise_adagrad", "adam")
FUSED, IN_BACKWARD = "fused_params", "in_backward"
DTYPES = ("fp32", "fp16")
LR = 0.01
DENSE_FEATURES, DENSE_ARCH, OVER_ARCH = 13, (16, 8), (16, 1)  # small: the tables dominate


@dataclass(frozen=True)
class MemoryCase(Record):
    """One training run to measure: `tables` [(name, rows, dim)], all sharded `sharding_type` (table-wise:
    table k on rank k mod world; column-wise: each table in equal column shards, one per rank; row-wise and
    data-parallel over every rank), trained with `optimizer` given `via` fused_params or in_backward, weights in
    `dtype`, a global batch of `batch` samples with `pooling` ids per table each."""

    sharding_type: str
    optimizer: str
    via: str
    dtype: str
    batch: int
    pooling: int
    tables: list[list] = json_field()

    def validate(self, world: int) -> None:
        for name, value, allowed in (("sharding_type", self.sharding_type, SHARDING_TYPES),
                                     ("optimizer", self.optimizer, OPTIMIZERS), ("via", self.via, (FUSED, IN_BACKWARD)),
                                     ("dtype", self.dtype, DTYPES)):
            if value not in allowed:
                raise ConfigError(name, f"must be one of {', '.join(allowed)}, got {value!r}")
        if self.batch < world or self.batch % world:
            raise ConfigError("batch", f"must split evenly over {world} ranks, got {self.batch}")
        if self.sharding_type == "column_wise" and any(dim % (4 * world) for _, _, dim in self.tables):
            raise ConfigError("tables", f"column-wise over {world} ranks needs dims that are multiples of {4 * world}")

    @property
    def label(self) -> str:
        return f"{self.sharding_type} {self.optimizer} ({self.via}) {self.dtype} B={self.batch} L={self.pooling}"

    @property
    def trains_on_cpu(self) -> bool:
        """False where FBGEMM's CPU kernel refuses the optimizer (Adam on a fused table)."""
        return not (self.optimizer == "adam" and self.sharding_type != "data_parallel")


@dataclass
class RankMemory(Record):
    """One rank's memory in one case, bytes over its baseline (the resident size before the model was built,
    `baseline`, absolute): `built` resident after the model and optimizers were built, `build_peak` the
    high-water mark while building, `step_peak` the high-water mark over the steps (reset before them, the
    batch built inside), `after` resident after the steps; `tensors_built` and `tensors_after` the bytes of the
    tensors held (`held_tensors`: weights, optimizer state, gradients) at those points."""

    baseline: float
    built: float
    build_peak: float
    step_peak: float
    after: float
    tensors_built: dict = json_field()
    tensors_after: dict = json_field()


@dataclass
class MemoryResult(Record):
    """One case's measurement: per rank a `RankMemory`, or `error` (one line) where the case did not train."""

    index: int = json_field(key="i")
    case: MemoryCase = json_field()
    ranks: list[RankMemory] = json_field(default_factory=list)
    error: str | None = json_field(None, omit_none=True)
    seconds: float = 0.0


# =========================================================================== what a rank holds


def _status_kb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1]) * 1024.0
    raise OSError(f"no {field} in /proc/self/status")


def resident_bytes() -> float:
    """This process's resident size (VmRSS)."""
    return _status_kb("VmRSS")


def peak_bytes() -> float:
    """This process's resident high-water mark since the last `reset_peak` (VmHWM)."""
    return _status_kb("VmHWM")


def reset_peak() -> None:
    """Reset the resident high-water mark to the current resident size (Linux: "5" to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _local_tensors(obj, out: dict) -> None:
    """The storages of every tensor in `obj` (nested dicts, lists, ShardedTensors' local shards): {storage: bytes},
    so that views into one buffer (a table batch's weights, its optimizer state) count it once."""
    import torch
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    if isinstance(obj, ShardedTensor):
        for s in obj.local_shards():
            _local_tensors(s.tensor, out)
    elif isinstance(obj, torch.Tensor):
        if obj.device.type != "meta" and obj.numel():
            storage = obj.untyped_storage()
            out[storage.data_ptr()] = storage.nbytes()
    elif isinstance(obj, dict):
        for v in obj.values():
            _local_tensors(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _local_tensors(v, out)


def held_tensors(model, optimizers: Sequence) -> dict[str, float]:
    """Bytes of the tensors `model` holds, by kind: `tables` (the embedding collection's local shards and
    replicas in its state dict), `dense` (the rest of the state dict), `optimizer` (the state of the fused
    optimizer, the in-backward ones and `optimizers`), `grads` (gradients left on parameters)."""
    from neuroshard.torchrec.training import MODULE_PATH

    state = model.state_dict()
    tables, dense, opt, grads = {}, {}, {}, {}
    for k, v in state.items():
        _local_tensors(v, tables if k.startswith(f"{MODULE_PATH}.") or f".{MODULE_PATH}." in k else dense)
    fused = getattr(model, "fused_optimizer", None)
    if fused is not None:
        _local_tensors(fused.state_dict().get("state", {}), opt)
    for _, p in model.named_parameters():
        for o in getattr(p, "_in_backward_optimizers", []) or []:
            _local_tensors(dict(o.state), opt)
        if p.grad is not None:
            _local_tensors(p.grad, grads)
    for o in optimizers:
        _local_tensors(dict(o.state), opt)
    for src in (dense, opt, grads):  # a view into a table's storage counts once, as the table
        for key in list(src):
            if key in tables:
                del src[key]
    return {k: float(sum(v.values())) for k, v in (("tables", tables), ("dense", dense), ("optimizer", opt),
                                                   ("grads", grads))}


# =========================================================================== the case's model and plan


def collection(case: MemoryCase, device: str = "meta"):
    """The case's `EmbeddingBagCollection` (on `device`), its weights in the case's dtype."""
    import torch
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, PoolingType
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    dtype = {"fp32": DataType.FP32, "fp16": DataType.FP16}[case.dtype]
    return EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[n], pooling=PoolingType.SUM,
                           data_type=dtype) for n, r, d in case.tables], device=torch.device(device))


def optimizer_class(name: str):
    """The torch optimizer class of an optimizer name (TorchRec maps it to the fused kernel's)."""
    import torch
    from torchrec.optim import RowWiseAdagrad

    return {"sgd": torch.optim.SGD, "row_wise_adagrad": RowWiseAdagrad, "adam": torch.optim.Adam}[name]


def case_sharder(case: MemoryCase, ebc):
    """The case's sharder (`training.all_types_sharder`): fused_params naming its optimizer, or none with the
    optimizer applied in backward to `ebc`'s parameters (`apply_optimizer_in_backward`, done here)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from neuroshard.torchrec.training import all_types_sharder

    if case.via == IN_BACKWARD:
        apply_optimizer_in_backward(optimizer_class(case.optimizer), ebc.parameters(), {"lr": LR})
        return all_types_sharder()
    fused = {"sgd": EmbOptimType.EXACT_SGD, "row_wise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
             "adam": EmbOptimType.ADAM}[case.optimizer]
    return all_types_sharder({"optimizer": fused, "learning_rate": LR})


def case_plan(case: MemoryCase, ebc, sharder, world: int):
    """The case's `ShardingPlan` (module path `training.MODULE_PATH`) by TorchRec's plan generators: the fused
    kernel, the dense one for data-parallel."""
    from torchrec.distributed.sharding_plan import (
        column_wise,
        construct_module_sharding_plan,
        data_parallel,
        row_wise,
        table_wise,
    )
    from torchrec.distributed.types import ShardingPlan

    from neuroshard.torchrec.training import MODULE_PATH

    def generator(k: int):  # the fused kernel named: on CPU the generators would pick the dense one
        if case.sharding_type == "table_wise":
            return table_wise(rank=k % world, compute_kernel="fused")
        if case.sharding_type == "column_wise":
            return column_wise(ranks=list(range(world)), compute_kernel="fused")
        return row_wise(compute_kernel="fused") if case.sharding_type == "row_wise" else data_parallel()

    per_table = {name: generator(k) for k, (name, _, _) in enumerate(case.tables)}
    return ShardingPlan({MODULE_PATH: construct_module_sharding_plan(
        ebc, per_table, sharder=sharder, local_size=world, world_size=world, device_type="cpu")})


def case_batch(case: MemoryCase, rank: int, world: int):
    """(dense, KeyedJaggedTensor, labels) of this rank's batch / world samples: `pooling` uniform random ids per
    table and sample, seeded by the rank."""
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    b = case.batch // world
    g = torch.Generator().manual_seed(1009 + rank)
    values = torch.cat([torch.randint(0, rows, (b * case.pooling,), generator=g) for _, rows, _ in case.tables])
    lengths = torch.full((b * len(case.tables),), case.pooling, dtype=torch.int64)
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=[n for n, _, _ in case.tables], values=values, lengths=lengths)
    return torch.randn(b, DENSE_FEATURES, generator=g), kjt, torch.randint(0, 2, (b,), generator=g).float()


def counted(case: MemoryCase, world: int) -> dict[str, list[float]]:
    """The counts of the case's plan, bytes per rank: NeuroShardPlanner's (`neuroshard`: memory="torchrec";
    `weights`: memory="weights"), TorchRec's storage estimator's (`torchrec`) and fp32 weights (`fp32`), on a
    CPU topology of `world` ranks at the case's per-rank batch and pooling factor."""
    import torch
    from torchrec.distributed.planner import ParameterConstraints, Topology

    from neuroshard.torchrec.planner import NeuroShardPlanner
    from neuroshard.torchrec.sharding_options import plan_shards
    from neuroshard.torchrec.training import MODULE_PATH

    ebc = collection(case)
    sharder = case_sharder(case, ebc)
    model = torch.nn.Module()
    setattr(model, MODULE_PATH, ebc)
    plan = case_plan(case, ebc, sharder, world)
    topology = Topology(world_size=world, compute_device="cpu", ddr_cap=2**40, local_world_size=world)
    cons = {n: ParameterConstraints(pooling_factors=[float(case.pooling)]) for n, _, _ in case.tables}
    planner = NeuroShardPlanner(topology, batch_size=case.batch // world, constraints=cons)
    out = {"neuroshard": planner.storage(model, [sharder], plan),
           "weights": planner.storage(model, [sharder], plan, count="weights"),
           "torchrec": planner.storage(model, [sharder], plan, count="estimator"), "fp32": [0.0] * world}
    for name, rows, dim in case.tables:
        for r, size, _ in plan_shards(plan, MODULE_PATH, name, world)[2]:
            out["fp32"][r] += 4.0 * (size[0] * size[1] if size else rows * dim)
    return out


# =========================================================================== rank side


def warm_up_case(case: MemoryCase, world: int) -> MemoryCase:
    """The case at a tiny size (a few rows per table, a batch of one sample per rank, one id each): trained
    first, so that the measured case finds the code it runs imported and the thread pools started, and its
    memory over the baseline is what its size costs."""
    return replace(case, batch=world, pooling=1, tables=[[n, 8 * world, d] for n, _, d in case.tables])


class TorchRecMemoryWorker(RankWorker):
    """One rank of the job: builds and trains each case, reading its memory (module doc)."""

    item = "case"
    first_phase = "building the model"

    def __init__(self, ctx: RankContext):
        super().__init__(ctx)
        self.steps = int(ctx.spec["steps"])
        self.items = None
        if ctx.rank == 0:
            with open(os.path.join(ctx.job_dir, ITEMS_FILE)) as f:
                self.items = json.load(f)

    def read_block(self, done: int) -> list:
        return [self.items[done]] if done < len(self.items) else []

    def measure(self, k: int, item: dict) -> dict | None:
        from neuroshard.measure.rank import local_lead
        from neuroshard.torchrec.training import release_memory

        ctx = self.ctx
        case = MemoryCase.from_json(item)
        t0 = time.perf_counter()
        try:
            self.ctx.state["phase"] = "warm-up (the case at a tiny size)"
            self._measure(warm_up_case(case, ctx.world))
            release_memory()
            mine, error = self._measure(case), None
        except Exception as e:  # noqa: BLE001 - a case the kernels refuse is a result, not the job's end
            mine, error = None, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        release_memory()
        ranks = ctx.gather(None if mine is None else mine.to_json())
        errors = ctx.gather(error)
        if not local_lead():
            return None
        first = next((e for e in errors if e), None)
        return MemoryResult(k, case, [] if first else [RankMemory.from_json(r) for r in ranks], first,
                            time.perf_counter() - t0).to_json()

    def _measure(self, case: MemoryCase) -> RankMemory:
        import torch
        from torchrec.distributed.model_parallel import DistributedModelParallel
        from torchrec.optim.optimizers import in_backward_optimizer_filter

        from neuroshard.torchrec.training import MODULE_PATH, concat_dlrm

        ctx, st = self.ctx, self.ctx.state
        if not case.trains_on_cpu:
            raise ValueError(f"FBGEMM's CPU kernel refuses {case.optimizer} (not supported in CPU mode)")
        base = resident_bytes()
        reset_peak()
        st["phase"] = "building the model"
        ebc = collection(case)
        sharder = case_sharder(case, ebc)
        plan = case_plan(case, ebc, sharder, ctx.world)
        torch.manual_seed(0)
        model = concat_dlrm(ebc, DENSE_FEATURES, DENSE_ARCH, OVER_ARCH, torch.device("cpu"))
        dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=[sharder])
        rest = dict(in_backward_optimizer_filter(dmp.named_parameters()))
        tables = [p for n, p in rest.items() if f"{MODULE_PATH}." in n]  # data-parallel replicas
        dense = [p for n, p in rest.items() if f"{MODULE_PATH}." not in n]
        optimizers = [torch.optim.SGD(dense, lr=LR)]
        if tables:
            optimizers.append(optimizer_class(case.optimizer)(tables, lr=LR))
        built, build_peak = resident_bytes(), peak_bytes()
        tensors_built = held_tensors(dmp, optimizers)
        reset_peak()
        st["phase"] = "training"
        dense_x, kjt, labels = case_batch(case, ctx.rank, ctx.world)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        for i in range(self.steps):
            st["phase"] = f"training step {i}"
            for o in optimizers:
                o.zero_grad(set_to_none=False)
            loss = loss_fn(dmp(dense_x, kjt), labels)
            loss.backward()
            for o in optimizers:
                o.step()
            if not torch.isfinite(loss.detach()):
                raise ValueError(f"the loss is {float(loss)} at step {i}")
        step_peak, after = peak_bytes(), resident_bytes()
        tensors_after = held_tensors(dmp, optimizers)
        st["phase"] = "freeing the model"
        del dmp, model, ebc, optimizers, rest, tables, dense, loss, dense_x, kjt, labels
        return RankMemory(base, built - base, build_peak - base, step_peak - base, after - base, tensors_built,
                          tensors_after)


# =========================================================================== launcher


@dataclass(frozen=True)
class MemorySpec(Record):
    """The job's settings as the ranks read them: `steps` training steps per case."""

    steps: int


class TorchRecMemoryJob(TorchrunJob):
    """One torchrun job measuring each case in order on `world` gloo CPU ranks; iterate `results()`."""

    item: ClassVar[str] = "case"
    job_prefix: ClassVar[str] = "torchrec_memory_job_"

    def __init__(self, cases: Sequence[MemoryCase], world: int, steps: int = 3, timeout: float = 120.0,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S, work_dir: str | None = None):
        for c in cases:
            c.validate(world)
        if steps < 1:
            raise ConfigError("steps", f"must be >= 1, got {steps}")
        self.cases = list(cases)
        super().__init__("torchrec_memory", MemorySpec(steps), world, len(self.cases), device="cpu",
                         timeout=timeout, startup_timeout=startup_timeout,
                         stall_timeout=(steps + 2) * timeout + WATCHDOG_GRACE_S, work_dir=work_dir)

    def write_inputs(self, job_dir: str) -> None:
        with open(os.path.join(job_dir, ITEMS_FILE), "w") as f:
            json.dump([c.to_json() for c in self.cases], f)

    def results(self):
        """Each case's `MemoryResult`, in order, as soon as rank 0 writes it."""
        for rec in self.records():
            yield MemoryResult.from_json(rec)


def measure_cases(cases: Sequence[MemoryCase], world: int = 2, steps: int = 3, on_result=None,
                  work_dir: str | None = None) -> list[MemoryResult]:
    """Measure every case in one job (`TorchRecMemoryJob`); `on_result(result)` as each arrives. Raises
    `launch.JobError` (naming the rank and cause) if a rank fails outside a case."""
    out = []
    if not cases:
        return out
    with TorchRecMemoryJob(cases, world, steps, work_dir=work_dir) as job:
        for r in job.results():
            out.append(r)
            if on_result is not None:
                on_result(r)
    return out
