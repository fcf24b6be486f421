"""Masks through the one inference pipeline: a ``masks`` grid field (Mask R-CNN's ``M x M``
probabilities over each detection's box) kept by Detections, re-gridded where a box is
clipped, flipped with a mirrored view, kept by slicing, TTA and tracking, and written by
the sinks (COCO results and JSON lines ``segmentation``, drawn images) and
``Detector.predict``.

Two detectors: a stand-in runner that finds the white pixels of its input (so its mask of
each view is known: an L, which a mirror would turn round), with a box wider than the
shape, past the image's edge where the shape touches it; and a real Mask R-CNN
(``mask_rcnn_fpn_resnet18_v1b_custom``, seeded random weights made to detect), registered
under a test name with a small input.
"""
import json
import os
import pickle

import cv2
import mxnet as mx
import numpy as np
import pytest

from gluondet import Detector
from gluondet.cli import main
from gluondet.deploy import detecting_random_weights
from gluondet.deploy.predictor import Predictor
from gluondet.deploy.track import ByteTrack
from gluondet.deploy.views import TTA, Slicing, ViewPredictor
from gluondet.detections import Detections, regrid
from gluondet.masks import decode, paste
from gluondet.model_zoo import get_model, register_model, registry
from gluondet.visualize import class_colors, draw_boxes, draw_detections

GRID = 28
MARGIN = 0.15       # the stand-in's box: the white pixels' bounds widened by this share
NAME = 'mask_rcnn_masks_pipeline_test_custom'
CLASSES = ('a', 'b')


def _iou(a, b):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return (a & b).sum() / max((a | b).sum(), 1)


def l_shape(height, width, x0, y0, size=70, arm=28):
    """A white L on black (its bar on the left, its foot along the bottom), its ``H x W``
    0/1 pixels, and the L mirrored in place (the foot to the left)."""
    truth = np.zeros((height, width), np.uint8)
    truth[y0:y0 + size, x0:x0 + arm] = 1
    truth[y0 + size - arm:y0 + size, x0:x0 + size] = 1
    mirrored = truth.copy()
    mirrored[:, x0:x0 + size] = truth[:, x0:x0 + size][:, ::-1]
    return np.repeat(truth[..., None] * 255, 3, axis=2), truth, mirrored


class WhiteShapes:
    """A stand-in runner: in each input, one detection of the white pixels (class 0), its
    box their bounds widened by MARGIN of their size each side, its mask the white pixels
    on a GRID x GRID grid over that box (0 past the image), its score higher the more of
    them lie right of the box's centre (so that a mirrored view of the L wins)."""

    batch_range = (1, None)
    output_fields = grid_fields = ('masks',)

    def __call__(self, batch):
        count = len(batch)
        ids, scores = np.full((count, 1, 1), -1, np.float32), np.full((count, 1, 1), -1,
                                                                        np.float32)
        boxes = np.full((count, 1, 4), -1, np.float32)
        masks = np.zeros((count, 1, GRID, GRID), np.float32)
        for i, data in enumerate(batch):
            white = (data.mean(axis=0) > 1).astype(np.float32)   # black < -1.7, fill 0
            ys, xs = np.nonzero(white)
            if not len(xs):
                continue
            low, high = np.array([xs.min(), ys.min()]), np.array([xs.max(), ys.max()])
            margin = MARGIN * (high - low + 1)
            box = np.concatenate([low - margin, high + margin])
            side = box[2:] - box[:2] + 1
            cx, cy = (box[:2, None] - 0.5 + (np.arange(GRID) + 0.5) * side[:, None] / GRID)
            mapx, mapy = np.meshgrid(cx.astype(np.float32), cy.astype(np.float32))
            masks[i, 0] = cv2.remap(white, mapx, mapy, cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_CONSTANT, borderValue=0)
            ids[i], boxes[i, 0] = 0, box
            scores[i] = 0.5 + 0.4 * (xs > (box[0] + box[2]) / 2).mean()
        return ids, scores, boxes, masks


@pytest.fixture(scope='module')
def shapes():
    return Predictor(WhiteShapes(), ['shape'], {'resize': 'keep_ratio', 'short': 128,
                                                'max_size': 256, 'multiple': 32})


# ---------------------------------------------------------------- Detections


