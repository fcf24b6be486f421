"""gluondet.data.transforms: boxes stay on their pixels, crops keep their constraints."""
import os
import xml.etree.ElementTree as ET

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluondet.bbox import bbox_iou
from gluondet.data import transforms as T

# Three boxes, each painted in its own channel; column 4 is the box's index.
BOXES = [[10, 20, 50, 60], [40, 5, 90, 45], [70, 50, 95, 75]]


def _painted(h=80, w=100, boxes=BOXES):
    img = np.zeros((h, w, 3), np.uint8)
    label = np.zeros((len(boxes), 6), np.float32)
    for k, (x1, y1, x2, y2) in enumerate(boxes):
        img[y1:y2, x1:x2, k] = 255
        label[k] = [x1, y1, x2, y2, k, 0]
    return img, label


def _extent(img, channel, thresh=190):
    """Box around the pixels of ``channel`` brighter than ``thresh`` (xmax/ymax exclusive)."""
    ys, xs = np.nonzero(img[:, :, channel] > thresh)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)


def _assert_boxes_on_pixels(img, label, atol=1.0):
    for row in label:
        np.testing.assert_allclose(_extent(img, int(row[4])), row[:4], atol=atol)


# ---------------------------------------------------------------- resize

@pytest.mark.parametrize('interp', [0, 1, 2, 3, 9])
def test_resize_fixed_keeps_boxes_on_pixels(interp):
    img, label = _painted()
    out, new = T.resize(img, label, (300, 200), interp=interp)
    assert out.shape == (200, 300, 3) and out.dtype == np.uint8
    np.testing.assert_allclose(new[:, :4], label[:, :4] * [3, 2.5, 3, 2.5], rtol=1e-6)
    np.testing.assert_array_equal(new[:, 4:], label[:, 4:])
    _assert_boxes_on_pixels(out, new)


def test_resize_square_size_and_shrink():
    img, label = _painted()
    out, new = T.resize(img, label, 40)
    assert out.shape == (40, 40, 3)
    _assert_boxes_on_pixels(out, new, atol=1.0)


@pytest.mark.parametrize('shape,short,max_size,mult,expected', [
    ((480, 640), 600, 1000, 1, (600, 800)),
    ((300, 1000), 600, 1000, 1, (300, 1000)),
    ((2321, 3482), 800, 1000, 1, (667, 1000)),   # GluonCV's documented examples
    ((2321, 3482), 800, 1200, 32, (800, 1184)),
    ((640, 480), 512, None, 1, (683, 512)),
])
def test_resize_short_within_sizes(shape, short, max_size, mult, expected):
    img = np.zeros(shape + (1,), np.uint8)
    label = np.array([[0, 0, shape[1], shape[0], 1, 0]], np.float32)
    out, new = T.resize_short_within(img, label, short, max_size, mult_base=mult)
    assert out.shape == expected + (1,)
    np.testing.assert_allclose(new[0, :4], [0, 0, expected[1], expected[0]], rtol=1e-6)


def test_resize_short_within_keeps_boxes_on_pixels():
    img, label = _painted()
    out, new = T.resize_short_within(img, label, 200, 1000)
    assert out.shape == (200, 250, 3)
    _assert_boxes_on_pixels(out, new)


# ---------------------------------------------------------------- flip

def test_flip_exact_and_on_pixels():
    img, label = _painted()
    out, new, flipped = T.random_flip(img, label, px=1.0)
    assert flipped is True
    np.testing.assert_array_equal(new[0], [50, 20, 90, 60, 0, 0])
    np.testing.assert_array_equal(out, img[:, ::-1])
    _assert_boxes_on_pixels(out, new, atol=0)
    back, again, _ = T.random_flip(out, new, px=1.0)
    np.testing.assert_array_equal(back, img)
    np.testing.assert_array_equal(again, label)


def test_flip_never_with_px_zero():
    img, label = _painted()
    out, new, flipped = T.random_flip(img, label, px=0.0, rng=np.random.RandomState(0))
    assert flipped is False
    np.testing.assert_array_equal(out, img)
    np.testing.assert_array_equal(new, label)


