"""Faster R-CNN with trainable, optionally synchronized BatchNorm: GluonCV's
``faster_rcnn_fpn_syncbn_*`` (architecture, checkpoint parity) and ``--norm-layer syncbn``."""
import os
import re

import mxnet as mx
import numpy as np
import pytest

from gluondet.errors import UserError
from mxnet import autograd
from mxnet.gluon import nn

import gluoncv

from gluondet.data import DemoDetection
from gluondet.deploy.compare import compare_detections
from gluondet.model_zoo import get_model, get_model_info
from gluondet.nn import SyncBatchNorm
from gluondet.tasks import FasterRCNNTask
from script_runs import run_cpu_command
from test_faster_rcnn import masked_gluoncv_roialign  # noqa: F401 (a fixture)

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'scripts',
                      'train_faster_rcnn.py')

NAME = 'faster_rcnn_fpn_syncbn_resnet50_v1b_coco'


def _norms(block):
    found = []

    def visit(child):
        if isinstance(child, nn.BatchNorm):
            found.append(child)
        for grandchild in child._children.values():  # pylint: disable=protected-access
            visit(grandchild)
    visit(block)
    return found


def test_architecture_and_settings_are_gluoncvs():
    ref = gluoncv.model_zoo.get_model(NAME, pretrained_base=False, num_devices=1)
    net = get_model(NAME, pretrained_base=False)
    assert (net.short, net.max_size) == (ref.short, ref.max_size) == ((640, 800), 1333)
    info = get_model_info(NAME)
    assert info.data_shape == (800, 1333)     # GluonCV evaluates at 800
    assert not info.has_weights               # GluonCV 0.10.5 publishes none
    assert (net.nms_thresh, net.nms_topk, net.post_nms) == (ref.nms_thresh, ref.nms_topk,
                                                            ref.post_nms) == (0.5, -1, -1)
    rpn = ref.rpn
    assert (net.proposal.train_pre_nms, net.proposal.counts(True)[1], net.proposal.test_pre_nms,
            net.proposal.counts(False)[1], net.proposal.min_size, net.proposal.clip) == (
        rpn._train_pre_nms, rpn._train_post_nms, rpn._test_pre_nms, rpn._test_post_nms,
        rpn.region_proposer._min_size, rpn.region_proposer._box_decoder._clip)
    assert net.rpn_head.conv1[0]._channels == rpn.rpn_head.conv1[0]._channels == 256
    assert (net.sampler.num_sample, net.roi_size, net.strides) == (
        ref._num_sample, tuple(ref._roi_size), ref._strides)
    # box head: 3x3 convolution (no bias), BatchNorm, ReLU, dense 1024, ReLU
    assert [type(b).__name__ for b in ref.box_features] == [
        'Conv2D', 'SyncBatchNorm', 'Activation', 'Dense', 'Activation']
    assert [type(b).__name__ for b in net.box_features] == [
        'Conv2D', 'BatchNorm', 'Activation', 'Dense', 'Activation']
    head = net.box_features
    assert (head[0]._channels, head[0]._kwargs['kernel'], head[0].bias) == (256, (3, 3), None)
    assert head[3]._units == ref.box_features[3]._units == 1024
    # trainable BatchNorm everywhere; the FPN's with GluonCV's symbol SyncBatchNorm's eps
    # 1e-3, after convolutions without bias
    assert not [b for b in _norms(net) if b._kwargs['use_global_stats']]
    fpn_norms = _norms(net.fpn)
    assert len(fpn_norms) == 9 and len(_norms(net.backbone)) == 53
    assert all(b._kwargs['eps'] == 1e-3 for b in fpn_norms)
    assert all(c.bias is None for c in list(net.fpn.laterals) + list(net.fpn.outputs))
    assert list(net.collect_train_params().keys()) == list(net.collect_params().keys())


def test_gluoncv_syncbn_params_load_and_give_gluoncv_detections(tmp_path,
                                                                masked_gluoncv_roialign):
    """Every norm parameter and statistic random (each mapped key matters), GluonCV's FPN
    gamma too (which it ignores)."""
    x = mx.nd.random.uniform(-2, 2, shape=(1, 3, 224, 288))
    mx.random.seed(0)
    ref = gluoncv.model_zoo.get_model(NAME, pretrained_base=False, num_devices=1)
    ref.initialize()
    ref(x)
    for p in ref.collect_params('.*(gamma|beta|running|moving).*').values():
        scale = p.name.endswith(('gamma', '_var'))
        p.set_data(mx.nd.random.uniform(0.9, 1.1, p.shape) if scale
                   else mx.nd.random.normal(0, 0.02, p.shape))
    for p in ref.class_predictor.collect_params().values():   # confident, varied classes
        p.set_data(mx.nd.random.normal(0, 0.05, p.shape))
    path = str(tmp_path / 'gluoncv.params')
    ref.save_parameters(path)
    net = get_model(NAME, pretrained_base=False)
    net.load_parameters(path)
    net.hybridize()
    expected, result = ref(x), net(x)
    valid = int((expected[0] >= 0).sum().asscalar())
    assert valid > 50
    comparison = compare_detections(expected, result, min_score=0.0, score_tol=1e-4,
                                    box_tol=1e-2)
    assert comparison.ok and comparison.compared == valid, comparison


