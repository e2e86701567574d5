"""The two policy-gradient estimators of the learned baselines: REINFORCE (DreamShard) and V-trace (AutoShard).

Written here rather than taken from torchrl: torchrl 0.14.1 imports beside
torch 2.13.0+cpu, but it pins tensordict < 0.15 while the shared environment
holds tensordict 0.15.3 for TorchRec, and both estimators are a few lines.
Each function works on torch tensors, is tested against hand-computed values
(tests/planner/test_rl.py), and computes its targets without gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

# --------------------------------------------------------------------------- REINFORCE (DreamShard)


def reinforce_advantages(step_returns: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Z-scored returns, DreamShard's advantages: (R - mean) / (std + eps) over every step of the batch.

    `step_returns` [S]: each step carries its episode's undiscounted return.
    The std is torch's default (Bessel-corrected), as in the released code;
    a batch of equal returns (std 0) gives zero advantages, never NaN.
    """
    r = step_returns.detach().double()
    if r.numel() < 2:
        return torch.zeros_like(step_returns)
    return ((r - r.mean()) / (r.std() + eps)).to(step_returns.dtype)


def reinforce_loss(logits: torch.Tensor, legal: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor,
                   entropy_weight: float) -> tuple[torch.Tensor, dict]:
    """mean[-log pi(a|s) * A] + entropy_weight * mean[sum_a p log p], over legal devices only.

    `logits` [S, N], `legal` [S, N] bool, `actions` [S], `advantages` [S].
    The released code sampled from the legal-device softmax but recomputed
    the log-probabilities over all devices in the update (a biased gradient
    whenever memory binds); here both use the same masked softmax.
    """
    logp = masked_log_softmax(logits, legal)
    chosen = logp.gather(1, actions.long()[:, None]).squeeze(1)
    pg = -(chosen * advantages.detach()).mean()
    neg_entropy = neg_entropy_terms(logp, legal).sum(1).mean()
    return pg + entropy_weight * neg_entropy, {"pg_loss": pg.item(), "entropy": -neg_entropy.item()}


def masked_log_softmax(logits: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """log-softmax over the legal entries of each row; illegal entries get -inf (probability 0)."""
    masked = logits.masked_fill(~legal, float("-inf"))
    return F.log_softmax(masked, dim=-1)


def neg_entropy_terms(logp: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """p log p per entry, 0 for illegal entries (filled before the product: 0 * -inf would be NaN, and so
    would its gradient even under a `where`)."""
    safe = logp.masked_fill(~legal, 0.0)
    return safe.exp().masked_fill(~legal, 0.0) * safe


# --------------------------------------------------------------------------- V-trace (AutoShard / IMPALA)


@dataclass
class VTraceReturns:
    vs: torch.Tensor  # [T, B] value targets
    pg_advantages: torch.Tensor  # [T, B] advantages of the policy-gradient term


@torch.no_grad()
def vtrace(log_rhos: torch.Tensor, discounts: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor,
           bootstrap_value: torch.Tensor, clip_rho: float = 1.0, clip_c: float = 1.0,
           clip_pg_rho: float = 1.0) -> VTraceReturns:
    """V-trace targets (Espeholt et al. 2018, as in TorchBeast's vtrace.py), time-major [T, B].

    `log_rhos`: log pi(a_t|x_t) - log mu(a_t|x_t) (target minus behaviour);
    `discounts`: gamma * (1 - done_t); `values`: V(x_t); `bootstrap_value` [B]:
    V(x_T). vs_t = V(x_t) + sum_{s>=t} gamma^(s-t) (prod_{t<=i<s} c_i) delta_s,
    delta_s = rho_s (r_s + gamma_s V(x_{s+1}) - V(x_s)); the policy-gradient
    advantage is rho_t^pg (r_t + gamma_t vs_{t+1} - V(x_t)).
    """
    rhos = log_rhos.exp()
    clipped_rhos = rhos.clamp(max=clip_rho)
    cs = rhos.clamp(max=clip_c)
    values_next = torch.cat([values[1:], bootstrap_value[None]], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_next - values)
    acc = torch.zeros_like(bootstrap_value)
    out = []
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        out.append(acc)
    vs = torch.stack(out[::-1]) + values
    vs_next = torch.cat([vs[1:], bootstrap_value[None]], dim=0)
    pg_adv = rhos.clamp(max=clip_pg_rho) * (rewards + discounts * vs_next - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_adv)


def impala_loss(target_logits: torch.Tensor, legal: torch.Tensor, behaviour_logp: torch.Tensor,
                actions: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, values: torch.Tensor,
                bootstrap_value: torch.Tensor, baseline_cost: float, entropy_cost: float) -> tuple[torch.Tensor, dict]:
    """TorchBeast's summed IMPALA loss over a [T, B] batch with V-trace targets.

    pg = sum(-log pi(a) * pg_adv); baseline = baseline_cost * 0.5 * sum((vs - V)^2);
    entropy = entropy_cost * sum(p log p); `target_logits` [T, B, N] with the
    legal mask [T, B, N] the actor sampled under.
    """
    logp_all = masked_log_softmax(target_logits, legal)
    logp = logp_all.gather(-1, actions.long()[..., None]).squeeze(-1)
    vt = vtrace(logp.detach() - behaviour_logp, discounts, rewards, values.detach(), bootstrap_value.detach())
    pg = -(logp * vt.pg_advantages).sum()
    baseline = baseline_cost * 0.5 * ((vt.vs - values) ** 2).sum()
    neg_entropy = neg_entropy_terms(logp_all, legal).sum()
    total = pg + baseline + entropy_cost * neg_entropy
    return total, {"pg_loss": pg.item(), "baseline_loss": baseline.item(),
                   "entropy": -neg_entropy.item() / max(1, logp.numel())}
