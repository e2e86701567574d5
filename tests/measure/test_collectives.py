"""The collectives of spread tables (`measure.collectives`): their values on 2 real gloo ranks by hand, and
the job that times them."""

import json
import os
import time
from datetime import timedelta

import pytest

from neuroshard.measure.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    CollectiveJob,
    buffers,
    check_sample,
    host_turns,
    run_collective,
)
from neuroshard.measure.rank import RankContext
from neuroshard.types.errors import ConfigError
from neuroshard.types.plan import host_groups
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


def _host_rank(rank: int, world: int, port: int, out_dir: str) -> None:
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from neuroshard.measure.collectives import CollectiveWorker

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    worker = CollectiveWorker(SimpleNamespace(rank=rank, world=world, spec={"samples": [], "warmup": 0, "iters": 1}))
    group = worker.host_group(2)
    assert worker.host_group(2) is group  # made once
    inp, out = buffers(REDUCE_SCATTER, 4, 2)
    inp.copy_(torch.arange(4, dtype=torch.float32) + 10 * (rank + 1))
    run_collective(REDUCE_SCATTER, inp, out, group)
    # the hosts take turns, and rank 0 has a third turn of its own: each turn's (start, end) wall clock
    ctx = RankContext(rank, world, "cpu", "", {}, {}, {})

    def run(q):
        start = time.time()
        time.sleep(0.2)
        return q, start, time.time()

    turns = ctx.take_turns([(0, 1), (2, 3), (0,)], run, "test")
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump({"values": out.tolist(), "turns": turns, "phase": ctx.state["phase"]}, fh)
    dist.destroy_process_group()


def test_a_host_groups_collective_stays_within_its_host(tmp_path):
    spawn_ranks(_host_rank, str(tmp_path), seconds=60, what="the ranks", world=4)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    # ranks 0, 1 (one host) hold [10..13] and [20..23]: each keeps its 2 samples' sums; ranks 2, 3 (the other
    # host) [30..33] and [40..43]
    assert [g["values"] for g in got] == [[30.0, 32.0], [34.0, 36.0], [70.0, 72.0], [74.0, 76.0]]
    # each rank ran the turns it is in, in order, and a turn started only once the one before had ended
    assert [[t[0] for t in g["turns"]] for g in got] == [[0, 2], [0], [1], [1]]
    ends = {q: max(t[2] for g in got for t in g["turns"] if t[0] == q) for q in range(3)}
    starts = {q: min(t[1] for g in got for t in g["turns"] if t[0] == q) for q in range(3)}
    assert starts[1] >= ends[0] and starts[2] >= ends[1]
    assert all(g["phase"] == "test (closing barrier)" for g in got)


def test_hosts_take_turns_and_every_rank_goes_at_once():
    # two hosts' table-row-wise groups and a row-wise table over all 4 ranks: the latter at once, the hosts in
    # order of first appearance
    assert host_turns([(2, 3), (0, 1, 2, 3), (0, 1), (2, 3)], 4) == ((0, 1, 2, 3), [(2, 3), (0, 1)])
    assert host_turns([(0, 1)], 4) == (None, [(0, 1)])
    assert host_turns([(0, 1, 2, 3)], 4) == ((0, 1, 2, 3), [])
    assert host_groups(2, 6) == [(0, 1), (2, 3), (4, 5)] and host_groups(4, 4) == [(0, 1, 2, 3)]


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
    with pytest.raises(ConfigError, match="sample 0: a group of 3 ranks: it must have 2 to 4 and divide the 4 ranks"):
        CollectiveJob([{"op": ALL_REDUCE, "numel": 8, "k": 3}], 4)
    with pytest.raises(ConfigError, match="sample 0: reduce_scatter: numel must be a multiple of the 2 ranks, got 5"):
        CollectiveJob([{"op": REDUCE_SCATTER, "numel": 5, "k": 2}], 4)


def test_the_collection_writes_samples_and_a_model_and_resumes(tmp_path):
    import runpy

    from neuroshard.planner.costs.collective_model import CollectiveModel
    from tests.scripts import ROOT

    main = runpy.run_path(str(ROOT / "collect_collective_cost_data.py"))["main"]
    argv = ["--device", "cpu", "--ndevices", "4", "--data_size", "12", "--noise_samples", "3", "--batch_size", "8",
            "--max_dim", "64", "--max_numel", "5000", "--warmup", "0", "--iters", "2", "--out_dir",
            str(tmp_path / "data"), "--out_path", str(tmp_path / "collectives_4.json"), "--no_progress"]
    assert main(argv) == 0
    rows = [json.loads(x) for x in (tmp_path / "data" / "data.jsonl").read_text().splitlines()]
    assert [r["op"] for r in rows] == [REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE] * 4
    assert all(r["ms"] > 0 and len(r["ranks_ms"]) == 4 and "k" not in r for r in rows)
    assert all(r["numel"] % 8 == 0 for r in rows if r["op"] != ALL_REDUCE)  # B x d
    assert len((tmp_path / "data" / "noise.jsonl").read_text().splitlines()) == 3
    model = CollectiveModel.load(tmp_path / "collectives_4.json", 4)
    assert set(model.fits) == {REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE}
    assert all(model.fit_of(op).noise_floor is not None for op in model.fits)  # the first 3: one of each
    # a rerun measures nothing more; another seed draws other samples than those recorded
    before = (tmp_path / "data" / "data.jsonl").read_text()
    assert main(argv) == 0 and (tmp_path / "data" / "data.jsonl").read_text() == before
    from neuroshard.types.errors import InputError

    with pytest.raises(InputError, match=r"data.jsonl: line 1: reduce_scatter of \d+ elements, this collection "
                                         r"draws .*another --seed"):
        main(argv + ["--seed", "5"])
    # hosts of 2 ranks: the same samples first, then as many over each host's group, fitted apart; the noise
    # file lost its last line: the job times the missing samples of both files, data first
    noise = (tmp_path / "data" / "noise.jsonl").read_text().splitlines()
    (tmp_path / "data" / "noise.jsonl").write_text("\n".join(noise[:2]) + "\n")
    assert main(argv + ["--local_world_size", "2"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "data" / "data.jsonl").read_text().splitlines()]
    assert (tmp_path / "data" / "data.jsonl").read_text().startswith(before) and len(rows) == 24
    assert all(r["k"] == 2 and r["timing"] == "turns" and len(r["ranks_ms"]) == 4 for r in rows[12:])
    again = [json.loads(x) for x in (tmp_path / "data" / "noise.jsonl").read_text().splitlines()]
    assert [json.loads(x) for x in noise[:2]] == again[:2] and len(again) == 6
    assert [(r["op"], r["numel"], r.get("k")) for r in again] == \
        [(r["op"], r["numel"], r.get("k")) for r in rows[:3] + rows[12:15]]
    model = CollectiveModel.load(tmp_path / "collectives_4.json", 4)
    assert set(model.fits) == {REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE, "reduce_scatter@2", "all_gather@2",
                               "all_reduce@2"}
    assert model.fit_of(REDUCE_SCATTER, 2).samples == 4 and model.fit_of(REDUCE_SCATTER, 2).noise_floor is not None
    # host samples timed before the hosts took turns (no "timing" on the line) are not extended
    lines = (tmp_path / "data" / "data.jsonl").read_text().splitlines()
    old = json.loads(lines[13])
    del old["timing"]
    lines[13] = json.dumps(old)
    (tmp_path / "data" / "data.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"data.jsonl: line 14: all_gather of \d+ elements on groups of 2 ranks was "
                                         r"timed on every host at once.*new --out_dir"):
        main(argv + ["--local_world_size", "2"])
