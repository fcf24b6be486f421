"""YOLOv3's training targets and losses: by hand, and equal to GluonCV's on the same batch."""
import numpy as np
import pytest
import mxnet as mx
from mxnet import autograd, gluon, nd

from gluondet.losses import YOLOV3Loss, YOLOV3LossTerms
from gluondet.model_zoo import get_model
from gluondet.nn import YOLOV3DynamicTarget, YOLOV3TargetGenerator, yolo3_feature_sizes

# GluonCV's anchors and strides, in the outputs' order (stride 32 first)
ANCHORS = [[116, 90, 156, 198, 373, 326], [30, 61, 62, 45, 59, 119], [10, 13, 16, 30, 33, 23]]
STRIDES = [32, 16, 8]
NUM_CLASS = 20


def _labels(rng, height, width, count, pad):
    """``count`` random boxes (tiny, large, on the edges), then ``pad`` rows of -1: ``M x 6``."""
    x = np.sort(rng.uniform(0, width, (count, 2)), axis=1)
    y = np.sort(rng.uniform(0, height, (count, 2)), axis=1)
    boxes = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1)
    if count >= 6:
        boxes[:6] = [[width - 3, height - 5, width, height],      # bottom-right corner
                     [5, 7, 5.4, 7.3],                            # under a pixel
                     [0, 0, width, height],                       # the whole image
                     [10, 20, 11, 40],                            # one pixel wide
                     [10, height, 20, height],                    # flat, on the bottom edge
                     [width, 10, width, 30]]                      # thin, on the right edge
    labels = np.full((count + pad, 6), -1, np.float32)
    labels[:count, :4] = boxes
    labels[:count, 4] = rng.randint(0, NUM_CLASS, count)
    labels[:count, 5] = 0
    return labels


def _batch(rng, height, width, counts, pad=3):
    """Labels of one image per count (0: no box), padded to one length: ``B x M x 6``."""
    most = max(counts) + pad
    return np.stack([_labels(rng, height, width, c, most - c) for c in counts])


def _ours(height, width, labels, mix):
    generator = YOLOV3TargetGenerator(ANCHORS, STRIDES)
    per_image = [generator(height, width, image[:, :4], image[:, 4],
                           None if ratio is None else ratio[:, 0])
                 for image, ratio in zip(labels, mix)]
    return [np.stack(t) for t in zip(*per_image)]


def _mix_ratios(rng, labels, mixup):
    if not mixup:
        return [None] * len(labels)
    return [rng.uniform(0.1, 0.9, (len(image), 1)).astype(np.float32) for image in labels]


def test_one_box_by_hand():
    targets = YOLOV3TargetGenerator(ANCHORS, STRIDES)(
        320, 320, [[100, 100, 150, 200], [-1, -1, -1, -1]], [3, -1])
    objectness, center, scale, weight, class_id = targets
    n = (10 * 10 + 20 * 20 + 40 * 40) * 3
    assert [t.shape for t in targets] == [(n, 1), (n, 2), (n, 2), (n, 2), (n, 1)]
    # 50 x 100 px: anchor 59 x 119 (stride 16, third); center (125, 150): cell (row 9, col 7)
    row = 10 * 10 * 3 + (9 * 20 + 7) * 3 + 2
    assert np.flatnonzero(objectness) == [row]
    np.testing.assert_allclose(center[row], [0.8125, 0.375])
    np.testing.assert_allclose(scale[row], np.log([50 / 59, 100 / 119]), rtol=1e-6)
    np.testing.assert_allclose(weight[row], 2 - 5000 / 320 ** 2)
    assert class_id[row] == 3 and (np.delete(class_id, row) == -1).all()
    for target in (center, scale, weight):
        assert np.count_nonzero(target) == 2


