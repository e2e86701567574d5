"""AutoShard (KDD 2022) in torch: shared table encoder and cost head, LSTM policy, V-trace learner.

Follows the released code (shared/BASELINES.md §2), with these differences:

* One synchronous learner on CPU instead of TorchBeast's asynchronous
  actors: `batch_size` environments step together with the current weights
  for `unroll_length` steps (one rollout each, the LSTM state carried over
  between rollouts), then one V-trace update on those rollouts. The rollouts
  are on-policy, so the importance weights are 1 and V-trace reduces to
  n-step returns with a bootstrap; the estimator is kept as released.
* Memory: the policy samples (and takes the argmax) over the devices with
  room only (the simulator's one checker, whole fp32 elements); the
  release had no mask and relied on the terminal penalty. An episode that
  reaches a table with no legal device ends there with the release's
  penalty (M - GB of the fullest device had the table gone to the
  least-used one) / M, which is negative; at inference it is an
  OutOfMemoryError.
* Reward: min_d / max_d of the per-device compute (fwd+bwd) ms from an
  oracle (`learned.oracle`: the simulator or real kernels), as AutoShard
  defines it; the oracle is asked once per rollout for all episodes that
  finished in it (the reward is terminal and the policy does not observe
  it, so delaying the query changes nothing). Every finished plan's
  non-empty shards go to the cost model's ring buffer once (the release
  added shards on rollout boundaries twice).
* Features (21 per table): [dim, row, pooling_factor, GB, bin_0..16]; dim,
  row and pooling factor z-scored with the training tasks' statistics
  (saved in the checkpoint; a constant column is only mean-centred).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from neuroshard.checks import check_fields, check_float
from neuroshard.learned.policy import LearnedPolicy, element_sizes, plan_from_assignment
from neuroshard.learned.rl import impala_loss, masked_log_softmax
from neuroshard.planner.baselines import no_room_error
from neuroshard.planner.costs.nets import mlp
from neuroshard.problem import Problem
from neuroshard.settings import Settings, common, setting
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.plan import Plan
from neuroshard.types.tables import NUM_BINS, ShardTable

NUM_FEATURES = 4 + NUM_BINS
NORMALISED = (0, 1, 2)  # dim, row, pooling factor
KIND = "autoshard"
HIDDEN = 64
Oracle = Callable[[Sequence[tuple[Sequence[ShardTable], Plan]]], list[CostBreakdown]]
FEATURES_DOC = ("per table [dim, row, pooling_factor, GB, bin_0..16]; dim, row and pooling_factor z-scored with "
                "the training tasks' mean/std (feature_mean/feature_std; a constant column only mean-centred)")


def raw_features(tables: Sequence[ShardTable]) -> np.ndarray:
    """[T, 21] float64: dim, row, pooling factor, size in GB, the 17 bins."""
    return np.array([[t.dim, t.config.row, t.config.pooling_factor, t.size_gb, *t.config.bins] for t in tables],
                    dtype=np.float64).reshape(len(tables), NUM_FEATURES)


def feature_stats(tasks: Sequence[Sequence[ShardTable]]) -> tuple[list[float], list[float]]:
    """Global mean and std of dim, row, pooling factor over every table of the training tasks."""
    x = np.concatenate([raw_features(t)[:, NORMALISED] for t in tasks])
    std = x.std(0)
    return x.mean(0).tolist(), np.where(std > 1e-12, std, 1.0).tolist()


def normalised_features(tables: Sequence[ShardTable], mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    x = raw_features(tables)
    x[:, NORMALISED] = (x[:, NORMALISED] - np.asarray(mean)) / np.asarray(std)
    return torch.from_numpy(x.astype(np.float32))


# --------------------------------------------------------------------------- the network


class AutoShardNet(nn.Module):
    """Table encoder t_fc (21->128->32) shared by the cost head c_fc (32->64->1 on the sum over a
    shard) and the policy: state [t_fc(table), ReLU(Linear 1->32)(step / T)] -> 2-layer LSTM(64);
    value 64->64->1; device embedding [sum of t_fc over its tables and one zero dummy row,
    ReLU(Linear 2->32)(predicted shard cost, shard GB)]; logit MLP(192->128->128->64->1) of
    [h, a_d, h * a_d]."""

    def __init__(self):
        super().__init__()
        self.t_fc = mlp([NUM_FEATURES, 128, 32], final_relu=True)
        self.c_fc = mlp([32, 64, 1])
        self.step_fc = mlp([1, 32], final_relu=True)
        self.lstm = nn.LSTM(HIDDEN, HIDDEN, num_layers=2)
        self.value = mlp([HIDDEN, 64, 1])
        self.dev_fc = mlp([2, 32], final_relu=True)
        self.logit = mlp([3 * HIDDEN, 128, 128, 64, 1])

    def shard_cost(self, sums: torch.Tensor, nonempty: torch.Tensor) -> torch.Tensor:
        """Predicted compute ms of shards with t_fc sums [..., 32]; 0 where empty."""
        return torch.where(nonempty, self.c_fc(sums).squeeze(-1), torch.zeros(()))

    def initial_state(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(2, batch, HIDDEN), torch.zeros(2, batch, HIDDEN)

    def core(self, x: torch.Tensor, reset: torch.Tensor, state):
        """LSTM over time: x [T, B, 64]; the state is zeroed before step t where reset[t] (an episode start)."""
        outs = []
        for t in range(x.shape[0]):
            keep = (~reset[t]).float()[None, :, None]
            state = (state[0] * keep, state[1] * keep)
            out, state = self.lstm(x[t:t + 1], state)
            outs.append(out[0])
        return torch.stack(outs), state

    def heads(self, h: torch.Tensor, dev_sums: torch.Tensor, dev_feats: torch.Tensor):
        """(logits [..., N], value [...]) from LSTM outputs [..., 64], device t_fc sums [..., N, 32]
        (dummy row included) and device features [..., N, 2]."""
        a = torch.cat([dev_sums, self.dev_fc(dev_feats)], dim=-1)
        hx = h[..., None, :].expand_as(a)
        return self.logit(torch.cat([hx, a, hx * a], dim=-1)).squeeze(-1), self.value(h).squeeze(-1)


# --------------------------------------------------------------------------- tasks and observations


@dataclass
class _Task:
    tables: list[ShardTable]
    feats: torch.Tensor  # [T, 21] normalised
    elements: np.ndarray  # [T] fp32 elements
    cap: int


def _order(net: AutoShardNet, feats: torch.Tensor) -> np.ndarray:
    """Tables by the cost head's single-table prediction, largest first (stable)."""
    with torch.no_grad():
        single = net.c_fc(net.t_fc(feats)).squeeze(-1)
    return torch.argsort(-single, stable=True).numpy()


