"""The original release's path of step 1, `gen_dlrm_data.py` (its README runs `python3 tools/gen_dlrm_data.py`).

The script is the pipeline's step at the repository root; this path runs the same `main` (DESIGN.md §2, §11):

    python3 tools/gen_dlrm_data.py --data /path/to/fbgemm_t856_bs65536.pt.gz --out_dir data/dlrm_datasets
"""

import runpy
from pathlib import Path

from neuroshard.cli import run_main

main = runpy.run_path(str(Path(__file__).resolve().parents[1] / "gen_dlrm_data.py"))["main"]

if __name__ == "__main__":
    run_main(main)
