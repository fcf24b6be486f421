"""YOLOv3 networks: zoo names, outputs, the training-mode interface, GluonCV parity."""
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd
from mxnet.gluon import nn

from gluondet.deploy import detecting_random_weights
from gluondet.model_zoo import get_model, get_model_info
from gluondet.model_zoo.backbones import darknet53
from gluondet.model_zoo.gluoncv_compat import load_gluoncv_backbone
from gluondet.model_zoo.gluoncv_yolo import load_gluoncv_darknet, yolo_key_table
from gluondet.nn import SyncBatchNorm

NAMES = ['yolo3_%s_%s' % (arch, dataset) for arch in ('darknet53', 'mobilenet1.0', 'mobilenet0.25')
         for dataset in ('voc', 'coco', 'custom')]
CUSTOM = ['RBC', 'WBC', 'Platelets']
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def _input(size, batch=1, seed=1):
    return mx.nd.array(np.random.RandomState(seed).normal(size=(batch, 3, size, size)))


def _bccd_images(bccd_root, size, names=('BloodImage_00000', 'BloodImage_00001')):
    """Real photos resized to ``size`` x ``size``, normalized as YOLOv3's validation."""
    images = []
    for name in names:
        path = os.path.join(bccd_root, 'BCCD', 'JPEGImages', name + '.jpg')
        image = mx.image.imresize(mx.image.imread(path), size, size).asnumpy() / 255.0
        images.append(((image - MEAN) / STD).transpose(2, 0, 1))
    return mx.nd.array(np.stack(images))


def _small(name='yolo3_mobilenet0.25_custom', **kwargs):
    kwargs.setdefault('classes', CUSTOM) if name.endswith('_custom') else None
    net = get_model(name, pretrained_base=False, **kwargs)
    net.initialize()
    return net


def test_every_gluoncv_name_is_registered():
    for name in NAMES:
        info = get_model_info(name)
        assert info.data_shape == (416, 416)
        assert info.has_weights == (name in ('yolo3_darknet53_voc', 'yolo3_darknet53_coco',
                                             'yolo3_mobilenet1.0_voc', 'yolo3_mobilenet1.0_coco'))
    assert get_model_info('yolo3_darknet53_voc').backbone == 'darknet53'
    small = get_model_info('yolo3_mobilenet0.5_custom')      # gluondet's, for CPU training
    assert (small.data_shape, small.backbone, small.has_weights) == ((320, 320), 'mobilenet0.5',
                                                                     False)
    net = _small('yolo3_mobilenet0.5_custom')
    assert net.base_size == 320 and net(_input(160))[0].shape == (1, 100, 1)
    assert [b.tip[0].weight.shape[0] for b in net.yolo_blocks] == [256, 128, 128]
    with pytest.raises(ValueError, match='needs classes'):
        get_model('yolo3_mobilenet0.25_custom', pretrained_base=False)
    with pytest.raises(TypeError, match='fixed classes'):
        get_model('yolo3_mobilenet0.25_voc', pretrained_base=False, classes=CUSTOM)


def test_inference_output_and_anchors():
    net = _small()
    ids, scores, boxes = net(_input(160, batch=2))
    assert ids.shape == scores.shape == (2, 100, 1) and boxes.shape == (2, 100, 4)
    valid = ids.asnumpy() >= 0
    assert set(np.unique(ids.asnumpy()[valid])) <= {0, 1, 2}
    assert (scores.asnumpy()[~valid] == -1).all()
    s = scores.asnumpy()[:, :, 0]
    assert (np.diff(s, axis=1) <= 0).all() and valid.any()   # sorted, the padding (-1) last
    assert net.anchors == [[116, 90, 156, 198, 373, 326], [30, 61, 62, 45, 59, 119],
                           [10, 13, 16, 30, 33, 23]]
    assert net.strides == [32, 16, 8] and net.base_size == 416
    assert net.postprocess_kind == 'yolo3'


