"""gluondet.data.preprocess: preprocessing as data, its transforms, and the Predictor's batches."""
import json
import warnings

import numpy as np
import pytest

from gluondet.data import transforms as T
from gluondet.data.preprocess import (SSDValTransform, check_preprocessing, fixed_size,
                                      keep_ratio, padded_shape, preprocessing_from_metadata,
                                      preprocessing_of, val_transform)
from gluondet.data.rcnn_transforms import RCNNValTransform
from gluondet.deploy.calibration import val_preprocess
from gluondet.deploy.predictor import Predictor
from gluondet.model_zoo import get_model

IMAGENET = {'mean': list(T.IMAGENET_MEAN), 'std': list(T.IMAGENET_STD)}


def _image(height, width, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (height, width, 3)).astype(np.uint8)


def test_specs_are_plain_json_and_checked():
    assert fixed_size(128) == dict(resize='fixed', data_shape=[128, 128], **IMAGENET)
    spec = keep_ratio(600.0, 1000, 32)
    assert spec == dict(resize='keep_ratio', short=600, max_size=1000, multiple=32, **IMAGENET)
    assert check_preprocessing(json.loads(json.dumps(spec))) == spec
    assert keep_ratio(600)['max_size'] is None and keep_ratio(600)['multiple'] == 1
    for bad, message in [({'resize': 'letterbox'}, "resize must be one of 'fixed', 'keep_ratio'"),
                         (dict(spec, data_shape=[1, 2]), 'unknown keys data_shape'),
                         (dict(spec, short=0), 'short must be a positive integer'),
                         (dict(spec, multiple=2.5), 'multiple must be a positive integer'),
                         (dict(spec, std=[1, 0, 1]), 'std must be 3 positive numbers'),
                         (dict(fixed_size(8), data_shape=[8]), 'data_shape must be'),
                         ([1, 2], 'must be a JSON object')]:
        with pytest.raises(ValueError, match='model.onnx: .*' + message):
            check_preprocessing(bad, 'model.onnx')


def test_metadata_without_preprocessing_reads_as_its_fixed_size():
    old = {'classes': ['a'], 'data_shape': [128, 96], 'mean': [0.5] * 3, 'std': [0.25] * 3}
    assert preprocessing_from_metadata(old, 'm') == fixed_size((128, 96), [0.5] * 3, [0.25] * 3)
    assert preprocessing_from_metadata({'data_shape': 64}, 'm') == fixed_size(64)
    assert preprocessing_from_metadata({'classes': ['a']}, 'm') is None
    rcnn = {'data_shape': [128, 160], 'short': 600, 'max_size': 1000}
    assert preprocessing_from_metadata(rcnn, 'm') == keep_ratio(600, 1000)
    new = {'data_shape': [608, 1024], 'preprocessing': keep_ratio(600, 1000, 32)}
    assert preprocessing_from_metadata(new, 'm') == keep_ratio(600, 1000, 32)
    with pytest.raises(ValueError, match='m-meta.json: preprocessing resize'):
        preprocessing_from_metadata({'preprocessing': {'resize': 'x'}}, 'm-meta.json')


def test_networks_give_their_preprocessing():
    ssd = get_model('ssd_160_mobilenet0.5_custom', classes=['a'], pretrained_base=False)
    assert preprocessing_of(ssd) == fixed_size(160)
    assert preprocessing_of(ssd, (128, 96)) == fixed_size((128, 96))
    fpn = get_model('faster_rcnn_fpn_resnet18_v1b_custom', classes=['a'], pretrained_base=False)
    assert preprocessing_of(fpn) == keep_ratio(fpn.short, fpn.max_size, 32)
    assert preprocessing_of(fpn, short=(128, 160), max_size=200) == keep_ratio(128, 200, 32)
    c4 = get_model('faster_rcnn_resnet18_v1b_custom', classes=['a'], pretrained_base=False)
    assert preprocessing_of(c4, data_shape=64) == keep_ratio(c4.short, c4.max_size, 1)


