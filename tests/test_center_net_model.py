"""CenterNet networks: zoo names, outputs in both modes, reset_class, set_nms, DCNv2, GluonCV
parity."""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd
from mxnet.gluon import nn

from gluondet.model_zoo import get_model, get_model_info, get_model_list
from gluondet.model_zoo.center_net_necks import ModulatedDeformableConv2D

CUSTOM = ['RBC', 'WBC', 'Platelets']
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
PUBLISHED = {'center_net_%s_%s' % (arch, dataset)
             for arch in ('resnet18_v1b', 'resnet18_v1b_dcnv2', 'resnet50_v1b',
                          'resnet50_v1b_dcnv2', 'resnet101_v1b', 'resnet101_v1b_dcnv2',
                          'mobilenetv3_large_duc', 'mobilenetv3_small_duc')
             for dataset in ('voc', 'coco')}
GLUONCV_ARCHS = ['resnet18_v1b', 'resnet18_v1b_dcnv2', 'resnet50_v1b', 'resnet50_v1b_dcnv2',
                 'resnet101_v1b', 'resnet101_v1b_dcnv2', 'dla34', 'dla34_dcnv2',
                 'mobilenetv3_large_duc', 'mobilenetv3_small_duc']


def _input(height, width=None, batch=1, seed=1):
    shape = (batch, 3, height, width or height)
    return mx.nd.array(np.random.RandomState(seed).normal(size=shape))


def _small(name='center_net_mobilenet0.5_custom', **kwargs):
    """The network ``name`` with random weights giving many peaks on :func:`_input` maps."""
    if name.endswith('_custom'):
        kwargs.setdefault('classes', CUSTOM)
    return _detecting(get_model(name, pretrained_base=False, **kwargs), _input(96, 128))


def test_every_gluoncv_name_is_registered_with_its_metadata():
    names = [n for n in get_model_list() if n.startswith('center_net_')]
    expected = ['center_net_%s_%s' % (a, d) for a in GLUONCV_ARCHS
                for d in ('voc', 'coco', 'custom')] + ['center_net_mobilenet0.5_custom']
    assert sorted(names) == sorted(expected)
    for name in expected[:-1]:
        info = get_model_info(name)
        assert info.data_shape == (512, 512)
        assert info.has_weights == (name in PUBLISHED)
        assert info.dataset == name.rsplit('_', 1)[1]
    assert get_model_info('center_net_dla34_voc').backbone == 'dla34'
    assert get_model_info('center_net_mobilenetv3_small_duc_coco').backbone == \
        'mobilenetv3_small'
    assert len(get_model_info('center_net_resnet50_v1b_coco').classes) == 80
    small = get_model_info('center_net_mobilenet0.5_custom')   # gluondet's, for CPU training
    assert (small.data_shape, small.backbone, small.has_weights) == ((384, 384), 'mobilenet0.5',
                                                                     False)
    with pytest.raises(ValueError, match='needs classes'):
        get_model('center_net_resnet18_v1b_custom', pretrained_base=False)
    with pytest.raises(TypeError, match='fixed classes'):
        get_model('center_net_resnet18_v1b_voc', pretrained_base=False, classes=CUSTOM)


def test_topk_size_and_preprocessing_attributes():
    from gluondet.data.preprocess import preprocessing_of
    voc = get_model('center_net_resnet18_v1b_voc', pretrained_base=False)
    coco = get_model('center_net_dla34_coco', pretrained_base=False)
    assert (voc.topk, coco.topk, voc.scale) == (40, 100, 4.0)
    assert (voc.short, voc.max_size, voc.size_multiple) == (512, 512, 32)
    assert voc.postprocess_kind == 'center_net' and not voc.flip_test
    prep = preprocessing_of(voc)
    assert {k: prep[k] for k in ('resize', 'short', 'max_size', 'multiple')} == {
        'resize': 'keep_ratio', 'short': 512, 'max_size': 512, 'multiple': 32}
    assert _small().max_size == 384


