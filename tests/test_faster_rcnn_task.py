"""FasterRCNNTask on the engine: a short run on demo images trains, validates and saves."""
import mxnet as mx
import numpy as np
import pytest

from gluondet.data import DemoDetection
from gluondet.engine import TrainConfig, fit
from gluondet.model_zoo import get_model
from gluondet.tasks import FasterRCNNTask


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('demo'))
    return (DemoDetection('train', num_images=8, image_size=128, seed=0, root=root),
            DemoDetection('val', num_images=4, image_size=128, seed=0, root=root))


@pytest.mark.parametrize('network', ['faster_rcnn_fpn_resnet18_v1b_custom',
                                     'faster_rcnn_resnet18_v1b_custom'])
def test_one_epoch_trains_and_validates(demo, tmp_path, network):
    train, val = demo
    task = FasterRCNNTask(network, train, val, short=128, max_size=160, pretrained_base=False)
    config = TrainConfig(batch_size=2, num_workers=0, epochs=1, lr=0.01, lr_decay_epoch=(),
                         save_prefix=str(tmp_path / 'frcnn'), save_interval=0, log_interval=1,
                         seed=7)
    result = fit(task, config)
    assert result.iteration == 4
    assert set(result.metrics) == {'mAP'} | {'AP/' + c for c in train.classes}
    assert 0 <= result.metrics['mAP'] <= 1
    trainable = task.train_params(result.net)
    assert len(list(trainable.keys())) == len(list(result.net.collect_params().keys()))
    with open(str(tmp_path / 'frcnn_metrics.jsonl')) as f:
        lines = f.read()
    for name in ('loss_rpn_obj', 'loss_rpn_box', 'loss_cls', 'loss_box'):
        assert name in lines
    assert task.meta()['short'] == 128 and task.multiple == (32 if 'fpn' in network else 1)
    # from scratch the backbone's BatchNorm learns batch statistics
    assert np.abs(result.net.backbone.bn1.running_mean.data().asnumpy()).max() > 0


def test_pretrained_base_freezes_gluoncv_layers_and_global_statistics(demo):
    train, val = demo
    task = FasterRCNNTask('faster_rcnn_resnet18_v1b_custom', train, val, pretrained_base=False)
    scratch = task.build_net([mx.cpu()])
    assert not scratch.backbone.bn1._kwargs['use_global_stats']
    task.pretrained_base = True
    frozen = set(scratch.collect_params().keys()) - set(task.train_params(scratch).keys())
    stem = set(scratch.backbone.stage_params('stem', 'layer1').keys())
    norms = {n for n in scratch.collect_params().keys()
             if n.endswith(('gamma', 'beta', 'running_mean', 'running_var'))}
    assert frozen == stem | norms
    zoo = get_model('faster_rcnn_resnet18_v1b_custom', classes=['a'], pretrained_base=False)
    assert zoo.backbone.bn1._kwargs['use_global_stats']    # the zoo's: GluonCV's frozen BN