def test_anchors_above_the_anchor_iou_thresh_are_assigned_too():
    """YOLOv4's assignment: the 50 x 100 px box has IoU 0.71 with 59 x 119 (the best), 0.41
    with 116 x 90 and 62 x 45, 0.37 with 30 x 61, less with the others."""
    box, ids = [[100, 100, 150, 200]], [3]
    best = YOLOV3TargetGenerator(ANCHORS, STRIDES)(320, 320, box, ids)
    objectness, center, scale, weight, class_id = YOLOV3TargetGenerator(
        ANCHORS, STRIDES, anchor_iou_thresh=0.3)(320, 320, box, ids)
    stride32 = (4 * 10 + 3) * 3                              # center (125, 150): row 4, col 3
    stride16 = [300 + (9 * 20 + 7) * 3 + k for k in (0, 1, 2)]
    assert list(np.flatnonzero(objectness)) == [stride32] + stride16
    assert (class_id[[stride32] + stride16] == 3).all() and (class_id >= 0).sum() == 4
    np.testing.assert_allclose(scale[stride32], np.log([50 / 116, 100 / 90]), rtol=1e-6)
    np.testing.assert_allclose(center[stride32], [125 / 32 - 3, 150 / 32 - 4], rtol=1e-6)
    for ours, gluoncv in zip((objectness, center, scale, weight, class_id), best):
        np.testing.assert_array_equal(ours[stride16[2]], gluoncv[stride16[2]])   # the best one


@pytest.mark.parametrize('label_smooth,on,off', [(False, 1, 0), (True, 1 - 1 / 40, 1 / 40)])
def test_ignore_mask_and_class_targets(label_smooth, on, off):
    preds = nd.array([[[0, 0, 10, 10], [0, 0, 10, 7], [0, 0, 10, 8], [50, 50, 60, 60]]])
    gt = nd.array([[[0, 0, 10, 10], [-1, -1, -1, -1]]])
    objectness = nd.array([[[0.6], [0], [0], [0]]])
    class_id = nd.array([[[2], [-1], [-1], [-1]]])
    target = YOLOV3DynamicTarget(0.7, label_smooth)
    for _ in range(2):      # imperative, then hybridized
        objectness_t, class_t, class_mask = target(
            preds, nd.zeros((1, 4, NUM_CLASS)), gt, objectness, class_id)
        assert objectness_t.reshape(-1).asnumpy().tolist() == pytest.approx([0.6, 0, -1, 0])
        np.testing.assert_allclose(class_t[0, 0].asnumpy(), [off] * 2 + [on] + [off] * 17,
                                   rtol=1e-7)
        assert class_mask.reshape(-1).asnumpy().tolist() == [1, 0, 0, 0]
        target.hybridize()


def _predictions(rng, batch, n):
    """Random training outputs of ``batch`` images of ``n`` predictions in a 160 px input:
    boxes, raw centers, raw scales, objectness, classes."""
    centers = rng.uniform(0, 160, (batch, n, 2))
    sizes = rng.uniform(5, 80, (batch, n, 2))
    return [nd.array(np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=-1))] + [
        nd.array(rng.normal(size=(batch, n, k))) for k in (2, 2, 1, NUM_CLASS)]