def _device_inputs(net: AutoShardNet, emb: torch.Tensor, assign: torch.Tensor, ndevices: int,
                   elements: torch.Tensor):
    """Per-device policy inputs from a (batch of) partial assignments.

    `emb` [..., Tmax, 32] t_fc of the task's tables, `assign` [..., Tmax]
    (device, or -1 for unplaced and padding), `elements` [..., Tmax]. Returns
    (sums with the dummy row [..., N, 32], features [..., N, 2]: predicted
    shard cost (ms, no gradient) and shard GB)."""
    onehot = F.one_hot(assign.long() + 1, ndevices + 1)[..., 1:].float()  # [..., Tmax, N]
    sums = torch.einsum("...tn,...tf->...nf", onehot, emb)
    with torch.no_grad():
        cost = net.shard_cost(sums.detach(), onehot.sum(-2) > 0)
    gb = torch.einsum("...tn,...t->...n", onehot.double(), elements.double()).float() * 4 / 2**30
    dummy = net.t_fc(torch.zeros(NUM_FEATURES))
    return sums + dummy, torch.stack([cost, gb], dim=-1)


# --------------------------------------------------------------------------- the policy (inference)


class AutoShardPolicy(LearnedPolicy):
    """A trained AutoShard network, its feature statistics and the setting it was trained for (`meta`)."""

    kind = KIND
    net_class = AutoShardNet
    meta_arrays = ("feature_mean", "feature_std")

    def task(self, tables: Sequence[ShardTable], max_mem: float) -> _Task:
        elements, cap = element_sizes(tables, max_mem)
        return _Task(list(tables), normalised_features(tables, self.meta["feature_mean"], self.meta["feature_std"]),
                     elements, cap)

    @torch.no_grad()
    def _plan(self, tables: Sequence[ShardTable], problem: Problem) -> Plan:
        """Argmax over the legal devices, table by table; OutOfMemoryError when a table fits nowhere."""
        ndevices, max_mem = problem.ndevices, problem.max_mem
        task = self.task(tables, max_mem)
        net, T = self.net, len(tables)
        order = _order(net, task.feats)
        emb = net.t_fc(task.feats)
        elements = torch.from_numpy(task.elements)
        assign = torch.full((T,), -1)
        used = np.zeros(ndevices, dtype=np.int64)
        state = net.initial_state(1)
        for step, t in enumerate(order):
            legal = used + task.elements[t] <= task.cap
            if not legal.any():
                raise no_room_error(int(t), task.tables[t], problem, used.tolist())
            x = torch.cat([emb[t], net.step_fc(torch.tensor([step / T]))])[None, None]
            h, state = net.core(x, torch.zeros(1, 1, dtype=torch.bool), state)
            sums, dev_feats = _device_inputs(net, emb, assign, ndevices, elements)
            logits, _ = net.heads(h[0, 0], sums, dev_feats)
            d = int(logits.masked_fill(~torch.from_numpy(legal), float("-inf")).argmax())
            assign[t] = d
            used[d] += task.elements[t]
        return plan_from_assignment(assign.tolist(), ndevices)