def test_flip_rate_is_px():
    rng = np.random.RandomState(0)
    flips = [T.random_flip(np.zeros((2, 2, 3)), None, px=0.3, rng=rng)[2] for _ in range(2000)]
    assert 0.27 < np.mean(flips) < 0.33


# ---------------------------------------------------------------- expand

def test_expand_places_image_and_boxes():
    img, label = _painted()
    for seed in range(10):
        out, new, (x, y, w, h) = T.random_expand(img, label, rng=np.random.RandomState(seed))
        assert out.shape == (h, w, 3) and out.dtype == np.uint8
        assert 100 <= w <= 400 and 80 <= h <= 320 and w / 100 == pytest.approx(h / 80, abs=0.02)
        np.testing.assert_array_equal(out[y:y + 80, x:x + 100], img)
        np.testing.assert_array_equal(new[:, :4], label[:, :4] + [x, y, x, y])
        _assert_boxes_on_pixels(out, new, atol=0)
        if w > 100:
            corner = out[0, 0] if (x, y) != (0, 0) else out[-1, -1]
            np.testing.assert_array_equal(corner, [124, 116, 104])  # rounded ImageNet mean


def test_expand_fill_and_no_expansion():
    img, label = _painted()
    out, new, window = T.random_expand(img.astype(np.float32), label, max_ratio=1)
    assert window == (0, 0, 100, 80)
    np.testing.assert_array_equal(new, label)
    out, _, (x, y, w, h) = T.random_expand(img, label, fill=7, keep_ratio=False,
                                           rng=np.random.RandomState(3))
    assert (out == 7).sum() == 3 * (w * h - 100 * 80)
    with pytest.raises(ValueError, match='one value per channel'):
        T.random_expand(img, label, fill=(1, 2))


def test_expand_and_flip_without_opencv_dtype_or_channel_count():
    img = np.arange(4 * 5 * 6, dtype=np.int64).reshape(4, 5, 6)  # numpy fallbacks
    out, _, (x, y, w, h) = T.random_expand(img, None, fill=-3, rng=np.random.RandomState(0))
    assert out.dtype == np.int64 and (out == -3).sum() == 6 * (w * h - 20)
    np.testing.assert_array_equal(out[y:y + 4, x:x + 5], img)
    np.testing.assert_array_equal(T.random_flip(img, None, px=1.0)[0], img[:, ::-1])


# ---------------------------------------------------------------- SSD crop

def _centre_inside(box, window):
    x, y, w, h = window
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return x <= cx < x + w and y <= cy < y + h


def _check_crop(img, label, out, new, window):
    x, y, w, h = window
    assert out.shape == (h, w, 3)
    np.testing.assert_array_equal(out, img[y:y + h, x:x + w])
    kept = set(new[:, 4].astype(int))
    for k, box in enumerate(label):
        assert (k in kept) == _centre_inside(box, window)
    _assert_boxes_on_pixels(out, new, atol=0)


@pytest.mark.parametrize('constraint', [(0.1, None), (0.3, None), (0.5, None), (0.7, None),
                                        (0.9, None), (None, 1), (0.1, 0.3)])
def test_crop_meets_its_constraint(constraint):
    img, label = _painted(160, 200, [[10, 8, 190, 152]])  # large enough for IoU 0.9 crops
    lo = -np.inf if constraint[0] is None else constraint[0]
    hi = np.inf if constraint[1] is None else constraint[1]
    cropped = 0
    for seed in range(20):
        out, new, window = T.random_crop_with_constraints(
            img, label, constraints=(constraint,), rng=np.random.RandomState(seed))
        _check_crop(img, label, out, new, window)
        if window != (0, 0, 200, 160):
            cropped += 1
            x, y, w, h = window
            iou = bbox_iou(label, np.array([[x, y, x + w, y + h]]))
            assert (iou >= lo).all() and (iou <= hi).all()
    assert cropped >= 2


