"""`python -m neuroshard.pipeline`: run the whole pipeline at a preset (see `neuroshard.pipeline.run`)."""

from neuroshard.cli import run_main
from neuroshard.pipeline.run import main

run_main(main)
