"""The learned sharders behind `--alg dreamshard` / `--alg autoshard` (`learned.sharders`, `learned.policy`):
policy flags, loading and its one-line errors, `--alg all` without policies, and out-of-memory tasks
reported as such."""

import argparse

import pytest
import torch

from neuroshard.eval.planning import plan_task, resolve_algs
from neuroshard.learned import autoshard as an
from neuroshard.learned import dreamshard as dn
from neuroshard.learned.policy import load_policy
from neuroshard.planner.registry import add_sharder_args, sharder_options
from neuroshard.planner.shard import shard
from neuroshard.problem import Problem
from neuroshard.types.errors import ConfigError, InputError
from tests.learned.test_dreamshard import MAX_MEM, N, models4, random_tasks, tight_task


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    d = tmp_path_factory.mktemp("policies")
    torch.manual_seed(0)
    dn.DreamShardPolicy(dn.DreamShardNet(), {"ndevices": N, "max_mem": MAX_MEM}).save(d / "ds.pt")
    mean, std = an.feature_stats(random_tasks(0, 2))
    an.AutoShardPolicy(an.AutoShardNet(), {"ndevices": N, "max_mem": MAX_MEM, "feature_mean": mean,
                                           "feature_std": std}).save(d / "as.pt")
    return {"dreamshard_policy": str(d / "ds.pt"), "autoshard_policy": str(d / "as.pt")}


def test_flags_become_options():
    p = argparse.ArgumentParser()
    add_sharder_args(p)

    def policy_options(args):
        return {k: v for k, v in sharder_options(args, None).items() if k.endswith("_policy")}

    assert policy_options(p.parse_args([])) == {}
    args = p.parse_args(["--dreamshard_policy", "a.pt", "--autoshard_policy", "b.pt"])
    assert policy_options(args) == {"dreamshard_policy": "a.pt", "autoshard_policy": "b.pt"}


def test_alg_all_includes_learned_sharders_only_with_their_policy(policies):
    assert "dreamshard" not in resolve_algs("all") and "autoshard" not in resolve_algs("all")
    assert resolve_algs("all", {"dreamshard_policy": "x.pt"})[-2:] == ["dreamshard", "neuroshard_plus"]
    assert resolve_algs("all", policies)[-3:] == ["dreamshard", "autoshard", "neuroshard_plus"]
    assert resolve_algs("dreamshard") == ["dreamshard"]  # named explicitly: it runs, and fails loudly


@pytest.mark.parametrize("alg", ["dreamshard", "autoshard"])
def test_shard_with_a_policy_gives_a_valid_simulated_plan(policies, alg):
    tables = random_tasks(3, 1)[0]
    res = shard(tables, Problem(N, MAX_MEM), models=models4(), alg=alg, **{f"{alg}_policy": policies[f"{alg}_policy"]})
    assert res.cost_ms > 0 and sorted(i for s in res.plan.shards for i in s) == list(range(len(tables)))


@pytest.mark.parametrize("alg", ["dreamshard", "autoshard"])
def test_policy_errors_are_one_line(policies, tmp_path, alg):
    tables = random_tasks(3, 1)[0]
    with pytest.raises(ConfigError, match=f"--{alg}_policy: --alg {alg} needs a trained policy"):
        shard(tables, Problem(N, MAX_MEM), models=models4(), alg=alg)
    with pytest.raises(InputError, match="policy checkpoint not found"):
        load_policy(alg, {f"{alg}_policy": str(tmp_path / "nope.pt")}, Problem(N, MAX_MEM))
    with pytest.raises(ConfigError, match="was trained for 4 devices, the task has 2"):
        load_policy(alg, policies, Problem(2, MAX_MEM))
    with pytest.raises(ConfigError, match="was trained for max_mem 1 GB, the task has 2 GB"):
        load_policy(alg, policies, Problem(N, 2.0))
    other = "autoshard" if alg == "dreamshard" else "dreamshard"
    with pytest.raises(InputError, match=f"expected a {alg} policy checkpoint, found '{other}_policy'"):
        load_policy(alg, {f"{alg}_policy": policies[f"{other}_policy"]}, Problem(N, MAX_MEM))
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(InputError, match=f"not a {alg} policy checkpoint"):
        load_policy(alg, {f"{alg}_policy": str(tmp_path / "junk.pt")}, Problem(N, MAX_MEM))


@pytest.mark.parametrize("alg", ["dreamshard", "autoshard"])
def test_a_task_that_fits_nowhere_is_reported_out_of_memory(policies, alg, tmp_path):
    tables, max_mem = tight_task(9)
    # a policy for this memory cap
    path = tmp_path / f"{alg}.pt"
    policy = load_policy(alg, policies, Problem(N, MAX_MEM))
    type(policy)(policy.net, {**policy.meta, "max_mem": max_mem}).save(path)
    rec = plan_task(0, tables, alg, Problem(N, max_mem), models4(), options={f"{alg}_policy": str(path)})
    assert rec.status == "oom" and rec.plan is None and "fits on no device" in rec.message
