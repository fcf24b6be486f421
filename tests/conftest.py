"""Shared test fixtures: where the real datasets are, seeds; thread counts; the learning
tests' record."""
import json
import os
import subprocess
import time

import pytest

# Tests pin MXNet to one OpenMP thread per test process (MKLDNN rounds differently with
# another count, and a learning test's result would then depend on the machine); `make test`
# runs one process per core. The processes the tests start inherit it. Set before anything
# imports gluondet or mxnet.
os.environ.setdefault('OMP_NUM_THREADS', '1')
# A process the tests start that crashes (SIGSEGV, SIGABRT) prints its Python threads' stacks.
os.environ.setdefault('PYTHONFAULTHANDLER', '1')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATASETS = os.environ.get('GLUONDET_SHARED_DATASETS',
                                 os.path.join(os.path.dirname(ROOT), 'shared', 'datasets'))


def _shared(name):
    path = os.path.join(SHARED_DATASETS, name)
    if not os.path.isdir(path):
        pytest.skip('real dataset %r not found at %s (set GLUONDET_SHARED_DATASETS)' % (name, path))
    return path


@pytest.fixture(scope='session')
def bccd_root():
    """``shared/datasets/bccd`` (VOC folder ``BCCD/`` and COCO json in ``coco/``)."""
    return _shared('bccd')


# `make test-learning`'s results, a JSON line each; tests/learning_report.py writes the last of
# each test into model_zoo/README.md
LEARNING_LOG = os.environ.get('GLUONDET_LEARNING_LOG',
                              os.path.join(ROOT, 'runs', 'test-learning.jsonl'))


def _commit():
    """The checkout's commit, ``-dirty`` when tracked files have changed since."""
    def git(*args):
        return subprocess.run(['git'] + list(args), cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    commit = git('rev-parse', '--short', 'HEAD') or 'unknown'
    return commit + ('-dirty' if git('status', '--porcelain', '--untracked-files=no') else '')


@pytest.fixture
def learning_bar(request):
    """``learning_bar(value, bar, metric='mAP')``: record a learning test's result (its
    minutes so far, the date, the commit) in `LEARNING_LOG`, then assert ``value >= bar``."""
    start = time.time()

    def check(value, bar, metric='mAP'):
        line = dict(test=request.node.nodeid, metric=metric, value=round(float(value), 4),
                    bar=bar, minutes=round((time.time() - start) / 60, 1),
                    date=time.strftime('%Y-%m-%d'), commit=_commit())
        os.makedirs(os.path.dirname(LEARNING_LOG), exist_ok=True)
        with open(LEARNING_LOG, 'a') as f:
            f.write(json.dumps(line) + '\n')
        assert value >= bar, line
    return check


@pytest.fixture(scope='session')
def cards_root():
    """``shared/datasets/cards`` (LabelImg xml beside images, COCO json in ``coco/``)."""
    return _shared('cards')


def pytest_collection_modifyitems(config, items):
    """The longest first (``@pytest.mark.slow(minutes=N)`` or ``learning(minutes=N)``, then
    other slow tests), and on
    several workers (``-n``, ``--dist worksteal``) each worker's share starts with its own
    long tests: the scheduler hands out contiguous equal shares, so sorted alone they all
    fell to the first worker and ran one after the other beside the rest of the suite."""
    def minutes(item):
        marker = item.get_closest_marker('learning') or item.get_closest_marker('slow')
        return -1 if marker is None else marker.kwargs.get('minutes', 0)
    items.sort(key=minutes, reverse=True)
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    longest = [item for item in items if minutes(item) > 0]
    if workers < 2 or len(longest) < 2:
        return
    rest = items[len(longest):]
    order, remaining = [], len(items)
    for k in range(workers):            # the shares of xdist's WorkStealingScheduling
        share = remaining // (workers - k)
        remaining -= share
        own = longest[k::workers]
        order += own + rest[:share - len(own)]
        del rest[:share - len(own)]
    items[:] = order + rest
