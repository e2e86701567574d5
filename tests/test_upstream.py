"""The original release's README run as its user runs it (issue 85): the eight `python3 ...` commands of its steps
2-7 ("Run on the DLRM Dataset"), in order, from one fresh folder, on a tiny dataset file in the public layout.

Each command is the README's as written, plus only the flags the README itself says to change (step 2: "change
`--data` argument to the path of the downloaded DLRM dataset") and size flags that keep each step to seconds on a
CPU (how many tasks and samples, warm-up and timed iterations, epochs). Every path is left at its default, so
each step finds the one before's output where the release put it: data/dlrm_datasets, data/tasks/4_gpu,
data/cost_data/compute, data/cost_data/comm_4, models/. The two `tools/` commands start a real interpreter on
the path the README names; the others run their script's `main` in this process (`tests.scripts.run_script`).
"""

import json
import os
import shlex
import subprocess
import sys

import pytest
import torch

from neuroshard.data.synthetic import SyntheticSpec, generate_synthetic
from neuroshard.formats.cost_data import read_comm_data, read_compute_data
from neuroshard.formats.dataset import read_dataset, write_public_dlrm
from neuroshard.formats.plan_file import read_plans
from neuroshard.formats.task_file import read_tasks
from tests.scripts import ROOT, run_script

# (the README's command, the flags added here): steps 2, 3, 4 (two), 5 (two), 6, 7
README = [
    ("python3 tools/gen_dlrm_data.py", ["--data", "fbgemm_t12_bs64.pt"]),
    ("python3 tools/gen_tasks.py", ["--data_size", "2", "--T_range", "3,4"]),
    ("python3 collect_compute_cost_data.py", ["--data_size", "6", "--warmup", "1", "--iters", "1"]),
    ("python3 collect_comm_cost_data.py", ["--data_size", "3", "--T_range", "3,4", "--warmup", "1", "--iters", "1"]),
    ("python3 train_compute_cost_model.py", ["--epochs", "2"]),
    ("python3 train_comm_cost_model.py", ["--epochs", "2"]),
    ("python3 eval_simulator.py --alg neuroshard", []),
    ("python3 eval.py --alg neuroshard", ["--warmup", "1", "--iters", "1"]),
]


def _public_file(path, tables: int, batch: int) -> None:
    """A dataset file in the public release's layout ((indices, offsets, lengths), `tables` x `batch` bags), of
    synthetic lookups."""
    _, _, idx, off = generate_synthetic(SyntheticSpec(num_tables=tables, batch_size=batch, max_rows=5000, seed=3),
                                        progress=False)
    lengths = torch.stack([o[1:] - o[:-1] for o in off]).to(torch.int64)
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.flatten(), 0)
    write_public_dlrm(path, torch.cat(idx).to(torch.int64), offsets, lengths)


def _run(command: str, added: list[str], cwd) -> tuple[int, str, str]:
    python, script, *flags = shlex.split(command)
    assert python == "python3"
    if script.startswith("tools/"):
        proc = subprocess.run([sys.executable, script if os.path.isabs(script) else str(ROOT / script), *flags,
                               *added], cwd=cwd, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        return proc.returncode, proc.stdout, proc.stderr
    res = run_script(ROOT / script, [*flags, *added], cwd)
    return res.returncode, res.stdout, res.stderr


@pytest.mark.heavy(30)
def test_the_original_readme_runs_as_written(tmp_path):
    _public_file(tmp_path / "fbgemm_t12_bs64.pt", 12, 64)
    out = {}
    for command, added in README:
        code, stdout, stderr = _run(command, added, tmp_path)
        assert code == 0, f"{command}: exit {code}\n{stderr[-2000:]}"
        assert "Traceback" not in stderr and "warning:" not in stderr, f"{command}\n{stderr[-2000:]}"
        out[command] = stdout
    data = tmp_path / "data"
    # step 2: the file's 12 tables and its batch, where the release wrote them
    ds = read_dataset(data / "dlrm_datasets")
    assert len(ds.configs) == 12 and ds.batch_size == 64
    # step 3: 2 tasks of 3 or 4 of those tables, fitting 4 devices of 4 GB (the defaults)
    tasks = read_tasks(data / "tasks" / "4_gpu" / "data.txt", num_tables=12)
    assert len(tasks) == 2 and all(3 <= len(t.table_ids) <= 4 for t in tasks)
    # step 4: 6 compute samples and 3 comm samples for the 4 devices of the defaults
    _, compute = read_compute_data(data / "cost_data" / "compute")
    assert len(compute) == 6 and all(s.cost > 0 for s in compute)
    assert len(read_comm_data(data / "cost_data" / "comm_4", ndevices=4)) == 3
    # step 5: the three models at the paths steps 6 and 7 read by default
    for name in ("compute.pt", "comm_4_fw.pt", "comm_4_bw.pt"):
        assert (tmp_path / "models" / name).stat().st_size > 0
    # step 6: NeuroShard's plans of both tasks, estimated
    sim = out["python3 eval_simulator.py --alg neuroshard"]
    assert "[neuroshard]" in sim and "Valid 2 / 2" in sim
    # step 7: the same plans measured on the 4 (CPU) ranks
    results = read_plans(tmp_path / "results" / "eval" / "results.json")
    assert [(r.task, r.alg) for r in results] == [(0, "neuroshard"), (1, "neuroshard")]
    assert all(r.measured is not None and len(r.measured.compute) == 4 for r in results)
    assert json.loads((tmp_path / "results" / "eval" / "config.json").read_text())["algs"] == ["neuroshard"]
