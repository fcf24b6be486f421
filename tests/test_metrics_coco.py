"""COCO box evaluation (== pycocotools' COCOeval) and COCODetectionMetric."""
import contextlib
import copy
import io
import json
import math
import os
import warnings

import numpy as np
import pytest

from gluondet.metrics import STAT_NAMES, COCODetectionMetric, coco_evaluate
from gluondet.metrics.coco_eval import detection_columns


def _pycocotools(gt, dets):
    """pycocotools' 12 numbers (it edits its inputs, so it gets copies)."""
    coco = pytest.importorskip('pycocotools.coco')
    cocoeval = pytest.importorskip('pycocotools.cocoeval')
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = coco.COCO()
        coco_gt.dataset = copy.deepcopy(gt)
        coco_gt.createIndex()
        evaluator = cocoeval.COCOeval(coco_gt, coco_gt.loadRes(copy.deepcopy(dets)), 'bbox')
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return dict(zip(STAT_NAMES, evaluator.stats))


def _assert_stats(stats, expected, tol=1e-12):
    assert list(stats) == list(STAT_NAMES)
    for name in STAT_NAMES:
        assert stats[name] == pytest.approx(expected[name], abs=tol), name


def _tiny_gt():
    return {'images': [{'id': 7, 'width': 100, 'height': 100}],
            'categories': [{'id': 3, 'name': 'x'}],
            'annotations': [
                {'id': 1, 'image_id': 7, 'category_id': 3, 'bbox': [10, 10, 20, 20], 'area': 400,
                 'iscrowd': 0},
                {'id': 2, 'image_id': 7, 'category_id': 3, 'bbox': [50, 50, 40, 40], 'area': 1600,
                 'iscrowd': 0}]}


def _det(bbox, score, image_id=7, category_id=3):
    return {'image_id': image_id, 'category_id': category_id, 'bbox': bbox, 'score': score}


def test_hand_computed():
    # by score: a false positive (area 25, small), the small gt exactly, the medium gt exactly
    dets = [_det([0, 0, 5, 5], 0.95), _det([10, 10, 20, 20], 0.9), _det([50, 50, 40, 40], 0.5)]
    stats = coco_evaluate(_tiny_gt(), dets)
    # all: TP flags 0 1 1 of 2 -> precision 2/3 at every recall point, every IoU
    # small: medium gt and its detection ignored -> 0 1 of 1 -> 1/2
    # medium: small gt, its detection and the small false positive ignored -> 1
    expected = {'AP': 2 / 3, 'AP50': 2 / 3, 'AP75': 2 / 3, 'APs': 0.5, 'APm': 1.0, 'APl': -1.0,
                'AR1': 0.0, 'AR10': 1.0, 'AR100': 1.0, 'ARs': 1.0, 'ARm': 1.0, 'ARl': -1.0}
    _assert_stats(stats, expected)


def test_no_detections_gives_zero():
    stats = coco_evaluate(_tiny_gt(), [])
    _assert_stats(stats, {'AP': 0., 'AP50': 0., 'AP75': 0., 'APs': 0., 'APm': 0., 'APl': -1.,
                          'AR1': 0., 'AR10': 0., 'AR100': 0., 'ARs': 0., 'ARm': 0., 'ARl': -1.})


def test_match_to_annotation_id_zero_counts_as_none():
    """pycocotools stores matched ids with 0 meaning none: so do we."""
    gt = _tiny_gt()
    gt['annotations'][0]['id'] = 0
    dets = [_det([10, 10, 20, 20], 0.9), _det([50, 50, 40, 40], 0.5)]
    stats = coco_evaluate(gt, dets)
    assert stats['APs'] == 0.0 and stats['APm'] == pytest.approx(1.0)
    _assert_stats(stats, _pycocotools(gt, dets))


def test_input_forms_agree():
    dets = [_det([0, 0, 5, 5], 0.95), _det([10, 11, 20, 19], 0.9), _det([50, 50, 40, 40], 0.5)]
    array = np.array([[d['image_id'], *d['bbox'], d['score'], d['category_id']] for d in dets])
    columns = dict(zip(('image_id', 'category_id', 'bbox', 'score'), detection_columns(dets)))
    expected = coco_evaluate(_tiny_gt(), dets)
    assert coco_evaluate(_tiny_gt(), array) == expected
    assert coco_evaluate(_tiny_gt(), columns) == expected


