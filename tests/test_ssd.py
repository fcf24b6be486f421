"""The SSD network (train/inference outputs, reset_class, set_nms, export) and SSDMultiBoxLoss."""
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluondet.losses import SSDMultiBoxLoss
from gluondet.model_zoo import VOC_CLASSES, get_model, get_model_info

# name -> (input size used here, anchors at that size)
SHAPES = {
    'ssd_300_mobilenet0.25': (300, 2268),
    'ssd_512_mobilenet1.0': (256, 1536),
    'ssd_512_resnet50_v1': (256, 1536),
    'ssd_300_vgg16_atrous': (300, 8732),
    'ssd_512_vgg16_atrous': (300, 8766),
}
ALL_NAMES = ['%s_%s' % (arch, d) for arch in SHAPES for d in ('voc', 'coco', 'custom')]
# VGG nets take seconds each on 2 cores: their voc variants stay in the fast run
SLOW_NAMES = {'ssd_300_vgg16_atrous_coco', 'ssd_300_vgg16_atrous_custom',
              'ssd_512_vgg16_atrous_coco', 'ssd_512_vgg16_atrous_custom'}


def _build(name, **kwargs):
    if name.endswith('_custom'):
        kwargs.setdefault('classes', ['a', 'b', 'c'])
    net = get_model(name, pretrained_base=False, **kwargs)
    net.initialize()
    return net


def _small_net(**kwargs):
    return _build('ssd_300_mobilenet0.25_voc', **kwargs)


def _image(size=300, batch=1, seed=0):
    return mx.nd.array(np.random.RandomState(seed).uniform(-2, 2, (batch, 3, size, size)))


@pytest.mark.parametrize('name', [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_NAMES
                                  else n for n in ALL_NAMES])
def test_train_and_inference_shapes(name):
    size, num_anchors = SHAPES[name.rsplit('_', 1)[0]]
    net = _build(name)
    classes = len(net.classes)
    assert classes == {'voc': 20, 'coco': 80, 'custom': 3}[name.rsplit('_', 1)[1]]
    x = _image(size)
    with autograd.train_mode():
        cls_preds, box_preds, anchors = net(x)
    assert cls_preds.shape == (1, num_anchors, classes + 1)
    assert box_preds.shape == (1, num_anchors, 4)
    assert anchors.shape == (1, num_anchors, 4)
    ids, scores, boxes = net(x)
    assert ids.shape == scores.shape == (1, 100, 1) and boxes.shape == (1, 100, 4)
    ids = ids.asnumpy()
    assert ids.min() >= -1 and ids.max() < classes
    assert np.isfinite(boxes.asnumpy()).all()


def test_demo_network_shapes_and_anchor_grid():
    net = _build('ssd_160_mobilenet0.5_custom')
    with autograd.train_mode():
        cls_preds, box_preds, anchors = net(_image(160))
    # stride 8, 16, 32 maps: 20 x 20, 10 x 10, 5 x 5 cells, 4 anchors each
    assert cls_preds.shape == (1, 2100, 4) and box_preds.shape == (1, 2100, 4)
    anchors = anchors.asnumpy()[0]
    first, last = anchors[:1600], anchors[2000:]
    assert first[:, :2].min() == 4 and first[:, :2].max() == 156
    assert last[:, :2].min() == 16 and last[:, :2].max() == 144
    np.testing.assert_allclose(first[:2, 2], [24, math.sqrt(24 * 44)], rtol=1e-6)
    ids, scores, boxes = net(_image(160, batch=2))
    assert ids.shape == scores.shape == (2, 100, 1) and boxes.shape == (2, 100, 4)
    info = get_model_info('ssd_160_mobilenet0.5_custom')
    assert (info.backbone, info.dataset, info.has_weights) == ('mobilenet0.5', 'custom', False)


def test_anchor_layout_of_the_first_map():
    net = _small_net()
    with autograd.train_mode():
        anchors = net(_image())[2].asnumpy()[0]
    # first map: 19 x 19 cells, step 8, sizes (21, 45), ratios 1, 2, 0.5
    first = anchors[:4]
    big = math.sqrt(21 * 45)
    np.testing.assert_allclose(first, [[4, 4, 21, 21], [4, 4, big, big],
                                       [4, 4, 21 * 2 ** 0.5, 21 / 2 ** 0.5],
                                       [4, 4, 21 / 2 ** 0.5, 21 * 2 ** 0.5]], rtol=1e-6)


def test_batch_inference_sorted_and_padded():
    net = _small_net()
    ids, scores, boxes = net(_image(batch=2))
    scores = scores.asnumpy()[..., 0]
    for row in scores:
        valid = row[row >= 0]
        assert (np.diff(valid) <= 0).all()
        assert (row[len(valid):] == -1).all()
    assert ((ids.asnumpy()[..., 0] == -1) == (scores == -1)).all()


