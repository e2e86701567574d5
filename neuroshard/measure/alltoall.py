"""All-to-all communication benchmark (DESIGN.md §5 "Communication").

Rank r holds pooled embeddings ``[B, dims[r]]``; the forward all-to-all turns
them into ``[B/n, sum(dims)]`` on every rank and the backward all-to-all sends
the gradient back. Both run as ONE flat ``dist.all_to_all_single`` with
element-count splits (the list form fails on gloo and hangs the peers, see
PLATFORM.md). gloo on CPU, NCCL on GPUs, the same code path.

The exchange's layout (split sizes, packing), known test patterns to verify
it, the collectives themselves (also as a differentiable op) and the timing
of one sample on one rank (`bench_sample`). The job that measures many
samples on many ranks is `measure.alltoall_job`. Run one measurement by hand::

    python tools/alltoall_bench.py --ndevices 4 --dims 64,256,128,32 --sleeps 0,3,0,1
    python tools/alltoall_bench.py --ndevices 4 --dims 64,256,128,32 --check   # verify values
    python tools/alltoall_bench.py --gpu_devices 0,1,2,3 --dims 512,256,768,128 --batch_size 65536

Units: times in ms, bandwidth in GB/s (1e9 bytes/s).
"""

from __future__ import annotations

import time
from typing import Sequence

from neuroshard.measure.rank import barrier

BYTES_PER_ELEMENT = 4  # fp32 pooled embeddings


# --------------------------------------------------------------------------- layout
# Pure tensor helpers (no torch.distributed): the flat buffers exchanged by the
# all-to-all and how to read them back. Tests drive them with a simulated
# all-to-all; the worker drives them with the real one.


def split_sizes(dims: Sequence[int], rank: int, batch_size: int) -> tuple[list[int], list[int]]:
    """Element counts (input splits, output splits) of rank `rank`'s forward all-to-all.

    Rank r sends ``B/n x dims[r]`` elements to every peer and receives
    ``B/n x dims[q]`` from each peer q. The backward exchange swaps the two lists.
    """
    n = len(dims)
    b = batch_size // n
    return [b * dims[rank]] * n, [b * d for d in dims]


def unpack_forward(flat, dims: Sequence[int], local_batch: int):
    """Received forward buffer -> ``[B/n, sum(dims)]`` (peer q's columns at its offset)."""
    import torch

    parts, off = [], 0
    for d in dims:
        parts.append(flat[off:off + local_batch * d].view(local_batch, d))
        off += local_batch * d
    return torch.cat(parts, dim=1)


def pack_backward(grad, dims: Sequence[int]):
    """Gradient ``[B/n, sum(dims)]`` -> flat send buffer, peer q's columns contiguous."""
    import torch

    return torch.cat([g.reshape(-1) for g in torch.split(grad, list(dims), dim=1)])


def unpack_backward(flat, batch_size: int, dim: int):
    """Received backward buffer -> ``[B, dims[r]]`` (peer q's rows are the q-th B/n block)."""
    return flat.view(batch_size, dim)


# --------------------------------------------------------------------------- check patterns


def pattern(rank: int, rows: int, cols: int, salt: float = 0.0, device="cpu"):
    """Deterministic fp32-exact test values, distinct per rank (< 2**24, so exact)."""
    import torch

    base = torch.arange(rows * cols, dtype=torch.float64, device=device) % 65521
    return (base + rank * 65536 + salt).to(torch.float32).view(rows, cols)


def expected_forward(dims: Sequence[int], rank: int, batch_size: int, device="cpu"):
    """What rank `rank` must hold after the forward exchange of :func:`pattern` inputs."""
    import torch

    b = batch_size // len(dims)
    return torch.cat([pattern(q, batch_size, d, device=device)[rank * b:(rank + 1) * b]
                      for q, d in enumerate(dims)], dim=1)


def expected_backward(dims: Sequence[int], rank: int, batch_size: int, device="cpu"):
    """Gradient rank `rank` must receive when each rank q's upstream gradient is
    ``pattern(q, B/n, sum(dims), salt=0.5)``."""
    import torch

    n, b, total = len(dims), batch_size // len(dims), sum(dims)
    off = sum(dims[:rank])
    return torch.cat([pattern(q, b, total, salt=0.5, device=device)[:, off:off + dims[rank]]
                      for q in range(n)], dim=0)


# --------------------------------------------------------------------------- collectives


def exchange_forward(x, dims: Sequence[int], rank: int, batch_size: int, out=None):
    """Forward all-to-all of the flat buffers: ``[B, dims[r]]`` -> flat ``[B/n * sum(dims)]``."""
    import torch
    import torch.distributed as dist

    in_splits, out_splits = split_sizes(dims, rank, batch_size)
    if out is None:
        out = torch.empty(sum(out_splits), dtype=x.dtype, device=x.device)
    dist.all_to_all_single(out, x.reshape(-1), out_splits, in_splits)
    return out


