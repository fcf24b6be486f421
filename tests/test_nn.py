"""gluondet.nn: anchors, box coding, matching, SSD targets, multi-class NMS."""
import math

import mxnet as mx
import numpy as np
import pytest

from gluondet.nn import (BipartiteMatcher, BoxCenterDecoder, BoxCenterEncoder, CompositeMatcher,
                         MaximumMatcher, MultiClassNMS, SSDAnchorGenerator, SSDTargetGenerator,
                         ssd_anchor_shapes)


def test_anchor_shapes_follow_ssd_order():
    shapes = ssd_anchor_shapes((30, 60), [1, 2, 0.5])
    expected = [(30, 30), (math.sqrt(1800), math.sqrt(1800)),
                (30 * math.sqrt(2), 30 / math.sqrt(2)), (30 * math.sqrt(0.5), 30 / math.sqrt(0.5))]
    np.testing.assert_allclose(shapes, expected, rtol=1e-12)


def test_anchor_generator_values_on_a_small_map():
    gen = SSDAnchorGenerator((10, 40), [1, 2], step=8, alloc_size=(4, 4))
    gen.initialize()
    anchors = gen(mx.nd.zeros((2, 5, 2, 3))).asnumpy()
    assert gen.num_anchors == 3
    assert anchors.shape == (1, 2 * 3 * 3, 4)
    # cell (row 1, col 2): center (2.5 * 8, 1.5 * 8); anchors 10x10, 20x20, 10*sqrt2 x 10/sqrt2
    cell = anchors[0, (1 * 3 + 2) * 3:(1 * 3 + 2) * 3 + 3]
    expected = [[20, 12, 10, 10], [20, 12, 20, 20], [20, 12, 10 * 2 ** 0.5, 10 / 2 ** 0.5]]
    np.testing.assert_allclose(cell, expected, rtol=1e-6)


def test_anchor_generator_clip():
    gen = SSDAnchorGenerator((100, 400), [1], step=64, alloc_size=(2, 2), clip=True,
                             im_size=(100, 120))
    gen.initialize()
    anchors = gen(mx.nd.zeros((1, 1, 2, 2))).asnumpy()[0]
    assert anchors[:, 0].max() == 96 and anchors[:, 1].max() == 96
    assert anchors[:, 2].max() == 120 and anchors[:, 3].max() == 100


@pytest.mark.parametrize('sizes,ratios,step,feature', [
    ((21, 45), [1, 2, 0.5], 8, 19),
    ((45, 99), [1, 2, 0.5, 3, 1.0 / 3], 16, 10),
    ((51.2, 102.4), [1, 2, 0.5], 16, 32),
    ((460.8, 537.6), [1, 2, 0.5], 512, 1),
])
def test_anchor_generator_equals_gluoncv(sizes, ratios, step, feature):
    from gluoncv.model_zoo.ssd.anchor import SSDAnchorGenerator as GluonCVAnchors
    theirs = GluonCVAnchors(0, (300, 300), sizes, ratios, step, (32, 32))
    ours = SSDAnchorGenerator(sizes, ratios, step, (32, 32))
    theirs.initialize()
    ours.initialize()
    x = mx.nd.zeros((1, 8, feature, feature))
    assert ours.num_anchors == theirs.num_depth
    np.testing.assert_array_equal(ours.anchors.data().asnumpy(), theirs.anchors.data().asnumpy())
    np.testing.assert_array_equal(ours(x).asnumpy(), theirs(x).asnumpy())


def test_box_encoder_exact_values():
    anchors = mx.nd.array([[[0, 0, 10, 10]]])
    boxes = mx.nd.array([[[1, 2, 5, 10]]])
    codes = BoxCenterEncoder()(boxes, anchors).asnumpy()
    # center (3, 6) size (4, 8) vs anchor center (5, 5) size (10, 10)
    expected = [-2.0, 1.0, math.log(0.4) / 0.2, math.log(0.8) / 0.2]
    np.testing.assert_allclose(codes[0, 0], expected, rtol=1e-6)


def test_box_decoder_inverts_encoder():
    rng = np.random.RandomState(0)
    xy = rng.uniform(0, 200, (1, 50, 2))
    anchors_corner = np.concatenate([xy, xy + rng.uniform(5, 100, (1, 50, 2))], -1)
    boxes = np.concatenate([xy + 3, xy + rng.uniform(10, 80, (1, 50, 2))], -1)
    codes = BoxCenterEncoder()(mx.nd.array(boxes), mx.nd.array(anchors_corner))
    centers = np.concatenate([(anchors_corner[..., :2] + anchors_corner[..., 2:]) / 2,
                              anchors_corner[..., 2:] - anchors_corner[..., :2]], -1)
    decoded = BoxCenterDecoder()(codes, mx.nd.array(centers)).asnumpy()
    np.testing.assert_allclose(decoded, boxes, atol=1e-3)