def test_loss_dict_over_contexts():
    """Two contexts: each image's losses divided by the batch's images (their sum is GluonCV's
    per-image sum over the batch size); gradients reach every output but the boxes."""
    rng = np.random.RandomState(6)
    labels = _batch(rng, 160, 160, [9, 0, 4])
    gt_boxes = nd.array(labels[:, :, :4])
    targets = [nd.array(t) for t in _ours(160, 160, labels, [None] * 3)]
    outputs = _predictions(rng, 3, targets[0].shape[1])
    whole = [x.asnumpy() for x in YOLOV3LossTerms(0.7)(*outputs, gt_boxes, *targets)]
    contexts = [mx.cpu(0), mx.cpu(1)]
    split = [slice(0, 1), slice(1, 3)]
    parts = [[x[s].as_in_context(c) for x in outputs] for s, c in zip(split, contexts)]
    for part in parts:
        for x in part:
            x.attach_grad()
    with autograd.record():
        losses = YOLOV3Loss(0.7)(
            parts, [gt_boxes[s].as_in_context(c) for s, c in zip(split, contexts)],
            [[x[s].as_in_context(c) for x in targets] for s, c in zip(split, contexts)])
        autograd.backward([nd.add_n(*[v[k].sum() for v in losses.values()]) for k in (0, 1)])
    assert list(losses) == ['loss_obj', 'loss_center', 'loss_scale', 'loss_cls']
    for values, total in zip(losses.values(), whole):
        assert [v.context for v in values] == contexts
        np.testing.assert_allclose(np.concatenate([v.asnumpy() for v in values]), total / 3,
                                   rtol=1e-6)
    for part in parts:
        assert not part[0].grad.asnumpy().any()
        assert all(x.grad.asnumpy().any() for x in part[1:])


def test_backward_skips_the_ignore_mask(tmp_path):
    """The ignore mask's IoU of every prediction with every ground truth is a target: none of
    its operators runs in the backward pass (MXNet runs them, in zeros, if only the targets
    are cut: 3% of a YOLOv3 training step on CPUs)."""
    rng = np.random.RandomState(6)
    labels = _batch(rng, 160, 160, [9, 4])
    targets = [nd.array(t) for t in _ours(160, 160, labels, [None] * 2)]
    outputs = _predictions(rng, 2, targets[0].shape[1])
    for x in outputs:
        x.attach_grad()
    with autograd.record():
        total = nd.add_n(*[t.sum() for t in YOLOV3LossTerms(0.7)(
            *outputs, nd.array(labels[:, :, :4]), *targets)])
    mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                           filename=str(tmp_path / 'profile.json'))
    mx.profiler.set_state('run')
    total.backward()
    mx.nd.waitall()
    mx.profiler.set_state('stop')
    table = mx.profiler.dumps(reset=True)
    assert '_backward_abs' in table             # the scale loss's: the backward pass was seen
    assert '_backward_broadcast_minimum' not in table
    assert '_backward_broadcast_maximum' not in table


def test_gluondet_network_learns_from_the_losses():
    """gluondet's network (hybridized): its anchors, strides and outputs fit the targets, every
    parameter with a gradient gets one, and a few steps on one batch lower the loss."""
    mx.random.seed(1)
    net = get_model('yolo3_mobilenet0.25_voc', pretrained_base=False)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    rng = np.random.RandomState(1)
    labels = _batch(rng, 160, 192, [6, 0])
    generator = YOLOV3TargetGenerator(net.anchors, net.strides)
    targets = [nd.array(np.stack(t)) for t in zip(*[
        generator(160, 192, image[:, :4], image[:, 4]) for image in labels])]
    images, gt_boxes = nd.array(rng.normal(size=(2, 3, 160, 192))), nd.array(labels[:, :, :4])
    loss = YOLOV3Loss(label_smooth=True)
    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 1e-2})
    totals = []
    for _ in range(4):
        with autograd.record():
            losses = loss([net(images)], [gt_boxes], [targets])
            total = nd.add_n(*[v[0].sum() for v in losses.values()])
        total.backward()
        trainer.step(1)
        totals.append(total.asscalar())
    # the prediction starts at its priors (a loss near 60 here, not hundreds)
    assert np.isfinite(totals).all() and (np.diff(totals) < 0).all()
    assert totals[-1] < totals[0] * 0.7, totals
    trained = [p for p in net.collect_params().values() if p.grad_req != 'null']
    assert all(p.grad().asnumpy().any() for p in trained)


try:    # the parity tests below need GluonCV; the ones above run without it
    import gluoncv
    from gluoncv.loss import YOLOV3Loss as GluonCVLoss
    from gluoncv.model_zoo.yolo.yolo_target import (YOLOV3PrefetchTargetGenerator,
                                                    YOLOV3TargetMerger)
