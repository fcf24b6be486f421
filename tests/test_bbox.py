"""gluondet.bbox: IoU, conversions, clipping, box coding and NMS, with exact values."""
import mxnet as mx
import numpy as np
import pytest

from gluondet.bbox import (bbox_area, bbox_clip_xyxy, bbox_decode, bbox_encode, bbox_iou,
                           bbox_nms, bbox_xywh_to_xyxy, bbox_xyxy_to_xywh)

SQUARE = [0, 0, 10, 10]


def _iou1(a, b):
    return bbox_iou(np.array([a], np.float32), np.array([b], np.float32))[0, 0]


# ---------------------------------------------------------------- IoU

def test_iou_identical_disjoint_nested_partial():
    assert _iou1(SQUARE, SQUARE) == 1.0
    assert _iou1(SQUARE, [20, 20, 30, 30]) == 0.0
    assert _iou1(SQUARE, [2, 2, 6, 6]) == pytest.approx(16 / 100, abs=1e-7)
    assert _iou1(SQUARE, [5, 5, 15, 15]) == pytest.approx(25 / 175, abs=1e-7)


def test_iou_touching_boxes():
    assert _iou1(SQUARE, [10, 0, 20, 10]) == 0.0
    assert _iou1(SQUARE, [10, 10, 20, 20]) == 0.0


def test_iou_offset_one_is_inclusive_pixels():
    a, b = np.array([SQUARE], np.float32), np.array([[5, 5, 15, 15]], np.float32)
    # 11x11 boxes sharing a 6x6 block of pixels
    assert bbox_iou(a, b, offset=1)[0, 0] == pytest.approx(36 / (121 + 121 - 36), abs=1e-7)
    # touching boxes share pixel column 10 under the +1 convention
    touching = np.array([[10, 0, 20, 10]], np.float32)
    assert bbox_iou(a, touching, offset=1)[0, 0] == pytest.approx(11 / 231, abs=1e-7)
    assert bbox_iou(a, np.array([[11, 0, 20, 10]]), offset=1)[0, 0] == 0.0


def test_iou_matrix_shape_and_values_match_brute_force():
    rng = np.random.RandomState(0)
    xy = rng.uniform(0, 50, (7, 2))
    a = np.hstack([xy, xy + rng.uniform(1, 30, (7, 2))]).astype(np.float32)
    xy = rng.uniform(0, 50, (5, 2))
    b = np.hstack([xy, xy + rng.uniform(1, 30, (5, 2))]).astype(np.float32)
    iou = bbox_iou(a, b)
    assert iou.shape == (7, 5)
    for i in range(7):
        for j in range(5):
            w = max(0.0, min(a[i, 2], b[j, 2]) - max(a[i, 0], b[j, 0]))
            h = max(0.0, min(a[i, 3], b[j, 3]) - max(a[i, 1], b[j, 1]))
            union = bbox_area(a[i]) + bbox_area(b[j]) - w * h
            assert iou[i, j] == pytest.approx(w * h / union, rel=1e-5, abs=1e-7)


def test_iou_extra_columns_empty_and_degenerate():
    a = np.array([SQUARE + [3, 0]], np.float32)
    assert bbox_iou(a, a)[0, 0] == 1.0
    assert bbox_iou(np.zeros((0, 4)), a).shape == (0, 1)
    assert bbox_iou(a, np.zeros((0, 6))).shape == (1, 0)
    point = np.array([[3, 3, 3, 3]], np.float32)
    assert bbox_iou(point, point)[0, 0] == 0.0  # empty union: 0, not NaN


def test_iou_rejects_bad_shape():
    with pytest.raises(ValueError, match='bbox_a must be a 2-D array'):
        bbox_iou(np.array(SQUARE), np.array([SQUARE]))
    with pytest.raises(ValueError, match='bbox_b'):
        bbox_iou(np.array([SQUARE]), np.zeros((2, 3)))


# ---------------------------------------------------------------- conversions, area, clip

def test_xywh_xyxy_exact_and_round_trip():
    xywh = np.array([[1, 2, 3, 4, 7]], np.float32)
    np.testing.assert_array_equal(bbox_xywh_to_xyxy(xywh), [[1, 2, 4, 6, 7]])
    np.testing.assert_array_equal(bbox_xywh_to_xyxy(xywh, offset=1), [[1, 2, 3, 5, 7]])
    np.testing.assert_array_equal(bbox_xyxy_to_xywh([[1, 2, 4, 6]]), [[1, 2, 3, 4]])
    np.testing.assert_array_equal(bbox_xyxy_to_xywh([[1, 2, 3, 5]], offset=1), [[1, 2, 3, 4]])
    rng = np.random.RandomState(1)
    boxes = np.hstack([rng.uniform(0, 100, (20, 2)), rng.uniform(1, 50, (20, 2))])
    for offset in (0, 1):
        back = bbox_xyxy_to_xywh(bbox_xywh_to_xyxy(boxes, offset), offset)
        np.testing.assert_allclose(back, boxes, rtol=1e-12)
    assert bbox_xywh_to_xyxy([1, 2, 3, 4]).tolist() == [1, 2, 4, 6]
    assert bbox_xywh_to_xyxy(np.array([[1, 2, 3, 4]])).dtype == np.float32


