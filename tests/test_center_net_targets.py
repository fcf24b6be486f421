"""CenterNet's training targets, losses and train transform against GluonCV 0.10.5's
(``CenterNetTargetGenerator``, ``HeatmapFocalLoss`` / ``MaskedL1Loss``,
``CenterNetDefaultTrainTransform``)."""
import os
import pickle
import random

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, nd

from gluondet.data import VOCDetection
from gluondet.data.batchify import Stack, Tuple
from gluondet.data.center_net_transforms import (CenterNetAugment, CenterNetTrainTransform,
                                                 center_affine)
from gluondet.losses import CenterNetLoss
from gluondet.nn import CenterNetTargetGenerator

gcv_loss = pytest.importorskip('gluoncv.loss')
gcv_target = pytest.importorskip('gluoncv.model_zoo.center_net.target_generator')
gcv_presets = pytest.importorskip('gluoncv.data.transforms.presets.center_net')
gcv_bbox = pytest.importorskip('gluoncv.data.transforms.bbox')

BCCD_CLASSES = ('RBC', 'WBC', 'Platelets')
TARGET_NAMES = ('heatmap', 'wh_target', 'wh_mask', 'center_reg', 'center_reg_mask')


@pytest.fixture(scope='module')
def bccd(bccd_root):
    return VOCDetection(os.path.join(bccd_root, 'BCCD'), splits='train', classes=BCCD_CLASSES)


def gluoncv_targets(num_class, width, height, boxes, ids):
    out = gcv_target.CenterNetTargetGenerator(num_class, width, height)(boxes, ids)
    return [x.asnumpy() for x in out]


def assert_targets_equal(ours, theirs, atol=0):
    assert len(ours) == len(theirs) == 5
    for name, a, b in zip(TARGET_NAMES, ours, theirs):
        assert a.dtype == np.float32 and a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=name)


def bccd_output_boxes(dataset, index, size=128):
    """An image's boxes mapped to a ``size x size`` output map by GluonCV's validation affine
    (the image's longest side to the map, centered), clipped as GluonCV."""
    image, label = dataset[index]
    h, w = image.shape[:2]
    warp = gcv_bbox.get_affine_transform(np.array([w / 2, h / 2], np.float32), max(h, w), 0,
                                         [size, size])
    boxes = label[:, :4].copy()
    for row in boxes:
        row[:2] = gcv_bbox.affine_transform(row[:2], warp)
        row[2:] = gcv_bbox.affine_transform(row[2:], warp)
    return np.clip(boxes, 0, size - 1), label[:, 4].copy()


# -- targets ---------------------------------------------------------------------------------

def test_targets_of_bccd_boxes_equal_gluoncvs(bccd):
    generator = CenterNetTargetGenerator(3, 128, 128)
    peaks = 0
    for index in range(0, len(bccd), 10):
        boxes, ids = bccd_output_boxes(bccd, index)
        ours = generator(boxes, ids)
        assert_targets_equal(ours, gluoncv_targets(3, 128, 128, boxes, ids))
        peaks += int((ours[0] == 1).sum())
    assert peaks > 200       # the images' cells (RBCs overlap: some share a cell)


EDGE_BOXES = {
    'at the borders': ([[0, 0, 9.5, 7.2], [118.3, 120.1, 127, 127], [0, 60, 127, 70],
                        [50, 0, 60, 127]], [0, 1, 2, 0]),
    'tiny': ([[10, 10, 10.2, 10.3], [20.5, 30.5, 21, 31], [40, 40, 41, 41], [5, 5, 5.9, 7]],
             [0, 0, 1, 2]),
    'overlapping, one class': ([[10, 10, 40, 40], [12, 12, 42, 42], [25, 25, 26, 26],
                                [10.2, 10.1, 40.3, 40.2], [0, 0, 127, 127]], [1, 1, 1, 1, 1]),
    'empty': ([[10, 10, 10, 30], [50, 50, 40, 60], [7, 8, 9, 8]], [0, 1, 2]),
    'non-square map': ([[0, 0, 30, 20], [100, 50, 127, 63], [60, 10, 61, 60]], [2, 1, 0]),
}


@pytest.mark.parametrize('case', sorted(EDGE_BOXES))
def test_targets_of_edge_cases_equal_gluoncvs(case):
    boxes, ids = (np.array(x, np.float32) for x in EDGE_BOXES[case])
    height = 64 if case == 'non-square map' else 128
    ours = CenterNetTargetGenerator(3, 128, height)(boxes, ids)
    assert_targets_equal(ours, gluoncv_targets(3, 128, height, boxes, ids))
    assert int((ours[0] == 1).sum()) >= (0 if case == 'empty' else 3)


