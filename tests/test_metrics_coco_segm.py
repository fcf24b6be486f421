"""COCO mask evaluation (== pycocotools' COCOeval(iouType='segm')) and COCODetectionMetric's
masks."""
import contextlib
import copy
import io
import json

import numpy as np
import pytest

from gluondet import masks
from gluondet.metrics import STAT_NAMES, COCODetectionMetric, coco_evaluate

pytest.importorskip('pycocotools')


def _pycocotools(gt, dets, iou_type='segm'):
    """pycocotools' 12 numbers (it edits its inputs, so it gets copies)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = copy.deepcopy(gt)
        coco_gt.createIndex()
        evaluator = COCOeval(coco_gt, coco_gt.loadRes(copy.deepcopy(dets)), iou_type)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return dict(zip(STAT_NAMES, evaluator.stats))


def _assert_stats(stats, expected):
    assert list(stats) == list(STAT_NAMES)
    np.testing.assert_allclose([stats[n] for n in STAT_NAMES],
                               [expected[n] for n in STAT_NAMES], rtol=0, atol=1e-12)


def _blob(rng, height, width, radius):
    """A star-shaped polygon around a random centre (flat list)."""
    cx, cy = rng.uniform(0, width), rng.uniform(0, height)
    angles = np.sort(rng.uniform(0, 2 * np.pi, rng.integers(3, 14)))
    radii = radius * rng.uniform(0.4, 1.0, len(angles))
    return np.c_[cx + radii * np.cos(angles), cy + radii * np.sin(angles)].ravel().tolist()


def _uncompressed(rle):
    """pycocotools' uncompressed form (counts as a list) of a compressed RLE."""
    flat = masks.decode(rle).T.ravel()                  # column by column
    counts = np.diff(np.r_[0, np.flatnonzero(np.diff(flat)) + 1, flat.size])
    return {'size': rle['size'], 'counts': ([0] if flat[0] else []) + counts.tolist()}


def _problem(seed):
    """Ground truth with polygons, RLEs (compressed and not) and crowd RLEs over images of
    several sizes and 4 categories; detections: moved copies of the masks, clutter, ties,
    an image over 100 detections, several detections in a crowd, none of category 4, an
    image with detections and no ground truth, one with nothing."""
    rng = np.random.default_rng(seed)
    sizes = [(120, 160), (90, 90), (240, 320), (64, 96), (150, 200), (80, 60), (100, 100)]
    images = [{'id': i + 1, 'height': h, 'width': w} for i, (h, w) in enumerate(sizes)]
    anns = []
    for image in images[:-2]:
        h, w = image['height'], image['width']
        for _ in range(rng.integers(2, 7)):
            polys = [_blob(rng, h, w, np.exp(rng.uniform(np.log(3), np.log(200))))
                     for _ in range(rng.integers(1, 3))]
            kind = rng.integers(0, 4)
            rle = masks.from_polygons(polys, h, w)
            segmentation = (polys, _uncompressed(rle), rle, _uncompressed(rle))[kind]
            anns.append({'id': len(anns) + 1, 'image_id': image['id'],
                         'category_id': int(rng.integers(1, 5)), 'segmentation': segmentation,
                         'area': float(masks.area(rle)) * rng.uniform(0.8, 1.2),
                         'bbox': masks.to_bbox(rle).tolist(), 'iscrowd': int(kind == 3)})
    anns[0]['id'] = 0       # pycocotools' "no match" id
    gt = {'images': images, 'annotations': anns,
          'categories': [{'id': c, 'name': 'c%d' % c} for c in range(1, 5)]}
    dets = []

    def add(bitmap, image, category, score):
        rle = masks.encode(bitmap)
        dets.append({'image_id': image['id'], 'category_id': category, 'segmentation': rle,
                     'score': score, 'bbox': masks.to_bbox(rle).tolist()})

    for ann in anns:
        image = images[ann['image_id'] - 1]
        bitmap = masks.decode(masks.to_rle(ann['segmentation'], image['height'],
                                           image['width']))
        copies = 4 if ann['iscrowd'] else rng.integers(0, 3)
        for _ in range(copies):
            moved = np.roll(bitmap, rng.integers(-1, 2, 2) * (rng.random() < 0.5), axis=(0, 1))
            if rng.random() < 0.3:
                moved = moved & (rng.random(moved.shape) < 0.97)
            category = ann['category_id'] if rng.random() < 0.85 else int(rng.integers(1, 4))
            add(moved, image, min(category, 3), float(np.round(rng.uniform(0.2, 1), 2)))
    for image in (images[1], images[-2]):
        h, w = image['height'], image['width']
        for _ in range(105 if image is images[1] else 10):
            clutter = masks.decode(masks.from_polygons([_blob(rng, h, w, rng.uniform(2, 40))],
                                                       h, w))
            add(clutter, image, int(rng.integers(1, 4)), float(np.round(rng.random() * .6, 1)))
    return gt, dets


