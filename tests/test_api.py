"""The public API: the README's "Use as a library" example runs as written, and `ns.shard` behaves
as documented (every algorithm through one call, validated plans, out-of-memory raised)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import neuroshard as ns
from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.dataset import write_table_configs
from neuroshard.formats.task_file import write_tasks
from neuroshard.planner.costs.cost_models import save_model
from neuroshard.planner.costs.nets import linear_comm_model, linear_compute_model
from neuroshard.planner.registry import required_option
from neuroshard.types.tables import Task

ROOT = Path(__file__).resolve().parents[1]


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use as a library", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _hand_models(n: int) -> ns.CostModels:
    """compute = 0.5 + 0.01 x dim sum; comm = 0.1 + 0.02 x dims (+ 0.5 x sleep for fw), ms."""
    return ns.CostModels(linear_compute_model(0.01, 0.5),
                         linear_comm_model("fw", n, np.hstack([0.02 * np.eye(n), 0.5 * np.eye(n)]), np.full(n, 0.1)),
                         linear_comm_model("bw", n, 0.02 * np.eye(n), np.full(n, 0.1)))


def test_readme_example_runs_as_written(tmp_path):
    """The example reads make demo's outputs: build them small, in the same layout."""
    quick = tmp_path / "results" / "quick"
    models = _hand_models(4)
    for name, m in (("compute.pt", models.compute), ("comm_4_fw.pt", models.fw), ("comm_4_bw.pt", models.bw)):
        save_model(m, quick / "models" / name)
    configs = generate_synthetic(SyntheticSpec(num_tables=8, batch_size=64, max_rows=100_000), progress=False)[0]
    write_table_configs(quick / "dataset" / "table_configs.json", configs)
    write_tasks(quick / "tasks" / "data.txt", [Task((0, 1, 2, 3, 4, 5), (64, 32, 16, 128, 8, 64))])
    out = subprocess.run([sys.executable, "-c", _readme_example()], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("neuroshard: ") and lines[1].startswith("size_lookup_greedy: ")
    assert [line.startswith('{"table": ') or line.startswith("{'table': ") for line in lines[2:5]] == [True] * 3
    assert lines[5].startswith("per-device ms: [")


def test_every_algorithm_through_one_call_with_its_simulated_cost():
    models = _hand_models(2)
    tables = [ns.TableConfig(1000, 1.0, ns.DEFAULT_BINS, d) for d in (16, 32, 8)]
    for alg in ns.algorithm_names():
        if required_option(alg):  # the learned sharders need a trained policy (tests/learned/test_sharders.py)
            continue
        if alg == "torchrec_full":  # replicates these small tables: a plan for TorchRec's runtime, not the paper's
            with pytest.raises(ns.InvalidPlanError, match="table 0 is data_parallel: the paper runtime's cost models"):
                ns.shard(tables, ns.Problem(2, 1.0), models=models, alg=alg)
            continue
        r = ns.shard(tables, ns.Problem(2, 1.0), models=models, alg=alg)
        assert r.alg == alg and r.search_ms >= 0 and [v["table"] for v in r.view] == [0, 1, 2]
        assert r.cost_ms == pytest.approx(max(r.breakdown.total))
    # the neuroshard plan by hand: dims 32 | 16 + 8 balances compute (0.82 vs 0.74 ms) and comm
    r = ns.shard(tables, ns.Problem(2, 1.0), models=models, alg="neuroshard", max_length=0)
    assert sorted(map(sorted, r.plan.shards)) == [[0, 2], [1]]
    # without models: a validated plan, no simulated cost
    r = ns.shard(tables, ns.Problem(2, 1.0), alg="dim_greedy")
    assert r.cost_ms is None and r.breakdown is None and r.plan.ndevices == 2
    # with models but simulated=False (a caller that costs the plan itself): the same plan, not costed
    r2 = ns.shard(tables, ns.Problem(2, 1.0), models=models, alg="dim_greedy", simulated=False)
    assert r2.plan == r.plan and r2.cost_ms is None and r2.breakdown is None


def test_errors_are_typed():
    big = [ns.TableConfig(2**28, 1.0, ns.DEFAULT_BINS, 4)]  # 4 GB at dim 4, cannot be split
    with pytest.raises(ns.OutOfMemoryError):
        ns.shard(big, ns.Problem(2, 1.0), alg="size_greedy")
    with pytest.raises(ns.NeuroShardError, match="needs the compute, forward and backward cost models"):
        ns.shard([ns.TableConfig(100, 1.0, ns.DEFAULT_BINS, 8)], ns.Problem(2, 1.0), alg="neuroshard")
    with pytest.raises(ns.NeuroShardError, match="unknown sharding algorithm 'nope'"):
        ns.shard([], ns.Problem(2, 1.0), alg="nope")
    with pytest.raises(ns.InvalidPlanError, match="table 0 has no dim"):
        ns.shard([ns.TableConfig(100, 1.0, ns.DEFAULT_BINS)], ns.Problem(2, 1.0), alg="random")
    # an option the algorithm does not take is an error that lists the ones it does, never ignored
    tables = [ns.TableConfig(100, 1.0, ns.DEFAULT_BINS, 8)]
    with pytest.raises(ns.ConfigError, match=r"beam_kk: not an option of --alg neuroshard \(valid: beam_k, "):
        ns.shard(tables, ns.Problem(2, 1.0), models=_hand_models(2), beam_kk=3)


def test_cost_models_load_checks_the_device_count(tmp_path):
    models = _hand_models(2)
    for name, m in (("compute.pt", models.compute), ("comm_2_fw.pt", models.fw), ("comm_2_bw.pt", models.bw)):
        save_model(m, tmp_path / name)
    assert ns.CostModels.load(tmp_path, ndevices=2).ndevices == 2
    with pytest.raises(ns.InputError, match="comm_4_fw.pt"):
        ns.CostModels.load(tmp_path, ndevices=4)
    with pytest.raises(ns.ConfigError, match="forward model is for 2 devices, backward for 3"):
        ns.CostModels(models.compute, models.fw, linear_comm_model("bw", 3, np.eye(3), np.zeros(3)))
    # the collective model beside them is loaded with them; one for other ranks is refused
    from neuroshard.planner.costs.collective_model import CollectiveFit, CollectiveModel

    assert ns.CostModels.load(tmp_path, ndevices=2).collectives is None
    CollectiveModel(2, {"all_reduce": CollectiveFit("linear", [0.1, 1.0], 8)}).save(tmp_path / "collectives_2.json")
    loaded = ns.CostModels.load(tmp_path, ndevices=2)
    assert loaded.collectives.predict("all_reduce", 2_000_000) == pytest.approx(2.1)
    with pytest.raises(ns.ConfigError, match="the collective model is for 3 ranks, the comm models for 2"):
        ns.CostModels(models.compute, models.fw, models.bw, collectives=CollectiveModel(3, {}))
    # the batch the collectives are priced at: the planning batch, else the compute data's, else an error
    assert loaded.at_batch(512).global_batch == 512
    with pytest.raises(ns.ConfigError, match="the compute model does not record the batch of its data"):
        loaded.global_batch


def test_an_empty_table_list_is_a_zero_cost_plan():
    """Issue 24: with no table anywhere nothing is sent, so the comm models' few ms for an empty all-to-all
    are not a cost; a device without tables in a plan with tables keeps its comm (it still receives)."""
    models = _hand_models(2)
    for alg in ("neuroshard", "neuroshard_plus", "dim_greedy", "random"):
        r = ns.shard([], ns.Problem(2, 1.0), models=models, alg=alg)
        assert r.plan.shards == ((), ()) and r.cost_ms == 0.0
        assert r.breakdown.total == [0.0, 0.0] and r.breakdown.fw_comm == [0.0, 0.0]
    one = ns.shard([ns.TableConfig(1000, 1.0, ns.DEFAULT_BINS, 8)], ns.Problem(2, 1.0), models=models, alg="dim_greedy")
    empty = [r for r, s in enumerate(one.plan.shards) if not s]
    assert empty and one.breakdown.compute[empty[0]] == 0.0 and one.breakdown.bw_comm[empty[0]] > 0


def test_the_call_before_problem_plans_as_the_call_with_one_with_a_deprecation_warning():
    """`shard(tables, ndevices=, max_mem_gb=, seed=)` (the release's README until 77a2aaf introduced `Problem`),
    by keyword or by position, is the call with that problem."""
    models = _hand_models(2)
    tables = [ns.TableConfig(1000, 1.0, ns.DEFAULT_BINS, d) for d in (16, 32, 8)]
    with pytest.warns(DeprecationWarning, match=r"shard\(tables, ndevices=2, max_mem_gb=1.0, seed=3\) is deprecated; "
                                                r"use shard\(tables, problem=ns.Problem\(ndevices=2, max_mem=1.0, "
                                                r"seed=3\)\)"):
        old = ns.shard(tables, ndevices=2, max_mem_gb=1.0, models=models, alg="neuroshard", seed=3, beam_k=3)
    new = ns.shard(tables, ns.Problem(2, 1.0, seed=3), models=models, alg="neuroshard", beam_k=3)
    assert (old.plan, old.cost_ms, old.view) == (new.plan, new.cost_ms, new.view)
    with pytest.warns(DeprecationWarning, match="seed=0"):
        by_position = ns.shard(tables, 2, 1.0, models, "dim_greedy")
    # dim_greedy by hand: dims 32, 16, 8 in turn to the device with the smaller dim sum: table 1 | tables 0, 2
    assert by_position.plan.shards == ((1,), (0, 2)) and by_position.alg == "dim_greedy"
    with pytest.warns(DeprecationWarning), pytest.raises(ns.OutOfMemoryError):
        ns.shard(tables, ndevices=2, max_mem_gb=1e-6, alg="dim_greedy")
    with pytest.raises(TypeError, match="max_mem_gb"):
        ns.shard(tables, ndevices=2, alg="dim_greedy")


def test_sharders_and_keywords_of_register_before_problem(monkeypatch):
    """A plug-in of the signature before `Problem`, `fn(tables, ndevices, max_mem_gb, ctx)` with `ctx.seed`, plans
    through `ns.shard` (warned when registered); `register(requires=)` is `requires_option=`."""
    from neuroshard.planner import registry

    ns.algorithm_names()  # the package's own sharders registered before the registry is copied
    for name in ("_REGISTRY", "_SETTINGS", "_OPTIONS"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    seen = []

    def round_robin(tables, ndevices, max_mem_gb, ctx):
        seen.append((ndevices, max_mem_gb, ctx.seed))
        return ns.Plan((), tuple(tuple(range(d, len(tables), ndevices)) for d in range(ndevices)))

    with pytest.warns(DeprecationWarning, match=r"sharder 'old_round_robin' takes \(tables, ndevices, max_mem_gb, "
                                                r"ctx\), which is deprecated"):
        ns.register("old_round_robin")(round_robin)
    tables = [ns.TableConfig(1000, 1.0, ns.DEFAULT_BINS, 8)] * 3
    assert ns.shard(tables, ns.Problem(2, 1.0, seed=5), alg="old_round_robin").plan.shards == ((0, 2), (1,))
    assert seen == [(2, 1.0, 5)]
    with pytest.raises(ns.ConfigError, match="takes one memory size for every device"):
        ns.shard(tables, ns.Problem(2, (1.0, 2.0)), alg="old_round_robin")
    with pytest.warns(DeprecationWarning, match=r"use register\(requires_option=...\)"):
        ns.register("old_policy_sharder", requires="old_policy")(lambda tables, problem, ctx: None)
    assert required_option("old_policy_sharder") == "old_policy"
    with pytest.raises(TypeError, match=r"learned=True\) is gone: .* register\(requires_option='<option>'\)"):
        ns.register("old_learned", learned=True)