def test_targets_skip_bad_boxes_and_padding_without_nan():
    generator = CenterNetTargetGenerator(2, 32, 32)
    good = np.array([[4, 4, 12, 10]], np.float32)
    bad = np.array([[np.nan, 1, 5, 5], [1, 1, np.inf, 5], [-np.inf, 1, np.inf, 5],
                    [40, 40, 50, 50], [-20, -20, -10, -10], [3, 3, 3, 3], [-1, -1, -1, -1]],
                   np.float32)
    ids = np.array([1, 0, 0, 0, 0, 0, 0, -1], np.float32)
    ours = generator(np.vstack([good, bad]), ids)
    assert all(np.isfinite(x).all() for x in ours)
    assert_targets_equal(ours, generator(good, ids[:1]))
    assert all(not x.any() for x in generator(np.zeros((0, 4)), np.zeros(0)))
    with pytest.raises(ValueError, match='class id 2 of a 2-class'):
        generator(good, [2])


# -- losses ----------------------------------------------------------------------------------

def batch_targets(bccd, indices, size=128):
    generator = gcv_target.CenterNetTargetGenerator(3, size, size)
    per_image = [generator(*bccd_output_boxes(bccd, k, size)) for k in indices]
    return [nd.stack(*parts) for parts in zip(*per_image)]


def random_outputs(batch, size=128, seed=0):
    rng = np.random.RandomState(seed)
    heatmap = 1 / (1 + np.exp(-rng.normal(-2, 2, (batch, 3, size, size))))
    return [nd.array(x) for x in (np.clip(heatmap, 1e-4, 1 - 1e-4),
                                  rng.uniform(0, 30, (batch, 2, size, size)),
                                  rng.uniform(0, 1, (batch, 2, size, size)))]


def gluoncv_losses(outputs, targets):
    heatmap, wh, reg = outputs
    heatmap_t, wh_t, wh_mask, reg_t, reg_mask = targets
    return {'loss_heatmap': gcv_loss.HeatmapFocalLoss(from_logits=True)(heatmap, heatmap_t),
            'loss_wh': gcv_loss.MaskedL1Loss(weight=0.1)(wh, wh_t, wh_mask),
            'loss_center': gcv_loss.MaskedL1Loss(weight=1.0)(reg, reg_t, reg_mask)}


def losses_and_gradients(compute, outputs):
    for x in outputs:
        x.attach_grad()
    with autograd.record():
        losses = compute()
        total = sum(nd.sum(v) if isinstance(v, nd.NDArray) else sum(t.sum() for t in v)
                    for v in losses.values())
    total.backward()
    values = {k: float(v.sum().asscalar()) if isinstance(v, nd.NDArray)
              else sum(float(t.sum().asscalar()) for t in v) for k, v in losses.items()}
    return values, [x.grad.asnumpy().copy() for x in outputs]


def test_losses_and_gradients_equal_gluoncvs(bccd):
    targets = batch_targets(bccd, [0, 1, 2, 3])
    outputs = random_outputs(4)
    ours, our_grads = losses_and_gradients(
        lambda: CenterNetLoss()([outputs], [targets]), outputs)
    theirs, their_grads = losses_and_gradients(lambda: gluoncv_losses(outputs, targets),
                                               outputs)
    assert set(ours) == {'loss_heatmap', 'loss_wh', 'loss_center'}
    for name, value in theirs.items():
        assert value > 0.01
        assert ours[name] == pytest.approx(value, rel=1e-5, abs=1e-4), name
    for a, b in zip(our_grads, their_grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(b).max())


def test_losses_split_over_contexts_sum_to_the_whole_batchs(bccd):
    targets = batch_targets(bccd, [4, 5, 6, 7])
    outputs = random_outputs(4, seed=1)
    loss = CenterNetLoss(wh_weight=0.3, center_reg_weight=2.0)
    whole = loss([outputs], [targets])
    halves = loss([[x[:1] for x in outputs], [x[1:] for x in outputs]],
                  [[t[:1] for t in targets], [t[1:] for t in targets]])
    for name, value in whole.items():
        assert [t.shape for t in halves[name]] == [(1,), (3,)]
        assert sum(float(t.sum().asscalar()) for t in halves[name]) == pytest.approx(
            float(value[0].sum().asscalar()), rel=1e-5)
    assert float(whole['loss_wh'][0].sum().asscalar()) == pytest.approx(
        3 * float(gluoncv_losses(outputs, targets)['loss_wh'].asscalar()), rel=1e-5)


