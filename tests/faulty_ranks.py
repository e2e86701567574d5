"""A rank entry point with an injected fault, for the launcher's failure tests.

Tests hand it to a job in place of the rank loop's module
(`AllToAllJob(..., worker_module="tests.faulty_ranks")`, `PlanJob(...)`); it
wraps the real worker's per-item measurement and runs the real rank loop. The
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
    from neuroshard.measure import rank as rank_loop
    from neuroshard.measure.alltoall_job import AllToAllWorker
    from neuroshard.measure.plan_job import PlanWorker

    target, bad_rank, bad_item, kind = _fault()
    workers = {"comm": AllToAllWorker, "hardware": PlanWorker}
    if target not in workers:
        sys.exit(f"{ENV}: unknown target {target!r}")
    cls = workers[target]
    real = cls.measure
    rank = int(os.environ["RANK"])

    def measure(self, k, item):
        if (rank, k) == (bad_rank, bad_item):
            _strike(kind, rank, k)
        return real(self, k, item)

    cls.measure = measure
    rank_loop.main()


if __name__ == "__main__":
    main()