def test_crop_default_samplers_scale_and_aspect():
    img, label = _painted(160, 200, [[20, 40, 100, 120], [80, 10, 180, 90], [140, 100, 190, 150]])
    windows = set()
    for seed in range(40):
        out, new, window = T.random_crop_with_constraints(img, label,
                                                          rng=np.random.RandomState(seed))
        _check_crop(img, label, out, new, window)
        assert len(new) >= 1
        x, y, w, h = window
        scale = np.sqrt(w * h / (200.0 * 160.0))
        aspect = (w / 200.0) / (h / 160.0)
        assert 0.29 <= scale <= 1.0 and 0.48 <= aspect <= 2.05
        windows.add(window)
    assert len(windows) > 20


def test_crop_no_boxes_all_dropped_and_tiny_images():
    img = np.full((60, 70, 3), 9, np.uint8)
    out, new, (x, y, w, h) = T.random_crop_with_constraints(img, np.zeros((0, 6)),
                                                            rng=np.random.RandomState(1))
    assert new.shape == (0, 6) and out.shape == (h, w, 3) and w >= 1 and h >= 1
    outside = np.array([[100, 100, 120, 130, 1, 0], [5, 5, 5, 5, 2, 0]], np.float32)
    out, new, window = T.random_crop_with_constraints(img, outside, rng=np.random.RandomState(2))
    assert window == (0, 0, 70, 60) and new.shape == (0, 6) and out.shape == (60, 70, 3)
    one = np.array([[[1, 2, 3]]], np.uint8)
    for seed in range(5):
        out, new, window = T.random_crop_with_constraints(
            one, [[0, 0, 1, 1, 0, 0]], rng=np.random.RandomState(seed))
        assert window == (0, 0, 1, 1)
        np.testing.assert_array_equal(new, [[0, 0, 1, 1, 0, 0]])
    _, none_label, _ = T.random_crop_with_constraints(img, None, rng=np.random.RandomState(3))
    assert none_label is None


def test_crop_rejects_bad_arguments():
    img, label = _painted()
    with pytest.raises(ValueError, match='min_scale'):
        T.random_crop_with_constraints(img, label, min_scale=0)
    with pytest.raises(ValueError, match='max_aspect_ratio'):
        T.random_crop_with_constraints(img, label, max_aspect_ratio=0.5)


def test_bbox_crop_matches_gluoncv_rules():
    label = np.array([[0, 0, 8, 8, 1, 0], [8, 8, 30, 30, 2, 0], [40, 40, 50, 50, 3, 0],
                      [0, 0, 10, 10, 4, 0]])
    np.testing.assert_array_equal(T.bbox_crop(label, (5, 5, 20, 20)),
                                  [[0, 0, 3, 3, 1, 0], [3, 3, 20, 20, 2, 0], [0, 0, 5, 5, 4, 0]])
    np.testing.assert_array_equal(T.bbox_crop(label, (5, 5, 20, 20), allow_outside_center=False),
                                  [[3, 3, 20, 20, 2, 0], [0, 0, 5, 5, 4, 0]])


# ---------------------------------------------------------------- colour

_TYIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
_ITYIQ = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])


def _distort_step_by_step(img, rng):
    """GluonCV's sequence, one step at a time, hue in degrees."""
    x = img.astype(np.float64)

    def maybe(fn):
        return fn() if rng.uniform(0, 1) > 0.5 else None

    def contrast():
        alpha = maybe(lambda: rng.uniform(0.5, 1.5))
        return x if alpha is None else x * alpha

    def saturation():
        alpha = maybe(lambda: rng.uniform(0.5, 1.5))
        if alpha is None:
            return x
        gray = (x * [0.299, 0.587, 0.114]).sum(axis=2, keepdims=True)
        return x * alpha + gray * (1 - alpha)

    def hue():
        angle = maybe(lambda: np.deg2rad(rng.uniform(-18, 18)))
        if angle is None:
            return x
        rot = np.array([[1, 0, 0], [0, np.cos(angle), -np.sin(angle)],
                        [0, np.sin(angle), np.cos(angle)]])
        return x @ (_ITYIQ @ rot @ _TYIQ).T

    delta = maybe(lambda: rng.uniform(-32, 32))
    x = x if delta is None else x + delta
    for step in ((contrast, saturation, hue) if rng.randint(0, 2) else
                 (saturation, hue, contrast)):
        x = step()
    return np.clip(x, 0, 255)