def _with_masks():
    rng = np.random.RandomState(0)
    return Detections([1, 0, 1], [0.9, 0.3, 0.6], [[0, 0, 9, 9], [5, 5, 20, 30], [1, 2, 3, 4]],
                      grid_fields=('masks',), masks=rng.uniform(size=(3, 4, 4)),
                      track_ids=[7, -1, 3])


def test_grid_fields_are_kept_by_every_operation_and_named_in_errors():
    d = _with_masks()
    assert d.grid_fields == ('masks',) and d.point_fields == ()
    for kept in (d[1:], d.sorted(), d.above(0.5), d[np.array([True, False, True])],
                 Detections.concat([d, d[:1]]), d.replace(track_ids=None),
                 pickle.loads(pickle.dumps(d))):
        assert kept.grid_fields == ('masks',)
    assert d.sorted().masks[1].tolist() == d.masks[2].tolist()
    assert d.replace(masks=None).grid_fields == ()
    assert Detections.empty(grid_fields=['masks'], masks=np.zeros((4, 4))).masks.shape == (0, 4,
                                                                                          4)
    with pytest.raises(ValueError, match='a grid field .* not track_ids, boxes, nothing'):
        Detections(d.ids, d.scores, d.boxes, grid_fields=('track_ids', 'boxes', 'nothing'),
                   track_ids=d.track_ids)
    with pytest.raises(ValueError, match=r'fields differ: ids, scores, boxes, masks, track_ids '
                                         r'\(grids: masks\) and ids, scores, boxes, masks, '
                                         r'track_ids$'):
        Detections.concat([d, Detections(d.ids, d.scores, d.boxes, masks=d.masks,
                                         track_ids=d.track_ids)])
    with pytest.raises(ValueError, match='masks grid field .* these have ids, scores, boxes, '
                                         'track_ids, masks$'):
        d.replace(masks=None).replace(masks=d.masks).pasted_masks((10, 10))


def test_scaling_keeps_a_grid_mirroring_flips_it_clipping_regrids_it():
    d = _with_masks()
    assert d.clipped(d.boxes).masks.tolist() == d.masks.tolist()     # nothing cut: exact
    mirrored = d.mirrored((30, 40))
    assert mirrored.boxes[1].tolist() == [29 - 20, 5, 29 - 5, 30]
    np.testing.assert_array_equal(mirrored.masks, d.masks[..., ::-1])
    assert mirrored.mirrored((30, 40)).boxes.tolist() == d.boxes.tolist()
    # only the clipped box's grid changes; a box wholly outside keeps nothing
    cut = d.clipped([[0, 0, 9, 9], [5, 5, 20, 12], [1, 2, 3, 4]])
    np.testing.assert_array_equal(cut.masks[[0, 2]], d.masks[[0, 2]])
    assert not np.allclose(cut.masks[1], d.masks[1])
    outside = regrid(np.ones((1, 2, 6, 6)), [[50, 0, 70, 20]], [[39, 0, 39, 20]])
    assert outside.shape == (1, 2, 6, 6) and not outside.any()


def _blob(rng, cells):
    """A confident mask filling most of its box, as a trained Mask R-CNN's: 1 inside an
    ellipse, falling to 0 over a cell or two, with noise."""
    yy, xx = np.mgrid[0:cells, 0:cells] + 0.5
    centre, radius = rng.uniform(0.45, 0.55, 2) * cells, rng.uniform(0.4, 0.5, 2) * cells
    d = ((xx - centre[0]) / radius[0]) ** 2 + ((yy - centre[1]) / radius[1]) ** 2
    logits = rng.uniform(6, 12) * (d - 1) + rng.normal(0, 0.3, (cells, cells))
    return (1 / (1 + np.exp(logits))).astype(np.float32)