def load_policy(path) -> AutoShardPolicy:
    """The policy of a checkpoint written by `AutoShardPolicy.save` (InputError for any other file)."""
    return AutoShardPolicy.load(path)


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class AutoShardConfig(Settings):
    """The released defaults (run_autoshard.py / monobeast), one flag each."""

    TITLE: ClassVar[str] = "AutoShard (released defaults)"
    RELEASED_ALIASES: ClassVar[bool] = True

    total_steps: int = setting(100_000, "environment steps in all (the learning rate decays linearly to 0 over them)")
    batch_size: int = common("batch_size", 8, help="environments stepped together = rollouts per learner update")
    unroll_length: int = setting(100, "steps per rollout")
    num_cost_updates: int = setting(20, "cost-model steps after each learner update")
    cost_batch_size: int = setting(512, "cost-model batch (shards, drawn with replacement)")
    buffer_size: int = setting(5000, "ring buffer of shard measurements for the cost model")
    entropy_cost: float = setting(0.001, "weight of the entropy term")
    baseline_cost: float = setting(0.5, "weight of the value loss")
    discounting: float = setting(1.0, "discount factor (terminal reward only)")
    learning_rate: float = setting(0.001, "Adam learning rate")
    grad_norm_clipping: float = setting(40.0, "gradient norm clip")
    seed: int = common("seed", help="random seed (network init, task draws, sampling)")

    def __post_init__(self):
        check_fields(self, min_int={"num_cost_updates": 0}, open_floats=("learning_rate", "grad_norm_clipping"))
        check_float("--discounting", self.discounting, 0.0, 1.0)

    @property
    def num_updates(self) -> int:
        """Learner updates: total_steps env steps in rollouts of unroll_length x batch_size."""
        per = self.unroll_length * self.batch_size
        return max(1, -(-self.total_steps // per))



class _ShardBuffer:
    """Ring buffer of (task, tables on the shard, measured compute ms)."""

    def __init__(self, capacity: int, max_tables: int):
        self.task = np.zeros(capacity, dtype=np.int64)
        self.members = np.zeros((capacity, max_tables), dtype=bool)
        self.ms = np.zeros(capacity, dtype=np.float32)
        self.size, self.next = 0, 0

    def add(self, task: int, members: np.ndarray, ms: float) -> None:
        i = self.next
        self.task[i], self.ms[i] = task, ms
        self.members[i] = False
        self.members[i, :len(members)] = members
        self.next = (i + 1) % len(self.ms)
        self.size = min(self.size + 1, len(self.ms))

    def loss(self, net: AutoShardNet, feats: torch.Tensor, batch: int, rng: np.random.Generator) -> torch.Tensor:
        idx = rng.integers(self.size, size=batch)
        emb = net.t_fc(feats)  # [K, Tmax, 32]
        sums = torch.einsum("st,stf->sf", torch.from_numpy(self.members[idx]).float(), emb[self.task[idx]])
        return F.mse_loss(net.c_fc(sums).squeeze(-1), torch.from_numpy(self.ms[idx]))


class _Envs:
    """`batch_size` sharding environments stepped together (AutoShard's Env, vectorised)."""

    def __init__(self, net, tasks: list[_Task], ndevices: int, count: int, rng: np.random.Generator):
        self.net, self.tasks, self.n, self.rng = net, tasks, ndevices, rng
        self.tmax = max(len(t.tables) for t in tasks)
        self.k = np.zeros(count, dtype=np.int64)
        self.step = np.zeros(count, dtype=np.int64)
        self.order = np.zeros((count, self.tmax), dtype=np.int64)
        self.assign = np.full((count, self.tmax), -1, dtype=np.int64)
        self.used = np.zeros((count, ndevices), dtype=np.int64)
        self.fresh = np.ones(count, dtype=bool)  # the next observation starts an episode
        for a in range(count):
            self.reset(a)

    def reset(self, a: int) -> None:
        k = int(self.rng.integers(len(self.tasks)))
        self.k[a], self.step[a] = k, 0
        T = len(self.tasks[k].tables)
        self.order[a, :T] = _order(self.net, self.tasks[k].feats)
        self.assign[a] = -1
        self.used[a] = 0
        self.fresh[a] = True

    def table(self, a: int) -> int:
        return int(self.order[a, self.step[a]])

    def legal(self) -> np.ndarray:
        out = np.zeros((len(self.k), self.n), dtype=bool)
        for a in range(len(self.k)):
            task = self.tasks[self.k[a]]
            out[a] = self.used[a] + task.elements[self.table(a)] <= task.cap
        return out

    def act(self, a: int, device: int) -> tuple[bool, float | None, list | None]:
        """Place the current table; returns (done, reward or None when the oracle gives it, finished plan)."""
        task = self.tasks[self.k[a]]
        t = self.table(a)
        self.assign[a, t] = device
        self.used[a, device] += task.elements[t]
        self.step[a] += 1
        T = len(task.tables)
        if self.step[a] == T:
            return True, None, self.assign[a, :T].tolist()
        nxt = task.elements[self.table(a)]
        if not (self.used[a] + nxt <= task.cap).any():
            # the release's overflow penalty, had the table gone to the least-used device
            return True, float((task.cap - (self.used[a].min() + nxt)) / task.cap), None
        return False, 0.0, None


def train(train_tables: Sequence[Sequence[ShardTable]], problem: Problem, oracle: Oracle,
          cfg: AutoShardConfig, meta: dict | None = None, progress: bool = True,
          on_update: Callable[[int, AutoShardPolicy, dict], None] | None = None, log_every: int = 1,
          ) -> tuple[AutoShardPolicy, list[dict]]:
    """AutoShard's learner (BASELINES.md §2) on the training tasks, synchronous; returns the policy and
    one training-curve row per `log_every` updates (and the last).

    Per update: `batch_size` environments take `unroll_length` steps with
    the current weights; the episodes that finished are scored by `oracle`
    (one batched call: reward min/max of per-device compute) and their
    non-empty shards go to the ring buffer; one V-trace update with clipping
    `grad_norm_clipping`; then `num_cost_updates` MSE steps of the cost head
    (shared Adam). `on_update(u, policy, row)` is called with each row.
    """
    ndevices, max_mem = problem.ndevices, problem.max_mem
    from tqdm import tqdm

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    net = AutoShardNet()
    mean, std = feature_stats(train_tables)
    policy = AutoShardPolicy(net, {**(meta or {}), "ndevices": ndevices, "max_mem": max_mem,
                                   "feature_mean": mean, "feature_std": std, "config": cfg.to_json(),
                                   "features": FEATURES_DOC})
    tasks = [policy.task(t, max_mem) for t in train_tables]
    for k, task in enumerate(tasks):
        if (task.elements > task.cap).any():
            t = int(np.argmax(task.elements))
            raise no_room_error(t, task.tables[t], problem, [0] * ndevices)
    tmax = max(len(t.tables) for t in tasks)
    feats = torch.zeros(len(tasks), tmax, NUM_FEATURES)
    elements = torch.zeros(len(tasks), tmax, dtype=torch.int64)
    for k, task in enumerate(tasks):
        feats[k, :len(task.tables)] = task.feats
        elements[k, :len(task.tables)] = torch.from_numpy(task.elements)
    B, U = cfg.batch_size, cfg.unroll_length
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda u: max(0.0, 1 - min(u * U * B, cfg.total_steps) / cfg.total_steps))
    envs = _Envs(net, tasks, ndevices, B, rng)
    buf = _ShardBuffer(cfg.buffer_size, tmax)
    state = net.initial_state(B)
    curve, window = [], {"rewards": [], "costs": [], "penalties": 0}
    t_start = time.perf_counter()
    bar = tqdm(range(cfg.num_updates), desc="autoshard", unit="update", disable=None if progress else True)
    for u in bar:
        # ---- rollout: U steps of B environments (plus the observation after the last)
        init_state = (state[0].clone(), state[1].clone())
        obs_k = np.zeros((U + 1, B), dtype=np.int64)
        obs_t = np.zeros((U + 1, B), dtype=np.int64)
        obs_frac = np.zeros((U + 1, B), dtype=np.float32)
        obs_assign = np.zeros((U + 1, B, tmax), dtype=np.int64)
        obs_legal = np.zeros((U + 1, B, ndevices), dtype=bool)
        obs_reset = np.zeros((U + 1, B), dtype=bool)
        actions = torch.zeros(U, B, dtype=torch.long)
        behaviour_logp = torch.zeros(U, B)
        rewards = torch.zeros(U, B)
        dones = torch.zeros(U, B, dtype=torch.bool)
        finished = []  # (step, env, task, assignment) awaiting the oracle
        with torch.no_grad():
            emb_all = net.t_fc(feats)
            for s in range(U + 1):
                obs_k[s], obs_reset[s] = envs.k, envs.fresh
                envs.fresh[:] = False
                obs_t[s] = [envs.table(a) for a in range(B)]
                obs_frac[s] = envs.step / np.array([len(tasks[k].tables) for k in envs.k])
                obs_assign[s] = envs.assign
                obs_legal[s] = envs.legal()
                if s == U:
                    break
                logits, state = _forward_step(net, emb_all, elements, obs_k[s], obs_t[s], obs_frac[s],
                                              obs_assign[s], obs_reset[s], state, ndevices)
                logp = masked_log_softmax(logits, torch.from_numpy(obs_legal[s]))
                a = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
                actions[s], behaviour_logp[s] = a, logp.gather(1, a[:, None]).squeeze(1)
                for e in range(B):
                    done, reward, assignment = envs.act(e, int(a[e]))
                    if done:
                        dones[s, e] = True
                        if assignment is None:
                            rewards[s, e] = reward
                            window["penalties"] += 1
                        else:
                            finished.append((s, e, int(envs.k[e]), assignment))
                        envs.reset(e)
        # ---- the oracle scores the finished plans (reward) and feeds the cost model's buffer
        if finished:
            measured = oracle([(tasks[k].tables, plan_from_assignment(asg, ndevices)) for _, _, k, asg in finished])
            for (s, e, k, asg), bd in zip(finished, measured):
                compute = np.asarray(bd.compute, dtype=np.float64)
                rewards[s, e] = float(compute.min() / compute.max()) if compute.max() > 0 else 0.0
                window["rewards"].append(float(rewards[s, e]))
                window["costs"].append(bd.cost)
                asg = np.asarray(asg)
                for d in range(ndevices):
                    if (asg == d).any():
                        buf.add(k, asg == d, float(compute[d]))
        # ---- V-trace update
        net.train()
        logits, values = _forward_rollout(net, feats, elements, obs_k, obs_t, obs_frac, obs_assign, obs_reset,
                                          init_state, ndevices)
        discounts = (~dones).float() * cfg.discounting
        loss, st = impala_loss(logits[:-1], torch.from_numpy(obs_legal[:-1]), behaviour_logp, actions, rewards,
                               discounts, values[:-1], values[-1], cfg.baseline_cost, cfg.entropy_cost)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_norm_clipping)
        opt.step()
        sched.step()
        # ---- cost-model updates from the ring buffer
        cost_losses = []
        if buf.size > 0:
            for _ in range(cfg.num_cost_updates):
                opt.zero_grad()
                closs = buf.loss(net, feats, cfg.cost_batch_size, rng)
                closs.backward()
                nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_norm_clipping)
                opt.step()
                cost_losses.append(closs.item())
        net.eval()
        if (u + 1) % log_every == 0 or u == cfg.num_updates - 1:
            row = {"update": u, "steps": (u + 1) * U * B, "elapsed_s": time.perf_counter() - t_start,
                   "episodes": len(window["rewards"]) + window["penalties"],
                   "mean_reward": float(np.mean(window["rewards"])) if window["rewards"] else None,
                   "mean_measured_ms": float(np.mean(window["costs"])) if window["costs"] else None,
                   "penalised_episodes": window["penalties"],
                   "cost_loss": float(np.mean(cost_losses)) if cost_losses else None, **st}
            curve.append(row)
            window = {"rewards": [], "costs": [], "penalties": 0}
            bar.set_postfix(reward=row["mean_reward"], cost_loss=row["cost_loss"])
            if on_update is not None:
                on_update(u, policy, row)
    return policy, curve


