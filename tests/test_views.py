"""gluondet.deploy.views: tiles, views mapped back, weighted box fusion, evaluate with views.

The detector is test_deploy_predictor's ``trained_model`` (an SSD at 128 px trained a few
steps on BCCD and demo images), on real BCCD images; tiles also with a keep-ratio Faster
R-CNN.
"""
import os
import re

import mxnet as mx
import numpy as np
import pytest

from gluondet.cli import main
from gluondet.data import VOCDetection
from gluondet.data.base import read_image
from gluondet.deploy import compare_detections, detecting_random_weights
from gluondet.deploy.commands import export_model
from gluondet.deploy.predictor import Predictor
from gluondet.detections import Detections
from gluondet.deploy.views import (TTA, Slicing, ViewPredictor, fuse_boxes, merge_nms,
                                   tile_windows)
from gluondet.model_zoo import get_model

from test_deploy_predictor import SMALL_SPLIT, small_bccd, trained_model  # noqa: F401

pytest.importorskip('onnxruntime')


# ---------------------------------------------------------------- tiles

@pytest.mark.parametrize('height, width, size, overlap', [
    (1920, 2560, (480, 640), 0.2), (1000, 1000, 300, 0.25), (700, 1300, (512, 640), 0.0),
    (481, 641, (480, 640), 0.2)])
def test_tiles_cover_the_image_overlap_and_end_at_its_edges(height, width, size, overlap):
    tiles = tile_windows(height, width, size, overlap)
    size = (size, size) if isinstance(size, int) else size
    covered = np.zeros((height, width), bool)
    for x0, y0, x1, y1 in tiles:
        assert (y1 - y0, x1 - x0) == size and 0 <= x0 and 0 <= y0 and x1 <= width and y1 <= height
        covered[y0:y1, x0:x1] = True
    assert covered.all()
    for start, end, tile, length in [(0, 2, size[1], width), (1, 3, size[0], height)]:
        starts = sorted({t[start] for t in tiles})
        ends = sorted({t[end] for t in tiles})
        assert starts[0] == 0 and ends[-1] == length        # the last tile at the edge
        overlaps = np.array(ends[:-1]) - np.array(starts[1:])
        assert (overlaps >= overlap * tile - 1).all()
        assert (overlaps[:-1] <= overlap * tile + 1).all()  # only the last one overlaps more
    if (height, width) == (1920, 2560):
        assert len(tiles) == 25 and tiles[1] == (512, 0, 1152, 480)


def test_an_image_no_larger_than_a_tile_is_one_tile():
    assert tile_windows(480, 640, 640) == [(0, 0, 640, 480)]
    assert tile_windows(100, 50, (480, 640)) == [(0, 0, 50, 100)]
    assert tile_windows(480, 1000, 640, 0.2) == [(0, 0, 640, 480), (360, 0, 1000, 480)]


def test_bad_settings_say_what_is_wrong():
    for kwargs, message in [({'size': 0}, 'slice size'), ({'size': 64, 'overlap': 1},
                                                           'overlap must be in')]:
        with pytest.raises(ValueError, match=message):
            Slicing(**kwargs)
    with pytest.raises(ValueError, match=r'scales must be distinct numbers in \(0, 1\]'):
        TTA(scales=(1, 1.2))
    with pytest.raises(ValueError, match="merge must be 'wbf' or 'nms'"):
        TTA(merge='mean')


@pytest.mark.parametrize('argv, message', [
    (['--slice-overlap', '0.3'], '--slice-overlap needs --slice'),
    (['--tta-merge', 'nms'], '--tta-merge needs --tta'),
    (['--slice', '640x'], "argument --slice: expected a tile size S or HxW, got '640x'"),
    (['--tta', '--tta-scales', '1,0'], 'TTA scales must be distinct numbers in')])
def test_evaluate_refuses_bad_view_flags_in_one_line(argv, message, capsys, tmp_path):
    try:
        code = main(['evaluate', '-m', str(tmp_path / 'm.onnx'), '--dataset', 'demo'] + argv)
    except SystemExit as usage:     # argparse's errors
        code = usage.code
    err = capsys.readouterr().err
    assert code in (1, 2) and message in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- merging

def dets(rows):
    rows = np.array(rows, np.float32).reshape(-1, 6)
    return Detections(rows[:, 0].astype(np.int64), rows[:, 1], rows[:, 2:])