except ImportError:
    gluoncv = None


@pytest.fixture(scope='module')
def gluoncv_net():
    if gluoncv is None:
        pytest.skip('the GluonCV parity tests need gluoncv (0.11.0), which is not installed')
    mx.random.seed(5)
    net = gluoncv.model_zoo.get_model('yolo3_mobilenet0.25_voc', pretrained_base=False)
    net.initialize(mx.init.Xavier())
    return net


def test_network_anchors_and_feature_sizes(gluoncv_net):
    anchors = [o.anchors.data().asnumpy().reshape(-1).tolist() for o in gluoncv_net.yolo_outputs]
    assert anchors == ANCHORS and [o._stride for o in gluoncv_net.yolo_outputs] == STRIDES
    for height, width in [(160, 160), (320, 320), (608, 608), (288, 192), (170, 250)]:
        with autograd.train_mode():
            feature_maps = gluoncv_net(nd.zeros((1, 3, height, width)))[3]
        assert [f.shape[2:] for f in feature_maps] == yolo3_feature_sizes(height, width, STRIDES)


def _gluoncv_prefetch(net, height, width, labels, mix):
    """GluonCV's prefetch targets of each image, as its train transform makes them."""
    fake = nd.zeros((1, 3, height, width))
    with autograd.train_mode():
        _, anchors, offsets, feature_maps = net(fake)[:4]
    generator = YOLOV3PrefetchTargetGenerator(num_class=NUM_CLASS)
    per_image = []
    for image, ratio in zip(labels, mix):
        per_image.append([t[0].asnumpy() for t in generator(
            fake, feature_maps, anchors, offsets, nd.array(image[None, :, :4]),
            nd.array(image[None, :, 4:5]), None if ratio is None else nd.array(ratio[None]))])
    return [np.stack(t) for t in zip(*per_image)]


SIZES = [(160, 160), (224, 320), (320, 320), (416, 416)]


@pytest.mark.parametrize('height,width', SIZES)
@pytest.mark.parametrize('mixup', [False, True])
def test_prefetch_targets_equal_gluoncv(gluoncv_net, height, width, mixup):
    rng = np.random.RandomState(height + width + mixup)
    labels = _batch(rng, height, width, [7, 0, 1, 40])
    mix = _mix_ratios(rng, labels, mixup)
    theirs = _gluoncv_prefetch(gluoncv_net, height, width, labels, mix)
    ours = _ours(height, width, labels, mix)
    assert ours[0].sum() > 0
    class_id = ours.pop()
    ours.append(np.where(class_id >= 0, class_id == np.arange(NUM_CLASS), -1))  # as GluonCV
    for name, mine, their in zip(['objectness', 'center', 'scale', 'weight', 'class'],
                                 ours, theirs):
        assert mine.shape == their.shape, name
        assert (mine == their).all(), (name, np.abs(mine - their).max())


def _train_outputs(net, images):
    """GluonCV's network outputs in training mode outside autograd.record: (box_preds,
    raw_centers, raw_scales, objness, class_pred), the interface of gluondet's network."""
    with autograd.train_mode():
        out = net(images)
    return out[0], out[4], out[5], out[6], out[7]


def _setup(net, height, width, seed):
    rng = np.random.RandomState(seed)
    labels = _batch(rng, height, width, [5, 0, 12])
    mix = _mix_ratios(rng, labels, seed % 2)
    if mix[0] is not None:
        mix[0][1] = 0      # gluondet's mixup with a fixed ratio of 1 weighs the partner's boxes 0
    images = nd.array(rng.normal(size=(len(labels), 3, height, width)))
    theirs = [nd.array(t) for t in _gluoncv_prefetch(net, height, width, labels, mix)]
    ours = [nd.array(t) for t in _ours(height, width, labels, mix)]
    return images, nd.array(labels[:, :, :4]), theirs, ours


