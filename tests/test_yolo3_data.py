"""YOLOv3's training data: its transform, and training at per-batch input sizes (multi-scale)
served by the engine's loader with any number of workers, on every rank, and across a resume."""
import dataclasses
import glob
import os
import signal

import mxnet as mx
import numpy as np
import pytest
from mxnet import gluon

from gluondet.data import transforms as T
from gluondet.data.batchify import Pad, PadImages, Tuple
from gluondet.data.mixup import MixupDetection
from gluondet.data.multiscale import SizedTransform
from gluondet.data.preprocess import fixed_size, val_transform
from gluondet.data.yolo_transforms import YOLO3TrainTransform, yolo3_train_batchify
from gluondet.engine import (EpochBatchSampler, HookBase, SizedBatchSampler, TrainConfig,
                             TrainData, local_runtime)
from gluondet.engine.loop import train_data
from gluondet.engine.testing import check_resume, train
from test_engine_toy import ToyImageTask

HERE = os.path.dirname(os.path.abspath(__file__))
GLUONCV_SIZES = list(range(320, 609, 32))     # train_yolo3.py: x * 32 for x in range(10, 20)


def stand_in_targets(height, width, boxes, ids, *mix):
    """A target function of the YOLOv3 kind: arrays whose shapes follow the input size."""
    grid = np.zeros((height // 32, width // 32), np.float32)
    grid[0, 0] = len(ids)
    weight = mix[0].sum() if mix else -1.0
    return np.array([height, width], np.float32), grid, np.array([ids.sum(), weight], np.float32)


# ------------------------------------------------------------------ the transform

PATCH = {0: 250, 1: 40}     # grey level of each class's object; the background is black


def _patches(width=640, height=480):
    """A black image with a bright object of class 0 and a dark one of class 1, boxed."""
    label = np.array([[60, 50, 260, 250, 0, 0], [380, 200, 600, 420, 1, 0]], np.float32)
    image = np.zeros((height, width, 3), np.uint8)
    for x0, y0, x1, y1, cls, _ in label.astype(int):
        image[y0:y1, x0:x1] = PATCH[cls]
    return mx.nd.array(image, dtype=np.uint8), label


def _pixels(data, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD):
    """A normalized ``3 x H x W`` image back in 0-255, ``H x W x 3``."""
    return (data.transpose(1, 2, 0) * np.array(std) + np.array(mean)) * 255


def _record(monkeypatch, drawn, *names):
    """Make each function ``names`` of `gluondet.data.transforms` keep its last result in
    ``drawn[name]``; ``resize`` also numpy's RNG state before it draws the interpolation, in
    ``drawn['interp']``."""
    def spy(name, real):
        def wrapper(*args, **kwargs):
            if name == 'resize':
                drawn['interp'] = np.random.get_state()
            drawn[name] = out = real(*args, **kwargs)
            return out
        return wrapper
    for name in names:
        monkeypatch.setattr(T, name, spy(name, getattr(T, name)))


def test_boxes_follow_the_objects_through_expand_crop_resize_and_flip(monkeypatch):
    """Without the colour jitter, each output box frames its own class's object: boxes moved,
    cut, scaled and mirrored with the pixels, kept inside the input, ids kept with them."""
    monkeypatch.setattr(T, 'random_color_distort', lambda img: img.asnumpy())
    drawn, flips = {}, set()
    _record(monkeypatch, drawn, 'random_flip')
    image, label = _patches()
    transform = YOLO3TrainTransform(416, 416)
    checked = 0
    for seed in range(30):
        np.random.seed(seed)
        size = [(416, 416), (320, 608)][seed % 2]
        data, out = transform(image, label, size)
        flips.add(drawn['random_flip'][2])
        assert data.shape == (3, size[1], size[0]) and data.dtype == np.float32
        assert out.dtype == np.float32 and out.shape[1] == 6 and len(out) >= 1
        assert set(out[:, 4]) <= {0, 1}
        assert (out[:, :2] >= 0).all() and (out[:, 2] <= size[0]).all() \
            and (out[:, 3] <= size[1]).all() and (out[:, :2] < out[:, 2:4]).all()
        pixels = _pixels(data)
        for x0, y0, x1, y1, cls, _ in out:
            inner = pixels[int(np.ceil(y0)) + 1:int(y1) - 1, int(np.ceil(x0)) + 1:int(x1) - 1]
            if inner.size:
                assert abs(np.median(inner) - PATCH[int(cls)]) < 8, (seed, cls)
                checked += 1
    assert checked >= 30 and flips == {True, False}


def test_without_zoom_every_box_is_only_scaled_and_perhaps_mirrored():
    """``zoom=False`` (the demo recipe's): no zoom-out and no crop, so every box stays whole,
    scaled to the input and mirrored with it or not."""
    image, label = _patches()
    transform = YOLO3TrainTransform(160, 160, zoom=False)
    scaled = label[:, :4] * np.array([128 / 640, 192 / 480] * 2, np.float32)
    mirrored = scaled.copy()
    mirrored[:, [0, 2]] = 128 - scaled[:, [2, 0]]
    outcomes = set()
    for seed in range(10):
        np.random.seed(seed)
        data, out = transform(image, label, (128, 192))
        assert data.shape == (3, 192, 128)
        np.testing.assert_array_equal(out[:, 4:], label[:, 4:])
        outcomes.add(next(i for i, boxes in enumerate((scaled, mirrored))
                          if np.allclose(out[:, :4], boxes, atol=1e-3)))
    assert outcomes == {0, 1}


def test_targets_get_the_input_size_the_boxes_and_the_ids():
    image, label = _patches()
    np.random.seed(0)
    sample = YOLO3TrainTransform(416, 416, stand_in_targets)(image, label, (320, 608))
    assert len(sample) == 5
    data, size, grid, sums, boxes = sample
    assert data.shape == (3, 608, 320) and grid.shape == (19, 10)
    assert size.tolist() == [608, 320]
    np.random.seed(0)
    _, plain = YOLO3TrainTransform(416, 416)(image, label, (320, 608))
    np.testing.assert_array_equal(boxes, plain[:, :4])
    assert sums.tolist() == [plain[:, 4].sum(), -1] and grid[0, 0] == len(plain)
    # mixup's weights (a 7th column) reach the target function; the default size is the
    # transform's own
    mixed = np.hstack([label, np.full((2, 1), 0.25, np.float32)])
    np.random.seed(0)
    data, _, _, sums, _ = YOLO3TrainTransform(416, 416, stand_in_targets)(image, mixed)
    assert data.shape == (3, 416, 416) and sums[1] == pytest.approx(0.25 * len(plain))


def test_batchify_stacks_the_targets_and_pads_the_boxes_with_minus_one():
    image, label = _patches()
    transform = YOLO3TrainTransform(320, 320, stand_in_targets)
    samples = [transform(image, label), transform(image, label[:1])]
    data, size, grid, sums, boxes = yolo3_train_batchify(3)(samples)
    assert data.shape == (2, 3, 320, 320) and grid.shape == (2, 10, 10)
    assert boxes.shape == (2, len(samples[0][-1]), 4)
    pad = boxes.asnumpy()[1, len(samples[1][-1]):]
    assert pad.size and (pad == -1).all()


def test_the_yolo3_target_generator_plugs_in():
    """gluondet.nn's generator as the target function, GluonCV's darknet53 anchors at an input
    of 320: 3 x (10^2 + 20^2 + 40^2) predictions; an image without boxes has no targets."""
    from gluondet.nn.yolo_target import YOLOV3TargetGenerator
    generator = YOLOV3TargetGenerator([[116, 90, 156, 198, 373, 326], [30, 61, 62, 45, 59, 119],
                                       [10, 13, 16, 30, 33, 23]], (32, 16, 8))
    image, label = _patches()
    transform = YOLO3TrainTransform(416, 416, generator)
    np.random.seed(2)
    samples = [transform(image, label, (320, 320)), transform(image, label[:0], (320, 320))]
    batch = [x.asnumpy() for x in yolo3_train_batchify(5)(samples)]
    assert [x.shape[1:] for x in batch[1:6]] == [(6300, 1), (6300, 2), (6300, 2), (6300, 2),
                                                 (6300, 1)]
    objectness, class_id, boxes = batch[1], batch[5], batch[6]
    assert 1 <= objectness[0].sum() <= 2 and set(class_id[0][objectness[0] > 0]) <= {0, 1}
    assert objectness[1].sum() == 0 and (boxes[1] == -1).all()


# ------------------------------------------------------------------ per-batch sizes

def _sizes(sampler, epoch, start=0):
    sampler.set_epoch(epoch, start)
    batches = list(sampler)
    assert all(len({size for _, size in batch}) == 1 for batch in batches)
    return [batch[0][1] for batch in batches]


def test_sizes_change_every_10_batches_within_320_to_608():
    inner = EpochBatchSampler(100, 4, seed=0)        # 25 batches per epoch

    def four_epochs(seed):
        sampler = SizedBatchSampler(inner, GLUONCV_SIZES, 10, seed)
        return sum((_sizes(sampler, epoch) for epoch in range(4)), [])
    sizes = four_epochs(3)
    assert len(sizes) == 100 and all(w == h and w in GLUONCV_SIZES for w, h in sizes)
    blocks = [sizes[i:i + 10] for i in range(0, 100, 10)]      # blocks run across epochs
    assert all(len(set(block)) == 1 for block in blocks)
    assert len({block[0] for block in blocks}) >= 4
    sampler = SizedBatchSampler(inner, GLUONCV_SIZES, 10, seed=3)
    assert _sizes(sampler, 2, start=7) == sizes[57:75]         # a function of the step
    assert len(sampler) == 18 and sampler.size_at(57) == sizes[57]
    assert four_epochs(4) != sizes
    assert _sizes(SizedBatchSampler(inner, [(320, 416)], 1, 0), 0) == [(320, 416)] * 25


@pytest.mark.parametrize('sizes, interval, message', [
    ([], 10, 'train_sizes must be a non-empty sequence'),
    ([320, (320, 0)], 10, r'positive int or \(width, height\), got \[320, \(320, 0\)\]'),
    (416, 10, 'train_sizes must be'),
    ([320], 0, 'train_size_interval must be an integer >= 1, got 0'),
])
def test_bad_sizes_are_one_line_errors(sizes, interval, message):
    with pytest.raises(ValueError, match=message):
        SizedBatchSampler(EpochBatchSampler(8, 2, seed=0), sizes, interval, seed=0)


class _Photos(gluon.data.Dataset):
    """``num`` random uint8 images of 40..90 px a side with 0-3 boxes of 3 classes."""

    def __init__(self, num, seed=1):
        rng = np.random.RandomState(seed)
        self.items = []
        for _ in range(num):
            h, w = rng.randint(40, 91, size=2)
            corners = np.sort(rng.uniform(0, 1, (rng.randint(0, 4), 2, 2)), axis=1)
            boxes = (corners * [w, h]).reshape(-1, 4)
            boxes[:, 2:] += 2
            label = np.hstack([boxes, rng.randint(0, 3, (len(boxes), 1)),
                               np.zeros((len(boxes), 1))]).astype(np.float32)
            self.items.append((rng.randint(0, 256, (h, w, 3)).astype(np.uint8), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        image, label = self.items[idx]
        return mx.nd.array(image, dtype=np.uint8), label.copy()


def _loader(num_workers=0, rank=0, world_size=1, batch_size=2, mixup_epochs=0):
    photos = _Photos(24)
    dataset = SizedTransform(MixupDetection(photos) if mixup_epochs else photos,
                             YOLO3TrainTransform(416, 416, stand_in_targets))
    return TrainData(dataset, yolo3_train_batchify(3), batch_size, num_workers, seed=7,
                     rank=rank, world_size=world_size, sizes=GLUONCV_SIZES,
                     mixup_epochs=mixup_epochs)


def _epoch(data, epoch, start=0):
    return [[x.asnumpy() for x in batch] for batch in data.epoch(epoch, start)]


def test_the_same_batches_with_0_and_2_workers_and_after_a_resume_mid_epoch():
    """12 batches per epoch and a new size every 10: a size block spans two epochs."""
    single = _loader(0, mixup_epochs=1)
    epochs = [_epoch(single, 0), _epoch(single, 1)]
    shapes = [batch[0].shape[2:] for epoch in epochs for batch in epoch]
    assert len(set(shapes[:10])) == 1 and len(set(shapes[10:20])) == 1
    assert all(h == w and h in GLUONCV_SIZES for h, w in shapes)
    for batch in epochs[0] + epochs[1]:     # the targets were made at the batch's size
        assert (batch[1] == batch[0].shape[2:]).all()
    multi = _loader(2, mixup_epochs=1)
    for epoch in (0, 1):
        for a, b in zip(epochs[epoch], _epoch(multi, epoch)):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
    resumed = _loader(2, mixup_epochs=1)     # a new process resuming epoch 1 at batch 5
    tail = _epoch(resumed, 1, start=5)
    assert len(tail) == 7
    for a, b in zip(epochs[1][5:], tail):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_every_rank_takes_the_same_size_at_each_step():
    shapes = [[batch[0].shape for batch in _epoch(_loader(rank=r, world_size=2, batch_size=1),
                                                   epoch)]
              for r in range(2) for epoch in (0, 1)]
    assert shapes[0] == shapes[2] and shapes[1] == shapes[3]
    assert len({s[2] for s in shapes[0] + shapes[1]}) > 1


def test_dali_refuses_per_batch_sizes_in_one_line(tmp_path):
    task = MultiScaleToyTask(num_train=8)
    task.dali_train_data = lambda *args: None
    config = TrainConfig(batch_size=4, dali=True, save_prefix=str(tmp_path / 'run'))
    with pytest.raises(ValueError, match='per-batch input sizes .train_sizes., which the DALI'):
        train_data(task, config, local_runtime(config))


# ------------------------------------------------------------------ through the engine

class MultiScaleToyTask(ToyImageTask):
    """`ToyImageTask` trained at a new size every 3 steps, with YOLOv3's augmentation."""

    train_sizes = (8, (12, 8), 16)
    train_size_interval = 3
    train_batchify = Tuple(PadImages(), Pad(pad_val=-1))

    def train_dataset(self):
        return SizedTransform(MixupDetection(self.images, self.ratio), YOLO3TrainTransform(8, 8))


def make_multiscale_task(**kwargs):
    """Factory for `gluondet.engine.testing` child processes."""
    return MultiScaleToyTask(**kwargs)


class _Shapes(HookBase):
    def __init__(self):
        self.shapes = []

    def before_step(self):
        self.shapes.append(self.loop.current_batch[0].shape[2:])


# 6 steps per epoch, a checkpoint every 4 steps: the child pauses at step 9 and is killed;
# the resumed run starts at step 8, in the middle of epoch 2 and of the size block 6-8.
RESUME_CONFIG = TrainConfig(batch_size=8, num_workers=0, epochs=2, lr=0.005, log_interval=4,
                            save_interval=0, checkpoint_interval=4, seed=11, mixup=True,
                            no_mixup_epochs=1, val_interval=0)


def test_a_run_killed_mid_epoch_resumes_at_the_same_sizes(tmp_path):
    shapes = _Shapes()
    reference = str(tmp_path / 'straight' / 'run')
    train('test_yolo3_data:make_multiscale_task',
          dataclasses.replace(RESUME_CONFIG, save_prefix=reference), hooks=[shapes])
    sizes = [(w, h) for h, w in shapes.shapes]
    assert len(sizes) == 12 and all(len(set(sizes[i:i + 3])) == 1 for i in range(0, 12, 3))
    assert len(set(sizes)) > 1 and set(sizes) <= {(8, 8), (12, 8), (16, 16)}
    report = check_resume('test_yolo3_data:make_multiscale_task', RESUME_CONFIG,
                          str(tmp_path), kill_signal=signal.SIGKILL, reference=reference,
                          pythonpath=[HERE])
    assert report['paused_at'] == 9 and report['resumed_from'] == 8
    assert report['params_diff'] <= 1e-6 and report['states_diff'] <= 1e-6


# ------------------------------------------------------------------ parity with GluonCV

@pytest.fixture(scope='module')
def bccd_images(bccd_root):
    paths = sorted(glob.glob(os.path.join(bccd_root, 'BCCD', 'JPEGImages', '*.jpg')))[:2]
    return [mx.image.imread(p) for p in paths]


@pytest.mark.parametrize('shape', [320, 416, 608, (608, 416)])
def test_val_transform_equals_gluoncvs(bccd_images, shape):
    """The fixed-size preprocessing is GluonCV's YOLO3DefaultValTransform (BCCD's 640 x 480
    photos: shrunk, or enlarged in one direction only; see `gluondet.data.yolo_transforms`)."""
    from gluoncv.data.transforms.presets.yolo import YOLO3DefaultValTransform
    height, width = (shape, shape) if np.isscalar(shape) else shape
    label = np.array([[10, 20, 300, 200, 1, 0]], np.float32)
    for image in bccd_images:
        ref_data, ref_label = YOLO3DefaultValTransform(width, height)(image, label)
        data, kept, size = val_transform(fixed_size((height, width)))(image, label)
        np.testing.assert_allclose(data, ref_data.asnumpy(), atol=1e-5, rtol=0)
        np.testing.assert_array_equal(kept, label)    # gluondet keeps the original pixels
        np.testing.assert_allclose(T.bbox_resize(kept, size[::-1], (width, height)), ref_label,
                                   rtol=1e-6)


def test_train_transform_replays_gluoncvs_box_and_image_steps(monkeypatch, bccd_images):
    """What the transform drew (jittered image, zoom-out, crop window, interpolation, flip),
    replayed with GluonCV's functions in GluonCV's order, gives its image and boxes."""
    from gluoncv.data.transforms import bbox as gbbox, image as gimage
    drawn = {}
    _record(monkeypatch, drawn, 'random_color_distort', 'random_expand',
            'random_crop_with_constraints', 'resize', 'random_flip')
    label = np.array([[60, 50, 260, 250, 0, 0], [380, 200, 600, 420, 2, 0],
                      [500, 10, 630, 100, 1, 0]], np.float32)
    transform = YOLO3TrainTransform(416, 416)
    seen = set()
    for seed in range(12):
        drawn.clear()
        np.random.seed(seed)
        data, out = transform(bccd_images[0], label, (416, 320))
        img = mx.nd.array(drawn['random_color_distort'], dtype=np.uint8)
        bbox = label
        if 'random_expand' in drawn:
            canvas, _, (x, y, _, _) = drawn['random_expand']
            h, w, _ = img.shape     # the image on a canvas of the mean colour (rounded)
            np.testing.assert_array_equal(canvas[y:y + h, x:x + w], img.asnumpy())
            assert (canvas[0, 0] if x or y else canvas[-1, -1]).tolist() == [124, 116, 104]
            img = mx.nd.array(canvas, dtype=np.uint8)
            bbox = gbbox.translate(label, x_offset=x, y_offset=y)
        crop = drawn['random_crop_with_constraints'][2]
        bbox = gbbox.crop(bbox, crop, allow_outside_center=False)
        img = mx.image.fixed_crop(img, *crop)
        np.random.set_state(drawn['interp'])
        interp = np.random.randint(0, 5)
        h, w, _ = img.shape
        img = gimage.imresize(img, 416, 320, interp=interp)
        bbox = gbbox.resize(bbox, (w, h), (416, 320))
        flipped = drawn['random_flip'][2]
        if flipped:
            img = mx.nd.flip(img, axis=1)
            bbox = gbbox.flip(bbox, (416, 320), flip_x=True)
        ref = mx.nd.image.normalize(mx.nd.image.to_tensor(img), mean=T.IMAGENET_MEAN,
                                    std=T.IMAGENET_STD).asnumpy()
        np.testing.assert_allclose(out, bbox, atol=1e-4)
        # OpenCV's cubic enlargement rounds differently in MXNet's build (1 of 255 at most)
        tolerance = 1 / (255 * min(T.IMAGENET_STD)) + 1e-5 if interp == 2 else 1e-5
        np.testing.assert_allclose(data, ref, atol=tolerance, rtol=0)
        seen.add(('expand' if 'random_expand' in drawn else 'no expand', bool(flipped)))
    assert len(seen) == 4
