"""VOC07 / VOC area mAP: hand-computed cases and equality with GluonCV 0.10.5."""
import math

import mxnet as mx
import numpy as np
import pytest

from gluondet.metrics import VOC07MApMetric, VOCMApMetric

NAMES = ['a', 'b', 'c', 'd', 'e']


def _one_image():
    """Ground truths and detections with a known outcome (see test_hand_computed)."""
    gt_boxes = np.array([[[0, 0, 9, 9], [20, 20, 29, 29], [40, 0, 49, 9], [0, 0, 9, 9],
                          [60, 60, 69, 69], [-1, -1, -1, -1]]], np.float32)
    gt_labels = np.array([[0, 0, 0, 1, 4, -1]], np.float32)
    difficult = np.array([[0, 1, 0, 0, 1, -1]], np.float32)
    boxes = np.array([[[0, 0, 9, 9],        # a: TP on the first gt
                       [0, 0, 9, 9],        # a: duplicate -> FP
                       [20, 20, 29, 29],    # a: on the difficult gt -> ignored
                       [80, 80, 89, 89],    # a: nowhere -> FP
                       [40, 0, 49, 9],      # a: TP on the third gt
                       [0, 0, 9, 4],        # b: IoU exactly 0.5 with +1 pixel sizes -> TP
                       [0, 0, 9, 9],        # c: a class without ground truth
                       [-1, -1, -1, -1]]], np.float32)
    labels = np.array([[0, 0, 0, 0, 0, 1, 2, -1]], np.float32)
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.3, 0.5, 0.4, -1]], np.float32)
    return boxes, labels, scores, gt_boxes, gt_labels, difficult


@pytest.mark.parametrize('cls, class_a', [(VOC07MApMetric, 8.5 / 11), (VOCMApMetric, 0.75)])
def test_hand_computed(cls, class_a):
    # class a, by score: TP, FP, ignored, FP, TP with 2 positives:
    # precision 1, .5, .5, 1/3, .5 at recall .5, .5, .5, .5, 1
    metric = cls(class_names=NAMES)
    metric.update(*_one_image())
    names, values = metric.get()
    assert names == NAMES + ['mAP']
    assert values[0] == pytest.approx(class_a, abs=1e-12)
    assert values[1] == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(values[2])  # detections but no ground truth
    assert math.isnan(values[3])  # never seen
    assert math.isnan(values[4])  # only a difficult ground truth
    assert values[5] == pytest.approx((class_a + 1.0) / 2, abs=1e-12)


def test_iou_threshold_is_inclusive_and_uses_pixel_sizes():
    gt = (np.array([[[0, 0, 9, 9]]], np.float32), np.array([[0]], np.float32))
    for ymax, expected in [(4, 1.0), (3, 0.0)]:  # IoU 50/100 -> TP, 40/100 -> FP
        metric = VOCMApMetric(iou_thresh=0.5, class_names=['a'])
        metric.update(np.array([[[0, 0, 9, ymax]]], np.float32), np.array([[0]]),
                      np.array([[0.9]]), *gt)
        assert metric.get()[1] == [expected, expected]


def test_no_class_names_gives_gluoncv_name_and_scalar():
    metric = VOC07MApMetric()
    metric.update(*_one_image())
    name, value = metric.get()
    assert name == 'VOCMeanAP'
    assert value == pytest.approx((8.5 / 11 + 1.0) / 2, abs=1e-12)


def test_reset_and_empty():
    metric = VOCMApMetric(class_names=['a', 'b'])
    names, values = metric.get()
    assert names == ['a', 'b', 'mAP'] and all(math.isnan(v) for v in values)
    metric.update(*_one_image())
    metric.reset()
    assert all(math.isnan(v) for v in metric.get()[1])


def test_input_forms_agree():
    """mx.nd, B x N x 1 labels, lists of per-device batches and no difficult flags."""
    batches = [_random_batch(np.random.default_rng(i), 3, 30, 8, 5) for i in range(4)]
    reference = VOCMApMetric(class_names=NAMES)
    for batch in batches:
        reference.update(*batch)
    as_nd = VOCMApMetric(class_names=NAMES)
    for boxes, labels, scores, gt_boxes, gt_labels, difficult in batches:
        as_nd.update(mx.nd.array(boxes), mx.nd.array(labels[..., None]),
                     mx.nd.array(scores[..., None]), mx.nd.array(gt_boxes),
                     mx.nd.array(gt_labels[..., None]), mx.nd.array(difficult[..., None]))
    as_list = VOCMApMetric(class_names=NAMES)
    as_list.update(*[list(column) for column in zip(*batches)])
    _assert_same(as_nd.get(), reference.get())
    _assert_same(as_list.get(), reference.get())
    plain = VOCMApMetric(class_names=NAMES)
    with_zeros = VOCMApMetric(class_names=NAMES)
    for batch in batches:
        plain.update(*batch[:5])
        with_zeros.update(*batch[:5], np.zeros_like(batch[5]))
    _assert_same(plain.get(), with_zeros.get())
    none_per_device = VOCMApMetric(class_names=NAMES)  # GluonCV's validate() without flags
    none_per_device.update(*[list(column) for column in zip(*batches)][:5], [None] * 4)
    _assert_same(none_per_device.get(), plain.get())