def test_color_distort_equals_step_by_step():
    img = np.random.RandomState(0).randint(0, 256, (13, 17, 3)).astype(np.uint8)
    for seed in range(25):
        expected = _distort_step_by_step(img, np.random.RandomState(seed))
        out = T.random_color_distort(img.astype(np.float32), rng=np.random.RandomState(seed))
        assert out.dtype == np.float32 and out.shape == img.shape
        np.testing.assert_allclose(out, expected, atol=2e-3)
        out = T.random_color_distort(img, rng=np.random.RandomState(seed))
        assert out.dtype == np.uint8  # rounded and saturated by OpenCV
        np.testing.assert_allclose(out, expected, atol=1.0)


def test_color_distort_range_and_gray_stays_gray():
    gray = np.full((8, 8, 3), 128, np.uint8)
    outs = [T.random_color_distort(gray, rng=np.random.RandomState(s)) for s in range(30)]
    assert all(0 <= o.min() and o.max() <= 255 for o in outs)
    assert max(np.ptp(o.astype(int), axis=2).max() for o in outs) <= 1  # YIQ round trip ~1e-3
    assert len({float(o[0, 0, 0]) for o in outs}) > 10
    with pytest.raises(ValueError, match='RGB'):
        T.random_color_distort(np.zeros((4, 4, 1)))


# ---------------------------------------------------------------- normalize, imresize

def test_normalize_exact_and_as_mxnet():
    img = np.array([[[0, 51, 255], [255, 0, 102]]], np.uint8)  # 1 x 2 x 3
    out = T.normalize(img)
    assert out.shape == (3, 1, 2) and out.dtype == np.float32 and out.flags['C_CONTIGUOUS']
    assert out[0, 0, 0] == pytest.approx(-0.485 / 0.229, abs=1e-6)
    assert out[2, 0, 0] == pytest.approx((1 - 0.406) / 0.225, abs=1e-6)
    assert out[1, 0, 1] == pytest.approx(-0.456 / 0.224, abs=1e-6)
    expected = mx.nd.image.normalize(mx.nd.image.to_tensor(mx.nd.array(img, dtype='uint8')),
                                     mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD)
    np.testing.assert_allclose(out, expected.asnumpy(), atol=1e-5)
    with pytest.raises(ValueError, match='one value per channel'):
        T.normalize(img, mean=(0.5,))


def test_imresize_methods():
    img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    np.testing.assert_array_equal(T.imresize(img, 4, 4, interp=0),
                                  img.repeat(2, axis=0).repeat(2, axis=1))
    big = np.random.RandomState(0).randint(0, 256, (40, 30, 3)).astype(np.uint8)
    np.testing.assert_array_equal(T.imresize(big, 15, 20, interp=9),
                                  cv2.resize(big, (15, 20), interpolation=cv2.INTER_AREA))
    np.testing.assert_array_equal(T.imresize(big, 60, 80, interp=9),
                                  cv2.resize(big, (60, 80), interpolation=cv2.INTER_CUBIC))
    picks = [T.imresize(big, 17, 23, interp=10, rng=np.random.RandomState(s)) for s in (4, 4)]
    np.testing.assert_array_equal(picks[0], picks[1])
    assert T.imresize(big[:, :, :1], 5, 6).shape == (6, 5, 1)
    with pytest.raises(ValueError, match='interp'):
        T.imresize(big, 5, 5, interp=7)
    with pytest.raises(ValueError, match='at least 1x1'):
        T.imresize(big, 0, 5)