def test_bad_input_is_named(tmp_path):
    path = tmp_path / 'gt.json'
    path.write_text(json.dumps(_tiny_gt()))
    with pytest.raises(ValueError, match='absent from .*gt.json'):
        coco_evaluate(str(path), [_det([0, 0, 5, 5], 0.9, image_id=8)])
    with pytest.raises(ValueError, match='finite'):
        coco_evaluate(str(path), [_det([0, 0, float('nan'), 5], 0.9)])
    with pytest.raises(ValueError, match='bbox'):
        coco_evaluate(str(path), [_det([0, 0, 5], 0.9)])
    duplicate = _tiny_gt()
    duplicate['annotations'][1]['id'] = 1
    with pytest.raises(ValueError, match='not unique'):
        coco_evaluate(duplicate, [])
    no_area = _tiny_gt()
    del no_area['annotations'][0]['area']
    with pytest.raises(ValueError, match='area'):
        coco_evaluate(no_area, [])
    path.write_text('{"images": [')
    with pytest.raises(ValueError, match='gt.json: not valid json'):
        coco_evaluate(str(path), [])


def test_pair_chunks_do_not_change_results(monkeypatch, cards_root):
    from gluondet.metrics import _pairs
    with open(os.path.join(cards_root, 'coco', 'instances_test.json')) as f:
        gt, dets = _jittered_problem(json.load(f), 2)
    expected = coco_evaluate(gt, dets)
    monkeypatch.setattr(_pairs, 'PAIR_CHUNK', 5)
    assert coco_evaluate(gt, dets) == expected


def test_unknown_category_is_dropped_with_a_warning():
    dets = [_det([10, 10, 20, 20], 0.9), _det([50, 50, 40, 40], 0.5)]
    with pytest.warns(UserWarning, match='1 detections have category ids absent'):
        stats = coco_evaluate(_tiny_gt(), dets + [_det([50, 50, 40, 40], 0.99, category_id=4)])
    assert stats == coco_evaluate(_tiny_gt(), dets)


def _jittered_problem(gt, seed):
    """Detections around the ground truths plus clutter; crowds, empty images, ties.

    Returns a modified copy of ``gt`` and the detections.
    """
    rng = np.random.default_rng(seed)
    gt = copy.deepcopy(gt)
    for ann in gt['annotations']:
        ann['iscrowd'] = int(rng.random() < 0.05)
        ann['area'] = ann['bbox'][2] * ann['bbox'][3] * rng.uniform(0.5, 1.0)
    gt['annotations'][0]['id'] = 0  # pycocotools' "no match" id
    top = max(image['id'] for image in gt['images'])
    gt['images'] += [{'id': top + 1, 'width': 640, 'height': 480},   # detections, no gt
                     {'id': top + 2, 'width': 640, 'height': 480}]   # nothing at all
    cats = [c['id'] for c in gt['categories']]
    dets = []
    for ann in gt['annotations']:
        for _ in range(rng.integers(0, 4) if rng.random() < 0.2 else rng.integers(1, 4)):
            x, y, w, h = ann['bbox']
            jx, jy, jw, jh = rng.normal(0, 0.08, 4) * [w, h, w, h]
            cat = ann['category_id'] if rng.random() < 0.85 else int(rng.choice(cats))
            dets.append(_det([x + jx, y + jy, max(w + jw, 1), max(h + jh, 1)],
                             float(rng.uniform(0.3, 1)), ann['image_id'], cat))
    for image in gt['images'][::5] + [gt['images'][-2]]:
        for _ in range(150 if image['id'] % 2 else 20):  # some images over 100 detections
            x, y, w, h = rng.uniform(0, 500), rng.uniform(0, 400), *rng.uniform(2, 150, 2)
            dets.append(_det([x, y, w, h], float(np.round(rng.uniform(0, 0.6), 1)),  # ties
                             image['id'], int(rng.choice(cats))))
    return gt, dets