def test_inference_outputs_padding_and_training_tuple():
    net = _small()
    x = _input(128, 160, batch=2)
    ids, scores, boxes = (o.asnumpy() for o in net(x))
    assert ids.shape == scores.shape == (2, 100, 1) and boxes.shape == (2, 100, 4)
    assert ids.dtype == scores.dtype == boxes.dtype == np.float32
    valid = scores[..., 0] > 0
    assert valid.any()
    assert set(np.unique(ids[valid])) <= {0, 1, 2}
    assert (np.diff(scores[..., 0], axis=1) <= 0).all()         # sorted, the padding last
    with autograd.train_mode():
        heatmap, wh, reg = (o.asnumpy() for o in net(x))
    assert heatmap.shape == (2, 3, 32, 40) and wh.shape == reg.shape == (2, 2, 32, 40)
    assert heatmap.min() >= np.float32(1e-4) and heatmap.max() <= np.float32(1 - 1e-4)
    features = net.base_network(x)           # the maps of inference (BatchNorm's statistics)
    heatmap, wh, reg = (head(features).asnumpy() for head in net.heads)
    heatmap = 1 / (1 + np.exp(-heatmap))
    # the peaks of the heatmap: each score is a place equal to its 3x3 maximum, its box
    # centred at that place plus its offset, its size the size map's, in input pixels
    for b, k in ((0, 0), (1, 3), (0, 17)):
        c = int(ids[b, k, 0])
        y, x_ = np.argwhere(np.isclose(heatmap[b, c], scores[b, k, 0], rtol=0, atol=1e-6))[0]
        window = heatmap[b, c, max(y - 1, 0):y + 2, max(x_ - 1, 0):x_ + 2]
        assert heatmap[b, c, y, x_] == window.max()
        cx, cy = x_ + reg[b, 0, y, x_], y + reg[b, 1, y, x_]
        w, h = wh[b, :, y, x_]
        np.testing.assert_allclose(boxes[b, k], 4 * np.array(
            [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]), rtol=1e-4, atol=1e-3)


def test_places_that_are_not_peaks_are_padded_with_minus_one():
    net = _small()
    heads = net.heads
    heads[0][2].weight.set_data(mx.nd.zeros_like(heads[0][2].weight.data()))
    ids, scores, boxes = (o.asnumpy() for o in net(_input(64)))
    # a constant heatmap: every place equals its neighbourhood's maximum, so all are peaks
    assert (scores > 0).all()
    net.set_nms(nms_topk=-1, post_nms=-1)
    net.postprocess.topk = 3 * 16 * 16
    heatmap = mx.nd.zeros((1, 3, 16, 16))
    heatmap[0, 1, 5, 7] = 0.9
    heatmap[0, 2, 9, 2] = 0.5
    ids, scores, boxes = (o.asnumpy() for o in net.postprocess(
        heatmap, mx.nd.ones((1, 2, 16, 16)), mx.nd.zeros((1, 2, 16, 16))))
    assert ids.shape == (1, 768, 1)
    np.testing.assert_array_equal(ids[0, :2, 0], [1, 2])
    np.testing.assert_allclose(scores[0, :2, 0], [0.9, 0.5])
    np.testing.assert_allclose(boxes[0, :2], [[26, 18, 30, 22], [6, 34, 10, 38]])
    assert (ids[0, 2:] == -1).all() and (scores[0, 2:] == -1).all() and (boxes[0, 2:] == -1).all()
    # fewer places than K (1 class x 4 x 4 < 40): the K rows, the places' then -1
    net.postprocess.topk = 40
    ids, scores, _ = (o.asnumpy() for o in net.postprocess(
        heatmap[:, :1, :4, :4] + 0.5, mx.nd.ones((1, 2, 4, 4)), mx.nd.zeros((1, 2, 4, 4))))
    assert ids.shape == (1, 40, 1) and (scores[0, :16] == 0.5).all() and (ids[0, 16:] == -1).all()


def test_set_nms_caps_the_detections():
    net = get_model('center_net_resnet18_v1b_voc', pretrained_base=False)
    net.initialize()
    x = _input(64)
    assert net(x)[0].shape == (1, 40, 1)
    net.set_nms(post_nms=10)
    assert net(x)[0].shape == (1, 10, 1)
    assert (net.nms_thresh, net.nms_topk, net.post_nms) == (0, 400, 10)
    net.set_nms(nms_topk=5, post_nms=100)
    assert net(x)[1].shape == (1, 5, 1)
    net.set_nms(nms_topk=-1, post_nms=-1)         # all: topk
    assert net(x)[2].shape == (1, 40, 4)


def test_hybridized_equals_imperative_and_flip_test():
    net = _small()
    x = _input(96, 128, batch=2)
    expected = [o.asnumpy() for o in net(x)]
    with autograd.train_mode():
        raw = [o.asnumpy() for o in net(x)]
    net.hybridize()
    for got, want in zip(net(x), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)
    with autograd.train_mode():
        for got, want in zip(net(x), raw):
            np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)
    net.flip_test = True        # a mirrored input gives the mirrored detections
    ids, scores, boxes = (o.asnumpy() for o in net(x))
    ids_m, scores_m, boxes_m = (o.asnumpy() for o in net(x.flip(axis=3)))
    assert not np.allclose(scores, expected[1])
    np.testing.assert_allclose(np.sort(scores, axis=1), np.sort(scores_m, axis=1), rtol=1e-4)


