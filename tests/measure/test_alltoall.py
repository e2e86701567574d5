"""All-to-all benchmark (`measure.alltoall`): buffer layout and exchanged values against a reference, the
algorithm bandwidth by hand."""

import math

import pytest
import torch

from neuroshard.measure import alltoall as cb


def simulated_all_to_all(sends, in_splits, out_splits):
    """What dist.all_to_all_single delivers, computed in one process: rank q receives
    from each peer p the q-th chunk (in_splits[p][q] elements) of p's send buffer."""
    n = len(sends)
    chunks = [list(torch.split(sends[p], in_splits[p])) for p in range(n)]
    recv = []
    for q in range(n):
        parts = [chunks[p][q] for p in range(n)]
        assert [len(x) for x in parts] == out_splits[q]
        recv.append(torch.cat(parts))
    return recv


@pytest.mark.parametrize("dims", [[4, 12], [64, 8, 0, 20], [16, 16, 16]])
def test_layout_round_trip_matches_reference(dims):
    n, batch = len(dims), 6 * len(dims)
    splits = [cb.split_sizes(dims, r, batch) for r in range(n)]
    xs = [cb.pattern(r, batch, dims[r]) for r in range(n)]
    recv = simulated_all_to_all([x.reshape(-1) for x in xs], [s[0] for s in splits], [s[1] for s in splits])
    for q in range(n):
        got = cb.unpack_forward(recv[q], dims, batch // n)
        assert got.shape == (batch // n, sum(dims))
        assert torch.equal(got, cb.expected_forward(dims, q, batch))
    # Backward: rank q's gradient goes back; the splits swap roles.
    grads = [cb.pattern(q, batch // n, sum(dims), salt=0.5) for q in range(n)]
    back = simulated_all_to_all([cb.pack_backward(g, dims) for g in grads],
                                [s[1] for s in splits], [s[0] for s in splits])
    for r in range(n):
        got = cb.unpack_backward(back[r], batch, dims[r])
        assert torch.equal(got, cb.expected_backward(dims, r, batch))


def test_reference_values_by_hand():
    # 2 ranks, B=2, dims [1, 2]: rank 0 holds [[a0],[a1]], rank 1 holds [[b00,b01],[b10,b11]].
    a, b = cb.pattern(0, 2, 1), cb.pattern(1, 2, 2)
    assert a.flatten().tolist() == [0.0, 1.0]
    assert b.flatten().tolist() == [65536.0, 65537.0, 65538.0, 65539.0]
    # rank 1 gets row 1 of everyone: [a1, b10, b11]
    assert cb.expected_forward([1, 2], 1, 2).tolist() == [[1.0, 65538.0, 65539.0]]
    assert cb.split_sizes([1, 2], 0, 2) == ([1, 1], [1, 2])
    assert cb.split_sizes([1, 2], 1, 2) == ([2, 2], [1, 2])


def test_algbw_by_hand():
    # B=1000, dims 250+250 -> 2e6 bytes in all, 1e6 per rank; 1 ms -> 1 GB/s.
    assert cb.algbw_gbps([250, 250], 1000, 1.0) == pytest.approx(1.0)
    assert math.isnan(cb.algbw_gbps([4], 4, 0.0))


def test_bench_sample_skips_the_backward_exchange_when_asked(monkeypatch, tmp_path):
    # A one-rank gloo group: a call runs warm-up + iters exchanges of each kind; backward=False, no backward one.
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    try:
        calls = {"forward": 0, "backward": 0}
        real_fw, real_bw = cb.exchange_forward, cb.exchange_backward

        def forward(*a, **k):
            calls["forward"] += 1
            return real_fw(*a, **k)

        def backward(*a, **k):
            calls["backward"] += 1
            return real_bw(*a, **k)

        monkeypatch.setattr(cb, "exchange_forward", forward)
        monkeypatch.setattr(cb, "exchange_backward", backward)
        fw, bw = cb.bench_sample([8], 0.0, 0, 16, warmup=1, iters=2, device="cpu")
        assert calls == {"forward": 3, "backward": 3} and fw >= 0.0 and bw >= 0.0
        fw, bw = cb.bench_sample([8], 0.0, 0, 16, warmup=1, iters=2, device="cpu", backward=False)
        assert calls == {"forward": 6, "backward": 3} and fw >= 0.0 and bw is None
    finally:
        dist.destroy_process_group()
