"""`neuroshard.formats.sharding_file`: TorchRec plan files."""

import torch

from neuroshard.formats.sharding_file import read_torchrec_plan
from tests.formats import expect_error


def test_torchrec_plan_reader_refuses_other_files(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"not": "a plan"}, path)
    expect_error(lambda: read_torchrec_plan(path), path, "not a TorchRec ShardingPlan: dict")
    path.write_text("garbage")
    expect_error(lambda: read_torchrec_plan(path), path, "cannot load TorchRec plan")