def _assert_same(result, expected):
    assert result[0] == expected[0]
    np.testing.assert_array_equal(result[1], expected[1])  # NaN == NaN here


def test_pair_chunks_do_not_change_results(monkeypatch):
    from gluondet.metrics import _pairs
    batches = [_random_batch(np.random.default_rng(i), 8, 50, 10, 5) for i in range(3)]
    results = []
    for chunk in (_pairs.PAIR_CHUNK, 7):
        monkeypatch.setattr(_pairs, 'PAIR_CHUNK', chunk)
        metric = VOC07MApMetric(class_names=NAMES)
        for batch in batches:
            metric.update(*batch)
        results.append(metric.get())
    _assert_same(results[1], results[0])


def test_bad_shapes_are_named():
    boxes, labels, scores, gt_boxes, gt_labels, difficult = _one_image()
    metric = VOCMApMetric()
    with pytest.raises(ValueError, match='pred_scores'):
        metric.update(boxes, labels, scores[:, :3], gt_boxes, gt_labels, difficult)
    with pytest.raises(ValueError, match='gt_bboxes'):
        metric.update(boxes, labels, scores, gt_boxes[..., :3], gt_labels, difficult)
    with pytest.raises(ValueError, match='lists of different lengths'):
        metric.update([boxes], [labels], [scores], [gt_boxes, gt_boxes], [gt_labels], None)


def _random_batch(rng, batch, num_dets, max_gts, num_classes, quantize=False):
    """Jittered copies of random ground truths plus clutter, padded with -1."""
    xy = rng.uniform(0, 300, (batch, max_gts, 2))
    gt_boxes = np.concatenate([xy, xy + rng.uniform(4, 120, (batch, max_gts, 2))], -1)
    gt_boxes = gt_boxes.astype(np.float32)
    gt_labels = rng.integers(0, num_classes - 1, (batch, max_gts)).astype(np.float32)
    difficult = (rng.random((batch, max_gts)) < 0.15).astype(np.float32)
    num_gts = rng.integers(0, max_gts + 1, batch)  # some images have none
    pad = np.arange(max_gts) >= num_gts[:, None]
    gt_labels[pad], difficult[pad], gt_boxes[pad] = -1, -1, -1
    pick = (rng.random((batch, num_dets)) * np.maximum(num_gts, 1)[:, None]).astype(int)
    rows = np.arange(batch)[:, None]
    boxes = gt_boxes[rows, pick] + rng.normal(0, 3, (batch, num_dets, 4)).astype(np.float32)
    labels = gt_labels[rows, pick]
    # wrong classes, including the last class, which never has ground truth
    wrong = (rng.random((batch, num_dets)) < 0.2) | (labels < 0)
    labels[wrong] = rng.integers(0, num_classes, wrong.sum())
    scores = rng.random((batch, num_dets)).astype(np.float32)
    if quantize:
        scores = np.round(scores, 1)
    num_valid = rng.integers(0, num_dets + 1, batch)
    pad = np.arange(num_dets) >= num_valid[:, None]
    labels[pad], scores[pad], boxes[pad] = -1, -1, -1
    return boxes, labels, scores, gt_boxes, gt_labels, difficult


@pytest.mark.parametrize('quantize', [False, True])
@pytest.mark.parametrize('name', ['VOC07MApMetric', 'VOCMApMetric'])
def test_same_numbers_as_gluoncv(name, quantize):
    """Random detections on 600 images (ties included when quantized)."""
    gluoncv_voc = pytest.importorskip('gluoncv.utils.metrics.voc_detection')
    ours = globals()[name](class_names=NAMES)
    theirs = getattr(gluoncv_voc, name)(class_names=NAMES)
    rng = np.random.default_rng(7)
    for _ in range(60):
        batch = _random_batch(rng, 10, 60, 12, len(NAMES), quantize=quantize)
        ours.update(*batch)
        theirs.update(*batch)
    names, values = ours.get()
    expected_names, expected = theirs.get()
    assert names == expected_names
    assert math.isnan(values[4]) and 0.3 < values[-1] < 1  # class e: no ground truth
    np.testing.assert_allclose(values, expected, rtol=0, atol=1e-12, equal_nan=True)
