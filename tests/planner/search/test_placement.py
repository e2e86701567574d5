"""The batched greedy (groups of agreeing scales, per-dim device keys) against the plain greedy run
for each (state, dim limit) on its own, one device at a time."""

import numpy as np
import pytest

from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.planner.search.beam import SearchConfig, make_space
from neuroshard.planner.search.placement import NO_LIMIT, pack_by_size, run_greedy, size_order
from neuroshard.problem import Problem
from tests.planner.search.test_beam import linear_models, random_models, random_task


def plain_greedy(order, limit, n, cap, size, dim, proj, acc0, head, allow=None):
    """Devices of each table of `order`, or None if one fits nowhere (DESIGN §8, written plainly); `cap` per
    device, `allow` [ids, n] the devices each table id may use."""
    cost = [0.0] * n
    mroom = [int(c) for c in np.broadcast_to(cap, (n,))]
    dsum = [0] * n
    acc = [acc0.copy() for _ in range(n)]
    out = []
    for g in order:
        best = None
        for d in range(n):
            if allow is not None and not allow[g, d]:
                continue
            if mroom[d] >= size[g] and dsum[d] + dim[g] <= limit:
                if best is None or (cost[d], -mroom[d]) < (cost[best], -mroom[best]):
                    best = d
        if best is None:
            return None
        acc[best] = acc[best] + proj[g]
        cost[best] = float(head(acc[best][None].copy())[0])
        mroom[best] -= size[g]
        dsum[best] += dim[g]
        out.append(best)
    return out


def check(tables, n, mem, models, states=3, seed=0, constraints=None):
    cfg = SearchConfig()
    prob = make_space(tables, Problem(n, mem, constraints=constraints), models, cfg)
    rng = np.random.default_rng(seed)
    # states: the unsplit tables, and some with random splits, in the search's greedy order
    gid_order = []
    for s in range(states):
        gids = prob.start.copy()
        for _ in range(s):
            i = int(rng.integers(len(gids)))
            if prob.can_split[gids[i]]:
                gids[i] += 1
                gids = np.append(gids, gids[i])
        gids = gids[: len(prob.start)]  # equal lengths: a split replaces a piece by its half
        gid_order.append(gids[np.argsort(-prob.cost1[gids], kind="stable")])
    gid_order = np.array(gid_order)
    scorer = get_scorer(models)
    res = run_greedy(gid_order, prob.limits, n, prob.cap, prob.size, prob.dim, prob.proj, scorer.acc0,
                     scorer.cost_from_acc, prob.allow)
    for s in range(len(gid_order)):
        for r, limit in enumerate(prob.limits):
            want = plain_greedy(gid_order[s], limit, n, prob.cap, prob.size, prob.dim, prob.proj, scorer.acc0,
                                scorer.cost_from_acc, prob.allow)
            row = res.row_of[s, r]
            if want is None:
                assert row == -1, (s, r)
                continue
            assert row >= 0, (s, r)
            assert res.devices[:, row].tolist() == want, (s, r)
            dims = np.zeros(n, dtype=np.int64)
            np.add.at(dims, want, prob.dim[gid_order[s]])
            assert res.dims[row].tolist() == dims.tolist()
    return res


@pytest.mark.parametrize("seed", range(6))
def test_batched_greedy_matches_the_plain_greedy(seed):
    # from 1 to 40 devices, tight to loose memory, constant models now and then (ties everywhere)
    rng = np.random.default_rng(300 + seed)
    n = int(rng.choice([1, 3, 8, 40]))
    T = int(rng.integers(3, 40))
    mem = float(rng.choice([0.01, 0.05, 1.0])) * max(1, T / n)
    models = random_models(n, seed) if seed % 2 else linear_models(n, per_dim=float(rng.choice([0.0, 0.01])))
    check(random_task(rng, T), n, mem, models, states=3, seed=seed)


def test_scales_that_agree_share_a_row():
    # one table per device and room to spare: every scale places alike, so one row serves all
    rng = np.random.default_rng(1)
    tables = random_task(rng, 4, dims=(16,))
    res = check(tables, 4, 1.0, linear_models(4), states=1)
    assert len(res.compute) == 1 and (res.row_of == 0).all()


def test_no_limit_is_larger_than_any_sum():
    assert NO_LIMIT > 2**60 and NO_LIMIT * 2 < np.iinfo(np.int64).max


def test_many_devices_and_groups_that_split():
    # 24 devices, 90 tables: the dim limits bind late, so groups of scales split and some fail
    rng = np.random.default_rng(5)
    tables = random_task(rng, 90)
    mem = max(1.5 * sum(t.size_gb for t in tables) / 24, 1.05 * max(t.size_gb for t in tables))
    res = check(tables, 24, mem, random_models(24, 5), states=2, seed=5)
    assert 2 < len(res.compute) < 2 * 12