def test_regridded_masks_paste_as_the_originals_cropped_to_the_image():
    """Boxes of 32 to 200 px crossing one or two sides of images of 40 to 240 px, at least
    40% and 24 px of each kept, grids of 14 and 28: the re-gridded mask pasted on the
    clipped box against the original pasted on its box (the part in the image).

    Pasting fades a grid towards its box's sides over half a cell, so along a cut side the
    re-gridded mask loses up to half a new cell of pixels where the probabilities are under
    1: the few cases under 0.95 are 14 x 14 grids cut on two sides (2 px of a 40 px mask
    on each; 1000 cases: least 0.939, 1% under 0.966, mean 0.992)."""
    rng = np.random.RandomState(0)
    ious = []
    while len(ious) < 300:
        cells = int(rng.choice([14, 28]))
        width, height = rng.randint(40, 240, 2)
        w, h = rng.uniform(32, 200, 2)
        x0, y0 = rng.uniform(-0.6 * w, width - 0.4 * w), rng.uniform(-0.6 * h, height - 0.4 * h)
        box = np.array([[x0, y0, x0 + w, y0 + h]], np.float32)
        kept = np.clip(box, 0, [width - 1, height - 1] * 2).astype(np.float32)
        if (kept == box).all() or (kept[0, 2:] - kept[0, :2] < 24).any():
            continue
        grid = _blob(rng, cells)[None]
        whole = paste(grid, box, (width, height))
        cut = Detections([0], [1], box, grid_fields=['masks'], masks=grid).clipped(kept)
        assert cut.boxes.tolist() == kept.tolist()
        ious.append(_iou(whole, cut.pasted_masks((width, height))))
    ious = np.array(ious)
    assert (ious >= 0.95).mean() >= 0.98 and ious.min() >= 0.93 and ious.mean() >= 0.99, (
        (ious >= 0.95).mean(), ious.min(), ious.mean())


# ---------------------------------------------------------------- the stand-in


def test_predictor_clips_the_box_and_regrids_its_mask(shapes):
    image, truth, _ = l_shape(128, 192, 0, 0)     # the L touches the top left corner
    (found,) = [p.detections for p in shapes.predict([image])]
    assert found.grid_fields == ('masks',) and found.masks.shape == (1, GRID, GRID)
    assert found.boxes[0, :2].tolist() == [0, 0]      # -10.5 clipped
    raw = WhiteShapes()(shapes.transform(image, np.zeros((0, 6)))[0][None])
    assert raw[2][0, 0, 0] < -10 and not np.allclose(found.masks[0], raw[3][0, 0])
    assert _iou(found.pasted_masks((192, 128))[0], truth) >= 0.93
    unclipped = paste(raw[3][0], raw[2][0], (192, 128))[0]
    assert _iou(found.pasted_masks((192, 128))[0], unclipped) >= 0.97


@pytest.mark.parametrize('merge', ['wbf', 'nms'])
def test_tta_mirrored_views_give_the_mask_back_unmirrored(shapes, merge):
    # the L touches the right edge: each view's box is clipped (by the predictor to the
    # view, or, shrunk, to the window when mapped back), its grid re-gridded
    image, truth, mirrored = l_shape(128, 192, 122, 20)
    assert _iou(truth, mirrored) < 0.5
    viewed = ViewPredictor(shapes, tta=TTA(scales=(1, 0.75), merge=merge))
    (views,) = viewed.view_detections([image])[0]
    assert len(views) == 4      # scale 1, mirrored; 0.75, mirrored
    for view in views:
        assert view.boxes[0, 2] == 191
        assert _iou(view.pasted_masks((192, 128))[0], truth) >= 0.9
    # the mirrored views score higher: their masks are those kept
    assert views[1].scores[0] > views[0].scores[0] and views[3].scores[0] > views[2].scores[0]
    (merged,) = viewed.detect([image])
    assert merged.grid_fields == ('masks',)
    assert merged.masks.tolist() in ([views[1].masks[0].tolist()], [views[3].masks[0].tolist()])
    pasted = merged.pasted_masks((192, 128))[0]
    assert _iou(pasted, truth) >= 0.9 and _iou(pasted, mirrored) < 0.5


def test_slicing_moves_the_mask_with_its_tile(shapes):
    image, truth, _ = l_shape(128, 256, 80, 25)     # whole only in the tile from x = 64
    viewed = ViewPredictor(shapes, slice=Slicing(128, overlap=0.5))
    assert viewed.windows(128, 256) == [(0, 0, 128, 128), (64, 0, 192, 128),
                                        (128, 0, 256, 128)]
    (found,) = viewed.detect([image])
    assert len(found) == 1 and found.grid_fields == ('masks',)
    assert found.boxes[0, 0] > 64       # in image pixels: the tile's offset added
    assert _iou(found.pasted_masks((256, 128))[0], truth) >= 0.93


