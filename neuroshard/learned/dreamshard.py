"""DreamShard (NeurIPS 2022) in torch: its cost network, policy, estimated MDP, REINFORCE and outer loop.

Follows the released code (shared/BASELINES.md §1), with these differences:

* Features (21 per table): [dim / 16, row, pooling_factor, size (row x dim
  elements), bin_0..16]; row, pooling factor and size are z-scored per task
  (population std; a constant column is only mean-centred: the release had
  no std = 0 guard). The release's dim was the constant 16, so dim / 16 is
  its raw value there; here dims vary (4..max_dim), hence the scaling.
* An empty device's shard embedding is the empty sum (zeros); the release
  encoded it as one all-zero feature row, i.e. after z-scoring a mean-sized
  table of dim 0.
* Labels come from an oracle (`learned.oracle`: the simulator or real
  kernels) as a `CostBreakdown` per plan. DreamShard's per-device columns
  [fwd compute, fwd comm, bwd comm, bwd compute] are filled as [compute
  (fwd+bwd, measured together), fw_comm, bw_comm, 0]; the kernel heads learn
  col 0, col 2, col 3 as released (so the "bwd" head learns 0) and the overall
  head max_d sum of the columns, which is exactly the common plan cost.
* Memory: the one checker of the simulator (whole fp32 elements). Sampling
  and the update use the same legal-device softmax (the release recomputed
  log-probabilities over all devices). An episode that reaches a table with
  no legal device stops there: it is not measured, and in an RL batch it
  gets the batch's lowest feasible return minus the feasible spread
  (so it ranks last); at inference it is an OutOfMemoryError.

Everything runs on CPU (the release's networks did too).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from neuroshard.checks import check_fields
from neuroshard.learned.policy import LearnedPolicy, element_sizes, plan_from_assignment
from neuroshard.learned.rl import (
    masked_log_softmax,
    reinforce_advantages,
    reinforce_loss,
)
from neuroshard.planner.baselines import no_room_error
from neuroshard.planner.costs.nets import mlp
from neuroshard.problem import Problem
from neuroshard.settings import Settings, common, setting
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan
from neuroshard.types.tables import NUM_BINS, ShardTable

NUM_FEATURES = 4 + NUM_BINS
DIM_UNIT = 16  # the released code's constant dim
KIND = "dreamshard"
# Oracle: a batch of (task tables, plan) -> one CostBreakdown per plan (ms); see eval.oracle.
Oracle = Callable[[Sequence[tuple[Sequence[ShardTable], Plan]]], list[CostBreakdown]]


def task_features(tables: Sequence[ShardTable]) -> np.ndarray:
    """DreamShard's per-task table features [T, 21] float32 (see the module doc)."""
    x = np.array([[t.dim / DIM_UNIT, t.config.row, t.config.pooling_factor, t.config.row * t.dim, *t.config.bins]
                  for t in tables], dtype=np.float64).reshape(len(tables), NUM_FEATURES)
    for col in (1, 2, 3):
        std = x[:, col].std()
        x[:, col] = (x[:, col] - x[:, col].mean()) / (std if std > 1e-12 else 1.0)
    return x.astype(np.float32)


def oracle_labels(bd: CostBreakdown) -> tuple[np.ndarray, float]:
    """DreamShard's per-device label columns [N, 4] (fwd compute, fwd comm, bwd comm, bwd compute) and
    the overall label max_d sum_k L[d, k] (= the plan cost) from an oracle's breakdown."""
    n = len(bd.compute)
    cols = np.stack([bd.compute, bd.fw_comm, bd.bw_comm, np.zeros(n)], axis=1).astype(np.float64)
    return cols, float(cols.sum(1).max())


# --------------------------------------------------------------------------- networks