def exchange_backward(packed_grad, dims: Sequence[int], rank: int, batch_size: int, out=None):
    """Backward all-to-all: flat packed gradient -> flat ``[B * dims[r]]``."""
    import torch
    import torch.distributed as dist

    in_splits, out_splits = split_sizes(dims, rank, batch_size)
    if out is None:
        out = torch.empty(sum(in_splits), dtype=packed_grad.dtype, device=packed_grad.device)
    dist.all_to_all_single(out, packed_grad, in_splits, out_splits)
    return out


def _make_autograd_fn():
    import torch

    class PooledAllToAll(torch.autograd.Function):
        """``[B, dims[r]]`` -> ``[B/n, sum(dims)]`` with the gradient exchange as backward."""

        @staticmethod
        def forward(ctx, x, dims, rank, batch_size):
            ctx.meta = (tuple(dims), rank, batch_size)
            flat = exchange_forward(x.contiguous(), dims, rank, batch_size)
            return unpack_forward(flat, dims, batch_size // len(dims))

        @staticmethod
        def backward(ctx, grad):
            dims, rank, batch_size = ctx.meta
            flat = exchange_backward(pack_backward(grad.contiguous(), dims), dims, rank, batch_size)
            return unpack_backward(flat, batch_size, dims[rank]), None, None, None

    return PooledAllToAll


def pooled_all_to_all(x, dims: Sequence[int], rank: int, batch_size: int):
    """Differentiable pooled-embedding all-to-all (the same exchange the benchmark times)."""
    return _make_autograd_fn().apply(x, list(dims), rank, batch_size)


# --------------------------------------------------------------------------- one sample


def check_sample(dims: Sequence[int], rank: int, batch_size: int, device: str) -> None:
    """Exchange known patterns through :func:`pooled_all_to_all` and compare with the reference."""
    import torch

    n = len(dims)
    x = pattern(rank, batch_size, dims[rank], device=device).requires_grad_(True)
    y = pooled_all_to_all(x, dims, rank, batch_size)
    want = expected_forward(dims, rank, batch_size, device=device)
    if not torch.equal(y.detach(), want):
        bad = (y.detach() != want).nonzero()[:1].tolist()
        raise AssertionError(f"forward values differ from the reference (first at {bad})")
    y.backward(pattern(rank, batch_size // n, sum(dims), salt=0.5, device=device))
    want_g = expected_backward(dims, rank, batch_size, device=device)
    if not torch.equal(x.grad, want_g):
        bad = (x.grad != want_g).nonzero()[:1].tolist()
        raise AssertionError(f"backward gradient differs from the reference (first at {bad})")


def bench_sample(dims: Sequence[int], sleep_ms: float, rank: int, batch_size: int,
                 warmup: int, iters: int, device: str, state=None,
                 backward: bool = True) -> tuple[float, float | None]:
    """Per-rank median forward and backward all-to-all ms of one sample (backward None if not `backward`).

    Forward: barrier (untimed), sleep `sleep_ms` (the straggler delay), all-to-all,
    closing barrier; the measured sleep is subtracted, so a rank that starts
    early pays for waiting on late ones. Backward: barrier (untimed), gradient
    all-to-all.
    """
    import torch
    import torch.distributed as dist

    from neuroshard.measure.timing import benchmark, median

    n = len(dims)
    b = batch_size // n
    x = torch.randn(batch_size, dims[rank], device=device)
    out = torch.empty(b * sum(dims), device=device)
    grad = torch.randn(b * sum(dims), device=device)  # already in the packed send layout
    grad_in = torch.empty(batch_size * dims[rank], device=device)
    sleep_s = sleep_ms / 1000.0

    def forward_barrier():
        if state is not None:
            state["phase"] = "forward barrier"
        barrier(dist, device)

    def backward_barrier():
        if state is not None:
            state["phase"] = "backward barrier"
        barrier(dist, device)

    def forward_once():
        if state is not None:
            state["phase"] = "forward sleep"
        t0 = time.perf_counter()
        if sleep_s > 0:
            time.sleep(sleep_s)
        slept = (time.perf_counter() - t0) * 1000.0
        if state is not None:
            state["phase"] = "forward all-to-all"
        exchange_forward(x, dims, rank, batch_size, out=out)
        barrier(dist, device)
        return slept  # time.sleep overshoots; subtract what was really slept

    def backward_once():
        if state is not None:
            state["phase"] = "backward all-to-all"
        exchange_backward(grad, dims, rank, batch_size, out=grad_in)

    fw = benchmark(forward_once, warmup=warmup, iters=iters, device=device, before_each=forward_barrier)
    if not backward:
        return float(median(fw)), None
    bw = benchmark(backward_once, warmup=warmup, iters=iters, device=device, before_each=backward_barrier)
    return float(median(fw)), float(median(bw))


def algbw_gbps(dims: Sequence[int], batch_size: int, ms: float) -> float:
    """Algorithm bandwidth in GB/s: the mean per-rank send buffer (B x sum(dims) x 4 / n
    bytes, the nccl-tests alltoall "size") over the slowest rank's time `ms`."""
    if ms <= 0:
        return float("nan")
    size = batch_size * sum(dims) * BYTES_PER_ELEMENT / len(dims)
    return size / (ms / 1000.0) / 1e9