def test_xywh_does_not_modify_input():
    xywh = np.array([[1, 2, 3, 4]], np.float32)
    bbox_xywh_to_xyxy(xywh)
    np.testing.assert_array_equal(xywh, [[1, 2, 3, 4]])


def test_area():
    boxes = np.array([SQUARE, [0, 0, 0, 5], [5, 5, 2, 9]], np.float32)
    np.testing.assert_array_equal(bbox_area(boxes), [100, 0, 0])
    np.testing.assert_array_equal(bbox_area(boxes, offset=1), [121, 6, 0])


def test_clip():
    boxes = np.array([[-5, -1, 30, 8, 2], [3, 4, 5, 6, 1]], np.float32)
    np.testing.assert_array_equal(bbox_clip_xyxy(boxes, 20, 7),
                                  [[0, 0, 20, 7, 2], [3, 4, 5, 6, 1]])
    np.testing.assert_array_equal(bbox_clip_xyxy(boxes, 20, 7, offset=1),
                                  [[0, 0, 19, 6, 2], [3, 4, 5, 6, 1]])


# ---------------------------------------------------------------- box coder

def test_encode_hand_computed():
    anchor = np.array([[0, 0, 10, 10]], np.float32)  # centre (5, 5), size 10 x 10
    gt = np.array([[2, 3, 12, 23]], np.float32)      # centre (7, 13), size 10 x 20
    np.testing.assert_allclose(bbox_encode(gt, anchor),
                               [[2.0, 8.0, 0.0, np.log(2) / 0.2]], rtol=1e-6)
    np.testing.assert_allclose(bbox_encode(gt, anchor, means=(0.1, 0.2, 0, 0), stds=(1, 1, 1, 1)),
                               [[0.1, 0.6, 0.0, np.log(2)]], rtol=1e-6, atol=1e-7)


def _random_boxes(rng, n, scale=100.0):
    xy = rng.uniform(0, scale, (n, 2))
    return np.hstack([xy, xy + rng.uniform(1, scale / 2, (n, 2))]).astype(np.float32)


def test_encode_decode_round_trip():
    rng = np.random.RandomState(2)
    gt, anchors = _random_boxes(rng, 50), _random_boxes(rng, 50)
    means, stds = (0.05, -0.1, 0.2, 0.0), (0.1, 0.1, 0.2, 0.2)
    codes = bbox_encode(gt, anchors, means, stds)
    np.testing.assert_allclose(bbox_decode(codes, anchors, means, stds), gt, atol=2e-4)


def test_encode_decode_broadcast_anchors():
    rng = np.random.RandomState(3)
    gt, anchor = _random_boxes(rng, 6).reshape(2, 3, 4), _random_boxes(rng, 3)
    codes = bbox_encode(gt, anchor)
    assert codes.shape == (2, 3, 4)
    np.testing.assert_allclose(bbox_decode(codes, anchor), gt, atol=2e-4)


def test_coder_matches_gluoncv():
    coder = pytest.importorskip('gluoncv.nn.coder')
    rng = np.random.RandomState(4)
    gt, anchors = _random_boxes(rng, 30), _random_boxes(rng, 30)
    encoder = coder.NormalizedBoxCenterEncoder(stds=(0.1, 0.1, 0.2, 0.2))
    targets, _ = encoder(mx.nd.ones((1, 30)), mx.nd.array(np.arange(30)[None]),
                         mx.nd.array(anchors[None]), mx.nd.array(gt[None]))
    np.testing.assert_allclose(bbox_encode(gt, anchors), targets.asnumpy()[0],
                               rtol=1e-4, atol=1e-4)
    codes = rng.uniform(-2, 2, (30, 4)).astype(np.float32)
    decoder = coder.NormalizedBoxCenterDecoder(stds=(0.1, 0.1, 0.2, 0.2), convert_anchor=True)
    expected = decoder(mx.nd.array(codes[None]), mx.nd.array(anchors[None])).asnumpy()[0]
    np.testing.assert_allclose(bbox_decode(codes, anchors), expected, rtol=1e-5, atol=1e-3)


def test_decode_clip_and_degenerate_boxes_stay_finite():
    anchor = np.array([[0, 0, 10, 10]], np.float32)
    huge = np.array([[0, 0, 1000, 1000]], np.float32)
    out = bbox_decode(huge, anchor, clip=np.log(4.0))
    np.testing.assert_allclose(out, [[-15, -15, 25, 25]], rtol=1e-6)
    codes = bbox_encode(np.array([[3, 3, 3, 3]], np.float32), np.array([[0, 0, 0, 5]]))
    assert np.isfinite(codes).all()