IOUS = [[0.8, 0.1, -1],
        [0.6, 0.3, -1],
        [0.8, 0.2, -1],
        [0.1, 0.4, -1]]


def test_bipartite_matcher_forces_best_anchors_and_ties():
    match = BipartiteMatcher(share_max=False)(mx.nd.array([IOUS])).asnumpy()
    # gt 0 -> anchor 0 or 2 (tied 0.8, both kept), gt 1 -> anchor 3 (its best)
    np.testing.assert_array_equal(match, [[0, -1, 0, 1]])


def test_maximum_matcher_threshold():
    match = MaximumMatcher(0.5)(mx.nd.array([IOUS])).asnumpy()
    np.testing.assert_array_equal(match, [[0, 0, 0, -1]])


def test_composite_matcher_fills_only_unmatched():
    ious = mx.nd.array([IOUS])
    strict = CompositeMatcher([BipartiteMatcher(), MaximumMatcher(0.7)])(ious).asnumpy()
    loose = CompositeMatcher([BipartiteMatcher(), MaximumMatcher(0.5)])(ious).asnumpy()
    np.testing.assert_array_equal(strict, [[0, -1, 0, 1]])
    np.testing.assert_array_equal(loose, [[0, 0, 0, 1]])


def test_matchers_ignore_padding_only_images():
    ious = mx.nd.ones((1, 4, 2)) * -1
    matcher = CompositeMatcher([BipartiteMatcher(), MaximumMatcher(0.5)])
    np.testing.assert_array_equal(matcher(ious).asnumpy(), [[-1, -1, -1, -1]])


def _random_gts(rng, count, size=300):
    xy = rng.uniform(0, size - 50, (count, 2))
    boxes = np.concatenate([xy, np.minimum(xy + rng.uniform(8, 200, (count, 2)), size)], 1)
    return boxes.astype(np.float32), rng.randint(0, 20, (count, 1)).astype(np.float32)


def _ssd300_anchors():
    gens = [SSDAnchorGenerator(s, r, st, (38, 38)) for s, r, st in zip(
        [(21, 45), (45, 99), (99, 153), (153, 207), (207, 261), (261, 315)],
        [[1, 2, 0.5]] + [[1, 2, 0.5, 3, 1.0 / 3]] * 3 + [[1, 2, 0.5]] * 2,
        [8, 16, 32, 64, 100, 300])]
    maps = [38, 19, 10, 5, 3, 1]
    for gen in gens:
        gen.initialize()
    return mx.nd.concat(*[g(mx.nd.zeros((1, 1, m, m))) for g, m in zip(gens, maps)], dim=1)


def test_target_generator_equals_gluoncv():
    from gluoncv.model_zoo.ssd.target import SSDTargetGenerator as GluonCVTargets
    anchors = _ssd300_anchors()
    theirs = GluonCVTargets(iou_thresh=0.5, stds=(0.1, 0.1, 0.2, 0.2), negative_mining_ratio=-1)
    ours = SSDTargetGenerator()
    rng = np.random.RandomState(0)
    for _ in range(12):
        boxes, ids = _random_gts(rng, rng.randint(1, 9))
        cls_t, box_t, _ = theirs(anchors, None, mx.nd.array(boxes[None]), mx.nd.array(ids[None]))
        cls_o, box_o = ours(anchors, mx.nd.array(boxes[None]), mx.nd.array(ids[None]))
        assert cls_o.shape == (1, anchors.shape[1]) and box_o.shape == (1, anchors.shape[1], 4)
        assert (cls_o > 0).sum().asscalar() >= len(boxes)
        np.testing.assert_array_equal(cls_o.asnumpy(), cls_t.asnumpy())
        np.testing.assert_array_equal(box_o.asnumpy(), box_t.asnumpy())


def test_target_generator_batch_with_padding_equals_single_images():
    anchors = _ssd300_anchors()
    gen = SSDTargetGenerator()
    gen.hybridize()
    rng = np.random.RandomState(1)
    images = [_random_gts(rng, n) for n in (3, 1, 6)]
    boxes = -np.ones((3, 6, 4), np.float32)
    ids = -np.ones((3, 6, 1), np.float32)
    for i, (b, c) in enumerate(images):
        boxes[i, :len(b)], ids[i, :len(c)] = b, c
    cls_batch, box_batch = gen(anchors, mx.nd.array(boxes), mx.nd.array(ids))
    for i, (b, c) in enumerate(images):
        cls_one, box_one = gen(anchors, mx.nd.array(b[None]), mx.nd.array(c[None]))
        np.testing.assert_array_equal(cls_batch[i].asnumpy(), cls_one[0].asnumpy())
        np.testing.assert_array_equal(box_batch[i].asnumpy(), box_one[0].asnumpy())


