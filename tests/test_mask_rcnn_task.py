"""MaskRCNNTask: GluonCV's mask targets and mask loss, a short run on the demo shapes, the
training command's flags."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluoncv.model_zoo.rcnn.mask_rcnn.rcnn_target import MaskTargetGenerator as GluonCVTargets

from gluondet.data import DemoDetection
from gluondet.engine import TrainConfig, fit
from gluondet.errors import UserError
from gluondet.losses import MaskLoss
from gluondet.nn import MaskTargetGenerator
from gluondet.tasks import MaskRCNNTask
from gluondet.train import mask_rcnn as command


def _targets_case(seed=0, batch=2, num_gt=3, num_pos=6, size=(48, 64)):
    rng = np.random.RandomState(seed)
    masks = (rng.uniform(size=(batch, num_gt) + size) > 0.6).astype(np.uint8)
    xy = rng.uniform(0, 30, size=(batch, num_pos, 2))
    wh = rng.uniform(4, 30, size=(batch, num_pos, 2))
    rois = np.concatenate([xy, xy + wh], axis=-1).astype(np.float32)
    matches = rng.randint(0, num_gt, size=(batch, num_pos)).astype(np.float32)
    classes = rng.randint(1, 4, size=(batch, num_pos)).astype(np.float32)   # GluonCV's 1..C
    return masks, rois, matches, classes


def test_mask_targets_equal_gluoncvs():
    masks, rois, matches, classes = _targets_case()
    theirs, weights = GluonCVTargets(2, 6, 3, (14, 14))(
        mx.nd.array(rois), mx.nd.array(masks, dtype='float32'), mx.nd.array(matches),
        mx.nd.array(classes))
    ours = MaskTargetGenerator((14, 14))
    ours.hybridize()
    result = ours(mx.nd.array(rois), mx.nd.array(matches), mx.nd.array(masks, dtype='uint8'))
    # GluonCV repeats the target for every class and weighs the region's own class
    np.testing.assert_allclose(result.asnumpy(), theirs.asnumpy()[:, :, 0], atol=1e-6)
    own = weights.asnumpy()[np.arange(2)[:, None], np.arange(6), classes.astype(int) - 1]
    assert own.min() == 1 and weights.asnumpy().sum() == own.sum()
    assert 0.2 < result.asnumpy().mean() < 0.6


def test_mask_loss_is_gluoncvs_on_one_device():
    """GluonCV: SigmoidBCE(mask_pred, targets, weights) * targets.size / weights.sum(), its
    B-vector summed; ours the same sum per image over the positives' mask pixels."""
    rng = np.random.RandomState(1)
    batch, num_pos, classes, size = 1, 5, 3, 14
    logits = rng.normal(0, 2, size=(batch, num_pos, classes, size, size)).astype(np.float32)
    targets = rng.uniform(size=(batch, num_pos, size, size)).astype(np.float32)
    own = rng.randint(0, classes, size=(batch, num_pos))
    positive = np.array([[1, 1, 1, 0, 0]], np.float32)
    weights = np.zeros_like(logits)
    weights[0, np.arange(num_pos), own[0]] = positive[0, :, None, None]
    full = np.broadcast_to(targets[:, :, None], logits.shape)
    bce = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    expected = (bce(mx.nd.array(logits), mx.nd.array(full), mx.nd.array(weights))
                * full.size / weights.sum()).sum().asscalar()
    picked = logits[0, np.arange(num_pos), own[0]][None]
    ours = MaskLoss()([mx.nd.array(picked)], [mx.nd.array(targets)], [mx.nd.array(positive)])
    np.testing.assert_allclose(ours['loss_mask'][0].asnumpy().sum(), expected, rtol=1e-5)


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('demo'))
    return (DemoDetection('train', num_images=8, image_size=128, seed=0, root=root,
                          masks=True),
            DemoDetection('val', num_images=4, image_size=128, seed=0, root=root, masks=True))


@pytest.mark.parametrize('network', ['mask_rcnn_fpn_resnet18_v1b_custom',
                                     'mask_rcnn_resnet18_v1b_custom'])
