"""The original release's path of step 2, `gen_tasks.py` (its README runs `python3 tools/gen_tasks.py`).

The script is the pipeline's step at the repository root; this path runs the same `main` (DESIGN.md §2, §11):

    python3 tools/gen_tasks.py --data_dir data/dlrm_datasets --out_dir data/tasks/4_gpu
"""

import runpy
from pathlib import Path

from neuroshard.cli import run_main

main = runpy.run_path(str(Path(__file__).resolve().parents[1] / "gen_tasks.py"))["main"]

if __name__ == "__main__":
    run_main(main)