class DreamShardNet(nn.Module):
    """The cost network and the policy of DreamShard (one module, one optimizer, as released).

    Cost: table encoder 21->128->32 (ReLU), summed per device; three kernel
    heads 32->64->1 (fwd compute, comm, bwd compute, ms); the overall head
    32->64->1 on the element-wise max over devices of the shard embeddings.
    Policy: per-device logit = Linear(64->1) of [sum of a separate RL encoder
    (21->128->32) over the device's tables, MLP(3->64->32) of the
    stop-gradient kernel predictions]; the weights are shared by all devices.
    """

    def __init__(self):
        super().__init__()
        self.cost_encoder = mlp([NUM_FEATURES, 128, 32], final_relu=True)
        self.kernel_heads = nn.ModuleList([mlp([32, 64, 1]) for _ in range(3)])
        self.overall_head = mlp([32, 64, 1])
        self.rl_encoder = mlp([NUM_FEATURES, 128, 32], final_relu=True)
        self.kernel_mlp = mlp([3, 64, 32], final_relu=True)
        self.logit = nn.Linear(64, 1)

    def kernel(self, sums: torch.Tensor) -> torch.Tensor:
        """[..., 3] predicted (fwd compute, comm, bwd compute) ms of shards with embedding sums [..., 32]."""
        return torch.cat([h(sums) for h in self.kernel_heads], dim=-1)

    def overall(self, sums: torch.Tensor) -> torch.Tensor:
        """[...] predicted plan cost (ms) from per-device shard sums [..., N, 32]."""
        return self.overall_head(sums.max(dim=-2).values).squeeze(-1)

    def single_table_costs(self, feats: torch.Tensor) -> torch.Tensor:
        """[T] predicted fwd+comm+bwd ms of each table alone: the order tables are placed in."""
        return self.kernel(self.cost_encoder(feats)).sum(-1)

    def logits(self, rl_sums: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        """[..., N] device logits from RL sums [..., N, 32] and kernel predictions [..., N, 3]."""
        return self.logit(torch.cat([rl_sums, self.kernel_mlp(kernel.detach())], dim=-1)).squeeze(-1)


# --------------------------------------------------------------------------- episodes on the estimated MDP


@dataclass
class _Task:
    tables: list[ShardTable]
    feats: torch.Tensor  # [T, 21]
    elements: np.ndarray  # [T] fp32 elements
    cap: int


@dataclass
class Episodes:
    """E episodes on one task: tables placed in `order`; `actions` [E, T] (device per step),
    `legal` [E, T, N] the masks sampled under, `failed` [E] the step with no legal device (-1: none)."""

    order: torch.Tensor
    actions: torch.Tensor
    legal: torch.Tensor
    failed: np.ndarray
    rl_sums: torch.Tensor  # [E, N, 32] final, no grad
    cost_sums: torch.Tensor  # [E, N, 32] final, no grad

    def assignment(self, e: int, ntables: int) -> list[int]:
        """Device of each table (task index order) in episode `e` (a complete one)."""
        out = [-1] * ntables
        for step, t in enumerate(self.order.tolist()):
            out[t] = int(self.actions[e, step])
        return out


@torch.no_grad()
def rollout(net: DreamShardNet, task: _Task, ndevices: int, episodes: int, greedy: bool,
            gen: torch.Generator | None = None) -> Episodes:
    """Run `episodes` episodes at once: sample from (or, `greedy`, take the argmax of) the
    legal-device softmax at each step. An episode that meets a table with no legal device stops
    (`failed`); its remaining actions are 0 and its masks all-False."""
    T, n, E = len(task.tables), ndevices, episodes
    order = torch.argsort(-net.single_table_costs(task.feats), stable=True)
    rl_emb = net.rl_encoder(task.feats)[order]
    cost_emb = net.cost_encoder(task.feats)[order]
    rl_sums = torch.zeros(E, n, 32)
    cost_sums = torch.zeros(E, n, 32)
    used = np.zeros((E, n), dtype=np.int64)
    actions = torch.zeros(E, T, dtype=torch.long)
    legal_all = torch.zeros(E, T, n, dtype=torch.bool)
    failed = np.full(E, -1)
    for step in range(T):
        t = int(order[step])
        legal_np = (used + task.elements[t] <= task.cap) & (failed < 0)[:, None]
        newly = (~legal_np.any(1)) & (failed < 0)
        failed[newly] = step
        alive = failed < 0
        if not alive.any():
            break
        legal = torch.from_numpy(legal_np)
        logits = net.logits(rl_sums, net.kernel(cost_sums))
        safe = legal | torch.from_numpy(~alive)[:, None]  # dead rows: any finite softmax, ignored
        if greedy:
            a = logits.masked_fill(~safe, float("-inf")).argmax(1)
        else:
            a = torch.multinomial(masked_log_softmax(logits, safe).exp(), 1, generator=gen).squeeze(1)
        a = torch.where(torch.from_numpy(alive), a, torch.zeros_like(a))
        actions[:, step] = a
        legal_all[:, step] = legal
        idx = torch.from_numpy(np.flatnonzero(alive))
        rl_sums[idx, a[idx]] += rl_emb[step]
        cost_sums[idx, a[idx]] += cost_emb[step]
        used[alive, a.numpy()[alive]] += task.elements[t]
    return Episodes(order, actions, legal_all, failed, rl_sums, cost_sums)


def step_logits(net: DreamShardNet, task: _Task, ep: Episodes, ndevices: int) -> torch.Tensor:
    """[E, T, N] the policy's logits at every step of the episodes, with gradients (the RL update).

    The state before step i is, per device, the sum of the embeddings of the
    tables placed at steps < i: an exclusive cumulative sum of one-hot placements.
    """
    onehot = F.one_hot(ep.actions, ndevices).float() * ep.legal.any(-1, keepdim=True).float()  # [E, T, N]

    def before(emb):  # [T, 32] in step order -> [E, T, N, 32]
        contrib = onehot[..., None] * emb[None, :, None, :]
        return contrib.cumsum(1) - contrib

    rl_sums = before(net.rl_encoder(task.feats)[ep.order])
    with torch.no_grad():
        kernel = net.kernel(before(net.cost_encoder(task.feats)[ep.order]))
    return net.logits(rl_sums, kernel)


# --------------------------------------------------------------------------- the cost-data buffer


class CostBuffer:
    """Every measured plan, never evicted (as released): 1 overall sample and N kernel samples each.

    Plans are stored padded to `max_tables` (padding rows are on no device, so they add nothing).
    """

    def __init__(self, ndevices: int, max_tables: int):
        self.n, self.tmax = ndevices, max_tables
        self.feats = torch.zeros(0, max_tables, NUM_FEATURES)
        self.onehot = torch.zeros(0, max_tables, ndevices)
        self.kernel_y = torch.zeros(0, ndevices, 3)  # per device: col 0, col 2, col 3
        self.overall_y = torch.zeros(0)

    def __len__(self) -> int:
        return len(self.overall_y)

    def add(self, feats: torch.Tensor, assignment: Sequence[int], bd: CostBreakdown) -> None:
        cols, overall = oracle_labels(bd)
        x = torch.zeros(1, self.tmax, NUM_FEATURES)
        x[0, :len(feats)] = feats
        oh = torch.zeros(1, self.tmax, self.n)
        oh[0, :len(feats)] = F.one_hot(torch.tensor(assignment), self.n).float()
        self.feats = torch.cat([self.feats, x])
        self.onehot = torch.cat([self.onehot, oh])
        self.kernel_y = torch.cat([self.kernel_y, torch.tensor(cols[None, :, [0, 2, 3]], dtype=torch.float32)])
        self.overall_y = torch.cat([self.overall_y, torch.tensor([overall], dtype=torch.float32)])

    def _sums(self, net: DreamShardNet, plans: torch.Tensor) -> torch.Tensor:
        """[B, N, 32] shard embedding sums of the buffered plans `plans`."""
        return torch.einsum("btn,btf->bnf", self.onehot[plans], net.cost_encoder(self.feats[plans]))

    def loss(self, net: DreamShardNet, batch: int, rng: np.random.Generator) -> torch.Tensor:
        """MSE(overall) + MSE(fwd) + MSE(comm) + MSE(bwd) on raw ms, `batch` samples of each kind
        drawn uniformly with replacement."""
        plans = torch.from_numpy(rng.integers(len(self), size=batch))
        loss = F.mse_loss(net.overall(self._sums(net, plans)), self.overall_y[plans])
        kplans = torch.from_numpy(rng.integers(len(self), size=batch))
        devs = torch.from_numpy(rng.integers(self.n, size=batch))
        sums = self._sums(net, kplans)[torch.arange(batch), devs]
        return loss + ((net.kernel(sums) - self.kernel_y[kplans, devs]) ** 2).mean(0).sum()


# --------------------------------------------------------------------------- the policy (inference)


class DreamShardPolicy(LearnedPolicy):
    """A trained DreamShard network and the setting it was trained for (`meta`)."""

    kind = KIND
    net_class = DreamShardNet

    def task(self, tables: Sequence[ShardTable], max_mem: float) -> _Task:
        elements, cap = element_sizes(tables, max_mem)
        return _Task(list(tables), torch.from_numpy(task_features(tables)), elements, cap)

    def _plan(self, tables: Sequence[ShardTable], problem: Problem) -> Plan:
        """Argmax over the legal devices, table by table; OutOfMemoryError when a table fits nowhere."""
        ndevices, max_mem = problem.ndevices, problem.max_mem
        task = self.task(tables, max_mem)
        ep = rollout(self.net, task, ndevices, 1, greedy=True)
        if ep.failed[0] >= 0:
            raise _failure(task, ep, problem)
        return plan_from_assignment(ep.assignment(0, len(tables)), ndevices)


def _failure(task: _Task, ep: Episodes, problem: Problem):
    step = int(ep.failed[0])
    used = [0] * problem.ndevices
    for s in range(step):
        used[int(ep.actions[0, s])] += int(task.elements[int(ep.order[s])])
    t = int(ep.order[step])
    return no_room_error(t, task.tables[t], problem, used)


def load_policy(path) -> DreamShardPolicy:
    """The policy of a checkpoint written by `DreamShardPolicy.save` (InputError for any other file)."""
    return DreamShardPolicy.load(path)


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class DreamShardConfig(Settings):
    """The released defaults (train.py), one flag each; `lr` and the schedule as hard-coded there."""

    TITLE: ClassVar[str] = "DreamShard (released defaults)"
    RELEASED_ALIASES: ClassVar[bool] = True

    num_iterations: int = setting(10, "outer iterations (each: collect, fit the cost net, update the policy)")
    bench_steps: int = setting(10, "plans rolled out with the current policy and measured by the oracle per "
                                   "iteration")
    bench_training_steps: int = setting(300, "cost-network steps per iteration")
    batch_size: int = common("batch_size", 64, help="cost-network batch (overall and kernel samples each)")
    rl_num_batches: int = setting(10, "REINFORCE batches (one Adam step each) per iteration")
    rl_batch_size: int = setting(10, "episodes per REINFORCE batch, all on one random training task")
    entropy_weight: float = setting(0.001, "weight of the entropy bonus")
    lr: float = common("lr", 5e-4, help="Adam learning rate, decayed by (1 - iteration / num_iterations)")
    seed: int = common("seed", help="random seed (network init, task draws, sampling)")

    def __post_init__(self):
        check_fields(self, open_floats=("lr",))



def train(train_tables: Sequence[Sequence[ShardTable]], problem: Problem, oracle: Oracle,
          cfg: DreamShardConfig, meta: dict | None = None, progress: bool = True,
          on_iteration: Callable[[int, DreamShardPolicy, dict], None] | None = None,
          ) -> tuple[DreamShardPolicy, list[dict]]:
    """DreamShard's outer loop (BASELINES.md §1.4) on the training tasks; returns the policy and one
    training-curve row per iteration.

    Each iteration: `bench_steps` plans of the current (sampling) policy on
    random training tasks are measured by `oracle` (one batched call) and
    buffered; the cost network takes `bench_training_steps` steps; the policy
    takes `rl_num_batches` REINFORCE steps on the estimated MDP (reward =
    -overall head of the final plan, no oracle). `on_iteration(it, policy,
    row)` is called after each (the training script saves a checkpoint there).
    """
    ndevices, max_mem = problem.ndevices, problem.max_mem
    from tqdm import tqdm

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    net = DreamShardNet()
    policy = DreamShardPolicy(net, {**(meta or {}), "ndevices": ndevices, "max_mem": max_mem,
                                    "config": cfg.to_json(), "features": FEATURES_DOC})
    tasks = [policy.task(t, max_mem) for t in train_tables]
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 1 - it / cfg.num_iterations)
    buf = CostBuffer(ndevices, max(len(t.tables) for t in tasks))
    curve = []
    bar = tqdm(range(cfg.num_iterations), desc="dreamshard", unit="it", disable=None if progress else True)
    t_start = time.perf_counter()
    for it in bar:
        net.train()
        # 1. the current policy's plans, measured by the oracle
        picked, plans = [], []
        for _ in range(cfg.bench_steps):
            k = int(rng.integers(len(tasks)))
            ep = rollout(net, tasks[k], ndevices, 1, greedy=False, gen=gen)
            if ep.failed[0] < 0:
                assignment = ep.assignment(0, len(tasks[k].tables))
                picked.append((k, assignment))
                plans.append((tasks[k].tables, plan_from_assignment(assignment, ndevices)))
        t0 = time.perf_counter()
        measured = oracle(plans) if plans else []
        oracle_s = time.perf_counter() - t0
        for (k, assignment), bd in zip(picked, measured):
            buf.add(tasks[k].feats, assignment, bd)
        # 2. the cost network
        cost_losses = []
        if len(buf):
            for _ in range(cfg.bench_training_steps):
                opt.zero_grad()
                loss = buf.loss(net, cfg.batch_size, rng)
                loss.backward()
                opt.step()
                cost_losses.append(loss.item())
        # 3. REINFORCE on the estimated MDP
        returns, stats = [], []
        for _ in range(cfg.rl_num_batches):
            task = tasks[int(rng.integers(len(tasks)))]
            ep = rollout(net, task, ndevices, cfg.rl_batch_size, greedy=False, gen=gen)
            with torch.no_grad():
                ret = -net.overall(ep.cost_sums)
            ret = _failed_returns(ret, ep.failed)
            returns += ret[ep.failed < 0].tolist()
            valid = ep.legal.any(-1)  # [E, T] steps that were taken
            step_ret = ret[:, None].expand_as(valid)[valid]
            logits = step_logits(net, task, ep, ndevices)[valid]
            opt.zero_grad()
            loss, st = reinforce_loss(logits, ep.legal[valid], ep.actions[valid], reinforce_advantages(step_ret),
                                      cfg.entropy_weight)
            loss.backward()
            opt.step()
            stats.append(st)
        sched.step()
        row = {"iteration": it, "elapsed_s": time.perf_counter() - t_start,
               "mean_measured_ms": float(np.mean([bd.cost for bd in measured])) if measured else None,
               "plans_measured": len(measured), "infeasible_rollouts": cfg.bench_steps - len(plans),
               "oracle_s": oracle_s, "cost_loss": float(np.mean(cost_losses)) if cost_losses else None,
               "mean_predicted_ms": -float(np.mean(returns)) if returns else None,
               "entropy": float(np.mean([s["entropy"] for s in stats]))}
        curve.append(row)
        bar.set_postfix(measured=row["mean_measured_ms"], cost_loss=row["cost_loss"])
        net.eval()
        if on_iteration is not None:
            on_iteration(it, policy, row)
    return policy, curve


FEATURES_DOC = ("per table [dim/16, row, pooling_factor, row*dim, bin_0..16]; row, pooling_factor and row*dim "
                "z-scored per task (population std, a constant column only mean-centred)")


def _failed_returns(ret: torch.Tensor, failed: np.ndarray) -> torch.Tensor:
    """Returns with failed episodes ranked last: the lowest feasible return minus the feasible spread."""
    bad = torch.from_numpy(failed >= 0)
    if not bad.any():
        return ret
    ok = ret[~bad]
    worst = ok.min() - (ok.max() - ok.min()) if len(ok) else torch.tensor(0.0)
    if len(ok) and not math.isfinite(float(worst)):
        worst = ok.min()
    return torch.where(bad, worst, ret)