def test_losses_of_saturated_predictions_and_no_objects_are_finite():
    heatmap = nd.array(np.random.RandomState(0).randint(0, 2, (2, 3, 8, 8)))
    outputs = [heatmap, nd.zeros((2, 2, 8, 8)), nd.zeros((2, 2, 8, 8))]
    targets = [nd.zeros((2, 3, 8, 8))] + [nd.zeros((2, 2, 8, 8))] * 4
    targets[0][0, 1, 3, 3] = 1
    values, grads = losses_and_gradients(lambda: CenterNetLoss()([outputs], [targets]),
                                         outputs)
    assert all(np.isfinite(v) for v in values.values()) and values['loss_heatmap'] > 1
    assert values['loss_wh'] == values['loss_center'] == 0
    assert all(np.isfinite(g).all() for g in grads)


# -- transform -------------------------------------------------------------------------------

def gluoncv_sample(transform, image, label, seed):
    """GluonCV's transform of a sample with numpy's and python's RNGs seeded by ``seed``, and
    its random choices replayed from the same seeds, as a `CenterNetAugment`."""
    np.random.seed(seed)
    random.seed(seed)
    data_rng = transform._data_rng
    state = data_rng.get_state()
    out = transform(mx.nd.array(image, dtype='uint8'), label.copy())
    np.random.seed(seed)
    random.seed(seed)
    data_rng.set_state(state)
    np.random.choice([False, True], p=[1, 0])
    flip = bool(np.random.choice([False, True], p=[0.5, 0.5]))
    h, w = image.shape[:2]
    borders = [gcv_presets._get_border(128, size) for size in (w, h)]
    center = tuple(float(np.random.randint(low=b, high=size - b))
                   for b, size in zip(borders, (w, h)))
    scale = max(h, w) * float(np.clip(np.random.randn() * 0.4 + 1, 0.6, 1.4))
    order = [0, 1, 2]
    random.shuffle(order)
    factors = [0.0] * 3
    for op in order:
        factors[op] = 1 + data_rng.uniform(low=-0.4, high=0.4)
    lighting = tuple(data_rng.normal(scale=0.1, size=(3,)))
    aug = CenterNetAugment(flip, center, scale, tuple(order), tuple(factors), lighting)
    return [x.asnumpy() for x in out], aug


def test_train_transform_with_gluoncvs_choices_equals_gluoncvs(bccd):
    ours = CenterNetTrainTransform(512, 512, 3, targets=CenterNetTargetGenerator)
    flips, worst = set(), 0.0
    for seed, index in zip(range(6), (0, 0, 1, 1, 2, 3)):
        image, label = bccd[index]
        image = image.asnumpy()
        theirs = gcv_presets.CenterNetDefaultTrainTransform(512, 512, 3)
        expected, aug = gluoncv_sample(theirs, image, label, seed)
        got = ours.apply(image, label.copy(), aug)
        assert got[0].shape == (3, 512, 512) and got[0].dtype == np.float32
        worst = max(worst, float(np.abs(got[0] - expected[0]).max()))
        assert_targets_equal(got[1:], expected[1:], atol=1e-6)
        assert int((got[1] == 1).sum()) > 3
        flips.add(aug.flip)
    assert worst <= 1e-6
    assert flips == {False, True}


def blocks_image(seed=0):
    """A black 300 x 400 image with white rectangles 24+ pixels apart, and their labels."""
    rng = np.random.RandomState(seed)
    image = np.zeros((300, 400, 3), np.uint8)
    rows = []
    for x0 in range(10, 380, 64):
        for y0 in range(10, 280, 70):
            w, h = rng.randint(8, 40), rng.randint(8, 46)
            image[y0:y0 + h, x0:x0 + w] = 255
            rows.append([x0, y0, x0 + w, y0 + h, rng.randint(0, 3), 0])
    return image, np.array(rows, np.float32)


