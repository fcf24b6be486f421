"""``--dali``: SSD's and RetinaNet's training data read by NVIDIA DALI (gluondet.data.dali)."""
import functools
import os
import subprocess
import sys

import cv2
import numpy as np
import pytest

pytest.importorskip('nvidia.dali', reason='NVIDIA DALI is not installed (gluondet[dali])')

from gluondet import demo  # noqa: E402
from gluondet.data import DemoDetection, transforms as T  # noqa: E402
from gluondet.data.batchify import Pad, PadImages, Tuple  # noqa: E402
from gluondet.data.dali import (DaliTrainData, KeepRatioDaliAugment, SSDDaliAugment,  # noqa: E402
                                require_dali)
from gluondet.data.rcnn_transforms import RCNNTrainTransform  # noqa: E402
from gluondet.engine import EpochBatchSampler, GroupedBatchSampler, TrainConfig  # noqa: E402
from gluondet.engine.loop import train_data  # noqa: E402
from gluondet.tasks.ssd import SSDTrainTransform  # noqa: E402
from script_runs import SMALL_NETWORKS, run_cpu_command  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENTITY_COLOUR = np.hstack([np.eye(3), np.zeros((3, 1))]).astype(np.float32)
RECT_COLOUR = (230, 40, 30)


class Images:
    """An in-memory dataset (no files: DALI gets PNGs): ``(uint8 HxWx3, N x 6)`` items."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def synthetic(width=200, height=150, seed=0):
    """A textured image with three filled rectangles of known boxes (inclusive pixels)."""
    rng = np.random.RandomState(seed)
    image = cv2.GaussianBlur(rng.randint(40, 200, (height, width, 3)).astype(np.uint8), (9, 9), 3)
    boxes = [(10, 20, 69, 79, 0), (120, 30, 189, 139, 1), (60, 100, 99, 129, 2)]
    for x0, y0, x1, y1, cls in boxes:
        image[y0:y1 + 1, x0:x1 + 1] = (40 + 80 * cls, 250 - 90 * cls, 60 + 40 * cls)
    label = np.array([b + (0,) for b in boxes], np.float32)
    label[2, 5] = 1     # one difficult box: the flag comes through
    return image, label


def one_sample(data):
    """The first sample of ``data``'s epoch 0 (batch size 1) as numpy arrays."""
    return [x.asnumpy()[0] for x in next(data.epoch(0))]


