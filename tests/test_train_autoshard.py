"""train_autoshard.py end to end on a tiny dataset: checkpoint (with feature statistics), curve and config;
the policy then used by eval_simulator.py next to DreamShard's."""

import pytest
import torch

from tests.test_train_dreamshard import (  # noqa: F401
    check_outputs,
    common,
    eval_sim,
    load_script,
    workspace,
)


def test_train_then_evaluate_with_the_policy(workspace, capsys):  # noqa: F811
    d = workspace
    argv = common(d, "as.pt", "--total-steps", "200", "--batch-size", "2", "--unroll-length", "25",
                  "--num-cost-updates", "2", "--cost_batch_size", "16")
    assert load_script("train_autoshard").main(argv) == 0
    assert "autoshard: trained in" in capsys.readouterr().out
    config = check_outputs(d, "as", "autoshard", rows=4)
    assert config["config"]["total_steps"] == 200
    meta = torch.load(d / "as.pt", weights_only=True)["meta"]
    assert meta["ndevices"] == 2 and meta["max_mem"] == 1.0 and len(meta["feature_mean"]) == 3
    if (d / "ds.pt").exists():
        summary = eval_sim(d, "--autoshard_policy", str(d / "as.pt"), "--dreamshard_policy", str(d / "ds.pt"))
        assert [r["alg"] for r in summary["algorithms"]][-3:] == ["dreamshard", "autoshard", "neuroshard_plus"]
    else:
        summary = eval_sim(d, "--autoshard_policy", str(d / "as.pt"))
        assert [r["alg"] for r in summary["algorithms"]][-2:] == ["autoshard", "neuroshard_plus"]
    assert {r["alg"]: r for r in summary["algorithms"]}["autoshard"]["valid"] == 3


def test_bad_setting_is_refused_before_training(workspace):  # noqa: F811
    from neuroshard.types.errors import ConfigError

    with pytest.raises(ConfigError, match="--discounting: must be <= 1"):
        load_script("train_autoshard").main(common(workspace, "x.pt", "--discounting", "2"))
