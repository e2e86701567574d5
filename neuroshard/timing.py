"""The one timing helper, shared by the kernel and the all-to-all benchmarks."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

import torch

# Larger than the last-level cache of common CPUs, so one pass evicts the
# embedding rows a previous iteration left warm.
_FLUSH_BYTES = 64 * 2**20
_flush_buffer: Optional[torch.Tensor] = None


def flush_cpu_cache() -> None:
    """Touch a buffer larger than the LLC so the next iteration starts cold."""
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = torch.empty(_FLUSH_BYTES // 4, dtype=torch.float32)
    _flush_buffer.add_(1.0)


def flush_gpu_cache(device) -> None:
    """Overwrite a buffer larger than the GPU L2 cache."""
    buf = torch.empty(_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    buf.zero_()


def benchmark(run_once: Callable[[], Optional[float]], warmup: int = 5, iters: int = 10,
              device: str = "cpu", before_each: Optional[Callable[[], None]] = None) -> list[float]:
    """Time `run_once` and return the ms of each timed iteration.

    `before_each` runs untimed before every iteration (warm-up included): a
    cache flush, a barrier. `run_once` may return a number of ms to subtract
    from its own iteration (a deliberate straggler sleep) or None. GPU timing
    uses CUDA events around the call; CPU timing uses time.perf_counter.
    """
    if iters < 1 or warmup < 0:
        raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters} warmup={warmup}")
    cuda = str(device).startswith("cuda")
    times = []
    for i in range(warmup + iters):
        if before_each is not None:
            before_each()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            subtract = run_once()
            end.record()
            torch.cuda.synchronize(device)
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            subtract = run_once()
            ms = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            times.append(ms - (subtract or 0.0))
    return times


def median(xs) -> float:
    return float(statistics.median(xs))
