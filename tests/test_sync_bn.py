"""gluondet.nn.SyncBatchNorm in one process: BatchNorm, hybridized or not (the 2-rank check
is in test_distributed_horovod.py)."""
import numpy as np
import pytest
from mxnet import gluon

from gluondet.nn import SyncBatchNorm
from sync_bn_run import inputs, run


def test_in_one_process_it_is_batch_norm():
    x, dy = inputs()
    ours, theirs = run(SyncBatchNorm, x, dy), run(gluon.nn.BatchNorm, x, dy)
    assert ours.keys() == theirs.keys()
    for key in ours:     # outputs, gradients, running statistics, inference
        assert np.abs(ours[key] - theirs[key]).max() < 1e-4 * max(1, np.abs(theirs[key]).max())


def test_its_parameters_are_batch_norms():
    names = lambda layer: sorted(k.split('_', 1)[1] for k in layer.collect_params())  # noqa
    assert names(SyncBatchNorm(in_channels=3)) == names(gluon.nn.BatchNorm(in_channels=3))
    with pytest.raises(ValueError, match='axis 1'):
        SyncBatchNorm(axis=3)