def test_tracking_keeps_the_masks(shapes):
    tracker = ByteTrack()
    for step in range(4):
        image, truth, _ = l_shape(128, 192, 40 + 5 * step, 20)
        (found,) = shapes.detect([image])
        tracked = tracker.track(found)
        assert tracked.track_ids.tolist() == [1] and tracked.grid_fields == ('masks',)
        np.testing.assert_array_equal(tracked.masks, found.masks)
        assert _iou(tracked.pasted_masks((192, 128))[0], truth) >= 0.9


def test_drawing_fills_the_masks_drawn_in_their_box_colour():
    height, width = 80, 120
    masks = np.zeros((2, 4, 4), np.float32)
    masks[:, 1:3, 1:3] = 1
    d = Detections([1, 0], [0.9, 0.1], [[10, 40, 49, 79], [70, 40, 110, 79]],
                   grid_fields=['masks'], masks=masks)
    image = np.full((height, width, 3), 100, np.uint8)
    drawn = draw_detections(image, d, ['a', 'b'], threshold=0.3)
    inside = d[:1].pasted_masks((width, height))[0].astype(bool)
    assert 300 < inside.sum() < 500 and (image == 100).all()
    color = np.array(class_colors(2)[1], np.float64)
    assert (drawn[inside] == np.round(0.5 * 100 + 0.5 * color).astype(np.uint8)).all()
    assert (drawn[50:70, 80:100] == 100).all()          # below the threshold: not filled
    plain = draw_boxes(image, d.boxes, d.ids, d.scores, ['a', 'b'], threshold=0.3)
    assert (drawn[~inside] == plain[~inside]).all()


# ---------------------------------------------------------------- the real Mask R-CNN


@pytest.fixture(scope='module')
def real(tmp_path_factory):
    """A small Mask R-CNN registered under NAME (removed after), detecting with seeded
    random weights: its params file."""
    @register_model(NAME, None, (128, 128), 'resnet18_v1b', 'custom', has_weights=False)
    def build(classes=None, pretrained=False, pretrained_base=True, ctx=mx.cpu(), root=None,
              **kwargs):
        net = get_model('mask_rcnn_fpn_resnet18_v1b_custom', classes=classes,
                        pretrained_base=False, ctx=ctx, short=128, max_size=192, **kwargs)
        net.grid_fields = ('masks',)        # until MaskRCNN declares it
        return net
    try:
        mx.random.seed(0)
        np.random.seed(0)
        net = get_model(NAME, classes=CLASSES)
        detecting_random_weights(net, mx.nd.random.normal(shape=(1, 3, 128, 160)))
        params = str(tmp_path_factory.mktemp('model') / 'masks.params')
        net.save_parameters(params)
        yield params
    finally:
        del registry._REGISTRY[NAME]


def _images(folder, count=2):
    rng = np.random.RandomState(1)
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(count):
        image, _, _ = l_shape(120, 160, 10 + 30 * i, 30)
        image = np.clip(image * 0.7 + rng.uniform(0, 60, image.shape), 0, 255).astype(np.uint8)
        paths.append(str(folder / ('img%d.png' % i)))
        cv2.imwrite(paths[-1], image)
    return paths


class Recording:
    """A runner's outputs kept as it gives them."""

    def __init__(self, runner):
        self.runner, self.outputs = runner, None
        self.batch_range, self.output_fields = runner.batch_range, runner.output_fields
        self.grid_fields = runner.grid_fields

    def __call__(self, batch):
        self.outputs = self.runner(batch)
        return self.outputs


def test_real_mask_rcnn_masks_follow_their_boxes(real, tmp_path):
    predictor = Predictor.from_model(NAME, params=real, classes=CLASSES)
    assert predictor.runner.grid_fields == ('masks',)
    predictor.runner = recording = Recording(predictor.runner)
    (path,) = _images(tmp_path, 1)
    (p,) = list(predictor.predict([path]))
    found = p.detections
    assert found.grid_fields == ('masks',) and found.masks.shape == (len(found), 14, 14)
    ids, _, boxes, masks = (o[0] for o in recording.outputs)
    keep = np.flatnonzero(ids[:, 0] >= 0)
    assert len(found) == len(keep) >= 5
    sample = predictor.transform(p.image, np.zeros((0, 6)))
    ratio = np.float32([120, 160]) / np.float32(sample[0].shape[1:])    # y, x
    unclipped = boxes[keep] * np.tile(ratio[::-1], 2)
    clipped = (unclipped != found.boxes).any(axis=1)
    assert clipped.sum() >= 1 and (~clipped).sum() >= 1
    np.testing.assert_array_equal(found.masks[~clipped], masks[keep][~clipped])
    np.testing.assert_allclose(found.masks[clipped], regrid(masks[keep], unclipped,
                                                            found.boxes)[clipped], atol=1e-6)


