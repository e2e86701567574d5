"""The two policy-gradient estimators against hand-computed 3-step examples."""

import math

import pytest
import torch

from neuroshard.learned.rl import (
    impala_loss,
    masked_log_softmax,
    reinforce_advantages,
    reinforce_loss,
    vtrace,
)


def test_reinforce_advantages_are_z_scored_returns():
    # returns 1, 2, 3: mean 2, Bessel std 1 -> -1, 0, 1
    adv = reinforce_advantages(torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)
    # two episodes of a 3-step batch: steps carry their episode's return (-4, -4, -1)
    # mean -3, std sqrt(((-1)^2 * 2 + 2^2) / 2) = sqrt(3)
    adv = reinforce_advantages(torch.tensor([-4.0, -4.0, -1.0]))
    torch.testing.assert_close(adv, torch.tensor([-1, -1, 2]) / math.sqrt(3), atol=1e-6, rtol=0)
    # equal returns: zero advantages, not NaN
    assert reinforce_advantages(torch.tensor([5.0, 5.0, 5.0])).tolist() == [0.0, 0.0, 0.0]


def test_reinforce_loss_uses_the_legal_softmax_in_the_update():
    logits = torch.zeros(3, 3, requires_grad=True)
    legal = torch.tensor([[True, True, False], [True, True, True], [False, False, True]])
    actions = torch.tensor([1, 2, 2])
    adv = torch.tensor([-1.0, 0.0, 1.0])
    loss, st = reinforce_loss(logits, legal, actions, adv, entropy_weight=0.5)
    # log pi: ln 1/2, ln 1/3, ln 1 -> pg = mean(-[ln .5 * -1, ln(1/3) * 0, 0 * 1]) = ln(.5)/3
    pg = math.log(0.5) / 3
    # entropies: ln 2, ln 3, 0 -> mean(p log p) = -(ln 2 + ln 3) / 3
    assert st["pg_loss"] == pytest.approx(pg)
    assert st["entropy"] == pytest.approx((math.log(2) + math.log(3)) / 3)
    assert loss.item() == pytest.approx(pg - 0.5 * (math.log(2) + math.log(3)) / 3)
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 2] == 0 and logits.grad[2, 0] == 0  # illegal devices get no gradient


def test_masked_log_softmax_gives_illegal_devices_probability_zero():
    p = masked_log_softmax(torch.tensor([[1.0, 5.0, 1.0]]), torch.tensor([[True, False, True]])).exp()
    torch.testing.assert_close(p, torch.tensor([[0.5, 0.0, 0.5]]))


def test_vtrace_on_policy_is_the_n_step_return():
    # gamma 1, no episode end: vs_t = sum of the remaining rewards + bootstrap = 1.3 for every t
    values, rewards = torch.tensor([[0.5], [0.2], [0.1]]), torch.tensor([[0.0], [0.0], [1.0]])
    out = vtrace(torch.zeros(3, 1), torch.ones(3, 1), rewards, values, torch.tensor([0.3]))
    torch.testing.assert_close(out.vs, torch.tensor([[1.3], [1.3], [1.3]]))
    # pg_adv_t = r_t + vs_{t+1} - V_t: 1.3 - 0.5, 1.3 - 0.2, 1 + 0.3 - 0.1
    torch.testing.assert_close(out.pg_advantages, torch.tensor([[0.8], [1.1], [1.2]]))


def test_vtrace_clips_importance_weights():
    # rho = 2, 0.5, 1 -> clipped rho = c = 1, 0.5, 1
    # deltas: 1 * (0 + 0.2 - 0.5) = -0.3; 0.5 * (0 + 0.1 - 0.2) = -0.05; 1 * (1 + 0.3 - 0.1) = 1.2
    # vs - V: 1.2; -0.05 + 0.5 * 1.2 = 0.55; -0.3 + 1 * 0.55 = 0.25 -> vs = 0.75, 0.75, 1.3
    log_rhos = torch.log(torch.tensor([[2.0], [0.5], [1.0]]))
    values, rewards = torch.tensor([[0.5], [0.2], [0.1]]), torch.tensor([[0.0], [0.0], [1.0]])
    out = vtrace(log_rhos, torch.ones(3, 1), rewards, values, torch.tensor([0.3]))
    torch.testing.assert_close(out.vs, torch.tensor([[0.75], [0.75], [1.3]]))
    # pg: 1 * (0 + 0.75 - 0.5), 0.5 * (0 + 1.3 - 0.2), 1 * (1 + 0.3 - 0.1)
    torch.testing.assert_close(out.pg_advantages, torch.tensor([[0.25], [0.55], [1.2]]))


def test_vtrace_stops_at_an_episode_end():
    # the episode ends after step 1 (discount 0): step 2 belongs to the next episode
    # deltas: 0.2 - 0.5 = -0.3; 1 + 0 - 0.2 = 0.8; 0 + 0.3 - 0.1 = 0.2 -> vs = 1.0, 1.0, 0.3
    values, rewards = torch.tensor([[0.5], [0.2], [0.1]]), torch.tensor([[0.0], [1.0], [0.0]])
    out = vtrace(torch.zeros(3, 1), torch.tensor([[1.0], [0.0], [1.0]]), rewards, values, torch.tensor([0.3]))
    torch.testing.assert_close(out.vs, torch.tensor([[1.0], [1.0], [0.3]]))
    torch.testing.assert_close(out.pg_advantages, torch.tensor([[0.5], [0.8], [0.2]]))


def test_impala_loss_sums_the_three_terms():
    logits = torch.zeros(3, 1, 2, requires_grad=True)
    legal = torch.ones(3, 1, 2, dtype=torch.bool)
    values = torch.tensor([[0.5], [0.2], [0.1]], requires_grad=True)
    rewards = torch.tensor([[0.0], [0.0], [1.0]])
    behaviour = torch.full((3, 1), math.log(0.5))  # on-policy: uniform over 2 devices
    loss, st = impala_loss(logits, legal, behaviour, torch.zeros(3, 1, dtype=torch.long), rewards,
                           torch.ones(3, 1), values, torch.tensor([0.3]), baseline_cost=0.5, entropy_cost=0.01)
    pg = -math.log(0.5) * (0.8 + 1.1 + 1.2)
    baseline = 0.5 * 0.5 * (0.8 ** 2 + 1.1 ** 2 + 1.2 ** 2)
    assert st["pg_loss"] == pytest.approx(pg, rel=1e-5)
    assert st["baseline_loss"] == pytest.approx(baseline, rel=1e-5)
    assert loss.item() == pytest.approx(pg + baseline - 0.01 * 3 * math.log(2), rel=1e-5)
