"""Shared test fixtures: where the real datasets are, seeds."""
import os

import pytest

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


@pytest.fixture(scope='session')
def cards_root():
    """``shared/datasets/cards`` (LabelImg xml beside images, COCO json in ``coco/``)."""
    return _shared('cards')


def pytest_collection_modifyitems(config, items):
    """The longest first (``@pytest.mark.slow(minutes=N)``, then other slow tests): on several
    workers (``-n``, ``--dist worksteal``) they start at once, and the short ones fill in."""
    def minutes(item):
        marker = item.get_closest_marker('slow')
        return -1 if marker is None else marker.kwargs.get('minutes', 0)
    items.sort(key=minutes, reverse=True)