def test_random_boxes_stay_on_their_objects():
    image, label = blocks_image()
    transform = CenterNetTrainTransform(256, 256, 3, seed=5)
    checked = 0
    for _ in range(8):
        img, boxes = transform(image, label)
        assert np.isfinite(img).all() and img.shape == (3, 256, 256)
        white = img[0] > (img[0].max() + img[0].min()) / 2
        for x0, y0, x1, y1 in boxes[:, :4]:
            inside = white[int(np.ceil(y0)) + 1:int(y1) - 1, int(np.ceil(x0)) + 1:int(x1) - 1]
            assert inside.all()
            ring = white[max(0, int(y0) - 3):int(np.ceil(y1)) + 4,
                         max(0, int(x0) - 3):int(np.ceil(x1)) + 4].sum()
            assert ring == white[max(0, int(y0) - 1):int(np.ceil(y1)) + 2,
                                 max(0, int(x0) - 1):int(np.ceil(x1)) + 2].sum()
            checked += inside.size > 0
        boxed = np.zeros_like(white)         # every object seen has its box
        for x0, y0, x1, y1 in boxes[:, :4]:
            boxed[max(0, int(y0) - 1):int(y1) + 3, max(0, int(x0) - 1):int(x1) + 3] = True
        assert white.any() and not (white & ~boxed).any()
    assert checked > 40


def test_random_targets_match_the_boxes_and_repeat_with_a_seed():
    image, label = blocks_image(1)
    with_targets = CenterNetTrainTransform(256, 256, 3, targets=CenterNetTargetGenerator,
                                           seed=11)
    without = CenterNetTrainTransform(256, 256, 3, seed=11)
    again = CenterNetTrainTransform(256, 256, 3, targets=CenterNetTargetGenerator, seed=11)
    for _ in range(4):
        sample = with_targets(image, label)
        img, boxes = without(image, label)
        assert all(np.array_equal(a, b) for a, b in zip(sample, again(image, label)))
        np.testing.assert_array_equal(sample[0], img)
        heatmap, wh, wh_mask, _, _ = sample[1:]
        assert heatmap.shape == (3, 64, 64) and wh.shape == (2, 64, 64)
        assert wh_mask[0].sum() <= len(boxes) <= wh_mask[0].sum() + 2   # 2: cut at the edges
        inner = boxes[(boxes[:, :4] < 250).all(axis=1)]
        assert len(inner) > 3
        for x0, y0, x1, y1, cid in inner[:, :5]:
            x, y = int((x0 + x1) / 8), int((y0 + y1) / 8)
            assert heatmap[int(cid), y, x] == 1
            np.testing.assert_allclose(wh[:, y, x], [(x1 - x0) / 4, (y1 - y0) / 4], atol=1e-3)


def test_seed_none_draws_from_numpys_global_rng():
    image, label = blocks_image(2)
    transform = pickle.loads(pickle.dumps(     # as sent to a data worker
        CenterNetTrainTransform(128, 128, 3, targets=CenterNetTargetGenerator)))
    np.random.seed(3)
    first = transform(image, label)
    np.random.seed(3)
    second = transform(image, label)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    batch = Tuple([Stack()] * 6)([first, second])
    assert [x.shape for x in batch] == [(2, 3, 128, 128), (2, 3, 32, 32)] + [(2, 2, 32, 32)] * 4


def test_bad_boxes_and_tiny_images_neither_crash_nor_give_nan():
    transform = CenterNetTrainTransform(128, 128, 3, targets=CenterNetTargetGenerator, seed=0)
    label = np.array([[5, 5, 5, 9, 0, 0], [-50, -50, -10, -10, 1, 0], [500, 5, 600, 9, 1, 0],
                      [np.nan, 1, 4, 4, 2, 0], [2, 2, np.inf, 6, 2, 0], [1, 1, 9, 9, 1, 0]],
                     np.float32)
    for size in ((20, 30), (1, 1), (300, 7)):
        image = np.full(size + (3,), 128, np.uint8)
        for _ in range(5):
            sample = transform(image, label)
            assert all(np.isfinite(x).all() for x in sample)
            assert sample[3][0].sum() <= 1      # [1, 1, 9, 9] alone has an area
    sample = transform(np.zeros((40, 40, 3), np.uint8), np.zeros((0, 6), np.float32))
    assert not any(x.any() for x in sample[2:])
    with pytest.raises(ValueError, match='class id column'):
        transform(image, label[:, :4])


def test_center_affine_equals_gluoncvs():
    rng = np.random.RandomState(0)
    for _ in range(200):
        center = rng.randint(0, 1000, 2).astype(np.float32)
        scale = rng.randint(10, 1000) * float(np.clip(rng.randn() * 0.4 + 1, 0.6, 1.4))
        size = [int(rng.choice([128, 96, 512])), int(rng.choice([128, 64, 512]))]
        np.testing.assert_array_equal(center_affine(center, scale, size),
                                      gcv_bbox.get_affine_transform(center, scale, 0, size))