@pytest.mark.parametrize('dataset, split', [('bccd', 'val'), ('cards', 'test')])
def test_same_numbers_as_pycocotools(request, dataset, split):
    root = request.getfixturevalue(dataset + '_root')
    with open(os.path.join(root, 'coco', 'instances_%s.json' % split)) as f:
        real = json.load(f)
    gt, dets = _jittered_problem(real, 0)
    if dataset == 'cards':  # a category without detections
        dets = [d for d in dets if d['category_id'] != gt['categories'][0]['id']]
    stats = coco_evaluate(gt, dets)
    assert 0.1 < stats['AP'] < 0.9
    _assert_stats(stats, _pycocotools(gt, dets))


def test_same_numbers_as_pycocotools_synthetic():
    """80 categories, every area range, a crowd-heavy category and a gt-less category."""
    rng = np.random.default_rng(3)
    images = [{'id': i, 'width': 640, 'height': 480} for i in range(1, 26)]
    anns = []
    for image in images:
        for _ in range(rng.poisson(6)):
            w, h = np.exp(rng.uniform(np.log(4), np.log(300), 2))
            cat = int(rng.integers(1, 80))
            anns.append({'id': len(anns) + 1, 'image_id': image['id'], 'category_id': cat,
                         'bbox': [rng.uniform(0, 400), rng.uniform(0, 300), w, h],
                         'area': w * h, 'iscrowd': int(cat == 5 or rng.random() < 0.02)})
    gt = {'images': images, 'annotations': anns,
          'categories': [{'id': i, 'name': str(i)} for i in range(1, 81)]}
    gt, dets = _jittered_problem(gt, 4)
    dets += [_det([10, 10, 50, 50], 0.7, 1, 80)]  # category 80 has no ground truth
    _assert_stats(coco_evaluate(gt, dets), _pycocotools(gt, dets))


# -- COCODetectionMetric ------------------------------------------------------------------


class StandIn:
    """The dataset attributes COCODetectionMetric reads (no image_size: sizes from json)."""

    def __init__(self, annotation_file, classes, contiguous_id_to_json, image_ids):
        self.annotation_file = annotation_file
        self.classes = classes
        self.contiguous_id_to_json = contiguous_id_to_json
        self.image_ids = image_ids


def _stand_in(tmp_path, gt):
    path = tmp_path / 'gt.json'
    path.write_text(json.dumps(gt))
    cats = sorted(c['id'] for c in gt['categories'])
    return StandIn(str(path), [str(c) for c in cats], list(cats),
                   sorted(image['id'] for image in gt['images']))


def _batches(gt, dets, dataset, scale=(1., 1.), pad=5):
    """Detections (COCO xywh) as padded xyxy batches of 3 images, in dataset pixels * scale
    (read as GluonCV reads COCO boxes, which ``COCODetectionMetric`` inverts)."""
    json_to_class = {j: c for c, j in enumerate(dataset.contiguous_id_to_json)}
    per_image = {i: [] for i in dataset.image_ids}
    for d in dets:
        x, y, w, h = d['bbox']
        box = [x * scale[0], y * scale[1], (x + w - 1) * scale[0], (y + h - 1) * scale[1]]
        per_image[d['image_id']].append(box + [json_to_class[d['category_id']], d['score']])
    width = max(len(rows) for rows in per_image.values()) + pad
    rows = np.full((len(per_image), width, 6), -1.)
    for i, image_id in enumerate(dataset.image_ids):
        if per_image[image_id]:
            rows[i, :len(per_image[image_id])] = per_image[image_id]
    return [(rows[i:i + 3, :, :4], rows[i:i + 3, :, 4], rows[i:i + 3, :, 5])
            for i in range(0, len(rows), 3)]