def test_one_epoch_trains_all_five_losses(demo, tmp_path, network):
    train, val = demo
    task = MaskRCNNTask(network, train, val, short=128, max_size=160, pretrained_base=False)
    config = TrainConfig(batch_size=2, num_workers=0, epochs=1, lr=0.01, lr_decay_epoch=(),
                         save_prefix=str(tmp_path / 'mrcnn'), save_interval=0, log_interval=1,
                         seed=7)
    result = fit(task, config)
    assert result.iteration == 4
    assert {'mAP', 'bbox_AP', 'mask_AP', 'mask_AP50'} <= set(result.metrics)
    assert all(0 <= result.metrics[k] <= 1 for k in ('mAP', 'bbox_AP', 'mask_AP'))
    with open(str(tmp_path / 'mrcnn_metrics.jsonl')) as f:
        lines = f.read()
    for name in ('loss_rpn_obj', 'loss_rpn_box', 'loss_cls', 'loss_box', 'loss_mask'):
        assert '"%s"' % name in lines
    assert np.isfinite(result.net.mask.mask.weight.data().asnumpy()).all()


def _args(*argv):
    return command.parse_args(['--dataset', 'coco'] + list(argv))


def test_network_names_follow_gluoncvs_flags():
    assert command.network_name(_args('--network', 'resnet50_v1b')) == \
        'mask_rcnn_resnet50_v1b_coco'
    assert command.network_name(_args('--network', 'resnet101_v1d', '--use-fpn')) == \
        'mask_rcnn_fpn_resnet101_v1d_coco'
    assert command.network_name(_args('--network', 'mobilenet1.0', '--norm-layer', 'bn')) == \
        'mask_rcnn_fpn_syncbn_mobilenet1.0_coco'
    assert command.network_name(_args('custom-model')) == 'custom_mask_rcnn_fpn'
    demo = command.parse_args(['--dataset', 'demo', '--network', 'resnet18_v1b', '--use-fpn'])
    assert command.network_name(demo) == 'mask_rcnn_fpn_resnet18_v1b_custom'
    with pytest.raises(UserError, match="COCO's classes only"):
        command.network_name(command.parse_args(['--dataset', 'demo']))
    with pytest.raises(UserError, match='no Mask R-CNN on --network vgg16'):
        command.network_name(_args('--network', 'vgg16'))
    for name in ('mask_rcnn_fpn_syncbn_mobilenet1.0_coco', 'mask_rcnn_resnet50_v1b_coco',
                 'mask_rcnn_fpn_resnet18_v1b_custom'):
        flags = command.network_flags(name)
        assert command.network_name(command.parse_args(
            ['--dataset', 'demo' if name.endswith('custom') else 'coco'] + flags)) == name


def test_gluoncvs_defaults_follow_the_batch_size():
    resolved, message = command._gluoncv_defaults(_args('--batch-size', '16'))
    assert (resolved.epochs, resolved.lr, resolved.lr_decay_epoch, resolved.lr_warmup,
            resolved.wd) == (26, 0.02, '17,23', 1000, 1e-4)
    assert '--lr 0.02' in message
    resolved, _ = command._gluoncv_defaults(_args('--batch-size', '4', '--lr', '0.1'))
    assert (resolved.lr, resolved.lr_warmup) == (0.1, 2000)


def test_custom_model_flags_are_custom_mask_rcnn_fpns_keywords():
    args = _args('--network', 'resnet18_v1b', 'custom-model', '--roi-size', '7,7',
                 '--num-mask-head-convs', '2', '--strides', '4,8,16,32,64')
    kwargs = command._custom_kwargs(args)
    assert kwargs['roi_size'] == (7, 7) and kwargs['num_fcn_convs'] == 2
    assert kwargs['strides'] == (4, 8, 16, 32, 64) and kwargs['base_network_name'] == \
        'resnet18_v1b'
    with pytest.raises(UserError, match='--roi-size'):
        command._custom_kwargs(_args('custom-model', '--roi-size', 'a,b'))