def test_coder_rejects_bad_stds():
    with pytest.raises(ValueError, match='4 values'):
        bbox_encode(np.zeros((1, 4)), np.ones((1, 4)), stds=(0.1, 0.2))


# ---------------------------------------------------------------- NMS

def _ref_nms(dets, overlap_thresh, valid_thresh, topk, force_suppress, background_id=-1):
    """Greedy NMS, one image: dets N x 6 [id, score, box] -> N x 6 kept rows then -1 rows."""
    valid = dets[(dets[:, 1] > valid_thresh) & (dets[:, 0] != background_id)]
    valid = valid[np.argsort(-valid[:, 1], kind='stable')]
    if topk > 0:
        valid = valid[:topk]
    alive = np.ones(len(valid), bool)
    for i in range(len(valid)):
        if not alive[i]:
            continue
        same = valid[i + 1:, 0] == valid[i, 0]
        iou = bbox_iou(valid[i:i + 1, 2:], valid[i + 1:, 2:])[0]
        alive[i + 1:] &= ~((force_suppress | same) & (iou > overlap_thresh))
    out = -np.ones_like(dets)
    out[:alive.sum()] = valid[alive]
    return out


def _random_dets(seed, batch=3, n=60, classes=4):
    rng = np.random.RandomState(seed)
    xy = rng.uniform(0, 40, (batch, n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(10, 40, (batch, n, 2))], axis=2)
    ids = rng.randint(0, classes, (batch, n, 1)).astype(np.float32)
    scores = rng.permutation(batch * n).reshape(batch, n, 1).astype(np.float32) / (batch * n)
    return np.concatenate([ids, scores, boxes], axis=2).astype(np.float32)


@pytest.mark.parametrize('force_suppress', [False, True])
@pytest.mark.parametrize('topk,valid_thresh', [(-1, 0.01), (20, 0.01), (-1, 0.3), (10, 0.5)])
def test_nms_matches_reference(force_suppress, topk, valid_thresh):
    dets = _random_dets(5)
    ids, scores, boxes = bbox_nms(dets, overlap_thresh=0.45, valid_thresh=valid_thresh,
                                  topk=topk, force_suppress=force_suppress)
    got = np.concatenate([ids, scores, boxes], axis=2)
    expected = np.stack([_ref_nms(d, 0.45, valid_thresh, topk, force_suppress) for d in dets])
    np.testing.assert_array_equal(got, expected)
    assert (got[:, :, 0] >= 0).sum() > 10  # some kept, some suppressed
    assert (got[:, :, 0] == -1).sum() > 10


def test_nms_per_class_keeps_more_than_agnostic():
    dets = _random_dets(6)
    kept = [(bbox_nms(dets, force_suppress=f)[0] >= 0).sum() for f in (False, True)]
    assert kept[0] > kept[1]


def test_nms_separate_arrays_post_nms_and_padding():
    dets = _random_dets(7, batch=2, n=40)
    dets[:, -5:] = -1  # padded rows are dropped
    expected = np.stack([_ref_nms(d, 0.5, 0.01, -1, False) for d in dets])[:, :15]
    ids, scores, boxes = bbox_nms(dets[..., 2:], dets[..., 1], dets[..., 0], overlap_thresh=0.5,
                                  post_nms=15)
    assert ids.shape == (2, 15, 1) and scores.shape == (2, 15, 1) and boxes.shape == (2, 15, 4)
    np.testing.assert_array_equal(np.concatenate([ids, scores, boxes], axis=2), expected)


def test_nms_single_class_without_ids_and_single_image():
    dets = _random_dets(8, batch=1, n=30, classes=1)[0]
    ids, scores, boxes = bbox_nms(dets[:, 2:], dets[:, 1:2], overlap_thresh=0.3)
    expected = _ref_nms(dets, 0.3, 0.01, -1, False)
    assert boxes.shape == (30, 4)
    np.testing.assert_array_equal(np.hstack([ids, scores, boxes]), expected)


def test_nms_ndarray_in_ndarray_out():
    dets = _random_dets(9, batch=2, n=20)
    ids, scores, boxes = bbox_nms(mx.nd.array(dets), post_nms=5)
    assert isinstance(boxes, mx.nd.NDArray) and boxes.shape == (2, 5, 4)
    expected = np.stack([_ref_nms(d, 0.45, 0.01, -1, False) for d in dets])[:, :5]
    np.testing.assert_array_equal(scores.asnumpy()[..., 0], expected[..., 1])


def test_nms_no_boxes_and_bad_input():
    ids, scores, boxes = bbox_nms(np.zeros((2, 0, 6), np.float32))
    assert ids.shape == (2, 0, 1) and boxes.shape == (2, 0, 4)
    with pytest.raises(ValueError, match='B x N x 6'):
        bbox_nms(np.zeros((2, 3, 5)))
    with pytest.raises(ValueError, match='post_nms'):
        bbox_nms(np.zeros((1, 3, 6)), post_nms=0)