def test_val_transforms_of_both_kinds():
    image, label = _image(96, 128), np.array([[1, 2, 30, 40, 0, 0]], np.float32)
    data, kept, size = val_transform(fixed_size((64, 80)))(image, label)
    np.testing.assert_array_equal(data, SSDValTransform(80, 64)(image, label)[0])
    assert data.shape == (3, 64, 80) and size.tolist() == [96, 128]
    np.testing.assert_array_equal(kept, label)
    data, _, size = val_transform(keep_ratio(128, 160))(image, label)
    np.testing.assert_array_equal(data, RCNNValTransform(128, 160)(image, label)[0])
    assert data.shape == (3, 120, 160) and size.tolist() == [96, 128]
    # an input of 64 x 64 takes the image at 48 x 64, keeping its ratio
    assert val_transform(keep_ratio(128, 160), fit=(64, 64))(image, label)[0].shape == (3, 48, 64)
    assert val_transform(keep_ratio(32, 40), fit=(64, 64))(image, label)[0].shape == (3, 30, 40)
    from gluondet.tasks.ssd import SSDValTransform as task_transform
    assert task_transform is SSDValTransform


def test_padded_shape_rounds_up_to_the_multiple_or_takes_the_fixed_input():
    assert padded_shape(keep_ratio(128, 160, 32), (120, 150)) == (128, 160)
    assert padded_shape(keep_ratio(128, 160, 32), (51, 160)) == (64, 160)
    assert padded_shape(keep_ratio(128, 160), (120, 150)) == (120, 150)
    assert padded_shape(keep_ratio(128, 160, 32), (51, 160), fixed=(192, 256)) == (192, 256)
    assert padded_shape(fixed_size((64, 80)), (51, 160)) == (64, 80)


class BoxRunner:
    """Finds one box ``BOX`` (input pixels) in every image, then a padding row; records batches."""

    BOX = np.array([8, 4, 40, 20], np.float32)
    batch_range = (1, None)

    def __init__(self, input_shape=None):
        if input_shape is not None:
            self.input_shape = input_shape
        self.batches = []

    def __call__(self, batch):
        self.batches.append(batch.copy())
        n = len(batch)
        ids = np.tile(np.array([[[0], [-1]]], np.float32), (n, 1, 1))
        scores = np.tile(np.array([[[0.9], [-1]]], np.float32), (n, 1, 1))
        boxes = np.tile(np.stack([self.BOX, -np.ones(4, np.float32)])[None], (n, 1, 1))
        return ids, scores, boxes


def test_keep_ratio_images_are_padded_to_their_own_size_and_scaled_back_by_their_own_factor():
    images = [_image(96, 128, 1), _image(128, 96, 2), _image(64, 200, 3), _image(96, 128, 4)]
    spec = keep_ratio(128, 160, 32)
    runner = BoxRunner()
    found = Predictor(runner, ['a'], spec).detect(images, batch_size=4)
    resized = [(120, 160), (160, 120), (51, 160), (120, 160)]
    # one runner call per padded size, images of one size together
    assert [b.shape for b in runner.batches] == [(2, 3, 128, 160), (1, 3, 160, 128),
                                                 (1, 3, 64, 160)]
    rows = {0: (0, 0), 3: (0, 1), 1: (1, 0), 2: (2, 0)}
    transform = val_transform(spec)
    for i, (image, (h, w)) in enumerate(zip(images, resized)):
        batch = runner.batches[rows[i][0]][rows[i][1]]
        np.testing.assert_array_equal(batch[:, :h, :w], transform(image, np.zeros((0, 6)))[0])
        assert not batch[:, h:].any() and not batch[:, :, w:].any()
        scale = np.array([image.shape[1] / w, image.shape[0] / h] * 2, np.float32)
        np.testing.assert_allclose(found[i].boxes, [BoxRunner.BOX * scale], rtol=1e-6)
        assert found[i].ids.tolist() == [0] and found[i].scores.tolist() == [np.float32(0.9)]


