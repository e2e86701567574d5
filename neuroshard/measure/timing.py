"""The one timing helper, shared by the kernel, the all-to-all and the end-to-end benchmarks.

`benchmark` does warm-up, the optional cache flush before each timed
iteration, the clock choice (CUDA events on a GPU; on CPU the wall clock or
the calling thread's CPU time) and returns the per-iteration times; callers
take the median. Times in ms.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

import torch

CLOCKS = ("wall", "cpu")
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


def flush_cache(device) -> None:
    """Evict the cache the next iteration would find warm: the GPU's L2 or the CPU's LLC."""
    if str(device).startswith("cuda"):
        flush_gpu_cache(device)
    else:
        flush_cpu_cache()


def benchmark(run_once: Callable[[], Optional[float]], warmup: int = 5, iters: int = 10, device: str = "cpu",
              before_each: Optional[Callable[[], None]] = None, flush: bool = False, clock: str = "wall",
              wall_ms: Optional[list] = None) -> list[float]:
    """Time `run_once` and return the ms of each timed iteration.

    Before every iteration (warm-up included) `before_each` runs untimed (a
    barrier); before each timed one, with `flush`, the cache is evicted first
    (warm-up times are thrown away, so flushing there would only cost time).
    `run_once` may return a number of ms to subtract from its own iteration
    (a deliberate straggler sleep) or None. GPU timing uses CUDA events
    around the call. CPU timing uses `time.perf_counter` (`clock="wall"`) or
    leaves out the time the thread sat descheduled (`clock="cpu"`: elapsed
    minus the part not spent on this thread's CPU time), which needs all of
    the work on this thread (one intra-op thread). `wall_ms`, if given,
    receives each timed iteration's elapsed wall time.
    """
    if iters < 1 or warmup < 0:
        raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters} warmup={warmup}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    cuda = str(device).startswith("cuda")
    if cuda and clock == "cpu":
        raise ValueError("clock='cpu' times CPU work; GPU work is timed with CUDA events")
    times = []
    for i in range(warmup + iters):
        timed = i >= warmup
        if flush and timed:
            flush_cache(device)
        if before_each is not None:
            before_each()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            subtract = run_once()
            end.record()
            torch.cuda.synchronize(device)
            ms = elapsed = start.elapsed_time(end)
        else:
            t0, c0 = time.perf_counter(), time.thread_time()
            subtract = run_once()
            c1, t1 = time.thread_time(), time.perf_counter()
            ms = elapsed = (t1 - t0) * 1e3
            if clock == "cpu":
                ms -= max(0.0, (t1 - t0) - (c1 - c0)) * 1e3  # the time spent descheduled
        if timed:
            times.append(ms - (subtract or 0.0))
            if wall_ms is not None:
                wall_ms.append(elapsed)
    return times


def elapsed_ms(start: float, device=None) -> float:
    """Wall ms since `start` (a `time.perf_counter()`), after the work queued on a CUDA `device` is done."""
    if device is not None and str(device).startswith("cuda"):
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) * 1e3


def median(xs) -> float:
    return float(statistics.median(xs))