@pytest.mark.parametrize('seed', [0, 2, 4])
def test_same_numbers_as_pycocotools(seed):
    gt, dets = _problem(seed)
    assert {a['iscrowd'] for a in gt['annotations']} == {0, 1}
    stats = coco_evaluate(gt, dets, iou_type='segm')
    assert 0.05 < stats['AP'] < 0.95
    _assert_stats(stats, _pycocotools(gt, dets))


def test_areas_from_masks_when_the_detections_have_no_boxes():
    """pycocotools takes detection areas from the boxes when the first has one, else from the
    masks: the two give different numbers, each pycocotools'."""
    gt, dets = _problem(3)
    no_boxes = [{k: v for k, v in d.items() if k != 'bbox'} for d in dets]
    with_boxes, without = coco_evaluate(gt, dets, 'segm'), coco_evaluate(gt, no_boxes, 'segm')
    assert with_boxes != without
    _assert_stats(without, _pycocotools(gt, no_boxes))
    columns = {key: [d[key] for d in no_boxes] for key in no_boxes[0]}
    assert coco_evaluate(gt, columns, 'segm') == without


def test_bbox_type_unchanged_by_segmentations():
    gt, dets = _problem(4)
    _assert_stats(coco_evaluate(gt, dets), _pycocotools(gt, dets, 'bbox'))


def test_hand_computed():
    """One 10 x 10 square; a detection covering it and 10 more pixels: IoU 100 / 110."""
    gt = {'images': [{'id': 1, 'height': 20, 'width': 20}],
          'categories': [{'id': 1, 'name': 'a'}],
          'annotations': [{'id': 1, 'image_id': 1, 'category_id': 1, 'iscrowd': 0,
                           'segmentation': [[2, 2, 12, 2, 12, 12, 2, 12]], 'area': 100.,
                           'bbox': [2, 2, 10, 10]}]}
    square = masks.decode(masks.from_polygons(gt['annotations'][0]['segmentation'], 20, 20))
    assert square.sum() == 100
    bigger = square.copy()
    bigger[12, 2:12] = 1
    det = [{'image_id': 1, 'category_id': 1, 'segmentation': masks.encode(bigger),
            'score': 0.9}]
    stats = coco_evaluate(gt, det, 'segm')
    # matched at IoU thresholds .50 ... .90 (9 of 10): AP = 0.9
    assert stats['AP'] == pytest.approx(0.9, abs=1e-12)
    assert stats['AP75'] == pytest.approx(1.0, abs=1e-12)
    _assert_stats(stats, _pycocotools(gt, det))


def test_bad_input_is_named():
    gt, dets = _problem(5)
    with pytest.raises(ValueError, match='iou_type'):
        coco_evaluate(gt, dets, 'keypoints')
    wrong_size = copy.deepcopy(dets)
    wrong_size[3]['segmentation'] = masks.encode(np.zeros((5, 5), np.uint8))
    with pytest.raises(ValueError, match=r'detections\[3\]/segmentation: RLE size \[5, 5\]'):
        coco_evaluate(gt, wrong_size, 'segm')
    bad_poly = copy.deepcopy(gt)
    bad_poly['annotations'][2]['segmentation'] = [[1, 2, 3, 4]]
    with pytest.raises(ValueError, match=r'<dict>: annotations\[2\]/segmentation\[0\]: a '
                                         r'polygon needs at least 3 points'):
        coco_evaluate(bad_poly, dets, 'segm')
    no_seg = copy.deepcopy(gt)
    del no_seg['annotations'][1]['segmentation']
    with pytest.raises(ValueError, match=r'annotations\[1\] has no "segmentation"'):
        coco_evaluate(no_seg, dets, 'segm')
    no_size = copy.deepcopy(gt)
    del no_size['images'][0]['height']
    with pytest.raises(ValueError, match='image 1 needs an int height and width'):
        coco_evaluate(no_size, dets, 'segm')
    with pytest.raises(ValueError, match='segmentation'):
        coco_evaluate(gt, [{k: v for k, v in dets[0].items() if k != 'segmentation'}], 'segm')
    half_boxes = copy.deepcopy(dets)
    del half_boxes[1]['bbox']
    with pytest.raises(ValueError, match='the first has a bbox'):
        coco_evaluate(gt, half_boxes, 'segm')