class FixedSSD(SSDDaliAugment):
    """No colour change (unless ``colour``), no zoom-out, the flip as given (the crop stays
    DALI's if zoom)."""

    def __init__(self, *args, flip=False, colour=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.flip, self.colour = flip, colour

    def plan(self, rng, width, height):
        plan = super().plan(rng, width, height)
        if not self.zoom:
            plan['flip'] = self.flip
        if not self.colour:
            plan['colour'] = IDENTITY_COLOUR
        return plan


@pytest.mark.parametrize('flip,colour', [(False, False), (True, False), (True, True)])
def test_ssd_boxes_and_pixels_match_the_opencv_transform(monkeypatch, flip, colour):
    image, label = synthetic()
    data = DaliTrainData(FixedSSD(160, 128, zoom=False, flip=flip, colour=colour),
                         Images([(image, label)]), EpochBatchSampler(1, 1, seed=0), seed=0,
                         num_threads=1)
    dali_image, dali_label = one_sample(data)
    matrix = data.sample(0)[1]['colour']     # the colour map drawn for the sample
    assert colour != np.array_equal(matrix, IDENTITY_COLOUR)
    # our transform with its random ops fixed: that colour map, bilinear, the same flip
    monkeypatch.setattr(T, 'random_color_distort',
                        lambda img: cv2.transform(img, matrix).reshape(img.shape))
    resize = T.resize
    monkeypatch.setattr(T, 'resize', lambda img, label, size, interp: resize(img, label, size, 1))
    monkeypatch.setattr(T, 'random_flip', functools.partial(T.random_flip, px=float(flip)))
    cv_image, cv_label = SSDTrainTransform(160, 128, zoom=False)(image, label)
    assert dali_image.shape == cv_image.shape == (3, 128, 160)
    assert np.abs(dali_label - cv_label).max() <= 1.0
    np.testing.assert_allclose(dali_label, cv_label, atol=1e-3)   # in fact the same boxes
    diff = np.abs(dali_image - cv_image) * 255 * np.array(T.IMAGENET_STD)[:, None, None]
    assert diff.mean() < 0.5 and diff.max() <= 2, (diff.mean(), diff.max())  # in 0-255 levels


class FixedKeepRatio(KeepRatioDaliAugment):
    def __init__(self, *args, flip=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.flip = flip

    def plan(self, rng, width, height):
        return dict(super().plan(rng, width, height), flip=self.flip)


@pytest.mark.parametrize('flip', [False, True])
def test_keep_ratio_matches_rcnn_transform_and_pad_images(flip):
    items = [synthetic(200, 150, 0), synthetic(150, 210, 1)]
    data = DaliTrainData(FixedKeepRatio(96, 128, multiple=32, flip=flip), Images(items),
                         EpochBatchSampler(2, 2, seed=0), seed=0, num_threads=1)
    images, sizes, labels = [x.asnumpy() for x in next(data.epoch(0))]
    order = [int(k) for k in next(iter(data.sampler))]
    transform = RCNNTrainTransform(96, 128, flip_p=float(flip))
    ref = Tuple(PadImages(32), Pad(-1))([transform(*items[k]) for k in order])
    ref_images, ref_sizes, ref_labels = [x.asnumpy() for x in ref]
    assert images.shape == ref_images.shape and images.shape[2] % 32 == 0
    np.testing.assert_array_equal(sizes, ref_sizes)
    assert np.abs(labels - ref_labels).max() <= 1e-3
    diff = np.abs(images - ref_images) * 255 * np.array(T.IMAGENET_STD)[:, None, None]
    assert diff.mean() < 0.5 and diff.max() <= 1.01, (diff.mean(), diff.max())  # 0-255 levels


def _around(low, high, margin):
    """The pixel rows (or columns) from ``margin`` before ``low`` to ``margin`` after ``high``."""
    return slice(max(0, int(low) - margin), int(np.ceil(high)) + margin)


def test_zoom_out_and_crop_keep_boxes_inside_and_on_their_pixels():
    """One rectangle on a plain background: where a box says, the rectangle is."""
    image = np.full((120, 160, 3), 90, np.uint8)
    image[30:80, 50:110] = RECT_COLOUR
    label = np.array([[50, 30, 109, 79, 0, 0]], np.float32)
    data = DaliTrainData(FixedSSD(128, 128, zoom=True), Images([(image, label)] * 8),
                         EpochBatchSampler(8, 8, seed=0), seed=3, num_threads=2)
    mean, std = np.array(T.IMAGENET_MEAN)[:, None, None], np.array(T.IMAGENET_STD)[:, None, None]
    seen, zoomed = 0, 0
    for epoch in range(4):
        images, labels = [x.asnumpy() for x in next(data.epoch(epoch))]
        for img, lab in zip(images, labels):
            pixels = ((img * std + mean) * 255).transpose(1, 2, 0)
            rect = np.abs(pixels - RECT_COLOUR).max(axis=2) < 40
            lab = lab[lab[:, 4] >= 0]
            assert len(lab) <= 1
            if not len(lab):
                continue
            x0, y0, x1, y1 = lab[0, :4]
            assert 0 <= x0 < x1 <= 128 and 0 <= y0 < y1 <= 128, lab
            seen += 1
            zoomed += (x1 - x0) < 40
            inside = rect[int(np.ceil(y0)) + 1:int(y1) - 1, int(np.ceil(x0)) + 1:int(x1) - 1]
            assert inside.mean() > 0.95
            ring = np.zeros_like(rect)
            ring[_around(y0, y1, 3), _around(x0, x1, 3)] = 1
            ring[_around(y0, y1, 1), _around(x0, x1, 1)] = 0
            assert not (ring & rect).any()      # nothing of the rectangle outside its box
    assert seen >= 24 and zoomed >= 2, (seen, zoomed)


def _ssd_data(dataset, batch_size, zoom, rank=0, world_size=1, seed=5):
    sampler = EpochBatchSampler(len(dataset), batch_size, seed, rank, world_size)
    return DaliTrainData(SSDDaliAugment(96, 96, zoom=zoom), dataset, sampler, seed,
                         num_threads=2)


@pytest.fixture(scope='module')
def demo_train(tmp_path_factory):
    return DemoDetection('train', 24, root=str(tmp_path_factory.mktemp('demo')))


def _arrays(batches):
    return [[x.asnumpy() for x in batch] for batch in batches]


def _equal(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for p, q in zip(a, b)
                                    for x, y in zip(p, q))


@pytest.mark.parametrize('zoom', [False, True])
def test_same_seed_same_batches_and_a_mid_epoch_start_is_the_tail(demo_train, zoom):
    data = _ssd_data(demo_train, 4, zoom)
    first = _arrays(data.epoch(1))
    assert len(first) == data.iters_per_epoch == 6
    assert _equal(first, _arrays(_ssd_data(demo_train, 4, zoom).epoch(1)))
    assert _equal(first[4:], _arrays(data.epoch(1, start=4)))
    assert not _equal(first, _arrays(data.epoch(2)))


def test_keep_ratio_mid_epoch_start_is_the_tail(demo_train):
    groups = [0] * 12 + [1] * 12
    data = DaliTrainData(KeepRatioDaliAugment((80, 112), 160, 32), demo_train,
                         GroupedBatchSampler(groups, 2, seed=1), seed=1, num_threads=2)
    full = _arrays(data.epoch(0))
    assert len(full) == 12 and {b[0].shape[2] for b in full} >= {96, 128}   # random short side
    assert _equal(full[5:], _arrays(data.epoch(0, start=5)))


def test_two_ranks_together_read_what_one_process_reads(demo_train):
    """Augmentation is drawn per sample, so without the crop even the pixels agree."""
    whole = _arrays(_ssd_data(demo_train, 8, zoom=False).epoch(0))
    ranks = [_arrays(_ssd_data(demo_train, 4, False, rank, 2).epoch(0)) for rank in (0, 1)]
    assert len(whole) == len(ranks[0]) == len(ranks[1]) == 3
    for b, (one, two) in enumerate(zip(*ranks)):
        np.testing.assert_array_equal(np.concatenate([one[0], two[0]]), whole[b][0])
        rows = [lab[lab[:, 4] >= 0] for part in (one, two) for lab in part[1]]
        for mine, theirs in zip(rows, whole[b][1]):
            np.testing.assert_array_equal(mine, theirs[theirs[:, 4] >= 0])


def test_records_give_the_batches_of_their_image_files(demo_train, tmp_path):
    """DALI decodes a record's image bytes as stored: what the files give, bit for bit."""
    from gluondet.data import RecordDetection
    from gluondet.tools.convert import convert
    convert(demo_train, str(tmp_path / 'demo'), partition_mode='sequence')
    records = RecordDetection(str(tmp_path / 'demo') + '-fold-000-of-001-shard-*.rec')
    assert _equal(_arrays(_ssd_data(demo_train, 4, zoom=True).epoch(0)),
                  _arrays(_ssd_data(records, 4, zoom=True).epoch(0)))


def test_without_dali_or_support_the_error_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, 'nvidia.dali', None)
    with pytest.raises(ImportError, match=r"pip install 'gluondet\[dali\]'"):
        require_dali()

    class NoDali:
        def train_dataset(self):
            return list(range(8))

    class Runtime:
        rank, world_size = 0, 1

    with pytest.raises(ValueError, match='task NoDali does not read its data with DALI'):
        train_data(NoDali(), TrainConfig(batch_size=2, dali=True), Runtime())


@pytest.mark.parametrize('argv, message', [
    (('--dali', '--auto-augment'), '--dali does not run --auto-augment'),
    (('--dali', '--no-dali-installed'), "--dali needs NVIDIA DALI, which is not installed: "
                                        "pip install 'gluondet[dali]'")])
def test_refusals_are_one_line_without_a_traceback(tmp_path, argv, message):
    """Before any data is read; DALI's absence is simulated in the script's process."""
    hide = '--no-dali-installed' in argv
    code = ('import runpy, sys; %s sys.argv = sys.argv[1:]; '
            'runpy.run_path(sys.argv[0], run_name="__main__")'
            % ('sys.modules["nvidia.dali"] = None;' if hide else ''))
    argv = [a for a in argv if a != '--no-dali-installed']
    out = subprocess.run([sys.executable, '-c', code,
                          os.path.join(ROOT, 'scripts', 'train_retinanet.py'), '--dataset',
                          'demo', '--gpus', ''] + argv, capture_output=True, text=True,
                         cwd=str(tmp_path), env=dict(os.environ, GLUONDET_HOME=str(tmp_path)),
                         timeout=300)
    assert out.returncode != 0 and 'Traceback' not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


@pytest.mark.parametrize('script', ['train_ssd.py', 'train_retinanet.py'])
def test_each_script_trains_an_epoch_with_dali_on_cpu(tmp_path, script):
    name, extra = SMALL_NETWORKS[script]
    _, log = run_cpu_command(os.path.join(ROOT, 'scripts', script),
                             ['--dataset', 'demo', '--gpus', '', '--epochs', '1', '--dali',
                              '--no-pretrained-base', '-j', '0'] + extra, tmp_path, name)
    assert 'dali=True' in log


@pytest.mark.learning(minutes=3)
def test_demo_ssd_learns_with_dali_as_without(tmp_path, learning_bar):
    """The SSD demo recipe (`gluondet.demo`) with its data read by DALI on the CPU, on half
    its epochs: at least 0.75, the bar of the bfloat16 test's float32 run on the same budget
    (measured with DALI: 0.884 on an AMD EPYC, where that run reaches 0.781; the whole
    recipe with DALI reached 0.9 in 20 epochs as the test of earlier stops)."""
    metrics = demo.run_demo(str(tmp_path), 'ssd', epochs=10, dali=True)
    learning_bar(metrics['mAP'], 0.75)
