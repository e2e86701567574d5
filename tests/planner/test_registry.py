"""The sharder registry: the paper's algorithms in order, unknown names, each sharder's typed options, and
third-party plug-ins registered through the `neuroshard.sharders` entry-point group."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuroshard.planner.registry import (
    algorithm_names,
    all_settings,
    check_options,
    get_sharder,
    option_names,
    options_for,
)
from neuroshard.planner.search.beam import SearchConfig
from neuroshard.planner.search.plus import PlusConfig
from neuroshard.torchrec.sharder import TorchRecConfig
from neuroshard.types.errors import ConfigError, NeuroShardError

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = """
from neuroshard.types.plan import Plan


def round_robin(tables, problem, ctx):
    shards = [[] for _ in range(problem.ndevices)]
    for i in range(len(tables)):
        shards[i % problem.ndevices].append(i)
    return Plan((), tuple(tuple(s) for s in shards))
"""


def test_registry_lists_paper_algorithms_and_rejects_unknown():
    names = algorithm_names()
    assert names[:6] == ["neuroshard", "random", "dim_greedy", "lookup_greedy", "size_greedy",
                         "size_lookup_greedy"]
    with pytest.raises(NeuroShardError, match="unknown sharding algorithm 'nope'"):
        get_sharder("nope")


def test_each_sharder_takes_its_own_options():
    assert option_names("neuroshard") == ["beam_k", "beam_n", "max_length", "grid_steps", "grid_min", "grid_max",
                                          "dim_fallback", "spread_rounds"]
    assert option_names("dim_greedy") == [] and option_names("torchrec") == ["batch_size", "torchrec_column_shards"]
    assert option_names("dreamshard") == ["dreamshard_policy"]
    # NeuroShard+ runs the others as starts: it takes their options too, and hands each its own
    plus = option_names("neuroshard_plus")
    assert {"plus_starts", "beam_k", "batch_size", "dreamshard_policy", "autoshard_policy"} <= set(plus)
    assert SearchConfig in all_settings() and PlusConfig in all_settings() and TorchRecConfig in all_settings()
    everything = {"beam_k": 2, "plus_tabu": 1, "batch_size": 64, "dreamshard_policy": "p.pt"}
    assert options_for("neuroshard", everything) == {"beam_k": 2}
    assert options_for("size_greedy", everything) == {}
    check_options("neuroshard", {"beam_k": 2})
    with pytest.raises(ConfigError, match=r"beam_kk: not an option of --alg neuroshard \(valid: beam_k, beam_n, "):
        check_options("neuroshard", {"beam_kk": 3})
    with pytest.raises(ConfigError, match=r"beam_k: not an option of --alg size_greedy \(valid: none\)"):
        check_options("size_greedy", {"beam_k": 3})
    with pytest.raises(ConfigError, match="--beam_k: must be >= 1, got 0"):
        check_options("neuroshard", {"beam_k": 0})


def test_entry_point_plugin_appears_in_alg_all(tmp_path):
    """A package installed with an entry point in the group `neuroshard.sharders` (here a
    distribution's metadata on sys.path) is listed and used without editing neuroshard."""
    site = tmp_path / "site"
    (site / "rr_plugin").mkdir(parents=True)
    (site / "rr_plugin" / "__init__.py").write_text(PLUGIN)
    dist = site / "rr_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rr-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[neuroshard.sharders]\nround_robin = rr_plugin:round_robin\n")
    code = ("import json, neuroshard as ns\n"
            "from neuroshard.types.tables import TableConfig\n"
            "t = [TableConfig(100, 1.0, (0.0,) * 17, 8) for _ in range(5)]\n"
            "r = ns.shard(t, ns.Problem(2, 1.0), alg='round_robin')\n"
            "print(json.dumps({'names': ns.algorithm_names(), 'shards': r.plan.to_json()['shards']}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    got = json.loads(out.stdout)
    assert got["names"][-1] == "round_robin" and got["names"][0] == "neuroshard"
    assert got["shards"] == [[0, 2, 4], [1, 3]]


def test_broken_plugin_is_named_in_one_line(tmp_path):
    site = tmp_path / "site"
    dist = site / "broken-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[neuroshard.sharders]\nbad = no_such_module:fn\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    out = subprocess.run([sys.executable, str(ROOT / "eval_simulator.py"), "--alg", "all"], capture_output=True,
                         text=True, env=env, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "sharder plug-in 'bad' (no_such_module:fn) failed to load" in out.stderr.strip().splitlines()[-1]
