"""The collectives of spread tables (`measure.collectives`): their values on 2 real gloo ranks by hand, and
the job that times them."""

import json
import os
from datetime import timedelta

import pytest

from neuroshard.measure.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    CollectiveJob,
    buffers,
    check_sample,
    run_collective,
)
from neuroshard.types.errors import ConfigError
from tests.two_nodes import spawn_ranks


def _rank(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    got = {}
    for op in (REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE):
        inp, out = buffers(op, 4, world)
        inp.copy_(torch.arange(inp.numel(), dtype=torch.float32) + 10 * (rank + 1))
        run_collective(op, inp, out)
        got[op] = (inp if out is None else out).tolist()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(got, fh)
    dist.destroy_process_group()


def test_each_collective_moves_what_its_spread_table_needs(tmp_path):
    spawn_ranks(_rank, str(tmp_path), seconds=60, what="the ranks")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    # reduce-scatter of 4 partial sums: rank 0 holds [10, 11, 12, 13], rank 1 [20, 21, 22, 23]; each keeps the
    # sums of its 2 samples
    assert r0[REDUCE_SCATTER] == [30.0, 32.0] and r1[REDUCE_SCATTER] == [34.0, 36.0]
    # all-gather of the 2-element slices [10, 11] and [20, 21]: the whole on both
    assert r0[ALL_GATHER] == r1[ALL_GATHER] == [10.0, 11.0, 20.0, 21.0]
    # all-reduce of the 4-element gradients, in place
    assert r0[ALL_REDUCE] == r1[ALL_REDUCE] == [30.0, 32.0, 34.0, 36.0]


def test_the_job_times_every_sample_on_every_rank():
    samples = [{"op": REDUCE_SCATTER, "numel": 4096}, {"op": ALL_GATHER, "numel": 64}, {"op": ALL_REDUCE, "numel": 10}]
    with CollectiveJob(samples, 2, warmup=1, iters=2, timeout=60) as job:
        got = list(job.results())
    assert [(r.index, r.op, r.numel) for r in got] == [(0, REDUCE_SCATTER, 4096), (1, ALL_GATHER, 64),
                                                       (2, ALL_REDUCE, 10)]
    assert all(len(r.ms) == 2 and min(r.ms) > 0 for r in got)


def test_bad_samples_are_refused_before_the_job_starts():
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        check_sample("gather", 8, 2)
    with pytest.raises(ValueError, match="reduce_scatter: numel must be a multiple of the 4 ranks, got 6"):
        check_sample(REDUCE_SCATTER, 6, 4)
    with pytest.raises(ConfigError, match="sample 1: all_reduce: numel must be positive, got 0"):
        CollectiveJob([{"op": ALL_GATHER, "numel": 8}, {"op": ALL_REDUCE, "numel": 0}], 2)
    with pytest.raises(ConfigError, match="at least 2 ranks"):
        CollectiveJob([], 1)


def test_the_collection_writes_samples_and_a_model_and_resumes(tmp_path):
    import runpy

    from neuroshard.planner.costs.collective_model import CollectiveModel
    from tests.test_bad_inputs import ROOT

    main = runpy.run_path(str(ROOT / "collect_collective_cost_data.py"))["main"]
    argv = ["--device", "cpu", "--ndevices", "2", "--data_size", "12", "--noise_samples", "3", "--batch_size", "8",
            "--max_dim", "64", "--max_numel", "5000", "--warmup", "0", "--iters", "2", "--out_dir",
            str(tmp_path / "data"), "--out_path", str(tmp_path / "collectives_2.json"), "--no_progress"]
    assert main(argv) == 0
    rows = [json.loads(x) for x in (tmp_path / "data" / "data.jsonl").read_text().splitlines()]
    assert [r["op"] for r in rows] == [REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE] * 4
    assert all(r["numel"] % 2 == 0 and r["ms"] > 0 and len(r["ranks_ms"]) == 2 for r in rows)
    assert all(r["numel"] % 8 == 0 for r in rows if r["op"] != ALL_REDUCE)  # B x d
    assert len((tmp_path / "data" / "noise.jsonl").read_text().splitlines()) == 3
    model = CollectiveModel.load(tmp_path / "collectives_2.json", 2)
    assert set(model.fits) == {REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE}
    assert all(model.fit_of(op).noise_floor is not None for op in model.fits)  # the first 3: one of each
    # a rerun measures nothing more; another seed draws other samples than those recorded
    before = (tmp_path / "data" / "data.jsonl").read_text()
    assert main(argv) == 0 and (tmp_path / "data" / "data.jsonl").read_text() == before
    from neuroshard.types.errors import InputError

    with pytest.raises(InputError, match=r"data.jsonl: line 1: reduce_scatter of \d+ elements, this collection "
                                         r"draws .*another --seed"):
        main(argv + ["--seed", "5"])
