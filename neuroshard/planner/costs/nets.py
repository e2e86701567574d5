"""Neural cost models (DESIGN §6) as torch modules: one compute model, forward and backward comm models.

Training builds and fits them (`neuroshard.train`); the planner loads them from
checkpoints (`planner.costs.cost_models`) and scores plans with NumPy copies of their
weights (`planner.costs.scorer`). All predictions are in ms.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from neuroshard.planner.costs.features import (
    NUM_FEATURES,
    TABLE_EMBED_DIM,
    feature_matrix,
)
from neuroshard.types.tables import TableConfig


def table_features(configs: Sequence[TableConfig]) -> torch.Tensor:
    """Per-table features [N, F] as a tensor (see `planner.costs.features.feature_matrix`)."""
    return torch.from_numpy(feature_matrix(configs))


def feature_stats(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std (std of a constant column is taken as 1) for normalisation."""
    mean = features.mean(0)
    std = features.std(0, unbiased=False)
    std = torch.where(std > 1e-12, std, torch.ones_like(std))
    return mean, std


def mlp(sizes: Sequence[int], final_relu: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or final_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class ComputeCostModel(nn.Module):
    """Shard compute cost: table MLP (F→128→32) per table, summed, then head (32→64→1).

    Because a shard's cost depends only on the sum of its tables' 32-d
    embeddings, a search can embed each table once and keep running sums.
    `target_scale` (ms) is set from the training targets so the network
    works on O(1) numbers; outputs are multiplied back to ms.
    """

    def __init__(self, feat_mean: torch.Tensor, feat_std: torch.Tensor, num_features: int = NUM_FEATURES,
                 target_scale: float = 1.0):
        super().__init__()
        self.num_features = num_features
        self.register_buffer("feat_mean", torch.as_tensor(feat_mean, dtype=torch.float32).clone())
        self.register_buffer("feat_std", torch.as_tensor(feat_std, dtype=torch.float32).clone())
        self.register_buffer("target_scale", torch.tensor(float(target_scale)))
        self.table_mlp = mlp([num_features, 128, TABLE_EMBED_DIM], final_relu=True)
        self.head = mlp([TABLE_EMBED_DIM, 64, 1])

    def config(self) -> dict:
        return {"num_features": self.num_features}

    def embed(self, feats: torch.Tensor) -> torch.Tensor:
        """Per-table embeddings [N, 32] from raw features [N, F]."""
        return self.table_mlp((feats - self.feat_mean) / self.feat_std)

    def cost_from_sums(self, sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Costs [M] in ms of M shards given their embedding sums [M, 32] and sizes [M]."""
        out = self.head(sums).squeeze(-1) * self.target_scale
        return torch.where(counts > 0, out, torch.zeros_like(out))

    def forward(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Costs [B] in ms of B shards: feats [B, K, F] padded, mask [B, K] true for real tables."""
        emb = self.embed(feats) * mask.unsqueeze(-1)
        return self.cost_from_sums(emb.sum(1), mask.sum(1))

    @torch.inference_mode()
    def predict_tables(self, configs: Sequence[TableConfig]) -> np.ndarray:
        """Embeddings [N, 32] of N tables (configs with dims), for a search to sum."""
        if len(configs) == 0:
            return np.zeros((0, TABLE_EMBED_DIM), dtype=np.float32)
        return self.embed(table_features(configs)).numpy()

    @torch.inference_mode()
    def predict_sets(self, configs: Sequence[TableConfig], sets: Sequence[Sequence[int]]) -> np.ndarray:
        """Costs [M] in ms of M shards, each a list of indices into `configs` (batched)."""
        emb = torch.from_numpy(self.predict_tables(configs))
        sums = torch.zeros((len(sets), TABLE_EMBED_DIM))
        counts = torch.zeros(len(sets))
        for m, s in enumerate(sets):
            if len(s):
                sums[m] = emb[list(s)].sum(0)
                counts[m] = len(s)
        return self.cost_from_sums(sums, counts).numpy()


COMM_HIDDEN = (128, 64, 32, 16)  # DESIGN §6: the comm models' hidden layers


class CommCostModel(nn.Module):
    """All-to-all cost per device: MLP (`hidden`, default 128, 64, 32, 16) to `ndevices` outputs in ms.

    kind "fw": input dims + sleeps (2n); kind "bw": input dims (n).

    `hidden` () makes the model linear in its inputs (one n_in x n layer): the
    backward exchange's time is close to linear in the per-device dim sums, and
    its measurements are noisy, so an MLP fits dips into the noise that a
    search then finds; a linear model scores the same on held-out data and has
    no dips.

    `wait_term` (forward only): the output is `max(sleeps) - sleeps[r]` (the
    time rank r waits for the last rank to start, known from the inputs) plus
    the MLP's output, which then only has to learn the transfer: an MLP learns
    `max - own` poorly from a few hundred samples of a 2n-input function.
    Without it (DESIGN §6 as written) the MLP learns the sum.

    `wait_inputs` (forward only): the MLP sees each rank's wait for the last
    rank, `max(sleeps) - sleeps[r]`, in place of its sleep (the same
    information when the first rank's sleep is 0, as in every collected
    sample and every plan's skew). The transfer left once the last rank
    arrives depends on how close behind it the others came (the smallest
    nonzero wait): nearly simultaneous arrivals leave more of the exchange
    to do. From sleeps the MLP must find that as a difference of maxima, and
    with a few hundred samples it does not; it then under-predicts the
    transfer of exactly the balanced plans a search prefers. Without it, the
    MLP sees the sleeps. (The measurements behind these choices are in
    docs/EXPERIMENTS.md.)
    """

    def __init__(self, kind: str, ndevices: int, x_mean: torch.Tensor, x_std: torch.Tensor,
                 target_scale: float = 1.0, wait_term: bool = False, hidden: Sequence[int] = COMM_HIDDEN,
                 wait_inputs: bool = False):
        super().__init__()
        if kind not in ("fw", "bw"):
            raise ValueError(f"kind must be 'fw' or 'bw', got {kind!r}")
        if wait_term and kind != "fw":
            raise ValueError("only the forward model has a wait term")
        if wait_inputs and kind != "fw":
            raise ValueError("only the forward model has wait inputs")
        self.kind = kind
        self.ndevices = int(ndevices)
        self.wait_term = bool(wait_term)
        self.wait_inputs = bool(wait_inputs)
        n_in = 2 * self.ndevices if kind == "fw" else self.ndevices
        self.register_buffer("x_mean", torch.as_tensor(x_mean, dtype=torch.float32).clone().reshape(n_in))
        self.register_buffer("x_std", torch.as_tensor(x_std, dtype=torch.float32).clone().reshape(n_in))
        self.register_buffer("target_scale", torch.tensor(float(target_scale)))
        self.hidden = tuple(int(h) for h in hidden)
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden layer sizes must be >= 1, got {list(self.hidden)}")
        self.mlp = mlp([n_in, *self.hidden, self.ndevices])
        if not self.hidden:  # linear: start at the mean target (the output is in units of target_scale)
            with torch.no_grad():
                self.mlp[0].weight.zero_()
                self.mlp[0].bias.fill_(1.0)

    def config(self) -> dict:
        return {"kind": self.kind, "ndevices": self.ndevices, "wait_term": self.wait_term,
                "hidden": list(self.hidden), "wait_inputs": self.wait_inputs}

    @staticmethod
    def waits(x: torch.Tensor, ndevices: int) -> torch.Tensor:
        """Each rank's wait for the last rank to start, max(sleeps) - own sleep, from an input (dims then
        sleeps)."""
        sleeps = x[..., ndevices:]
        return sleeps.max(dim=-1, keepdim=True).values - sleeps

    @staticmethod
    def features(x: torch.Tensor, ndevices: int, wait_inputs: bool) -> torch.Tensor:
        """The MLP's input from the model's (dims then sleeps): the sleeps replaced by each rank's wait for
        the last rank when `wait_inputs`."""
        if not wait_inputs:
            return x
        return torch.cat([x[..., :ndevices], CommCostModel.waits(x, ndevices)], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.features(x, self.ndevices, self.wait_inputs)
        out = self.mlp((feats - self.x_mean) / self.x_std) * self.target_scale
        if self.wait_term:
            out = out + self.waits(x, self.ndevices)
        return out

    @staticmethod
    def make_input(kind: str, dims, sleeps=None) -> torch.Tensor:
        dims = torch.as_tensor(np.asarray(dims, dtype=np.float32))
        if kind == "bw":
            return dims
        if sleeps is None:
            raise ValueError("the forward comm model needs sleeps")
        return torch.cat([dims, torch.as_tensor(np.asarray(sleeps, dtype=np.float32))], dim=-1)

    @torch.inference_mode()
    def predict(self, dims, sleeps=None) -> np.ndarray:
        """Per-device ms [M, n] for M dim vectors [M, n] (and sleeps [M, n] for fw)."""
        x = self.make_input(self.kind, dims, sleeps)
        if x.shape[-1] != self.x_mean.shape[0]:
            raise ValueError(f"{self.kind} comm model for {self.ndevices} devices got input of width {x.shape[-1]}")
        return self(x).numpy()


# --------------------------------------------------------------------------- any world size

# The per-rank features of `WorldCommModel`, in order: the world's size; the rank's place in it (r / (n - 1), and
# whether it is rank 0: the collectives' peers are paired in rank order, and the ranks of one size do not take
# the same time for the same exchange); the rank's own dim sum and the ranks' total, largest and smallest; what
# the rank sends and receives of an all-to-all (a rank holding [B, d_r] sends (n - 1) / n of it and receives
# 1 / n of every other rank's: in units of B floats), and the most any rank receives; and, forward only, the
# rank's wait for the last rank to start, the longest and the mean wait, and the gap between the last and the
# second-last rank to start (how close behind the last one the others came).
WORLD_FEATURES = {"bw": ("n", "rank", "first", "own", "total", "largest", "smallest", "send", "recv", "max_recv")}
WORLD_FEATURES["fw"] = WORLD_FEATURES["bw"] + ("wait", "max_wait", "mean_wait", "gap")
WORLD_HIDDEN = (64, 32)  # the per-rank network's hidden layers


def world_features(kind: str, dims: torch.Tensor, sleeps: torch.Tensor | None, counts: torch.Tensor) -> torch.Tensor:
    """Per-rank features [M, n, F] (`WORLD_FEATURES[kind]`) of M exchanges padded to n ranks: `dims` (and for "fw"
    `sleeps`) [M, n], of which the first `counts` [M] ranks are real; a padded rank's features are 0."""
    m, n = dims.shape
    valid = torch.arange(n, device=dims.device)[None, :] < counts[:, None]
    size = counts.to(dims.dtype)[:, None]
    d = torch.where(valid, dims, torch.zeros_like(dims))
    total = d.sum(1, keepdim=True)
    largest = d.max(1, keepdim=True).values
    smallest = torch.where(valid, d, torch.full_like(d, float("inf"))).min(1, keepdim=True).values
    index = torch.arange(n, device=dims.device, dtype=dims.dtype)[None, :].expand(m, n)
    place = index / (size - 1).clamp_min(1.0)
    cols = [size, place, (index == 0).to(dims.dtype), d, total, largest, smallest, d * (size - 1) / size,
            (total - d) / size, (total - smallest) / size]
    if kind == "fw":
        s = torch.where(valid, sleeps, torch.full_like(sleeps, -float("inf")))
        wait = torch.where(valid, s.max(1, keepdim=True).values - s, torch.zeros_like(s))
        ordered = torch.where(valid, wait, torch.full_like(wait, float("inf"))).sort(1).values
        gap = ordered[:, 1:2] if n > 1 else torch.zeros((m, 1), dtype=dims.dtype, device=dims.device)
        gap = torch.where(counts[:, None] > 1, gap, torch.zeros_like(gap))
        cols += [wait, wait.max(1, keepdim=True).values, wait.sum(1, keepdim=True) / size, gap]
    feats = torch.stack([c.expand(m, n) for c in cols], dim=-1)
    return torch.where(valid[..., None], feats, torch.zeros_like(feats))


class WorldCommModel(nn.Module):
    """All-to-all cost per rank for any number of ranks: one network applied to every rank's features
    (`WORLD_FEATURES`: its own exchange and the world's, the world's size among them), so exchanges of every
    world size train one model and it prices sizes it was not trained on between them (DeepSets' form, the
    pooled parts written out). Forward: the rank's wait for the last rank plus the network's transfer (as
    `CommCostModel`'s `wait_term`); `hidden` () makes the network linear in the features.

    `forward(x, counts)`: x [M, n] (bw: dims) or [M, 2n] (fw: dims then sleeps), padded to n ranks, of which the
    first `counts` [M] are real; per-rank ms [M, n], 0 at padded ranks. `predict(dims, sleeps)` takes any width.
    `ndevices` is None: the model is for any world size (`sizes`: those its data had)."""

    ndevices = None

    def __init__(self, kind: str, f_mean: torch.Tensor, f_std: torch.Tensor, target_scale: float = 1.0,
                 hidden: Sequence[int] = WORLD_HIDDEN, sizes: Sequence[int] = ()):
        super().__init__()
        if kind not in ("fw", "bw"):
            raise ValueError(f"kind must be 'fw' or 'bw', got {kind!r}")
        self.kind = kind
        self.sizes = tuple(int(k) for k in sizes)
        num = len(WORLD_FEATURES[kind])
        self.register_buffer("f_mean", torch.as_tensor(f_mean, dtype=torch.float32).clone().reshape(num))
        self.register_buffer("f_std", torch.as_tensor(f_std, dtype=torch.float32).clone().reshape(num))
        self.register_buffer("target_scale", torch.tensor(float(target_scale)))
        self.hidden = tuple(int(h) for h in hidden)
        self.mlp = mlp([num, *self.hidden, 1])
        with torch.no_grad():  # start at the mean target (the output is in units of target_scale)
            self.mlp[-1].bias.fill_(1.0)

    def config(self) -> dict:
        return {"kind": self.kind, "hidden": list(self.hidden), "sizes": list(self.sizes), "world": True}

    def features(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1] // 2 if self.kind == "fw" else x.shape[-1]
        return world_features(self.kind, x[..., :n], x[..., n:] if self.kind == "fw" else None, counts)

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        feats = self.features(x, counts)
        valid = feats[..., 0] > 0  # the world's size: 0 only at padded ranks
        out = self.mlp((feats - self.f_mean) / self.f_std).squeeze(-1) * self.target_scale
        if self.kind == "fw":
            out = out + feats[..., WORLD_FEATURES["fw"].index("wait")]
        return torch.where(valid, out, torch.zeros_like(out))

    @torch.inference_mode()
    def predict(self, dims, sleeps=None) -> np.ndarray:
        """Per-rank ms [M, n] for M dim vectors [M, n] (and sleeps [M, n] for fw), n any world size."""
        x = CommCostModel.make_input(self.kind, dims, sleeps)
        x = x.reshape(-1, x.shape[-1])
        counts = torch.full((x.shape[0],), x.shape[-1] // (2 if self.kind == "fw" else 1), dtype=torch.long)
        out = self(x, counts).numpy()
        return out.reshape(np.shape(dims))


class WorldAtCount(nn.Module):
    """A model for any world size (`WorldCommModel`, or an ensemble of them) pricing the exchanges of
    `ndevices` ranks, with a per-count `CommCostModel`'s interface: `predict(dims, sleeps)` of width n,
    `forward(x)`, `ndevices`, `kind`, `checkpoint_extra`; an ensemble's `members` bound alike. The planner binds
    a bundle to a problem's ranks with `CostModels.for_world` (one wrapper per model and count: `at_world`); the
    scorer runs it as a NumPy copy of `world_model` (the wrapped model), or through its torch fall-back."""

    def __init__(self, model: nn.Module, ndevices: int):
        super().__init__()
        self.world_model = model
        self.ndevices = int(ndevices)

    @property
    def kind(self) -> str:
        return self.world_model.kind

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(self.world_model.sizes)

    @property
    def checkpoint_extra(self) -> dict:
        return getattr(self.world_model, "checkpoint_extra", None) or {}

    @property
    def target_scale(self) -> torch.Tensor:  # a single model's (CostModels.scaled multiplies it in place)
        return self.world_model.target_scale

    @property
    def members(self) -> list:
        if "members" not in self.world_model._modules:  # a single model: no members (hasattr is then False)
            raise AttributeError("members")
        return [at_world(m, self.ndevices) for m in self.world_model.members]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.world_model(x, torch.full((x.shape[0],), self.ndevices, dtype=torch.long))

    @torch.inference_mode()
    def predict(self, dims, sleeps=None) -> np.ndarray:
        """Per-rank ms [M, n] for M dim vectors [M, n] (and sleeps [M, n] for fw)."""
        if np.shape(dims)[-1] != self.ndevices:
            raise ValueError(f"{self.kind} comm model bound to {self.ndevices} ranks got dims of width "
                             f"{np.shape(dims)[-1]}")
        return self.world_model.predict(dims, sleeps)


def at_world(model: nn.Module, ndevices: int) -> WorldAtCount:
    """`model` (for any world size) bound to `ndevices` ranks: one wrapper per model and count, kept on the model,
    so a scorer built for it once is found again (`scorer.get_scorer` caches per model)."""
    bound = model.__dict__.setdefault("_at_world", {})
    if ndevices not in bound:
        bound[ndevices] = WorldAtCount(model, ndevices)
    return bound[ndevices]


# --------------------------------------------------------------------------- ensembles


class CostEnsemble(nn.Module):
    """K cost models of one kind trained alike (other seeds and bootstrap resamples of the training
    split): their mean is the prediction, their spread the models' uncertainty.

    Wraps `members` (all ComputeCostModel, or all CommCostModel of one kind and device count) and
    behaves as one model of that kind: `forward`, `predict` and `predict_sets` average the members;
    its other attributes (`kind`, `ndevices`...) are the first member's. The planner's scorer
    (`planner.costs.scorer.PlanScorer`) runs all members in one batched pass and also gives each member's
    plan cost (`simulator.simulate` reports their mean and spread).
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        members = list(members)
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
        kinds = {type(m) for m in members}
        if len(kinds) != 1 or not isinstance(members[0], (ComputeCostModel, CommCostModel, WorldCommModel)):
            raise ValueError(f"ensemble members must be cost models of one class, got "
                             f"{sorted(k.__name__ for k in kinds)}")
        if isinstance(members[0], (CommCostModel, WorldCommModel)) and len({(m.kind, m.ndevices)
                                                                             for m in members}) != 1:
            raise ValueError("ensemble members must be comm models of one kind and device count")
        self.members = nn.ModuleList(members)

    def __getattr__(self, name):
        # kind, ndevices, wait_term, num_features...: the members' (checked equal where it matters)
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or "members" not in self.__dict__.get("_modules", {}):
                raise
            return getattr(self._modules["members"][0], name)

    def config(self) -> dict:
        return self.members[0].config()

    def forward(self, *inputs) -> torch.Tensor:
        return torch.stack([m(*inputs) for m in self.members]).mean(0)

    @torch.inference_mode()
    def predict(self, dims, sleeps=None) -> np.ndarray:
        return np.mean([m.predict(dims, sleeps) for m in self.members], axis=0)

    @torch.inference_mode()
    def predict_sets(self, configs: Sequence[TableConfig], sets: Sequence[Sequence[int]]) -> np.ndarray:
        return np.mean([m.predict_sets(configs, sets) for m in self.members], axis=0)


# --------------------------------------------------------------------------- hand-set models


def linear_compute_model(per_dim: float, base: float, per_lookup: float = 0.0) -> ComputeCostModel:
    """A compute model with known costs, for tests and benchmarks: a shard costs
    `base + per_dim * (sum of its dims) + per_lookup * (sum of dim x pooling factor)` ms, an empty shard 0
    (features 0 and 3 are the dim and dim x pooling)."""
    m = ComputeCostModel(torch.zeros(NUM_FEATURES), torch.ones(NUM_FEATURES), target_scale=1.0)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.table_mlp[0].weight[0, 0] = m.table_mlp[2].weight[0, 0] = 1.0  # embedding[0] = dim
        m.table_mlp[0].weight[1, 3] = m.table_mlp[2].weight[1, 1] = 1.0  # embedding[1] = dim x pooling
        m.head[0].weight[0, 0] = m.head[0].weight[1, 1] = 1.0  # hidden[0], [1]: their sums
        m.head[2].weight[0, 0], m.head[2].weight[0, 1], m.head[2].bias[0] = per_dim, per_lookup, base
    return m.eval()


def linear_comm_model(kind: str, ndevices: int, weight, bias) -> CommCostModel:
    """A comm model computing exactly `weight @ x + bias` ms, for tests and benchmarks.

    `weight` is [n, n_in] (n_in = 2n for "fw": dims then sleeps; n for "bw"), `bias` [n].
    The inputs (dims, sleeps: non-negative) pass the ReLU layers unchanged, so n_in must
    fit the narrowest hidden layer (16 units).
    """
    n_in = 2 * ndevices if kind == "fw" else ndevices
    m = CommCostModel(kind, ndevices, torch.zeros(n_in), torch.ones(n_in), target_scale=1.0)
    linears = [layer for layer in m.mlp if isinstance(layer, nn.Linear)]
    if n_in > min(layer.out_features for layer in linears[:-1]):
        raise ValueError(f"a linear {kind} comm model passes its {n_in} inputs through "
                         f"{min(layer.out_features for layer in linears[:-1])} hidden units: too many devices")
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        for layer in linears[:-1]:
            layer.weight[:n_in, :n_in] = torch.eye(n_in)
        linears[-1].weight[:, :n_in] = torch.as_tensor(np.asarray(weight, dtype=np.float32))
        linears[-1].bias[:] = torch.as_tensor(np.asarray(bias, dtype=np.float32))
    return m.eval()


def linear_world_model(kind: str, coef: dict, bias: float, sizes: Sequence[int] = ()) -> WorldCommModel:
    """A comm model for any world size computing exactly `bias + sum of coef[f] x feature f` ms per rank (f among
    `WORLD_FEATURES[kind]`; the forward one plus the rank's wait for the last rank), as if trained on world sizes
    `sizes`, for tests and benchmarks."""
    names = WORLD_FEATURES[kind]
    m = WorldCommModel(kind, torch.zeros(len(names)), torch.ones(len(names)), hidden=(), sizes=sizes)
    with torch.no_grad():
        m.mlp[0].weight.zero_()
        for name, c in coef.items():
            m.mlp[0].weight[0, names.index(name)] = float(c)
        m.mlp[0].bias.fill_(float(bias))
    return m.eval()