def test_weighted_box_fusion_on_hand_made_clusters():
    one = dets([[0, 0.9, 0, 0, 10, 10], [1, 0.8, 50, 50, 60, 60], [0, 0.2, 0, 20, 10, 30]])
    two = dets([[0, 0.6, 1, 1, 11, 11],        # IoU 0.68 with one's first: fused
                [1, 0.5, 0, 0, 10, 10],        # another class: not fused with class 0
                [0, 0.3, 100, 100, 110, 110],  # alone
                [0, 0.4, 1, 21, 11, 31], [0, 0.2, 0, 22, 10, 32]])  # two of one view
    fused = fuse_boxes([one, two], iou=0.55)
    expected = [
        [0, (0.9 + 0.6) / 2, 0.4, 0.4, 10.4, 10.4],
        [1, 0.8 / 2, 50, 50, 60, 60],
        # three boxes, two views: mean score times min(3, 2) / 2
        [0, (0.4 + 0.2 + 0.2) / 3, 0.5, (0.4 * 21 + 0.2 * 20 + 0.2 * 22) / 0.8,
         0.5 + 10, (0.4 * 31 + 0.2 * 30 + 0.2 * 32) / 0.8],
        [1, 0.5 / 2, 0, 0, 10, 10],
        [0, 0.3 / 2, 100, 100, 110, 110]]
    order = np.argsort([-row[1] for row in expected], kind='stable')
    expected = dets([expected[i] for i in order])
    np.testing.assert_array_equal(fused.ids, expected.ids)
    np.testing.assert_allclose(fused.scores, expected.scores, rtol=1e-6)
    np.testing.assert_allclose(fused.boxes, expected.boxes, rtol=1e-6)


def test_a_box_joins_the_cluster_it_overlaps_most():
    # clusters at x 0-10 and 8-18 (IoU 0.11); a box at 6-16 overlaps them by 0.25 and 0.67
    fused = fuse_boxes([dets([[0, 0.9, 0, 0, 10, 10], [0, 0.8, 8, 0, 18, 10]]),
                        dets([[0, 0.7, 6, 0, 16, 10]])], iou=0.2)
    np.testing.assert_allclose(fused.scores, [0.75, 0.45], rtol=1e-6)
    np.testing.assert_allclose(fused.boxes, [[(0.8 * 8 + 0.7 * 6) / 1.5, 0,
                                              (0.8 * 18 + 0.7 * 16) / 1.5, 10],
                                             [0, 0, 10, 10]], rtol=1e-6)
    fused = fuse_boxes([dets([[0, 0.9, 0, 0, 10, 10]]), dets([[0, 0.9, 0, 0, 10, 10],
                                                              [0, 0.5, 20, 0, 30, 10],
                                                              [0, 0, 40, 0, 50, 10]])])
    np.testing.assert_allclose(fused.scores, [0.9, 0.25])     # a score of 0 is left out
    assert len(fuse_boxes([dets([]), dets([])]).ids) == 0


def test_nms_merge_is_class_wise():
    merged = merge_nms([dets([[0, 0.9, 0, 0, 10, 10], [1, 0.8, 0, 0, 10, 10]]),
                        dets([[0, 0.7, 1, 1, 11, 11], [0, 0.6, 20, 20, 30, 30]])], 0.5)
    np.testing.assert_array_equal(merged.ids, [0, 1, 0])
    np.testing.assert_array_equal(merged.scores, np.float32([0.9, 0.8, 0.6]))


# ---------------------------------------------------------------- views on a real detector

@pytest.fixture(scope='module')
def bccd_image(bccd_root):
    return read_image(os.path.join(bccd_root, 'BCCD', 'JPEGImages',
                                   'BloodImage_00001.jpg')).asnumpy()


