"""The cost models as fast batched NumPy functions: the planner's one way of evaluating them.

`PlanScorer` evaluates the models as NumPy copies of their weights, made once
per model: for the small batches of a search that is several times faster
than torch. If a model's layout is not recognised (or the copy disagrees
with the model), it falls back to the model's own torch methods. Torch is
imported only for those fall-backs (a model object is a torch module, so
torch is loaded already when one is passed in). Times in ms.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from typing import Any, NamedTuple, Sequence

import numpy as np

from neuroshard.numerics import ordered_sums
from neuroshard.planner.costs.any_world import world_inputs
from neuroshard.planner.costs.features import ACC_DTYPE, batch_scaled, feature_matrix
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.tables import TableConfig


def _find_openblas_local_setter():
    """OpenBLAS's thread-local `openblas_set_num_threads_local`, if NumPy uses OpenBLAS (Linux)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "openblas" in line.lower() and "/" in line}
        for path in sorted(paths):
            fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
            if fn is not None:
                fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
                return fn
    except (OSError, ValueError):
        pass
    return None


_blas_setter: list = []


@contextlib.contextmanager
def single_threaded_blas():
    """Run NumPy's BLAS single-threaded in this thread, then restore.

    The search multiplies many small matrices (hundreds of rows); a threaded
    BLAS gains nothing there and, on a loaded machine, its threads wait for
    each other: measured 16 ms vs 1.1 ms for one comm-model batch.
    """
    if not _blas_setter:
        np.dot(np.ones((2, 2)), np.ones((2, 2)))  # make sure the BLAS library is loaded
        _blas_setter.append(_find_openblas_local_setter())
    setter = _blas_setter[0]
    if setter is None:
        yield
        return
    previous = setter(1)
    try:
        yield
    finally:
        setter(previous)


def _numpy_mlp(seq) -> list[tuple[np.ndarray, np.ndarray, bool]] | None:
    """(W^T, b, relu_after) float64 layers of an nn.Sequential of Linear/ReLU, or None."""
    import torch

    if not isinstance(seq, torch.nn.Sequential):
        return None
    layers: list[list] = []
    for m in seq:
        if isinstance(m, torch.nn.Linear):
            w = m.weight.detach().double().numpy().T.copy()
            b = (m.bias.detach().double().numpy().copy() if m.bias is not None
                 else np.zeros(w.shape[1]))
            layers.append([w, b, False])
        elif isinstance(m, torch.nn.ReLU) and layers and not layers[-1][2]:
            layers[-1][2] = True
        else:
            return None
    return [tuple(layer) for layer in layers] or None


def _run_mlp(layers, x: np.ndarray) -> np.ndarray:
    for w, b, relu in layers:
        x = x @ w
        x += b
        if relu:
            np.maximum(x, 0.0, out=x)
    return x




class _Head(NamedTuple):
    """The compute model's head as NumPy: its first linear layer (`w1` [32, A] float64, `b1` [A], then a
    ReLU if `relu1`), the remaining layers (`rest`: (w [A], b) of the usual A -> 1 output layer with the
    target scale folded in, or a list of (W, b, relu) layers) and the target `scale` (ms)."""

    w1: np.ndarray
    b1: np.ndarray
    relu1: bool
    rest: Any
    scale: float


