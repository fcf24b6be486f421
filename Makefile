# `make demo` and `make test` bootstrap everything from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# test processes: one per core (tests/conftest.py gives each one OpenMP thread)
PYTEST_WORKERS ?= auto

.PHONY: venv demo test test-fast bench bench-torch-venv clean-venv

venv: $(STAMP)

# Two pip steps: Horovod's build looks for an installed mxnet, so it must come second.
$(STAMP): setup.py constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt wheel==0.48.0
	$(PIP) install -q -c constraints.txt -e '.[test,onnx,dali]'
	$(PY) -c 'import horovod.mxnet' 2>/dev/null || \
	  HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
	  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MPI=1 \
	  $(PIP) install -q --no-build-isolation --no-cache-dir -c constraints.txt -e '.[horovod]'
	$(PY) -m pip check
	touch $@

demo: venv
	$(PY) -m gluondet demo

test: venv
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m 'not slow' $(PYTEST_ARGS)

bench: venv
	$(PY) benchmarks/run_all.py

# torchvision for benchmarks/bench_retinanet.py, in an environment of its own (several GB:
# torch's CUDA build; MXNet needs numpy < 1.24, torch brings numpy 2).
bench-torch-venv:
	test -x .venv-torch/bin/python || $(PYTHON) -m venv .venv-torch
	.venv-torch/bin/python -m pip install -q --disable-pip-version-check \
	  torch==2.14.1 torchvision==0.29.1

clean-venv:
	rm -rf $(VENV)