def _task(**kwargs):
    train = DemoDetection('train', num_images=2, image_size=96)
    val = DemoDetection('val', num_images=2, image_size=96)
    return FasterRCNNTask('faster_rcnn_fpn_syncbn_resnet18_v1b_custom', train, val, short=96,
                          max_size=128, pretrained_base=False, **kwargs)


def test_norm_layer_syncbn_synchronizes_backbone_fpn_and_head_and_trains_them():
    mx.random.seed(1)
    task = _task(model_kwargs={'norm_layer': 'syncbn'})
    net = task.build_net([mx.cpu()])
    norms = _norms(net)
    assert len(norms) == 20 + 9 + 1 and all(isinstance(b, SyncBatchNorm) for b in norms)
    assert list(net.collect_train_params().keys()) == list(net.collect_params().keys())
    net.hybridize(static_alloc=True)
    dataset = task.train_dataset()
    parts = [task.train_batchify([dataset[0], dataset[1]])]
    net(parts[0][0])                        # finish the deferred initialization
    params = task.train_params(net)
    before = {k: p.data().asnumpy().copy() for k, p in params.items()}
    trainer = mx.gluon.Trainer(params, 'sgd', {'learning_rate': 0.01})
    with autograd.record():
        losses = task.losses(net, parts)
        total = mx.nd.add_n(*[v.sum() for values in losses.values() for v in values])
    total.backward()
    trainer.step(1)
    assert all(np.isfinite(v[0].asnumpy()).all() for v in losses.values())
    moved = {k for k, p in params.items() if not np.array_equal(p.data().asnumpy(), before[k])}
    for block in (net.backbone.bn1, net.fpn.output_norms[0], net.box_features[1]):
        assert block.running_mean.name in moved          # batch statistics
    assert net.backbone.bn1.gamma.name in moved and net.box_features[1].gamma.name in moved
    ids, scores, boxes = net(parts[0][0])
    assert np.isfinite(scores.asnumpy()).all()


def test_without_norm_layer_the_syncbn_network_trains_plain_batch_norm():
    net = _task().build_net([mx.cpu()])
    norms = _norms(net)
    assert len(norms) == 30 and not [b for b in norms if isinstance(b, SyncBatchNorm)]
    assert not [b for b in norms if b._kwargs['use_global_stats']]


def test_the_script_refuses_norm_layer_syncbn_on_the_parameter_server(monkeypatch):
    import argparse
    from gluondet.train import flags
    monkeypatch.setenv('DMLC_ROLE', 'worker')
    args = argparse.Namespace(norm_layer='syncbn', kv_store='dist_sync', horovod=False, gpus='',
                              save_prefix='')
    with pytest.raises(UserError, match='--norm-layer syncbn synchronizes BatchNorm across '
                                         r'Horovod processes, not across parameter-server '
                                         r'workers \(--kv-store dist_sync\)'):
        flags.check_args(args)


def test_the_script_trains_with_norm_layer_syncbn_on_the_cpu(tmp_path):
    """``--norm-layer syncbn`` without ``--use-fpn``: the FPN syncbn network, said in the log,
    its synchronized BatchNorm trained everywhere."""
    name = 'faster_rcnn_fpn_syncbn_resnet18_v1b_custom'
    command = ['--network', 'resnet18_v1b', '--norm-layer', 'syncbn', '--dataset', 'demo',
               '--gpus', '', '--epochs', '1', '--no-pretrained-base', '--image-short', '128',
               '--image-max-size', '160', '--batch-size', '2', '--num-workers', '0', '--verbose']
    _, log = run_cpu_command(SCRIPT, command, tmp_path, name, 8, 4)
    assert ('--norm-layer syncbn: training %s, with FPN (GluonCV has synchronized BatchNorm '
            'only with FPN)' % name) in log
    trainable = re.search(r'Trainable parameters \(\d+\): (.*)', log).group(1).split(', ')
    gammas = [n for n in trainable if n.endswith('gamma')]     # backbone, FPN, box head
    assert len(gammas) == 20 + 9 + 1, gammas
    assert len([n for n in gammas if 'syncbatchnorm' in n]) == 9 + 1     # FPN and head's names