def _sorted(found):
    rows = np.concatenate([found.ids[:, None], found.scores[:, None], found.boxes], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


@pytest.fixture(params=['ssd', 'faster_rcnn'])
def detector(request, trained_model, bccd_image):
    """``(predictor, image)``: the trained SSD (fixed 128 x 128 input) on a BCCD image, or a
    Faster R-CNN FPN (keep-ratio, short 128, max size 160) with weights made to detect
    (:func:`detecting_random_weights`) on the image shrunk 4 times."""
    if request.param == 'ssd':
        return Predictor.from_model(trained_model[0]), bccd_image
    net = get_model('faster_rcnn_fpn_resnet18_v1b_custom', classes=('a', 'b', 'c'),
                    pretrained_base=False, short=128, max_size=160)
    detecting_random_weights(net, mx.nd.random.normal(shape=(1, 3, 128, 160)))
    return Predictor.from_model(net), np.ascontiguousarray(bccd_image[::4, ::4])


def test_tiles_map_back_exactly(detector):
    """Four copies of an image, tiles of its size without overlap: each tile is a copy,
    and the merged detections are the image's at each copy's place."""
    predictor, image = detector
    height, width = image.shape[:2]
    mosaic = np.tile(image, (2, 2, 1))
    own = merge_nms([predictor.detect([image], batch_size=1)[0]], 0.5)
    assert len(own.ids) > 20
    expected = Detections.concat([own.replace(boxes=own.boxes + np.float32([x, y, x, y]))
                                  for y in (0, height) for x in (0, width)])
    sliced = ViewPredictor(predictor, Slicing((height, width), overlap=0), batch_size=1)
    assert sliced.windows(2 * height, 2 * width) == [(0, 0, width, height),
                                                     (width, 0, 2 * width, height),
                                                     (0, height, width, 2 * height),
                                                     (width, height, 2 * width, 2 * height)]
    np.testing.assert_array_equal(_sorted(sliced.detect([mosaic])[0]), _sorted(expected))
    with_full = ViewPredictor(predictor, Slicing((height, width), overlap=0, full=True))
    assert len(with_full.windows(2 * height, 2 * width)) == 5
    assert with_full.windows(height, width) == [(0, 0, width, height)]   # not twice
    # an image no larger than a tile: the predictor's own detections
    a, b = with_full.detect([image], batch_size=1)[0], predictor.detect([image], batch_size=1)[0]
    for name in ('ids', 'scores', 'boxes'):
        np.testing.assert_array_equal(a[name], b[name])


def test_mirrored_view_maps_back_to_the_mirror_on_a_symmetric_image(trained_model, bccd_image):
    """On an image equal to its mirror the network sees the same input in both views, so
    the mirrored view's boxes, mapped back, must be the plain view's mirrored."""
    predictor = Predictor.from_model(trained_model[0])
    half = bccd_image[:, :320]
    symmetric = np.concatenate([half, half[:, ::-1]], axis=1)
    views = ViewPredictor(predictor, tta=TTA(scales=(1, 0.5)), batch_size=1)
    (plain, mirrored, small, small_mirrored), = views.view_detections([symmetric])[0]
    assert len(plain.ids) > 20
    np.testing.assert_array_equal(mirrored.ids, plain.ids)
    np.testing.assert_array_equal(mirrored.scores, plain.scores)
    np.testing.assert_allclose(mirrored.boxes, np.stack(
        [639 - plain.boxes[:, 2], plain.boxes[:, 1], 639 - plain.boxes[:, 0],
         plain.boxes[:, 3]], axis=1), atol=1e-4)
    # the shrunk view: its boxes in the image's pixels (twice the view's), not the padding
    on_canvas = predictor.detect([views_image(views, symmetric, 0.5)], batch_size=1)[0]
    np.testing.assert_allclose(small.boxes, np.minimum(on_canvas.boxes * 2,
                                                       [639, 479, 639, 479]), rtol=1e-6)
    assert len(small_mirrored.ids) > 0


def views_image(views, image, scale):
    from gluondet.deploy.views import View, view_image
    height, width = image.shape[:2]
    canvas = view_image(image, View((0, 0, width, height), False, scale), views._fill)
    assert (canvas[height // 2:, width // 2:] == views._fill).all()
    return canvas


def test_evaluate_with_slicing_and_tta_mxnet_and_onnxruntime(trained_model, bccd_root, tmp_path,
                                                            capsys):
    params, _, folder = trained_model
    voc, _ = small_bccd(bccd_root, folder)
    onnx_path = str(tmp_path / 'ssd.onnx')
    export_model(params, onnx_path, 'onnx', dynamic_batch=True, verbose=False)
    flags = ['--dataset', 'voc', '--dataset-root', voc, '--val-split', SMALL_SPLIT,
             '--slice', '320', '--slice-overlap', '0.25', '--slice-full', '--tta',
             '--tta-scales', '1,0.75', '--batch-size', '4']
    found = {}
    for model in (params, onnx_path):
        assert main(['evaluate', '-m', model] + flags) == 0
        out = capsys.readouterr().out
        found[model] = float(re.search(r'on 12 images: ([0-9.]+)', out).group(1))
    assert found[params] > 0.005 and abs(found[params] - found[onnx_path]) < 2e-3, found
    # predictions of files (batches of images) equal detect's of the decoded images
    predictor = Predictor.from_model(params)
    views = ViewPredictor(predictor, Slicing(320, 0.25, full=True), TTA(scales=(1, 0.75)),
                          batch_size=4)
    data = VOCDetection(voc, splits=SMALL_SPLIT, classes=predictor.classes)
    paths = [data.image_path(i) for i in range(2)]
    result = compare_detections([p.detections for p in views.predict(paths)],
                                views.detect([read_image(p).asnumpy() for p in paths]))
    assert result.ok and result.compared > 40, str(result)