def test_set_nms_changes_output_count_even_when_hybridized():
    net = _small_net()
    net.hybridize()
    x = _image()
    assert net(x)[0].shape == (1, 100, 1)
    net.set_nms(nms_thresh=0.5, nms_topk=200, post_nms=10)
    assert (net.nms_thresh, net.nms_topk, net.post_nms) == (0.5, 200, 10)
    assert net(x)[0].shape == (1, 10, 1)
    net.set_nms(nms_thresh=-1)
    assert net(x)[1].shape == (1, 20 * 2268, 1)


def test_hybridized_net_switches_between_train_and_inference():
    net = _small_net()
    net.hybridize(static_alloc=True, static_shape=True)
    x = _image()
    with autograd.train_mode():
        assert len(net(x)) == 3 and net(x)[0].shape == (1, 2268, 21)
    assert net(x)[0].shape == (1, 100, 1)
    with autograd.record():
        cls_preds = net(x)[0]
    assert cls_preds.shape == (1, 2268, 21)


def test_export_round_trip_gives_identical_outputs(tmp_path):
    net = _small_net()
    net.hybridize()
    x = _image(seed=3)
    expected = [o.asnumpy() for o in net(x)]
    prefix = str(tmp_path / 'ssd')
    net.export(prefix)
    imported = gluon.SymbolBlock.imports(prefix + '-symbol.json', ['data'],
                                         prefix + '-0000.params')
    for got, want in zip(imported(x), expected):
        np.testing.assert_array_equal(got.asnumpy(), want)


def test_own_parameter_file_round_trip(tmp_path):
    net = _small_net()
    x = _image(seed=4)
    expected = net(x)[2].asnumpy()
    path = str(tmp_path / 'net.params')
    net.save_parameters(path)
    other = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    other.load_parameters(path)
    np.testing.assert_array_equal(other(x)[2].asnumpy(), expected)


def test_load_parameters_of_other_classes_names_file_and_parameters(tmp_path):
    path = str(tmp_path / 'voc.params')
    net = _small_net()
    net(_image())
    net.save_parameters(path)
    coco = get_model('ssd_300_mobilenet0.25_coco', pretrained_base=False)
    with pytest.raises(ValueError, match=r'voc\.params.*wrong shape \(12\).*class_predictors\.0'):
        coco.load_parameters(path)


def test_load_parameters_rejects_a_non_parameter_file(tmp_path):
    path = tmp_path / 'junk.params'
    path.write_bytes(b'not mxnet')
    with pytest.raises(ValueError, match='junk.params'):
        _small_net().load_parameters(str(path))


def _class_rows(weight, num_classes, cls):
    """Rows of ``weight`` predicting class slot ``cls`` (0 = background) for every anchor."""
    return weight[cls::num_classes + 1]


def test_reset_class_reuses_named_and_indexed_weights():
    net = _small_net()
    net(_image())
    old = [p.weight.data().asnumpy() for p in net.class_predictors]
    net.reset_class(['person', 'dog', 'unicorn'], reuse_weights={'person': 'person', 'dog': 11})
    assert net.classes == ('person', 'dog', 'unicorn') and net.num_classes == 3
    for before, predictor in zip(old, net.class_predictors):
        after = predictor.weight.data().asnumpy()
        assert after.shape[0] == before.shape[0] // 21 * 4
        np.testing.assert_array_equal(_class_rows(after, 3, 0), _class_rows(before, 20, 0))
        np.testing.assert_array_equal(_class_rows(after, 3, 1), _class_rows(before, 20, 15))
        np.testing.assert_array_equal(_class_rows(after, 3, 2), _class_rows(before, 20, 12))
    with autograd.train_mode():
        assert net(_image())[0].shape == (1, 2268, 4)
    ids = net(_image())[0].asnumpy()
    assert ids.max() < 3


def test_reset_class_with_a_list_and_without_reuse():
    net = _small_net()
    net(_image())
    bias_before = net.class_predictors[0].bias.data().asnumpy()
    net.reset_class(['cat', 'car'], reuse_weights=['car', 'cat'])
    bias = net.class_predictors[0].bias.data().asnumpy()
    np.testing.assert_array_equal(bias[1::3], bias_before[VOC_CLASSES.index('cat') + 1::21])
    np.testing.assert_array_equal(bias[2::3], bias_before[VOC_CLASSES.index('car') + 1::21])
    net.reset_class(['x'])
    assert net.class_predictors[0].weight.shape[0] == 4 * 2
    assert (net.class_predictors[0].bias.data().asnumpy() == 0).all()


def test_reset_class_rejects_unknown_names():
    net = _small_net()
    net(_image())
    with pytest.raises(ValueError, match='unicorn'):
        net.reset_class(['a'], reuse_weights={'a': 'unicorn'})


