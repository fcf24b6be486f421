# `make demo` and `make test` bootstrap everything from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# test processes: one per core (tests/conftest.py gives each one OpenMP thread)
PYTEST_WORKERS ?= auto
# The MXNet build: mxnet (CPU) or mxnet-cu112 (CUDA 11.2 GPUs: docs/install.md). A venv keeps
# the build it was made with (recorded in $(VENV)/.mxnet before installing, so that a failed
# build is resumed with the same one; venvs older than the choice are CPU ones); another one
# needs `make clean-venv`.
MXNET_BUILT := $(shell cat $(VENV)/.mxnet 2>/dev/null || { test -x $(PY) && echo mxnet; })
MXNET ?= $(or $(MXNET_BUILT),mxnet)
MXNET_EXTRA := $(if $(filter mxnet,$(MXNET)),cpu,$(if $(filter mxnet-cu112,$(MXNET)),cu112))
CONSTRAINTS := $(if $(filter cu112,$(MXNET_EXTRA)),constraints-cu112.txt,constraints.txt)
# Horovod's build imports mxnet, which finds the CUDA wheels' libraries only through this;
# against mxnet-cu112 it also needs a CUDA toolkit, which a GPU machine may lack: optional.
HOROVOD_ENV := $(if $(filter cu112,$(MXNET_EXTRA)),LD_LIBRARY_PATH="$$($(PY) -c \
  'import gluondet._mxnet as m; print(m.ld_library_path())')")
HOROVOD_FAILED := $(if $(filter cu112,$(MXNET_EXTRA)),|| echo 'make venv: no Horovod: built \
  against mxnet-cu112 it needs a CUDA toolkit (docs/install.md)')

.PHONY: venv demo test test-fast test-learning test-repeat test-two-hosts lint docs bench bench-torch-venv clean-venv \
  check-mxnet

venv: $(STAMP)

# Two pip steps: Horovod's build looks for an installed mxnet, so it must come second.
$(STAMP): setup.py $(sort constraints.txt $(CONSTRAINTS)) Makefile | check-mxnet
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	echo $(MXNET) > $(VENV)/.mxnet
	$(PIP) install -q -c $(CONSTRAINTS) wheel==0.48.0
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[$(MXNET_EXTRA),test,dali,docs,openvino]'
	$(PY) -c 'import gluondet, horovod.mxnet' 2>/dev/null || \
	  HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
	  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MPI=1 $(HOROVOD_ENV) \
	  $(PIP) install -q --no-build-isolation --no-cache-dir -c $(CONSTRAINTS) -e '.[horovod]' \
	  $(HOROVOD_FAILED)
	$(PY) -m pip check
	touch $@

check-mxnet:
	@test -n '$(MXNET_EXTRA)' || { \
	  echo 'MXNET=$(MXNET): choose mxnet (CPU) or mxnet-cu112 (CUDA 11.2)'; exit 2; }
	@test -z '$(MXNET_BUILT)' -o '$(MXNET_BUILT)' = '$(MXNET)' || { echo '$(VENV) has' \
	  '$(MXNET_BUILT), not $(MXNET): make clean-venv first (or leave out MXNET=)'; exit 2; }

demo: venv
	$(PY) -m gluondet demo

test: venv
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m 'not slow and not learning' \
	  $(PYTEST_ARGS)

# The full recipes to their mAP (each demo recipe to >= 0.9, the cards and BCCD recipes), not in
# `make test`: hours on 2 cores; run it before resolving what touches training or a recipe. The
# results, failed ones too, go into model_zoo/README.md's table (tests/learning_report.py);
# PYTEST_ARGS='-k demo' runs some of them and keeps the others' rows.
test-learning: venv
	rm -f runs/test-learning.jsonl
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -m learning $(PYTEST_ARGS); \
	  status=$$?; $(PY) tests/learning_report.py && exit $$status

# pyflakes, pycodestyle and bugbear over the tree (ruff.toml); .ci/run runs it before the tests
lint: venv
	$(VENV)/bin/ruff check .

# The test files whose native crashes came and went (issue 35), REPEAT runs in a row on 2
# workers; the count of failed runs at the end
REPEAT ?= 20
REPEAT_FILES ?= tests/test_distributed_horovod.py tests/test_distributed_kvstore.py \
  tests/test_two_hosts.py tests/test_stop_signals.py tests/test_faster_rcnn.py \
  tests/test_faster_rcnn_task.py tests/test_train_faster_rcnn_script.py
test-repeat: venv
	failed=0; for run in $$(seq $(REPEAT)); do $(PY) -m pytest -n 2 --dist worksteal -q \
	  -p no:cacheprovider $(REPEAT_FILES) $(PYTEST_ARGS) || failed=$$((failed + 1)); \
	  echo "test-repeat: run $$run: $$failed failed so far"; done; \
	  echo "test-repeat: $$failed of $(REPEAT) runs failed"; test $$failed = 0

# Distributed training across two hosts made of network namespaces, alone (also in `make test`):
# root, `ip netns` and an sshd (apt-get install openssh-server), else skipped with the reason.
test-two-hosts: venv
	$(PY) -m pytest -n 0 -rs tests/test_two_hosts.py $(PYTEST_ARGS)

# The documentation site, offline: the generated pages (CLI reference, model zoo table) are
# rewritten from the code, then mkdocs builds site/ (mkdocs.yml); any warning fails it.
docs: venv
	$(PY) -m gluondet.docgen
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: venv
	$(PY) benchmarks/run_all.py
	for backend in mxnet onnxruntime; do $(PY) -m gluondet benchmark \
	  --model ssd_300_mobilenet0.25_voc --backend $$backend --batch-sizes 1,8 \
	  --output runs/benchmark/ssd_300_mobilenet0.25_voc_$$backend.json || exit 1; done

# torchvision for benchmarks/bench_retinanet.py, in an environment of its own (several GB:
# torch's CUDA build; MXNet needs numpy < 1.24, torch brings numpy 2).
bench-torch-venv:
	test -x .venv-torch/bin/python || $(PYTHON) -m venv .venv-torch
	.venv-torch/bin/python -m pip install -q --disable-pip-version-check \
	  torch==2.14.1 torchvision==0.29.1

clean-venv:
	rm -rf $(VENV)