def test_metric_equals_coco_evaluate_on_rescaled_boxes(tmp_path, cards_root):
    with open(os.path.join(cards_root, 'coco', 'instances_test.json')) as f:
        gt, dets = _jittered_problem(json.load(f), 5)
    dataset = _stand_in(tmp_path, gt)
    sizes = {image['id']: (image['width'], image['height']) for image in gt['images']}
    metric = COCODetectionMetric(dataset, str(tmp_path / 'results'), use_time=False,
                                 score_thresh=0.2, data_shape=(300, 400))
    for boxes, labels, scores in _batches(gt, dets, dataset):
        image_ids = dataset.image_ids[metric._current:metric._current + len(boxes)]
        scale = np.array([[400 / sizes[i][0], 300 / sizes[i][1]] * 2 for i in image_ids])
        metric.update(boxes * scale[:, None, :], labels, scores)
    names, values = metric.get()
    kept = [d for d in dets if d['score'] >= 0.2]
    expected = coco_evaluate(gt, kept)
    _assert_stats(metric.stats, expected, tol=1e-9)  # rescaling rounds the boxes
    assert names[1:-1] == dataset.classes and names[-1].startswith('~~~~ MeanAP')
    assert values[-1] == '{:.1f}'.format(100 * expected['AP'])
    assert values[0].splitlines()[0].startswith(' Average Precision  (AP) @[ IoU=0.50:0.95')
    with open(tmp_path / 'results.json') as f:
        written = json.load(f)
    assert len(written) == len(kept)
    _assert_stats(coco_evaluate(gt, written), expected, tol=1e-9)


def test_metric_post_affine_and_cleanup(tmp_path):
    gt = _tiny_gt()
    dataset = _stand_in(tmp_path, gt)
    dets = [_det([0, 0, 5, 5], 0.95), _det([10, 10, 20, 20], 0.9), _det([50, 50, 40, 40], 0.5)]

    def halve(orig_w, orig_h, out_w, out_h):  # network frame (50 x 50) -> original (100 x 100)
        assert (orig_w, orig_h, out_w, out_h) == (100, 100, 50, 50)
        return [[2., 0., 0.], [0., 2., 0.]]

    metric = COCODetectionMetric(dataset, str(tmp_path / 'r'), cleanup=True, score_thresh=0,
                                 data_shape=(50, 50), post_affine=halve)
    for batch in _batches(gt, dets, dataset, scale=(0.5, 0.5)):
        metric.update(*batch)
    metric.get()
    _assert_stats(metric.stats, coco_evaluate(gt, dets))
    assert not [p for p in os.listdir(tmp_path) if p.startswith('r_')]  # removed


def test_metric_skips_padding_unknown_classes_and_low_scores(tmp_path):
    dataset = _stand_in(tmp_path, _tiny_gt())
    metric = COCODetectionMetric(dataset)
    boxes = np.array([[[10, 10, 29, 29], [50, 50, 89, 89], [50, 50, 89, 89], [0, 0, 1, 1]]])
    metric.update(boxes, np.array([[0, 0, 1, -1]]), np.array([[0.9, 0.01, 0.9, 0.9]]))
    metric.get()
    assert metric.stats['APs'] == pytest.approx(1.0) and metric.stats['APm'] == 0.0
    with pytest.raises(ValueError, match='more images'):
        metric.update(boxes, np.array([[0, 0, 1, -1]]), np.array([[0.9, 0.01, 0.9, 0.9]]))
    metric.reset()
    with pytest.warns(UserWarning, match='Recorded 0 out of 1'):
        _, values = metric.get()
    assert values[1:] == ['0.0', '0.0']


def test_metric_bad_arguments(tmp_path):
    dataset = _stand_in(tmp_path, _tiny_gt())
    with pytest.raises(ValueError, match='data_shape'):
        COCODetectionMetric(dataset, data_shape=300)
    with pytest.raises(ValueError, match='post_affine needs data_shape'):
        COCODetectionMetric(dataset, post_affine=lambda *args: None)
    with pytest.raises(ValueError, match='not writable'):
        COCODetectionMetric(dataset, str(tmp_path / 'missing' / 'r'))


def test_metric_on_real_coco_dataset(bccd_root):
    """gluondet's COCODetection: its labels fed back as detections score AP 1."""
    from gluondet.data import COCODetection
    dataset = COCODetection(annotation_file=os.path.join(bccd_root, 'coco', 'instances_val.json'),
                            image_root=os.path.join(bccd_root, 'BCCD'), skip_empty=False)
    metric = COCODetectionMetric(dataset, score_thresh=0)
    for i in range(len(dataset)):
        label = dataset.label(i)
        metric.update(label[None, :, :4], label[None, :, 4], np.ones((1, len(label))))
    names, values = metric.get()
    assert names[1:4] == list(dataset.classes)
    assert values[1:] == ['100.0'] * 4
    assert metric.stats['AP'] == 1.0 and metric.stats['AR100'] == 1.0
    assert not any(math.isnan(v) for v in metric.stats.values())
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        metric.reset()