def _forward_step(net, emb_all, elements, k, t, frac, assign, reset, state, ndevices):
    """One actor step for B environments: (logits [B, N], new LSTM state)."""
    k_t = torch.from_numpy(k)
    x = torch.cat([emb_all[k_t, torch.from_numpy(t)], net.step_fc(torch.from_numpy(frac)[:, None])], dim=-1)
    h, state = net.core(x[None], torch.from_numpy(reset)[None], state)
    sums, dev_feats = _device_inputs(net, emb_all[k_t], torch.from_numpy(assign), ndevices, elements[k_t])
    logits, _ = net.heads(h[0], sums, dev_feats)
    return logits, state


def _forward_rollout(net, feats, elements, obs_k, obs_t, obs_frac, obs_assign, obs_reset, init_state, ndevices):
    """The learner's pass over a rollout [U+1, B]: (logits [U+1, B, N], values [U+1, B]) with gradients."""
    emb_all = net.t_fc(feats)  # [K, Tmax, 32]
    k = torch.from_numpy(obs_k)
    x = torch.cat([emb_all[k, torch.from_numpy(obs_t)], net.step_fc(torch.from_numpy(obs_frac)[..., None])], dim=-1)
    h, _ = net.core(x, torch.from_numpy(obs_reset), init_state)
    sums, dev_feats = _device_inputs(net, emb_all[k], torch.from_numpy(obs_assign), ndevices, elements[k])
    return net.heads(h, sums, dev_feats)