def test_anchor_overrides():
    net = _build('ssd_300_mobilenet0.25_custom', steps=[16, 32, 64, 100, 150, 300])
    with autograd.train_mode():
        anchors = net(_image())[2].asnumpy()[0]
    first_map = anchors[:19 * 19 * 4]
    assert first_map[:, 0].max() == first_map[:, 1].max() == 18.5 * 16


# ---- SSDMultiBoxLoss ---------------------------------------------------------------------

def _hand_case():
    """One positive (class 1) and three negatives of increasing difficulty."""
    cls_pred = mx.nd.array([[[0, 0], [2, 0], [0, 1], [0, 3]]])
    box_pred = mx.nd.array([[[0.5, -2, 0, 0], [9, 9, 9, 9], [1, 1, 1, 1], [0, 0, 0, 0]]])
    cls_target = mx.nd.array([[1, 0, 0, 0]])
    box_target = mx.nd.array([[[0, 0, 0, 0.5], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]])
    return cls_pred, box_pred, cls_target, box_target


def test_multibox_loss_exact_values_with_hard_negative_mining():
    sums, cls, box = SSDMultiBoxLoss(negative_mining_ratio=1)(*_hand_case())
    # positive: log 2; the hardest negative only: log(1 + e^3)
    expected_cls = math.log(2) + math.log(1 + math.exp(3))
    # smooth L1 of (0.5, 2, 0, 0.5): 0.125 + 1.5 + 0 + 0.125
    assert cls[0].asscalar() == pytest.approx(expected_cls, rel=1e-6)
    assert box[0].asscalar() == pytest.approx(1.75, rel=1e-6)
    assert sums[0].asscalar() == pytest.approx(expected_cls + 1.75, rel=1e-6)
    _, cls3, _ = SSDMultiBoxLoss(negative_mining_ratio=3)(*_hand_case())
    everything = math.log(2) + sum(math.log(1 + math.exp(v)) for v in (-2, 1, 3))
    assert cls3[0].asscalar() == pytest.approx(everything, rel=1e-6)


def test_multibox_loss_normalizes_by_positives_over_all_contexts():
    one = _hand_case()
    two = [mx.nd.concat(a, a, dim=0) for a in one]
    lambd = 0.5
    loss = SSDMultiBoxLoss(negative_mining_ratio=1, lambd=lambd)
    sums, cls, box = loss([one[0], two[0]], [one[1], two[1]], [one[2], two[2]],
                          [one[3], two[3]])
    expected_cls = (math.log(2) + math.log(1 + math.exp(3))) / 3
    assert [len(s) for s in sums] == [1, 2]
    for part in cls:
        np.testing.assert_allclose(part.asnumpy(), expected_cls, rtol=1e-6)
    for part in box:
        np.testing.assert_allclose(part.asnumpy(), 1.75 / 3, rtol=1e-6)
    np.testing.assert_allclose(sums[1].asnumpy(), expected_cls + lambd * 1.75 / 3, rtol=1e-6)


def test_multibox_loss_without_positives_is_zero():
    cls_pred, box_pred, _, box_target = _hand_case()
    sums, _, _ = SSDMultiBoxLoss()(cls_pred, box_pred, mx.nd.zeros((1, 4)), box_target * 0)
    assert sums[0].asscalar() == 0


def _random_batch(rng, batch, anchors, classes):
    cls_pred = mx.nd.array(rng.normal(0, 2, (batch, anchors, classes + 1)))
    box_pred = mx.nd.array(rng.normal(0, 1, (batch, anchors, 4)))
    cls_target = np.where(rng.uniform(size=(batch, anchors)) < 0.03,
                          rng.randint(1, classes + 1, (batch, anchors)), 0)
    box_target = np.where(cls_target[..., None] > 0, rng.normal(0, 1, (batch, anchors, 4)), 0)
    return cls_pred, box_pred, mx.nd.array(cls_target), mx.nd.array(box_target)


def _losses_and_grads(loss_fn, parts):
    cls_pred = [p[0].copy() for p in parts]
    box_pred = [p[1].copy() for p in parts]
    for x in cls_pred + box_pred:
        x.attach_grad()
    with autograd.record():
        sums, cls, box = loss_fn(cls_pred, box_pred, [p[2] for p in parts], [p[3] for p in parts])
    autograd.backward(sums)
    values = [x.asnumpy() for group in (sums, cls, box) for x in group]
    return values, [x.grad.asnumpy() for x in cls_pred + box_pred]


def test_multibox_loss_equals_gluoncv_values_and_gradients():
    from gluoncv.loss import SSDMultiBoxLoss as GluonCVLoss
    rng = np.random.RandomState(0)
    parts = [_random_batch(rng, 2, 500, 5), _random_batch(rng, 3, 500, 5)]
    ours, our_grads = _losses_and_grads(SSDMultiBoxLoss(), parts)
    theirs, their_grads = _losses_and_grads(GluonCVLoss(), parts)
    for a, b in zip(ours + our_grads, theirs + their_grads):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