class PlanScorer:
    """The three cost models as fast batched NumPy functions (ms).

    Build with `get_scorer(models)` (cached per model triple). `ndevices` is
    the comm models' device count.

    Compute cost: the head's first layer is linear, so instead of summing
    32-d embeddings and then applying it, each table's embedding is projected
    once (`project`) and a device keeps an accumulator `acc0 + sum of its
    tables' projections`; its cost is `cost_from_acc(acc)`, the rest of the
    head (ReLU, 64 -> 1). One placement update is then O(64), not O(32 x 64).
    Accumulators are float32 and each row's cost is computed without BLAS
    (einsum), so a device's cost does not depend on which batch it was
    computed in: equal shards get bit-equal costs and ties are real ties.
    """

    def __init__(self, compute_model, fw_model, bw_model):
        if compute_model is None or fw_model is None or bw_model is None:
            raise NeuroShardError("the simulator needs a compute, a forward and a backward cost model")
        self.compute_model, self.fw_model, self.bw_model = compute_model, fw_model, bw_model
        nd_fw, nd_bw = getattr(fw_model, "ndevices", None), getattr(bw_model, "ndevices", None)
        if nd_fw != nd_bw:
            raise NeuroShardError(f"forward comm model is for {nd_fw} devices, backward for {nd_bw}")
        if nd_fw is None:
            raise NeuroShardError("the comm models are for any world size: bind them to the problem's device count "
                                  "first (CostModels.for_world)")
        self.ndevices = int(nd_fw)
        self._table = self._extract_table_mlp(compute_model)
        self._head = self._extract_head(compute_model)
        self._zeros = np.zeros(len(self._head.b1) if self._head else 0, dtype=ACC_DTYPE)
        self._fw = self._extract_comm(fw_model)
        self._bw = self._extract_comm(bw_model)
        self._check_against_torch()

    # -- extraction (None: fall back to the model's torch methods)

    @staticmethod
    def _extract_table_mlp(model):
        layers = _numpy_mlp(getattr(model, "table_mlp", None))
        if layers is None or not all(hasattr(model, a) for a in ("feat_mean", "feat_std")):
            return None
        mean = model.feat_mean.detach().double().numpy().copy()
        std = model.feat_std.detach().double().numpy().copy()
        return layers, mean, std

    @staticmethod
    def _extract_head(model):
        """The head with its first linear layer apart, the rest as NumPy layers (`_Head`)."""
        head = getattr(model, "head", None)
        scale = getattr(model, "target_scale", None)
        layers = _numpy_mlp(head)
        if layers is None or scale is None or len(layers) < 2 or layers[-1][0].shape[1] != 1:
            return None
        (w1, b1, relu1), rest = layers[0], layers[1:]
        scale = float(scale)
        if len(rest) == 1 and not rest[0][2]:
            # the usual 64 -> 1 output layer: fold the target scale into it
            w, b, _ = rest[0]
            rest = ((w[:, 0] * scale).astype(ACC_DTYPE), ACC_DTYPE(b[0] * scale))
        else:
            rest = [(w.astype(ACC_DTYPE), b.astype(ACC_DTYPE), r) for w, b, r in rest]
        return _Head(w1, b1.astype(ACC_DTYPE), relu1, rest, scale)

    @staticmethod
    def _extract_comm(model):
        """(MLP layers, input mean, std, target scale, wait_term, wait_inputs, world) as NumPy, or None; `world`:
        a model for any world size (its input each rank's features, `world_inputs`; one output per rank)."""
        world = getattr(model, "world_model", None)  # one for any world size bound to a count (nets.WorldAtCount)
        net = model if world is None else world
        names = ("x_mean", "x_std") if world is None else ("f_mean", "f_std")
        layers = _numpy_mlp(getattr(net, "mlp", None))
        if layers is None or not all(hasattr(net, a) for a in (*names, "target_scale")):
            return None
        # float32 like the model itself: scoring thousands of placements is the second-largest
        # cost of the search, and float32 halves it
        layers = [(w.astype(np.float32), b.astype(np.float32), r) for w, b, r in layers]
        mean, std = (getattr(net, a).detach().numpy().astype(np.float32) for a in names)
        if world is not None:  # per-rank features, the wait for the last rank added (nets.WorldCommModel)
            return layers, mean, std, np.float32(net.target_scale), net.kind == "fw", False, True
        return (layers, mean, std, np.float32(model.target_scale), bool(getattr(model, "wait_term", False)),
                bool(getattr(model, "wait_inputs", False)), False)

    def _check_against_torch(self) -> None:
        """Drop a NumPy copy that disagrees with its torch model (an unknown layout)."""
        rng = np.random.default_rng(0)

        def close(fast, ref):
            return fast.shape == ref.shape and np.allclose(fast, ref, rtol=1e-3, atol=1e-4 * (1 + np.abs(ref).max()))

        if self._table is not None:
            layers, mean, std = self._table
            feats = mean + std * rng.normal(size=(8, len(mean)))
            import torch

            with torch.inference_mode():
                ref = self.compute_model.embed(torch.as_tensor(feats, dtype=torch.float32)).numpy()
            if not close(_run_mlp(layers, (feats - mean) / std), ref):
                self._table = None
        if self._head is not None:
            sums = np.abs(rng.normal(size=(8, self._head.w1.shape[0]))) * 3
            if not close(self.cost_from_acc(self.acc0 + self.project(sums)), self._torch_compute(sums)):
                self._head = None
        dims = rng.integers(0, 512, size=(8, self.ndevices)).astype(np.float64)
        sleeps = rng.uniform(0, 10, size=(8, self.ndevices))
        for kind in ("fw", "bw"):
            if getattr(self, f"_{kind}") is not None:
                x = sleeps if kind == "fw" else None
                if not close(self._comm(kind, dims, x), self._torch_comm(kind, dims, x)):
                    setattr(self, f"_{kind}", None)

    @property
    def uses_numpy(self) -> bool:
        """True when all three models run as NumPy copies (the fast path)."""
        return all(p is not None for p in (self._table, self._head, self._fw, self._bw))

    # -- torch fall-backs

    def _torch_compute(self, sums: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            sums_t = torch.as_tensor(np.asarray(sums), dtype=torch.float32)
            out = self.compute_model.cost_from_sums(sums_t, torch.ones(len(sums_t)))
        return out.numpy().astype(ACC_DTYPE)

    def _torch_comm(self, kind: str, dims: np.ndarray, sleeps) -> np.ndarray:
        model = self.fw_model if kind == "fw" else self.bw_model
        return np.asarray(model.predict(dims, sleeps), dtype=np.float64)

    # -- compute cost

    @property
    def embed_dim(self) -> int:
        if self._head is not None:
            return self._head.w1.shape[0]
        return int(getattr(self.compute_model.head[0], "in_features", 32))

    def embed(self, configs: Sequence[TableConfig]) -> np.ndarray:
        """Per-table 32-d embeddings [N, 32] (float64) of configs with dims, one model call.

        Equal configs are embedded once, so they get bit-equal embeddings.
        """
        if len(configs) == 0:
            return np.zeros((0, self.embed_dim))
        uniq: dict[TableConfig, int] = {}
        index = np.array([uniq.setdefault(c, len(uniq)) for c in configs])
        distinct = list(uniq)
        if self._table is None:
            emb = np.asarray(self.compute_model.predict_tables(distinct), dtype=np.float64)
        else:
            layers, mean, std = self._table
            emb = _run_mlp(layers, (feature_matrix(distinct).astype(np.float64) - mean) / std)
        return emb[index]

    def project(self, emb: np.ndarray) -> np.ndarray:
        """Per-table accumulator increments [N, A] (float32) from embeddings [N, 32]."""
        emb = np.asarray(emb, dtype=np.float64)
        if self._head is None:
            return emb.astype(ACC_DTYPE)
        return (emb @ self._head.w1).astype(ACC_DTYPE)

    @property
    def acc0(self) -> np.ndarray:
        """The accumulator of an empty device [A] (float32)."""
        if self._head is None:
            return np.zeros(self.embed_dim, dtype=ACC_DTYPE)
        return self._head.b1.copy()

    def cost_from_acc(self, acc: np.ndarray, overwrite: bool = False) -> np.ndarray:
        """Compute ms [M] (float32) of non-empty shards from their accumulators [M, A].

        The hot path of the search; `overwrite=True` lets it use `acc` as scratch.
        """
        if self._head is None:
            return self._torch_compute(acc)
        relu, rest = self._head.relu1, self._head.rest
        x = acc if overwrite else acc.copy()
        if relu:
            # against a zero row, not the scalar 0: measured 1.7x faster in NumPy 2.4
            np.maximum(x, self._zeros, out=x)
        if isinstance(rest, tuple):
            out = np.einsum("ij,j->i", x, rest[0])  # row by row, no BLAS: batch-independent bits
            out += rest[1]
            return out
        for w, b, r in rest:
            x = x @ w
            x += b
            if r:
                np.maximum(x, 0, out=x)
        return x[:, 0] * ACC_DTYPE(self._head.scale)

    def shard_costs(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        """Compute ms [n] of each shard (indices into emb), accumulated in shard-list order; empty -> 0."""
        acc = shard_accumulators(self.project(emb), shards, self.acc0)
        counts = np.array([len(s) for s in shards])
        return np.where(counts > 0, self.cost_from_acc(acc).astype(np.float64), 0.0)

    # -- communication

    def _comm(self, kind: str, dims: np.ndarray, sleeps) -> np.ndarray:
        params = self._fw if kind == "fw" else self._bw
        if params is None:
            return self._torch_comm(kind, dims, sleeps)
        layers, mean, std, scale, wait_term, wait_inputs, world = params
        if kind == "fw":
            waits = sleeps.max(axis=-1, keepdims=True) - sleeps  # see nets.CommCostModel
        if world:
            x = world_inputs(kind, dims, sleeps)
        elif kind == "bw":
            x = dims
        else:
            x = np.concatenate([dims, waits if wait_inputs else sleeps], axis=-1)
        out = _run_mlp(layers, (x.astype(np.float32) - mean) / std)
        out = out[..., 0] if world else out
        out *= scale
        out = out.astype(np.float64)
        if wait_term:  # see nets.CommCostModel: the wait for the last rank, from the inputs
            out += waits
        return out

    def comm(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Backward and forward comm ms [M, n] (float64) from dim sums [M, n] and compute ms [M, n]."""
        dims = np.asarray(dims, dtype=np.float64)
        compute = np.asarray(compute, dtype=np.float64)
        if dims.ndim != 2 or dims.shape[1] != self.ndevices:
            raise NeuroShardError(f"comm models are for {self.ndevices} devices, got dims of shape {dims.shape}")
        bw = self._comm("bw", dims, None)
        ready = compute + bw
        skew = ready - ready.min(axis=1, keepdims=True)
        fw = self._comm("fw", dims, skew)
        return _no_tables_no_comm(dims, bw, fw)

    # -- the members of an ensemble (one here; see EnsembleScorer)

    members = 1

    def member_costs_from_acc(self, acc: np.ndarray) -> np.ndarray:
        """Each member's compute ms [M, K] of shards from their accumulators (K = 1 here)."""
        return self.cost_from_acc(acc)[:, None]

    def member_shard_costs(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        """Each member's compute ms [K, n] of each shard (K = 1 here)."""
        return self.shard_costs(emb, shards)[None]

    def comm_members(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each member's backward and forward comm ms [K, M, n] from dim sums [M, n] and that member's
        compute ms [K, M, n] (its own skew)."""
        bw, fw = self.comm(dims, compute[0])
        return bw[None], fw[None]


class EnsembleScorer:
    """The scorer of cost models that are ensembles (`nets.CostEnsemble`): K members, all in one pass.

    Same interface as `PlanScorer`, whose predictions are the members' mean:
    a table's embedding is the K members' side by side [K x 32], a device's
    accumulator the K members' [K x A], and `cost_from_acc` runs every
    member's head in one einsum and averages; the comm models run as one
    batched matrix product per layer over the stacked members' weights. The
    search therefore costs the same calls as with one model, each K times
    wider. `member_*` and `comm_members` give each member's own prediction
    (member k: compute member k with comm members k; a part with one model
    serves every member), from which `simulator.simulate` reports each
    plan's spread. Needs the standard layouts (the NumPy path of every member).
    """

    def __init__(self, compute_model, fw_model, bw_model):
        from neuroshard.planner.costs.cost_models import members

        self.compute_model, self.fw_model, self.bw_model = compute_model, fw_model, bw_model
        parts = [members(compute_model), members(fw_model), members(bw_model)]
        k = max(len(p) for p in parts)
        if any(len(p) not in (1, k) for p in parts):
            raise NeuroShardError(f"ensembles of {', '.join(str(len(p)) for p in parts)} members cannot be "
                                  "scored together: give each cost the same number of members (or one)")
        self.members = k
        self.parts = [PlanScorer(parts[0][i % len(parts[0])], parts[1][i % len(parts[1])],
                                 parts[2][i % len(parts[2])]) for i in range(k)]
        heads = [p._head for p in self.parts]
        if not all(p._table is not None and h is not None for p, h in zip(self.parts, heads)) \
                or not all(isinstance(h.rest, tuple) for h in heads) or len({h.relu1 for h in heads}) != 1:
            raise NeuroShardError("ensemble members must have the standard cost-model layout")
        self.ndevices = self.parts[0].ndevices
        self._w1 = np.stack([h.w1 for h in heads])  # [K, E, A] float64
        self._b1 = np.concatenate([h.b1 for h in heads])  # [K A] float32: an empty device's accumulator
        self._relu1 = heads[0].relu1
        self._w2 = np.stack([h.rest[0] for h in heads])  # [K, A] float32, target scale folded in
        self._b2 = np.array([h.rest[1] for h in heads], dtype=ACC_DTYPE)  # [K]
        # the members' mean as one head over the [K x A] accumulator: mean_k(relu(x_k) . w2_k + b2_k)
        self._w2_mean = (self._w2 / ACC_DTYPE(k)).reshape(-1).astype(ACC_DTYPE)  # [K A]
        self._b2_mean = self._b2.mean(dtype=ACC_DTYPE)
        self._zeros = np.zeros_like(self._b1)
        self._comm_params = {kind: self._stack_comm(params) if all(q is not None for q in params) else None
                             for kind in ("fw", "bw") for params in [[getattr(p, f"_{kind}") for p in self.parts]]}

    @staticmethod
    def _stack_comm(params):
        layers = [(np.stack([p[0][i][0] for p in params]), np.stack([p[0][i][1] for p in params])[:, None],
                   params[0][0][i][2]) for i in range(len(params[0][0]))]
        mean = np.stack([p[1] for p in params])[:, None]  # [K, 1, in]
        std = np.stack([p[2] for p in params])[:, None]
        scale = np.array([p[3] for p in params], dtype=np.float32)[:, None, None]
        return layers, mean, std, scale, *params[0][4:]

    @property
    def uses_numpy(self) -> bool:
        """True when every model runs as NumPy copies (the compute models always do here)."""
        return all(p is not None for p in self._comm_params.values())

    @property
    def embed_dim(self) -> int:
        return self.members * self.parts[0].embed_dim

    def embed(self, configs: Sequence[TableConfig]) -> np.ndarray:
        """Per-table embeddings of every member side by side [N, K x 32] (float64)."""
        return np.concatenate([p.embed(configs) for p in self.parts], axis=1)

    def project(self, emb: np.ndarray) -> np.ndarray:
        """Per-table accumulator increments [N, K x A] (float32) from embeddings [N, K x 32]."""
        emb = np.asarray(emb, dtype=np.float64)
        k, (e, a) = self.members, self._w1.shape[1:]
        proj = np.einsum("nke,kea->nka", emb.reshape(len(emb), k, e), self._w1)
        return proj.reshape(len(emb), k * a).astype(ACC_DTYPE)

    @property
    def acc0(self) -> np.ndarray:
        return self._b1.copy()

    def member_costs_from_acc(self, acc: np.ndarray, overwrite: bool = False) -> np.ndarray:
        """Each member's compute ms [M, K] (float32) from accumulators [M, K x A]; row by row, no BLAS."""
        x = acc if overwrite else acc.copy()
        if self._relu1:
            np.maximum(x, self._zeros, out=x)
        out = np.einsum("mka,ka->mk", x.reshape(len(x), self.members, -1), self._w2)
        out += self._b2
        return out

    def cost_from_acc(self, acc: np.ndarray, overwrite: bool = False) -> np.ndarray:
        """Compute ms [M] (float32): the members' mean, as one row-by-row product with the members' second
        layers side by side (each divided by K), not K costs and then their mean: the search's hot path."""
        x = acc if overwrite else acc.copy()
        if self._relu1:
            np.maximum(x, self._zeros, out=x)
        out = np.einsum("ij,j->i", x, self._w2_mean)
        out += self._b2_mean
        return out

    def _acc(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        return shard_accumulators(self.project(emb), shards, self.acc0)

    def shard_costs(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        counts = np.array([len(s) for s in shards])
        return np.where(counts > 0, self.cost_from_acc(self._acc(emb, shards)).astype(np.float64), 0.0)

    def member_shard_costs(self, emb: np.ndarray, shards: Sequence[Sequence[int]]) -> np.ndarray:
        counts = np.array([len(s) for s in shards])
        costs = self.member_costs_from_acc(self._acc(emb, shards)).astype(np.float64).T  # [K, n]
        return np.where(counts[None] > 0, costs, 0.0)

    def _comm(self, kind: str, dims: np.ndarray, sleeps) -> np.ndarray:
        """Every member's prediction [K, M, n] (float64); `sleeps` [K, M, n] (fw) or None (bw)."""
        if self._comm_params[kind] is None:  # a layout without NumPy copies: each member's torch model
            return np.stack([p._torch_comm(kind, dims, None if sleeps is None else sleeps[k])
                             for k, p in enumerate(self.parts)])
        layers, mean, std, scale, wait_term, wait_inputs, world = self._comm_params[kind]
        k, (m, n) = self.members, dims.shape
        x = np.broadcast_to(dims.astype(np.float32), (k, m, n))
        if kind == "fw":
            waits = sleeps.max(axis=-1, keepdims=True) - sleeps
        if world:  # every rank a row: [K, M n, F]
            x = world_inputs(kind, x, sleeps).reshape(k, m * n, -1)
        elif kind == "fw":
            x = np.concatenate([x, (waits if wait_inputs else sleeps).astype(np.float32)], axis=-1)
        x = (x - mean) / std
        for w, b, relu in layers:
            x = np.matmul(x, w)  # one batched product over the members
            x += b
            if relu:
                np.maximum(x, 0.0, out=x)
        x = x.reshape(k, m, n) if world else x
        out = (x * scale).astype(np.float64)
        if wait_term:
            out += waits
        return out

    def comm_members(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dims = np.asarray(dims, dtype=np.float64)
        compute = np.asarray(compute, dtype=np.float64)
        if dims.ndim != 2 or dims.shape[1] != self.ndevices:
            raise NeuroShardError(f"comm models are for {self.ndevices} devices, got dims of shape {dims.shape}")
        bw = self._comm("bw", dims, None)
        ready = compute + bw
        fw = self._comm("fw", dims, ready - ready.min(axis=-1, keepdims=True))
        return _no_tables_no_comm(dims, bw, fw)

    def comm(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Backward and forward comm ms [M, n]: the members' means, each member's forward wait from the mean
        compute plus its own backward time."""
        k = self.members
        bw, fw = self.comm_members(dims, np.broadcast_to(np.asarray(compute, dtype=np.float64),
                                                         (k, *np.shape(compute))))
        return bw.mean(axis=0), fw.mean(axis=0)


def shard_accumulators(proj: np.ndarray, shards: Sequence[Sequence[int]], acc0: np.ndarray) -> np.ndarray:
    """Each shard's accumulator [len(shards), A]: `acc0` plus its members' rows of `proj`, added in shard-list
    order, the order in which the search's placement adds them (so the bits agree)."""
    lengths = [len(s) for s in shards]
    members = np.fromiter((i for s in shards for i in s), dtype=np.int64, count=sum(lengths))
    return ordered_sums(np.repeat(np.arange(len(shards)), lengths), proj[members], len(shards), acc0)


def _no_tables_no_comm(dims: np.ndarray, bw: np.ndarray, fw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero comm ms for the placements [M, n] whose devices hold no table at all (every dim sum 0).

    The comm models were fitted on all-to-alls that carry something and
    predict a few ms for an empty one; with no table anywhere nothing is
    sent, so such a placement (the plan of an empty table list) costs 0. A
    device without tables in a plan with tables still receives its slice of
    the others' embeddings (and sends their gradients), so its comm is kept:
    the costs of plans with tables do not change. `bw`, `fw`: [M, n] or [K, M, n].
    """
    idle = ~np.asarray(dims).any(axis=-1)
    if idle.any():
        bw, fw = bw.copy(), fw.copy()
        bw[..., idle, :] = 0.0
        fw[..., idle, :] = 0.0
    return bw, fw


_SCORERS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _make_scorer(cm, fw, bw):
    if any(hasattr(m, "members") for m in (cm, fw, bw)):
        return EnsembleScorer(cm, fw, bw)
    return PlanScorer(cm, fw, bw)


class BatchScaledScorer:
    """A scorer costing plans at another batch than its models' data (`CostModels.at_batch`): tables are
    embedded at `compute_ratio` times their pooling (`features.batch_scaled`) and the exchanges' dim sums
    read at `comm_ratio` times (the bytes of a pooled all-to-all are batch x dims); all else is the base
    scorer's."""

    def __init__(self, base, compute_ratio: float, comm_ratio: float):
        self.base, self.compute_ratio, self.comm_ratio = base, float(compute_ratio), float(comm_ratio)

    def __getattr__(self, name):
        return getattr(self.base, name)

    def embed(self, configs: Sequence[TableConfig]) -> np.ndarray:
        return self.base.embed(batch_scaled(configs, self.compute_ratio))

    def comm(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.base.comm(np.asarray(dims, dtype=np.float64) * self.comm_ratio, compute)

    def comm_members(self, dims: np.ndarray, compute: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.base.comm_members(np.asarray(dims, dtype=np.float64) * self.comm_ratio, compute)


def get_scorer(models) -> PlanScorer | EnsembleScorer | BatchScaledScorer:
    """The scorer of a `CostModels` bundle (an `EnsembleScorer` when a model is an ensemble), cached per
    model triple; wrapped in a `BatchScaledScorer` when the bundle costs plans at another batch than its
    data's (`CostModels.batch_ratios`).

    The cache assumes the models' weights do not change after first use.
    """
    if models is None:
        raise NeuroShardError("the simulator needs a compute, a forward and a backward cost model")
    if getattr(models, "analytic", None) is not None:
        from neuroshard.planner.costs.analytic import AnalyticScorer

        return AnalyticScorer(models.analytic, models.batch)
    cm, fw, bw = models.compute, models.fw, models.bw
    ratios = models.batch_ratios if hasattr(models, "batch_ratios") else (1.0, 1.0)
    try:
        per_model = _SCORERS.setdefault(cm, {})
    except TypeError:  # not weak-referenceable: no caching
        return _at_batch(_make_scorer(cm, fw, bw), ratios)
    key = (id(fw), id(bw))
    hit = per_model.get(key)
    if hit is None or hit.fw_model is not fw or hit.bw_model is not bw:
        hit = per_model[key] = _make_scorer(cm, fw, bw)
    return _at_batch(hit, ratios)


def _at_batch(scorer, ratios: tuple[float, float]):
    return scorer if ratios == (1.0, 1.0) else BatchScaledScorer(scorer, *ratios)


