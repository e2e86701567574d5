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

# two workers: the suite is mostly subprocesses (torch imports, torchrun ranks), which two cores overlap
test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

demo: $(STAMP)
	$(PY) -m neuroshard.pipeline --preset quick

clean:
	rm -rf $(VENV) results