def test_real_mask_rcnn_through_gluondet_infer(real, tmp_path):
    paths = _images(tmp_path / 'images')
    output, drawn = str(tmp_path / 'det.json'), str(tmp_path / 'drawn')
    assert main(['infer', '--model', NAME, '--params', real, '--classes', ','.join(CLASSES),
                 '--source', str(tmp_path / 'images'), '--output', output,
                 '--visualize', drawn, '--threshold', '0.5']) == 0
    with open(output) as f:
        rows = json.load(f)
    predictor = Predictor.from_model(NAME, params=real, classes=CLASSES)
    for image_id, p in enumerate(predictor.predict(paths), 1):
        mine = [r for r in rows if r['image_id'] == image_id]
        assert len(mine) == len(p.detections) >= 5
        assert all(isinstance(r['segmentation']['counts'], str) for r in mine)
        assert mine[0]['segmentation']['size'] == [120, 160]
        pasted = p.detections.pasted_masks((160, 120))
        np.testing.assert_array_equal(decode([r['segmentation'] for r in mine]), pasted)
        assert pasted.any()
        # the drawn image: the masks of the boxes drawn filled, no others
        image = cv2.cvtColor(cv2.imread(os.path.join(drawn, os.path.basename(p.source))),
                             cv2.COLOR_BGR2RGB)
        expected = draw_detections(p.image, p.detections, CLASSES, 0.5)
        np.testing.assert_array_equal(image, expected)      # a PNG
        shown = p.detections.above(0.5)
        plain = draw_boxes(p.image, shown.boxes, shown.ids, shown.scores, CLASSES)
        filled = shown.pasted_masks((160, 120)).any(axis=0)
        bare = filled & (plain == p.image).all(axis=2)      # under no line or label
        assert 0 < len(shown) < len(p.detections) and bare.sum() > 100
        assert (expected[bare] != p.image[bare]).any(axis=1).all()
        assert (expected[~filled] == plain[~filled]).all()


@pytest.fixture()
def video(tmp_path):
    path = str(tmp_path / 'shapes.avi')
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'MJPG'), 10, (160, 120))
    for i in range(4):
        image, _, _ = l_shape(120, 160, 20 + 8 * i, 30)
        writer.write(image)
    writer.release()
    return path


def test_real_mask_rcnn_json_lines_with_tracking(real, video, tmp_path):
    lines = str(tmp_path / 'det.jsonl')
    assert main(['infer', '--model', NAME, '--params', real, '--classes', ','.join(CLASSES),
                 '--source', video, '--output', lines, '--track']) == 0
    with open(lines) as f:
        frames = [json.loads(line) for line in f]
    assert len(frames) == 4
    found = [d for frame in frames for d in frame['detections']]
    assert found and {'bbox', 'score', 'class_id', 'class', 'track_id',
                      'segmentation'} == set(found[0])
    assert max(d['track_id'] for d in found) >= 1
    masks = decode([d['segmentation'] for d in found])
    assert masks.shape == (len(found), 120, 160) and masks.any()


def test_detector_predict_gives_the_masks(real, tmp_path):
    (path,) = _images(tmp_path, 1)
    d = Detector(NAME, params=real, classes=CLASSES)
    (r,) = d.predict(path)
    masks = r.masks()
    assert masks.shape == (len(r), 120, 160) and masks.dtype == np.uint8 and masks.any()
    np.testing.assert_array_equal(masks, r.detections.pasted_masks((160, 120)))
    rows = r.to_list()
    assert set(rows[0]) == {'box', 'score', 'class_id', 'name', 'segmentation'}
    np.testing.assert_array_equal(decode([row['segmentation'] for row in rows]), masks)
    assert (r.plot(0.5) != draw_boxes(r.image, r.boxes, r.class_ids, r.scores, CLASSES,
                                      threshold=0.5)).any()
    (flipped,) = d.predict(path, tta=TTA(scales=(1,)))
    assert flipped.detections.grid_fields == ('masks',) and flipped.masks().any()
