"""gluondet.nn.SyncBatchNorm in one process: BatchNorm, hybridized or not (the 2-rank check
is in test_distributed_horovod.py)."""
import numpy as np
import pytest
from mxnet import gluon

from gluondet.errors import UserError
from gluondet.nn import SyncBatchNorm
from sync_bn_run import inputs, run


def test_in_one_process_it_is_batch_norm():
    x, dy = inputs()
    ours, theirs = run(SyncBatchNorm, x, dy), run(gluon.nn.BatchNorm, x, dy)
    assert ours.keys() == theirs.keys()
    for key in ours:     # outputs, gradients, running statistics, inference
        assert np.abs(ours[key] - theirs[key]).max() < 1e-4 * max(1, np.abs(theirs[key]).max())


def test_the_engine_hybridizes_it_with_static_alloc_unless_frozen():
    """Without static_alloc MXNet 1.9 handed its custom operator freed gradient buffers."""
    from gluondet.engine import TrainConfig
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(3), gluon.nn.HybridSequential())
    net[1].add(SyncBatchNorm(in_channels=3))
    TrainConfig(static_alloc=False).hybridize_net(net)
    assert dict(net._flags)['static_alloc'] and dict(net._flags)['static_shape']
    net[1][0]._kwargs['use_global_stats'] = True                  # frozen: MXNet's operator
    TrainConfig(static_alloc=False).hybridize_net(net)
    assert not dict(net._flags)['static_alloc']


def test_its_parameters_are_batch_norms():
    names = lambda layer: sorted(k.split('_', 1)[1] for k in layer.collect_params())  # noqa
    assert names(SyncBatchNorm(in_channels=3)) == names(gluon.nn.BatchNorm(in_channels=3))
    with pytest.raises(ValueError, match='axis 1'):
        SyncBatchNorm(axis=3)


def test_the_norm_layer_for_the_devices_of_training():
    import mxnet as mx
    from gluondet.nn import sync_norm_layer
    assert sync_norm_layer([mx.cpu()]) == (SyncBatchNorm, {})
    assert sync_norm_layer([mx.gpu(0), mx.gpu(1)]) == (gluon.contrib.nn.SyncBatchNorm,
                                                       {'num_devices': 2})
    with pytest.raises(ValueError, match="2 CPU contexts: MXNet's SyncBatchNorm hangs"):
        sync_norm_layer([mx.cpu(0), mx.cpu(1)])


def test_synchronized_batch_norm_refuses_the_parameter_server():
    import mxnet as mx
    from gluondet.engine import KVStoreRuntime
    from gluondet.nn import sync_norm_layer
    runtime = KVStoreRuntime((mx.cpu(),), rank=0, world_size=2, kv_store='dist_sync')
    with runtime.activated(), pytest.raises(ValueError, match='runs on Horovod'):
        sync_norm_layer([mx.cpu()])


def test_the_scripts_refuse_syncbn_on_the_parameter_server_in_one_line(monkeypatch):
    import argparse
    from gluondet.train import flags
    monkeypatch.setenv('DMLC_ROLE', 'worker')
    args = argparse.Namespace(syncbn=True, kv_store='dist_sync', horovod=False, gpus='',
                              save_prefix='')
    with pytest.raises(UserError, match='--syncbn synchronizes BatchNorm across Horovod'):
        flags.check_args(args)
