# Two commands: `make demo` and `make test`. Each sets up .venv with pinned
# dependencies (torch, fbgemm-gpu-cpu, torchrec; skipped when already installed) and then runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test setup clean

setup: $(STAMP)

# torchrec is installed with --no-deps: its metadata names the CUDA fbgemm-gpu (see requirements-torchrec.txt).
$(STAMP): requirements.txt requirements-torchrec.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-torchrec.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# three workers on two cores: much of the suite is subprocesses (torch imports, torchrun ranks) waiting on
# each other, and a third worker fills those waits (docs/EXPERIMENTS.md, the entry on the suite's time)
test: $(STAMP)
	$(PY) -m pytest -q -n 3 tests

demo: $(STAMP)
	$(PY) -m neuroshard.pipeline --preset quick

clean:
	rm -rf $(VENV) results