def test_reset_class_keeps_the_reused_rows():
    net = _small('center_net_resnet18_v1b_voc')
    x = _input(64)
    with autograd.train_mode():
        before = [o.asnumpy() for o in net(x)]
    net.reset_class(['dog', 'kiwi', 'person'], reuse_weights={'dog': 'dog', 2: 14})
    with autograd.train_mode():
        after = [o.asnumpy() for o in net(x)]
    assert net.classes == ('dog', 'kiwi', 'person') and after[0].shape[1] == 3
    np.testing.assert_allclose(after[0][:, [0, 2]], before[0][:, [11, 14]], rtol=1e-5, atol=1e-6)
    for a, b in zip(after[1:], before[1:]):
        np.testing.assert_array_equal(a, b)
    assert sorted(net._collect_params_with_prefix()) == sorted(   # pylint: disable=protected-access
        get_model('center_net_resnet18_v1b_voc', pretrained_base=False)
        ._collect_params_with_prefix())
    net.reset_class(['a', 'b'])                   # nothing reused: a fresh start at the prior
    bias = net.heads[0][2].bias.data().asnumpy()
    np.testing.assert_allclose(bias, [-2.19, -2.19])
    assert net(x)[0].shape == (1, 40, 1)
    fresh = get_model('center_net_resnet18_v1b_voc', pretrained_base=False)
    with pytest.raises(ValueError, match='needs the old predictors to hold weights'):
        fresh.reset_class(['dog'], reuse_weights=['dog'])


def test_dcnv2_trains_on_cpu_and_equals_mxnet_operator():
    """MXNet 1.9.1's ModulatedDeformableConvolution has no CPU backward; ours equals its
    forward and has one."""
    ours = ModulatedDeformableConv2D(6, 4)
    theirs = mx.gluon.contrib.cnn.ModulatedDeformableConvolution(6, 3, 1, 1, in_channels=4)
    ours.initialize()
    theirs.initialize()
    x = mx.nd.array(np.random.RandomState(1).normal(size=(2, 4, 9, 11)))
    theirs(x)
    rng = np.random.RandomState(0)
    for name, param in theirs._collect_params_with_prefix().items():  # pylint: disable=W0212
        value = mx.nd.array(rng.normal(scale=0.3, size=param.shape))
        param.set_data(value)
        ours._collect_params_with_prefix()[name].set_data(value)  # pylint: disable=W0212
    np.testing.assert_allclose(ours(x).asnumpy(), theirs(x).asnumpy(), rtol=1e-4, atol=1e-5)
    x.attach_grad()
    with autograd.record():
        loss = (ours(x) ** 2).sum()
    loss.backward()
    assert np.abs(x.grad.asnumpy()).sum() > 0
    assert np.abs(ours.offset_weight.grad().asnumpy()).sum() > 0
    with pytest.raises(mx.base.MXNetError, match='only implemented in GPU'):
        with autograd.record():
            loss = theirs(x).sum()
        loss.backward()
        x.grad.asnumpy()


def test_dcnv2_network_runs_forward_and_backward():
    net = _small('center_net_resnet18_v1b_dcnv2_custom')
    x = _input(64, batch=2)
    with autograd.record():
        loss = sum(o.sum() for o in net(x))
    loss.backward()
    grad = net.base_network.deconv[0].offset_weight.grad()
    assert np.isfinite(grad.asnumpy()).all() and net(x)[0].shape == (2, 100, 1)


def test_norm_layer_reaches_backbone_and_neck():
    from gluondet.nn import SyncBatchNorm
    for name in ('center_net_dla34_custom', 'center_net_mobilenetv3_small_duc_custom',
                 'center_net_resnet18_v1b_custom'):
        net = get_model(name, classes=CUSTOM, pretrained_base=False, norm_layer=SyncBatchNorm)
        norms = []
        net.apply(lambda b, found=norms: found.append(b) if isinstance(b, nn.BatchNorm) else None)
        assert norms and all(isinstance(n, SyncBatchNorm) for n in norms), name


# ---- GluonCV ----------------------------------------------------------------------------