@pytest.mark.parametrize('label_smooth', [False, True])
def test_merged_targets_equal_gluoncv(gluoncv_net, label_smooth):
    images, gt_boxes, theirs, ours = _setup(gluoncv_net, 224, 192, 3)
    outputs = _train_outputs(gluoncv_net, images)
    merger = YOLOV3TargetMerger(NUM_CLASS, 0.7)
    merger._label_smooth = label_smooth    # what GluonCV's train_yolo3.py --label-smooth sets
    merged = [t.asnumpy() for t in merger(outputs[0], gt_boxes, *theirs)]
    objectness, class_t, class_mask = [t.asnumpy() for t in YOLOV3DynamicTarget(
        0.7, label_smooth)(outputs[0], outputs[4], gt_boxes, ours[0], ours[4])]
    assert (objectness == -1).sum() > 0 and (objectness > 0).sum() > 0
    ours = [objectness] + [t.asnumpy() for t in ours[1:4]] + [
        np.where(class_mask, class_t, -1), np.broadcast_to(class_mask, class_t.shape)]
    for name, mine, their in zip(['objectness', 'center', 'scale', 'weight', 'class',
                                  'class mask'], ours, merged):
        assert (mine == their).all(), (name, np.abs(mine - their).max())


@pytest.mark.parametrize('height,width,seed,label_smooth',
                         [(160, 160, 0, False), (256, 192, 1, True), (320, 320, 2, False)])
def test_losses_match_gluoncv(gluoncv_net, height, width, seed, label_smooth):
    """GluonCV's network's losses (its training forward) and ours from its outputs."""
    images, gt_boxes, theirs, ours = _setup(gluoncv_net, height, width, seed)
    gluoncv_net._target_generator._label_smooth = label_smooth
    try:
        with autograd.record():
            expected = [x.asnumpy() for x in gluoncv_net(images, gt_boxes, *theirs)]
    finally:
        gluoncv_net._target_generator._label_smooth = False
    outputs = _train_outputs(gluoncv_net, images)
    terms = YOLOV3LossTerms(0.7, label_smooth)
    got = [x.asnumpy() for x in terms(*outputs, gt_boxes, *ours)]
    terms.hybridize()
    hybridized = [x.asnumpy() for x in terms(*outputs, gt_boxes, *ours)]
    for mine, hybrid, their in zip(got, hybridized, expected):
        assert mine.shape == their.shape == (3,)
        np.testing.assert_allclose(mine, their, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(hybrid, mine, rtol=1e-6)
    assert expected[3][1] == 0 and expected[0][1] > 0      # no box: objectness loss only


def test_gradients_match_gluoncv(gluoncv_net):
    """The loss's gradients with respect to the network's outputs, GluonCV's and ours."""
    images, gt_boxes, theirs, ours = _setup(gluoncv_net, 192, 192, 5)
    outputs = _train_outputs(gluoncv_net, images)
    merger = YOLOV3TargetMerger(NUM_CLASS, 0.7)
    merger._label_smooth = True

    def gradients(loss):
        leaves = [x.copy() for x in outputs]
        for leaf in leaves:
            leaf.attach_grad()
        with autograd.record():
            autograd.backward([term.sum() for term in loss(leaves)])
        return [leaf.grad.asnumpy() for leaf in leaves]

    expected = gradients(lambda out: GluonCVLoss()(*(
        [out[3], out[1], out[2], out[4]] + merger(out[0], gt_boxes, *theirs))))
    got = gradients(lambda out: YOLOV3LossTerms(0.7, label_smooth=True)(*out, gt_boxes, *ours))
    assert not got[0].any() and not expected[0].any()      # the boxes only choose the ignored
    for mine, their in zip(got[1:], expected[1:]):
        assert np.abs(their).max() > 0
        np.testing.assert_allclose(mine, their, rtol=1e-4, atol=1e-6)
