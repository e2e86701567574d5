"""The environment every measuring process starts with: torchrun ranks (`measure.launch`) and benchmark pool
workers (`measure.pool`).

glibc's malloc moves its mmap and trim thresholds with the sizes a process frees, so a run of large buffers
ends up served by fresh pages, faulted in by the kernel on every call. Usually that is cheap; at times on the
CPU machine here it was not, and then gloo's collectives of more than about 4 M elements (16 MB) switched, at a
random call of a run of that size, into a regime about twice as slow, and stayed there. A plan's collectives,
timed after others of their size, fell into it far more often than the collection's samples, drawn in random
order of size, so the two measured different machines. With fixed thresholds the processes keep and reuse
their pages, and the regime did not occur (docs/EXPERIMENTS.md, the entry on malloc thresholds). It still
comes at times: gloo's `reduce_scatter_tensor` grows a process call after call (`measure.collectives.run_collective`
runs another form), and even without it the largest reduce-scatters of some plan jobs ran about twice as long for a
while. A value already in the environment wins; malloc other than glibc's ignores these variables.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

# 32 MiB, the largest mmap threshold glibc accepts on 64-bit (set, it no longer moves); memory is returned to the
# system only past 2 GiB of free heap
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(2 << 30)}


def measuring_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the measuring processes' defaults (`MALLOC_ENV`, and one OpenMP thread) where unset."""
    env = dict(environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in MALLOC_ENV.items():
        env.setdefault(key, value)
    return env


@contextmanager
def inherited_malloc_env() -> Iterator[None]:
    """`MALLOC_ENV` in this process's environment while the block starts child processes (a `spawn`ed
    worker execs with the parent's environment), restored after; values already set are kept."""
    added = [key for key in MALLOC_ENV if key not in os.environ]
    os.environ.update({key: MALLOC_ENV[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
