import time

import pytest

from neuroshard.measure.timing import benchmark, elapsed_ms, flush_cpu_cache, median


def test_benchmark_counts_and_subtracts():
    calls = []
    times = benchmark(lambda: calls.append(1) or 0.0, warmup=2, iters=3, before_each=flush_cpu_cache)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)
    # a 20 ms sleep reported as "subtract 20" leaves a small remainder
    def sleepy():
        time.sleep(0.02)
        return 20.0
    assert max(benchmark(sleepy, warmup=0, iters=3)) < 10.0
    assert median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError):
        benchmark(lambda: None, iters=0)


def test_elapsed_ms_counts_from_the_given_start():
    start = time.perf_counter() - 0.5  # half a second ago
    ms = elapsed_ms(start, "cpu")  # no CUDA work to wait for on a CPU device
    assert 500.0 <= ms < 60_000.0 and elapsed_ms(start) >= ms