def _bccd_image(bccd_root, name='BloodImage_00000'):
    """A real 640 x 480 photo at 512 x 384 (keep ratio, longest side 512), normalized."""
    path = os.path.join(bccd_root, 'BCCD', 'JPEGImages', name + '.jpg')
    image = mx.image.imresize(mx.image.imread(path), 512, 384).asnumpy() / 255.0
    return mx.nd.array(((image - MEAN) / STD).transpose(2, 0, 1)[None])


def _detecting(net, x, seed=0):
    """Random weights of GluonCV's (or our) CenterNet that detect on ``x``: each BatchNorm
    normalizes its input on ``x`` (mean 0, variance the mean square; random gamma, beta 1),
    DCNv2 offsets of about a pixel, and the heads rescaled to heatmap logits of mean -3 and
    std 1.5 (many peaks, scores well apart), sizes of 8 +- 2 cells, offsets 0.5 +- 0.2."""
    mx.random.seed(seed)
    rng = np.random.RandomState(seed)
    net.initialize(mx.init.Xavier())
    net(x)

    def set_statistics(block, inputs):
        mean_square = (inputs[0] ** 2).mean(axis=(0, 2, 3))
        block.running_mean.set_data(mx.nd.zeros_like(mean_square))
        block.running_var.set_data(mean_square)
        block.beta.set_data(mx.nd.ones_like(mean_square))
        block.gamma.set_data(mx.nd.array(rng.uniform(0.5, 1.5, mean_square.shape)))
    hooks = []
    net.apply(lambda b: hooks.append(b.register_forward_pre_hook(set_statistics))
              if isinstance(b, nn.BatchNorm) else None)
    for name, param in net.collect_params().items():
        if name.endswith('offset_weight'):
            param.set_data(mx.nd.array(rng.normal(scale=0.3 / np.sqrt(param.shape[1] * 9),
                                                  size=param.shape)))
    net(x)
    for hook in hooks:
        hook.detach()
    features = net.base_network(x)
    for head, (mean, std) in zip(net.heads, ((-3, 1.5), (8, 2), (0.5, 0.2))):
        out = head(features).asnumpy()
        got_mean, got_std = out.mean(axis=(0, 2, 3)), out.std(axis=(0, 2, 3))
        last = head[2]
        ratio = std / got_std
        last.weight.set_data(last.weight.data() * mx.nd.array(ratio).reshape((-1, 1, 1, 1)))
        last.bias.set_data(mx.nd.array((last.bias.data().asnumpy() - got_mean) * ratio + mean))
    return net


def _gluoncv_parity(name, bccd_root, tmp_path):
    gluoncv = pytest.importorskip('gluoncv')
    x = _bccd_image(bccd_root)
    theirs = _detecting(gluoncv.model_zoo.get_model(name, pretrained_base=False), x)
    path = str(tmp_path / (name + '.params'))
    theirs.save_parameters(path)
    ours = get_model(name, pretrained_base=False)
    ours.load_parameters(path)
    got = [o.asnumpy() for o in ours(x)]
    # GluonCV's ids and scores are B x K
    expected = [o.asnumpy().reshape(g.shape) for o, g in zip(theirs(x), got)]
    valid = expected[1][..., 0] > 0
    assert valid.sum() == ours.topk and (expected[1][valid] > 0.2).sum() >= 5
    np.testing.assert_array_equal(got[0][valid], expected[0][valid])
    score_diff = np.abs(got[1][valid] - expected[1][valid]).max()
    box_diff = np.abs(got[2][valid] - expected[2][valid]).max()
    print('%s: max score difference %.2e, max box difference %.2e px'
          % (name, score_diff, box_diff))
    assert score_diff <= 1e-4 and box_diff <= 1e-2
    assert np.ptp(expected[2][valid][:, 2] - expected[2][valid][:, 0]) > 8    # real boxes
    with autograd.train_mode():       # the raw maps of both
        for a, b in zip(ours(x), theirs(x)):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('name', ['center_net_resnet18_v1b_voc', 'center_net_dla34_coco',
                                  'center_net_mobilenetv3_small_duc_voc',
                                  'center_net_mobilenetv3_large_duc_voc',
                                  'center_net_resnet18_v1b_dcnv2_voc',
                                  'center_net_dla34_dcnv2_coco'])
def test_gluoncv_file_gives_gluoncv_detections(name, bccd_root, tmp_path):
    _gluoncv_parity(name, bccd_root, tmp_path)


