"""A rank entry point with an injected fault, for the launcher's failure tests.

Tests hand it to a job in place of the real worker module
(`CommJob(..., worker_module="tests.faulty_ranks")`, `HardwareJob(...)`); it
wraps the real worker's per-item measurement and runs the real worker. The
fault comes from this test module's own environment variable, which the test
sets (production code reads none):

    FAULTY_RANKS="comm|hardware:RANK:ITEM:raise|hang|exit"
"""

import os
import sys
import time

ENV = "FAULTY_RANKS"


def _fault():
    target, rank, item, kind = os.environ[ENV].split(":")
    return target, int(rank), int(item), kind


def _strike(kind: str, rank: int, item: int) -> None:
    if kind == "raise":
        raise RuntimeError(f"injected fault on rank {rank} at item {item}")
    if kind == "exit":
        os._exit(7)
    time.sleep(10**6)  # "hang": never reaches the next collective


def main() -> None:
    target, bad_rank, bad_item, kind = _fault()
    rank = int(os.environ["RANK"])
    if target == "comm":
        from neuroshard.bench import comm

        real, calls = comm.bench_sample, [0]

        def bench_sample(*args, **kwargs):
            item, calls[0] = calls[0], calls[0] + 1
            if (rank, item) == (bad_rank, bad_item):
                _strike(kind, rank, item)
            return real(*args, **kwargs)

        comm.bench_sample = bench_sample
        comm.worker_main()
    elif target == "hardware":
        from neuroshard.eval import hardware_rank

        real = hardware_rank._Rank.measure

        def measure(self, k):
            if (rank, k) == (bad_rank, bad_item):
                _strike(kind, rank, k)
            return real(self, k)

        hardware_rank._Rank.measure = measure
        hardware_rank.worker_main()
    else:
        sys.exit(f"{ENV}: unknown target {target!r}")


if __name__ == "__main__":
    main()