def test_training_output_is_the_documented_tuple():
    net = _small()
    x = _input(160, batch=2)
    with autograd.record():
        out = net(x)
    n = sum((160 // s) ** 2 * 3 for s in net.strides)
    assert [o.shape for o in out] == [(2, n, 4), (2, n, 2), (2, n, 2), (2, n, 1), (2, n, 3)]
    boxes, centers, scales, _, _ = (o.asnumpy() for o in out)
    # the first place of the stride-32 output: row 0, column 0, anchor 0 (116 x 90); the next
    # output starts at 5 * 5 * 3
    for place, col, row, stride, anchor in ((0, 0, 0, 32, (116, 90)), (4, 1, 0, 32, (156, 198)),
                                            (3 * 5 + 2, 0, 1, 32, (373, 326)),
                                            (75 + 3 * 11, 1, 1, 16, (30, 61))):
        center = (1 / (1 + np.exp(-centers[:, place])) + (col, row)) * stride
        size = np.exp(scales[:, place]) * anchor
        np.testing.assert_allclose(boxes[:, place], np.concatenate(
            [center - size / 2, center + size / 2], axis=-1), rtol=1e-5, atol=1e-3)


def test_a_fresh_prediction_starts_at_the_priors():
    """From scratch the objectness starts at 8 objects an image, the classes at 0.6 over their
    number (the logit of a class is log(0.6 / (C - 0.99)), as Ultralytics'; initialized as the
    trainer does it: Xavier for what has no initializer of its own)."""
    net = get_model('yolo3_mobilenet0.5_custom', classes=CUSTOM, pretrained_base=False)
    net.initialize(mx.init.Xavier(rnd_type='gaussian', factor_type='out', magnitude=2))
    with autograd.train_mode():
        _, _, scales, objness, classes = (o.asnumpy() for o in net(_input(320)))
    start = 0
    for stride in net.strides:
        count = (320 // stride) ** 2 * 3
        probability = 1 / (1 + np.exp(-objness[0, start:start + count]))
        np.testing.assert_allclose(probability.sum() / 3, 8, rtol=0.1)
        start += count
    assert abs(classes.mean() - np.log(0.6 / 2.01)) < 0.05 and classes.std() < 0.3
    assert np.abs(scales).max() < 0.5
    net.reset_class(['a', 'b', 'c', 'd', 'e'])       # new rows start there too
    net.yolo_outputs[0].prediction.initialize()
    with autograd.train_mode():
        classes = net(_input(320))[4].asnumpy()
    assert abs(classes.mean() - np.log(0.6 / 4.01)) < 0.05 and classes.std() < 0.3


def test_hybridized_outputs_equal_imperative():
    net = _small()
    x = _input(192, batch=2)
    expected = [o.asnumpy() for o in net(x)]
    net.hybridize()
    for got, want in zip(net(x), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-5)
    with autograd.train_mode():
        assert len(net(x)) == 5      # the mode switch retraces


def test_any_input_size_even_off_the_stride():
    net = _small()
    with autograd.train_mode():
        out = net(_input(200))        # maps 7, 13, 25: the upsampled maps are cropped
    assert out[0].shape[1] == (7 * 7 + 13 * 13 + 25 * 25) * 3


def test_set_nms():
    net = _small()
    x = _input(160)
    net.set_nms(nms_thresh=0.45, nms_topk=200, post_nms=20)
    assert net(x)[0].shape == (1, 20, 1)
    assert (net.nms_thresh, net.nms_topk, net.post_nms) == (0.45, 200, 20)
    net.set_nms(nms_thresh=0, post_nms=-1)       # no NMS: every candidate
    assert net(x)[1].shape == (1, (25 + 100 + 400) * 3 * 3, 1)


def test_reset_class_keeps_the_reused_rows():
    net = _small('yolo3_mobilenet0.25_voc')
    x = _input(160)
    with autograd.train_mode():
        before = [o.asnumpy() for o in net(x)]
    net.reset_class(['dog', 'kiwi', 'person'], reuse_weights={'dog': 'dog', 2: 14})
    with autograd.train_mode():
        after = [o.asnumpy() for o in net(x)]
    assert net.classes == ('dog', 'kiwi', 'person') and after[4].shape[-1] == 3
    # boxes and objectness kept (a convolution of other width rounds a little differently)
    for a, b in zip(after[:4], before[:4]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(after[4][..., [0, 2]], before[4][..., [11, 14]], rtol=1e-4,
                               atol=1e-4)
    assert net(x)[0].shape == (1, 100, 1)
    fresh = get_model('yolo3_mobilenet0.25_voc', pretrained_base=False)
    with pytest.raises(ValueError, match='needs the old predictors to hold weights'):
        fresh.reset_class(['dog'], reuse_weights=['dog'])


def test_norm_layer_reaches_backbone_and_head():
    net = get_model('yolo3_mobilenet0.25_custom', classes=CUSTOM, pretrained_base=False,
                    norm_layer=SyncBatchNorm, norm_kwargs={'momentum': 0.8})
    norms = []
    net.apply(lambda block: norms.append(block) if isinstance(block, nn.BatchNorm) else None)
    assert len(norms) == 27 + 3 * 6 + 2    # backbone, the 3 blocks' 6 cells, 2 transitions
    # pylint: disable=protected-access
    assert all(isinstance(n, SyncBatchNorm) and n._kwargs['momentum'] == 0.8 for n in norms)


# ---- GluonCV ----------------------------------------------------------------------------

def _detecting_gluoncv(name, x, seed=0):
    """GluonCV's network with random weights that detect on ``x``: deploy's for YOLOv3
    (:func:`~gluondet.deploy.compare.yolo3_detecting` reads only the ``yolo_outputs``, which
    GluonCV's network has too), its instance given our post-processing kind to find them."""
    gluoncv = pytest.importorskip('gluoncv')
    net = gluoncv.model_zoo.get_model(name, pretrained_base=False)
    net.postprocess_kind = 'yolo3'
    detecting_random_weights(net, x, seed)
    return net


@pytest.mark.parametrize('name', ['yolo3_mobilenet1.0_coco', 'yolo3_darknet53_voc'])
def test_gluoncv_file_gives_gluoncv_detections(name, bccd_root, tmp_path):
    x = _bccd_images(bccd_root, 256)
    theirs = _detecting_gluoncv(name, x)
    path = str(tmp_path / (name + '.params'))
    theirs.save_parameters(path)
    expected = [o.asnumpy() for o in theirs(x)]
    ours = get_model(name, pretrained_base=False)
    ours.load_parameters(path)
    got = [o.asnumpy() for o in ours(x)]
    assert (expected[0] >= 0).sum() == 200       # 100 detections in each image
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], atol=1e-4, rtol=0)
    np.testing.assert_allclose(got[2], expected[2], atol=1e-2, rtol=0)
    with autograd.train_mode():       # the raw predictions in GluonCV's order
        raw = theirs(x)
        want = [raw[0]] + list(raw[4:])
        for a, b in zip(ours(x), want):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-3, rtol=1e-4)


def test_key_table_covers_every_parameter_once():
    for name in ('yolo3_darknet53_voc', 'yolo3_mobilenet1.0_voc'):
        net = get_model(name, pretrained_base=False)
        table = yolo_key_table(net)
        ours = net._collect_params_with_prefix()  # pylint: disable=protected-access
        assert sorted(table.values()) == sorted(ours)
    assert table['stages.1.0.weight'] == 'backbone.blocks.5.depthwise.conv.weight'
    assert table['stages.2.4.gamma'] == 'backbone.blocks.11.pointwise.bn.gamma'
    table = yolo_key_table(get_model('yolo3_darknet53_voc', pretrained_base=False))
    assert table['stages.1.0.0.weight'] == 'backbone.features.15.0.weight'
    assert table['stages.2.4.body.1.1.beta'] == 'backbone.features.28.body.1.1.beta'


def test_gluoncv_file_of_another_backbone_is_refused(tmp_path):
    x = _input(64)
    path = str(tmp_path / 'mobilenet1.0.params')
    _detecting_gluoncv('yolo3_mobilenet1.0_voc', x).save_parameters(path)
    net = get_model('yolo3_darknet53_voc', pretrained_base=False)
    with pytest.raises(ValueError, match='GluonCV YOLOv3 file that does not fit this DarkNet'):
        net.load_parameters(path)


def _gluoncv_classifier(name, x, folder):
    """GluonCV's ImageNet classifier ``name``, initialized and run on ``x``, and the file it
    saved in ``folder``."""
    gluoncv = pytest.importorskip('gluoncv')
    classifier = gluoncv.model_zoo.get_model(name)
    classifier.initialize(mx.init.Xavier())
    classifier(x)
    path = str(folder / (name + '.params'))
    classifier.save_parameters(path)
    return classifier, path


def test_gluoncv_imagenet_darknet53_loads(tmp_path):
    x = _input(64)
    classifier, path = _gluoncv_classifier('darknet53', x, tmp_path)
    backbone = darknet53()
    load_gluoncv_darknet(backbone, path)
    maps = backbone(x)
    assert [m.shape[2] for m in maps] == [8, 4, 2]
    np.testing.assert_allclose(maps[-1].asnumpy(), classifier.features(x).asnumpy(),
                               rtol=1e-5, atol=1e-5)


def test_gluoncv_imagenet_mobilenet_loads_into_the_backbone(tmp_path):
    """What ``pretrained_base`` loads for the MobileNet networks (the head keeps its init)."""
    x = _input(64)
    classifier, path = _gluoncv_classifier('mobilenet0.25', x, tmp_path)
    net = get_model('yolo3_mobilenet0.25_voc', pretrained_base=False)
    load_gluoncv_backbone(net, path)
    np.testing.assert_allclose(net.backbone(x)[-1].asnumpy(),
                               classifier.features[:-2](x).asnumpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError):
        net.yolo_outputs[0].prediction.weight.data()