def test_small_network_learns_squares():
    """gluondet's CPU CenterNet fits 16 synthetic images of coloured squares (two each) in
    120 Adam steps, with GluonCV's targets and losses: every square found (score > 0.3, its
    class, IoU > 0.5) by inference afterwards."""
    from gluondet.losses import CenterNetLoss
    from gluondet.nn import CenterNetTargetGenerator
    mx.random.seed(0)
    rng = np.random.RandomState(0)
    size, images, labels = 128, [], []
    for _ in range(16):
        image = rng.uniform(0, 0.2, (3, size, size)).astype('float32')
        boxes, ids = [], []
        for _ in range(2):
            c, w = rng.randint(3), rng.randint(16, 40)
            x0, y0 = rng.randint(0, size - w, size=2)
            image[c, y0:y0 + w, x0:x0 + w] = 1.0
            boxes.append([x0, y0, x0 + w, y0 + w])
            ids.append(c)
        images.append(image)
        labels.append((np.array(boxes, 'float32'), np.array(ids, 'float32')))
    generator = CenterNetTargetGenerator(3, size // 4, size // 4)
    targets = [generator(boxes / 4, ids) for boxes, ids in labels]
    targets = [mx.nd.array(np.stack(parts)) for parts in zip(*targets)]
    x = mx.nd.array(np.stack(images))
    net = get_model('center_net_mobilenet0.5_custom', classes=CUSTOM, pretrained_base=False)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = mx.gluon.Trainer(net.collect_params(), 'adam', {'learning_rate': 2e-3})
    loss = CenterNetLoss()
    for _ in range(120):
        with autograd.record():
            total = sum(v[0].sum() for v in loss([net(x)], [targets]).values())
        total.backward()
        trainer.step(1)
    ids, scores, boxes = (o.asnumpy() for o in net(x))
    found = 0
    for i, (truth, classes) in enumerate(labels):
        for box, c in zip(truth, classes):
            picked = (scores[i, :, 0] > 0.3) & (ids[i, :, 0] == c)
            found += any(_iou(p, box) > 0.5 for p in boxes[i][picked])
    assert found == 32


def _iou(a, b):
    inter = np.prod(np.clip(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0, None))
    return inter / (np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2]) - inter)


def _gluoncv_classifier(name, x, folder):
    """GluonCV's ImageNet classifier ``name`` (random weights, run on ``x``) and its file."""
    gluoncv = pytest.importorskip('gluoncv')
    classifier = gluoncv.model_zoo.get_model(name)
    classifier.initialize(mx.init.Xavier())
    classifier(x)
    path = str(folder / (name + '.params'))
    classifier.save_parameters(path)
    return classifier, path


def test_gluoncv_imagenet_backbones_load(tmp_path):
    """What ``pretrained_base`` loads: GluonCV's ImageNet dla34, mobilenetv3 and mobilenet0.5
    files give GluonCV's features."""
    from gluondet.model_zoo.backbones import mobilenet0_5
    from gluondet.model_zoo.backbones.dla import dla34, load_gluoncv_dla
    from gluondet.model_zoo.backbones.mobilenetv3 import (load_gluoncv_mobilenetv3,
                                                         mobilenetv3_small)
    from gluondet.model_zoo.center_net import _Holder
    from gluondet.model_zoo.gluoncv_compat import load_gluoncv_backbone
    x = _input(64)
    classifier, path = _gluoncv_classifier('dla34', x, tmp_path)
    ours = dla34()
    load_gluoncv_dla(ours, path)
    classifier._use_feature = True          # pylint: disable=protected-access
    for a, b in zip(ours(x), classifier(x)):
        _assert_close(a, b)
    classifier, path = _gluoncv_classifier('mobilenetv3_small', x, tmp_path)
    ours = mobilenetv3_small()
    load_gluoncv_mobilenetv3(ours, path)
    _assert_close(ours(x), classifier.features[:17](x))
    classifier, path = _gluoncv_classifier('mobilenet0.5', x, tmp_path)
    ours = mobilenet0_5(out_blocks=(12,))
    load_gluoncv_backbone(_Holder(ours), path)
    _assert_close(ours(x)[0], classifier.features[:-2](x))
    cut = mobilenet0_5(out_blocks=(10,))    # the small CenterNet's: the file's rest is skipped
    load_gluoncv_backbone(_Holder(cut), path)
    assert len(cut.blocks) == 11 and cut.out_channels == [256]
    _assert_close(cut(x)[0], classifier.features[:3 + 11 * 6](x))   # stem, 11 blocks


def _assert_close(got, expected):
    """Equal within 1e-4 of the largest value (random deep networks shrink their maps)."""
    expected = expected.asnumpy()
    scale = np.abs(expected).max()
    assert scale > 0
    np.testing.assert_allclose(got.asnumpy(), expected, rtol=0, atol=1e-4 * scale)