@pytest.mark.parametrize("seed", range(4))
def test_batched_greedy_matches_the_plain_greedy_on_unequal_devices_with_allowed_devices(seed):
    # devices of two memory sizes; a third of the tables limited to a few devices (the keyed path from 16 on)
    from neuroshard.types.constraints import TableConstraints

    rng = np.random.default_rng(700 + seed)
    n = int(rng.choice([3, 8, 20]))
    T = int(rng.integers(6, 40))
    tables = random_task(rng, T)
    base = 1.0 * sum(t.size_gb for t in tables)  # the small devices (0.6 x) bind now and then
    mem = tuple(base * (1.0 if d % 2 else 0.6) for d in range(n))
    mem = tuple(max(m, 1.05 * max(t.size_gb for t in tables)) for m in mem)
    limited = rng.choice(T, size=T // 3, replace=False)
    devices = tuple((int(t), tuple(int(d) for d in rng.choice(n, size=max(2, n // 3), replace=False)))
                    for t in limited)
    models = random_models(n, seed)
    cons = TableConstraints(devices=devices)
    res = check(tables, n, mem, models, states=1, seed=seed, constraints=cons)
    # the unsplit state, in greedy order: every placement keeps each limited table on its devices
    prob = make_space(tables, Problem(n, mem, constraints=cons), models, SearchConfig())
    order = np.argsort(-prob.cost1[prob.start], kind="stable")
    placed = 0
    for row in set(res.row_of[0].tolist()) - {-1}:
        for j, t in enumerate(order):
            ds = cons.allowed(int(t))
            assert ds is None or int(res.devices[j, row]) in ds
        placed += 1
    assert placed >= 1


def _count_head(acc, overwrite=False):
    return acc[:, 0].astype(np.float32)  # a device's compute: how many tables it holds


def test_packing_by_size_spreads_then_packs_tight():
    # two devices of 8; sizes 4, 4, 3, 3, 2 fill them exactly. Largest first onto the most room left:
    # 4 -> d0, 4 -> d1, 3 -> d0 (tie, first), 3 -> d1, and the 2 fits nowhere (1 left on each).
    # Onto the least room that still holds it: 4 -> d0, 4 -> d0, 3 -> d1, 3 -> d1, 2 -> d1.
    size, dim = np.array([3, 4, 2, 4, 3]), np.array([8, 16, 4, 16, 8])
    proj = np.ones((5, 1), dtype=np.float32)
    # size order: positions 1, 3 (the 4s), 0, 4 (the 3s), 2
    assert size_order(np.array([[0, 1, 2, 3, 4]]), size).tolist() == [[1, 3, 0, 4, 2]]
    res = pack_by_size(np.array([[1, 3, 0, 4, 2]]), 2, 8, size, dim, proj, np.zeros(1, np.float32), _count_head)
    assert res.row_of.tolist() == [[-1, 0]]
    assert res.devices[:, 0].tolist() == [0, 0, 1, 1, 1]
    assert res.compute.tolist() == [[2.0, 3.0]] and res.dims.tolist() == [[32, 20]]
    # room to spare: both rows place. Table 1 (the 4) may use d1 only; then the 3 goes where most is left (d0)
    # or least (d1)
    allow = np.ones((5, 2), dtype=bool)
    allow[1] = [False, True]
    res = pack_by_size(np.array([[1, 0]]), 2, 8, size, dim, proj, np.zeros(1, np.float32), _count_head, allow)
    assert res.row_of.tolist() == [[0, 1]] and res.devices.T.tolist() == [[1, 0], [1, 1]]


@pytest.mark.parametrize("seed", range(3))
def test_blocks_of_keys_match_the_plain_greedy(seed, monkeypatch):
    # keys cut into blocks of 8 devices from 16 devices on (the path of 256 devices and more, cheaper here): 37
    # devices, the last block padded; tight memory (full scans), dim limits that split groups, ties (constant
    # models)
    import neuroshard.planner.search.placement as placement

    monkeypatch.setattr(placement, "BLOCKS_FROM", 16)
    monkeypatch.setattr(placement, "BLOCK", 8)
    rng = np.random.default_rng(900 + seed)
    tables = random_task(rng, 80)
    mem = max(1.2 * sum(t.size_gb for t in tables) / 37, 1.05 * max(t.size_gb for t in tables))
    models = random_models(37, seed) if seed < 2 else linear_models(37, per_dim=0.0)
    res = check(tables, 37, mem, models, states=3, seed=seed)
    assert len(res.compute) > 3