def test_a_fixed_input_takes_keep_ratio_images_fitted_and_padded_and_fixed_sizes_as_before():
    images = [_image(96, 128), _image(50, 60)]
    runner = BoxRunner(input_shape=(3, 96, 96))
    predictor = Predictor(runner, ['a'], keep_ratio(128, 160, 32), 'onnxruntime')
    assert predictor.data_shape == (96, 96)
    found = predictor.detect(images, batch_size=2)
    assert runner.batches[0].shape == (2, 3, 96, 96)
    # 96 x 128 would be 120 x 160 and does not fit: 72 x 96; 50 x 60 becomes 80 x 96
    scales = [(128 / 96, 96 / 72), (60 / 96, 50 / 80)]
    for got, (sx, sy) in zip(found, scales):
        np.testing.assert_allclose(got.boxes, [BoxRunner.BOX * [sx, sy, sx, sy]], rtol=1e-6)
    np.testing.assert_array_equal(runner.batches[0][0],
                                  val_preprocess((96, 96), keep_ratio(128, 160, 32))(images[0]))
    fixed = Predictor(BoxRunner(input_shape=(3, 64, 80)), ['a'], (64, 80))
    assert fixed.preprocessing == fixed_size((64, 80)) and fixed.data_shape == (64, 80)
    with pytest.raises(ValueError, match=r'takes inputs of 3 x 64 x 80, not 3 x 64 x 64: its '
                                         'data_shape is fixed'):
        Predictor(BoxRunner(input_shape=(3, 64, 80)), ['a'], fixed_size(64), 'onnxruntime')
    assert 'short 128, max size 160, multiple 32' in repr(Predictor(BoxRunner(), ['a'],
                                                                    keep_ratio(128, 160, 32)))


def test_boxes_are_clipped_to_their_image_keep_ratio_and_fixed_size_alike():
    # inclusive pixels: a 128 x 96 image's boxes lie in [0, 127] x [0, 95]
    runner = BoxRunner(input_shape=(3, 96, 96))
    runner.BOX = np.array([-2, 0, 96, 96], np.float32)     # spills into the padding
    found = Predictor(runner, ['a'], keep_ratio(128, 160)).detect([_image(96, 128)])
    np.testing.assert_allclose(found[0].boxes, [[0, 0, 127, 95]], rtol=1e-6)   # 72 x 96 input
    found = Predictor(runner, ['a'], fixed_size(96)).detect([_image(48, 192)])
    np.testing.assert_allclose(found[0].boxes, [[0, 0, 191, 47]], rtol=1e-6)


def test_nan_and_infinite_detections_are_left_out_with_one_warning(caplog):
    class Overflowing(BoxRunner):     # rows: a box, a NaN score, an infinite box, a huge box
        def __call__(self, batch):
            n = len(batch)
            ids = np.zeros((n, 4, 1), np.float32)
            scores = np.tile(np.array([[[0.9], [np.nan], [0.8], [0.7]]], np.float32), (n, 1, 1))
            boxes = np.tile(np.array([[self.BOX, self.BOX, [0, 0, np.inf, 9],
                                       [0, 0, 3e38, 9]]], np.float32), (n, 1, 1))
            return ids, scores, boxes

    predictor = Predictor(Overflowing(), ['a'], fixed_size(64), 'onnxruntime')
    with warnings.catch_warnings():
        warnings.simplefilter('error')          # no numpy overflow warning either
        found = predictor.detect([_image(64, 128)] * 3)
        found += predictor.detect([_image(64, 128)])
    assert [d.scores.tolist() for d in found] == [[pytest.approx(0.9), pytest.approx(0.7)]] * 4
    assert found[0].boxes[1].tolist() == [0, 0, 127, 9]        # the huge box: clipped
    assert predictor.nonfinite == 8
    assert caplog.text.count('with a NaN or infinite score or box left out') == 1
    assert ("onnxruntime: 6 detections with a NaN or infinite score or box left out: the "
            "network's outputs overflowed (are its weights trained?)") in caplog.text