# -- COCODetectionMetric with masks ---------------------------------------------------------


class StandIn:
    """The dataset attributes COCODetectionMetric reads; ``annotation_file`` a dict."""

    def __init__(self, gt):
        self.annotation_file = gt
        cats = sorted(c['id'] for c in gt['categories'])
        self.classes = ['c%d' % c for c in cats]
        self.contiguous_id_to_json = cats
        self.image_ids = sorted(image['id'] for image in gt['images'])


def _feed(metric, gt, dets, form):
    """One image at a time: boxes (GluonCV's inclusive xyxy), labels, scores, masks (full
    images, a list of RLEs or an object array of them), with two padding rows."""
    for image in gt['images']:
        mine = [d for d in dets if d['image_id'] == image['id']]
        h, w = image['height'], image['width']
        rows = np.full((len(mine) + 2, 6), -1.)
        bitmaps = np.zeros((len(mine) + 2, h, w), np.uint8)
        for i, d in enumerate(mine):
            x, y, bw, bh = d['bbox']
            rows[i] = [x, y, x + bw - 1, y + bh - 1, d['category_id'] - 1, d['score']]
            bitmaps[i] = masks.decode(d['segmentation'])
        pred = {'bitmaps': bitmaps, 'rles': masks.encode(bitmaps),
                'array': np.array(masks.encode(bitmaps) + [None], object)[:-1]}[form]
        metric.update(rows[None, :, :4], rows[None, :, 4], rows[None, :, 5],
                      pred_masks=[pred])


@pytest.mark.parametrize('form', ['bitmaps', 'rles', 'array'])
def test_metric_reports_box_and_mask_ap(tmp_path, form):
    gt, dets = _problem(6)
    metric = COCODetectionMetric(StandIn(gt), save_prefix=str(tmp_path / 'res'),
                                 use_time=False, masks=True, score_thresh=0)
    metric.reset()
    _feed(metric, gt, dets, form)
    names, values = metric.get()
    with open(tmp_path / 'res.json') as f:
        written = json.load(f)
    assert len(written) == len(dets) and {'bbox', 'segmentation'} <= set(written[0])
    _assert_stats(metric.stats, _pycocotools(gt, written, 'bbox'))
    _assert_stats(metric.segm_stats, _pycocotools(gt, written, 'segm'))
    # detections whose boxes are x, y, w + 1 - 1, ...: the boxes are the written ones
    _assert_stats(metric.segm_stats, _pycocotools(gt, dets, 'segm'))
    assert names[0] == '~~~~ Summary bbox metrics ~~~~\n' and names[-1] == 'segm AP'
    assert names.index('bbox AP') == 5 and names[6] == '~~~~ Summary segm metrics ~~~~\n'
    assert names[1:5] == ['bbox/c1', 'bbox/c2', 'bbox/c3', 'bbox/c4']
    assert values[5] == '%.1f' % (100 * metric.stats['AP'])
    assert values[-1] == '%.1f' % (100 * metric.segm_stats['AP'])
    assert any(a['category_id'] == 4 for a in gt['annotations'])
    assert values[-2] == '0.0'      # category 4: ground truths, no detections
    assert 'Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all' in values[6]


def test_metric_mask_arguments_are_checked():
    gt, dets = _problem(7)
    boxes, labels, scores = np.zeros((1, 2, 4)), np.zeros((1, 2)), np.ones((1, 2))
    boxes[..., 2:] = 5
    metric = COCODetectionMetric(StandIn(gt), masks=True)
    metric.reset()
    with pytest.raises(ValueError, match='needs pred_masks'):
        metric.update(boxes, labels, scores)
    h, w = gt['images'][0]['height'], gt['images'][0]['width']
    with pytest.raises(ValueError, match=r'pred_masks\[0\]: 2 x %d x %d .* image 1 is %d x %d'
                                         % (h + 1, w, h, w)):
        metric.update(boxes, labels, scores, pred_masks=[np.zeros((2, h + 1, w))])
    with pytest.raises(ValueError, match='one mask per box'):
        metric.update(boxes, labels, scores, pred_masks=[np.zeros((3, h, w))])
    plain = COCODetectionMetric(StandIn(gt))
    plain.reset()
    with pytest.raises(ValueError, match='masks=True'):
        plain.update(boxes, labels, scores, pred_masks=[np.zeros((2, h, w))])