# ---------------------------------------------------------------- inputs, degenerate cases, seeds

def _pipeline(img, label, rng):
    """The SSD training augmentation in the order GluonCV applies it."""
    img = T.random_color_distort(img, rng=rng)
    img, label, _ = T.random_expand(img, label, rng=rng)
    img, label, _ = T.random_crop_with_constraints(img, label, rng=rng)
    img, label = T.resize(img, label, (64, 48), interp=10, rng=rng)
    img, label, _ = T.random_flip(img, label, rng=rng)
    return T.normalize(img), label


def test_same_seed_same_output_and_inputs_untouched():
    img, label = _painted()
    img0, label0 = img.copy(), label.copy()
    for make in (np.random.RandomState, np.random.default_rng):
        a = _pipeline(img, label, make(11))
        b = _pipeline(img, label, make(11))
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    np.random.seed(5)
    a = _pipeline(img, label, None)
    np.random.seed(5)
    b = _pipeline(img, label, None)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(img, img0)
    np.testing.assert_array_equal(label, label0)


def test_degenerate_inputs_give_finite_valid_outputs():
    empty = np.zeros((0, 6), np.float32)
    one_px = np.array([[[200, 10, 30]]], np.uint8)
    for seed in range(10):
        for img, label in ((one_px, empty), (one_px, [[0, 0, 1, 1, 3, 0]]),
                           (_painted()[0], empty)):
            out, new = _pipeline(img, label, np.random.RandomState(seed))
            assert out.shape == (3, 48, 64) and np.isfinite(out).all()
            assert new.shape[1] == 6 and np.isfinite(new).all()


def test_ndarray_input_and_bad_labels():
    img, label = _painted()
    out, new = T.resize(mx.nd.array(img, dtype='uint8'), mx.nd.array(label), (50, 40))
    assert isinstance(out, np.ndarray) and isinstance(new, np.ndarray)
    np.testing.assert_allclose(new[:, :4], label[:, :4] / 2)
    assert T.resize(img, None, 10)[1] is None
    assert T.random_flip(img, [], px=1.0)[1].shape == (0, 6)
    with pytest.raises(ValueError, match='label must be an N x 4'):
        T.random_flip(img, [1, 2, 3, 4])
    with pytest.raises(ValueError, match='image must be an HxWxC'):
        T.resize(np.zeros((5, 5)), label, 10)


def _voc_sample(root, name):
    """Image (RGB) and N x 6 label of one BCCD record, read plainly for the test."""
    tree = ET.parse(os.path.join(root, 'BCCD', 'Annotations', name + '.xml')).getroot()
    rows = []
    for obj in tree.iter('object'):
        box = obj.find('bndbox')
        rows.append([float(box.find(k).text) for k in ('xmin', 'ymin', 'xmax', 'ymax')] + [0, 0])
    img = cv2.imread(os.path.join(root, 'BCCD', 'JPEGImages', name + '.jpg'))[:, :, ::-1]
    return img, np.array(rows, np.float32)


def test_real_image_with_zero_area_box(bccd_root):
    img, label = _voc_sample(bccd_root, 'BloodImage_00338')
    assert img.shape == (480, 640, 3) and len(label) == 14
    assert ((label[:, 0] == label[:, 2]) & (label[:, 1] == label[:, 3])).sum() == 1
    out, new = T.resize_short_within(img, label, 600, 1000)
    assert out.shape == (600, 800, 3)
    np.testing.assert_allclose(new[:, :4], label[:, :4] * 1.25, rtol=1e-6)
    for seed in range(20):
        out, new = _pipeline(img, label, np.random.RandomState(seed))
        assert np.isfinite(out).all() and np.isfinite(new).all() and len(new) >= 1
        assert (new[:, 0] < new[:, 2]).all() and (new[:, 1] < new[:, 3]).all()
        assert (new[:, :4] >= 0).all() and (new[:, [0, 2]] <= 64).all()
        assert (new[:, [1, 3]] <= 48).all()