def test_target_generator_degenerate_and_empty_images_stay_finite():
    anchors = _ssd300_anchors()
    boxes = mx.nd.array([[[50, 50, 50, 50], [10, 10, 120, 90]], [[-1, -1, -1, -1]] * 2])
    ids = mx.nd.array([[[2], [4]], [[-1], [-1]]])
    cls_t, box_t = SSDTargetGenerator()(anchors, boxes, ids)
    assert np.isfinite(box_t.asnumpy()).all()
    assert set(np.unique(cls_t[0].asnumpy())) == {0, 5}   # zero-area box never matched
    assert cls_t[1].sum().asscalar() == 0 and box_t[1].abs().sum().asscalar() == 0


def _nms_inputs():
    probs = mx.nd.array([[[0.1, 0.7, 0.2], [0.25, 0.6, 0.15], [0.005, 0.005, 0.99]]])
    boxes = mx.nd.array([[[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]]])
    return probs, boxes


def test_multiclass_nms_exact_output():
    ids, scores, boxes = MultiClassNMS(post_nms=5)(*_nms_inputs())
    assert ids.shape == (1, 5, 1) and boxes.shape == (1, 5, 4)
    np.testing.assert_array_equal(ids.asnumpy()[0, :, 0], [1, 0, 1, -1, -1])
    np.testing.assert_array_equal(scores.asnumpy()[0, :, 0],
                                  np.float32([0.99, 0.7, 0.2, -1, -1]))
    np.testing.assert_array_equal(boxes.asnumpy()[0, :3],
                                  [[50, 50, 60, 60], [0, 0, 10, 10], [0, 0, 10, 10]])
    assert (boxes.asnumpy()[0, 3:] == -1).all()


def test_multiclass_nms_disabled_returns_every_candidate():
    ids, scores, _ = MultiClassNMS(nms_thresh=-1)(*_nms_inputs())
    assert ids.shape == (1, 6, 1)
    np.testing.assert_array_equal(ids.asnumpy()[0, :, 0], [0, 0, -1, 1, 1, 1])
    np.testing.assert_array_equal(scores.asnumpy()[0, :, 0],
                                  np.float32([0.7, 0.6, 0, 0.2, 0.15, 0.99]))


def _every_candidate_nms(probs, boxes, nms_topk=400, post_nms=100):
    """GluonCV's way: box_nms over all C x A candidates, then the best post_nms."""
    scores = mx.nd.transpose(probs[:, :, 1:], (0, 2, 1))
    scores = mx.nd.where(scores > 0.01, scores, mx.nd.zeros_like(scores))
    rows = MultiClassNMS._all_candidates(mx.nd, scores, boxes)  # pylint: disable=protected-access
    rows = mx.nd.contrib.box_nms(rows, overlap_thresh=0.45, topk=nms_topk, valid_thresh=0.01,
                                 id_index=0, score_index=1, coord_start=2)
    return rows[:, :min(post_nms, rows.shape[1])]


@pytest.mark.parametrize('quantized', [False, True])
def test_multiclass_nms_preselection_equals_nms_over_every_candidate(quantized):
    rng = np.random.RandomState(0)
    for batch, anchors, classes, nms_topk in ((2, 600, 21, 400), (2, 900, 5, 50), (3, 40, 4, 400)):
        if quantized:   # many exactly tied scores
            probs = mx.nd.array(rng.randint(0, 8, (batch, anchors, classes)) / 8.0)
        else:
            probs = mx.nd.softmax(mx.nd.array(rng.normal(0, 4, (batch, anchors, classes))))
        xy = rng.uniform(0, 100, (batch, anchors, 2))
        boxes = mx.nd.array(np.concatenate([xy, xy + rng.uniform(5, 40, xy.shape)], -1))
        nms = MultiClassNMS(nms_topk=nms_topk)
        for hybrid in (False, True):
            if hybrid:
                nms.hybridize()
            got = mx.nd.concat(*nms(probs, boxes), dim=-1).asnumpy()
            expected = _every_candidate_nms(probs, boxes, nms_topk).asnumpy()
            np.testing.assert_array_equal(got[:, :expected.shape[1]], expected)
            assert (got[:, expected.shape[1]:] == -1).all()


def test_multiclass_nms_pads_when_there_are_fewer_candidates_than_post_nms():
    ids, scores, boxes = MultiClassNMS(post_nms=500)(*_nms_inputs())
    assert ids.shape == (1, 500, 1)
    np.testing.assert_array_equal(ids.asnumpy()[0, :4, 0], [1, 0, 1, -1])
    assert (scores.asnumpy()[0, 3:] == -1).all() and (boxes.asnumpy()[0, 3:] == -1).all()
