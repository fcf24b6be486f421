"""gluondet's COCO boxes against GluonCV's own: the same json read into the same boxes,
the same detections written into the same results json."""
import json
import os
import shutil

import numpy as np
import pytest

from gluondet.data import COCODetection
from gluondet.metrics import COCODetectionMetric

from filetools import jpeg, write

gcv_data = pytest.importorskip('gluoncv.data')
gcv_metric = pytest.importorskip('gluoncv.utils.metrics.coco_detection')
pytest.importorskip('pycocotools')


def gluoncv_dataset(annotation_file, image_root, folder, **kwargs):
    """GluonCV's ``COCODetection`` on any json: its classes are the json's, in id order, and
    ``file_name`` is relative to ``image_root`` (GluonCV reads ``coco_url``)."""
    with open(annotation_file) as f:
        categories = sorted(json.load(f)['categories'], key=lambda c: c['id'])
    os.makedirs(os.path.join(folder, 'annotations'), exist_ok=True)
    shutil.copy(annotation_file, os.path.join(folder, 'annotations', 'data.json'))

    class Custom(gcv_data.COCODetection):
        CLASSES = [c['name'] for c in categories]

        def _parse_image_path(self, entry):
            return os.path.join(image_root, entry['file_name'])

    return Custom(root=folder, splits='data', **kwargs)


def labels_by_path(ours, theirs):
    """``{image path: (our N x 5, GluonCV's N x 5)}`` as float32, GluonCV's dummy rows left out."""
    found = {}
    for i, path in enumerate(theirs._items):
        label = np.array(theirs._labels[i], dtype=np.float32).reshape(-1, 5)
        found[path] = [label[label[:, 4] >= 0]]
    for i in range(len(ours)):
        found.setdefault(ours.image_path(i), [np.zeros((0, 5), np.float32)]).insert(
            0, ours.label(i)[:, :5])
    return found


def assert_same_boxes(ours, theirs):
    pairs = labels_by_path(ours, theirs)
    assert sum(len(p[0]) for p in pairs.values()) > 0
    for path, (mine, gluoncv) in pairs.items():
        np.testing.assert_array_equal(mine, gluoncv, err_msg=path)


REAL = [('bccd', 'val', 'BCCD'), ('bccd', 'train', 'BCCD'), ('cards', 'test', 'images'),
        ('cards', 'train', 'images')]


@pytest.mark.parametrize('dataset, split, images', REAL)
def test_real_json_reads_as_gluoncv_reads_it(request, tmp_path, dataset, split, images):
    root = request.getfixturevalue(dataset + '_root')
    annotation_file = os.path.join(root, 'coco', 'instances_%s.json' % split)
    image_root = os.path.join(root, images)
    ours = COCODetection(annotation_file=annotation_file, image_root=image_root)
    theirs = gluoncv_dataset(annotation_file, image_root, str(tmp_path))
    assert ours.contiguous_id_to_json == theirs.contiguous_id_to_json
    assert_same_boxes(ours, theirs)


def test_edge_boxes_are_kept_and_dropped_as_gluoncv(tmp_path):
    """Fractional, one-pixel, sub-pixel, negative, zero-area, outside and crowd boxes."""
    boxes = [([1, 1, 5, 5], 25), ([2.5, 3.25, 10.5, 7.75], 81), ([4, 4, 1, 6], 6),
             ([4, 4, 1.5, 6], 9), ([4, 4, 0.5, 6], 3), ([4, 4, -2, 6], 12), ([4, 4, 8, 8], 0),
             ([60, 40, 20, 20], 400), ([63, 10, 5, 5], 25), ([70, 10, 5, 5], 25),
             ([-5, -5, 10, 10], 100), ([0, 0, 64, 48], 3072), ([10, 10, 8, 8], 64)]
    annotations = [{'id': i + 1, 'image_id': 1 + i % 2, 'category_id': 3 + 4 * (i % 3 == 0),
                    'bbox': bbox, 'area': area, 'iscrowd': int(i == len(boxes) - 1)}
                   for i, (bbox, area) in enumerate(boxes)]
    images = [{'id': i, 'file_name': 'x%d.jpg' % i, 'width': 64, 'height': 48} for i in (1, 2)]
    for entry in images:
        write(tmp_path / 'images' / entry['file_name'], jpeg())
    path = write(tmp_path / 'edge.json', json.dumps({
        'images': images, 'annotations': annotations,
        'categories': [{'id': 3, 'name': 'cat'}, {'id': 7, 'name': 'dog'}]}))  # GluonCV: file order
    ours = COCODetection(annotation_file=path, image_root=str(tmp_path / 'images'))
    theirs = gluoncv_dataset(path, str(tmp_path / 'images'), str(tmp_path / 'gluoncv'),
                             use_crowd=False)
    assert_same_boxes(ours, theirs)
    assert ours.report.boxes == 6 and ours.report.dropped == {
        'zero_area': 3, 'inverted': 1, 'outside_image': 2, 'crowd': 1}


def jittered_detections(dataset, seed):
    """Per image ``(boxes, class ids, scores)``: each ground truth moved by quarter pixels
    (exact in binary, so both metrics' arithmetic is exact) plus a few random boxes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(len(dataset)):
        label = dataset.label(i)
        boxes = label[:, :4] + rng.integers(-8, 9, (len(label), 4)) / 4.
        classes = label[:, 4].copy()
        width, height = dataset.image_size(i)
        extra = rng.integers(0, 4)
        corners = rng.integers(0, min(width, height) // 2, (extra, 2)) + 0.5
        sizes = rng.integers(2, 60, (extra, 2))
        boxes = np.concatenate([boxes, np.hstack([corners, corners + sizes])])
        classes = np.concatenate([classes, rng.integers(0, dataset.num_class, extra)])
        scores = np.round(rng.uniform(0, 1, len(boxes)), 3)   # some under the 0.05 threshold
        out.append((boxes.astype(np.float32), classes.astype(np.float32),
                    scores.astype(np.float32)))
    return out


@pytest.mark.parametrize('dataset, split, images', REAL[::2])
def test_metric_writes_the_results_gluoncv_writes(request, tmp_path, dataset, split, images):
    root = request.getfixturevalue(dataset + '_root')
    annotation_file = os.path.join(root, 'coco', 'instances_%s.json' % split)
    image_root = os.path.join(root, images)
    ours = COCODetection(annotation_file=annotation_file, image_root=image_root, skip_empty=False)
    theirs = gluoncv_dataset(annotation_file, image_root, str(tmp_path), skip_empty=False)
    our_metric = COCODetectionMetric(ours, str(tmp_path / 'ours'), use_time=False)
    their_metric = gcv_metric.COCODetectionMetric(theirs, str(tmp_path / 'theirs'),
                                                  use_time=False)
    for boxes, classes, scores in jittered_detections(ours, 0):
        for metric in (our_metric, their_metric):
            metric.update(boxes[None].copy(), classes[None], scores[None])
    our_names, our_values = our_metric.get()
    their_names, their_values = their_metric.get()
    with open(str(tmp_path / 'ours.json')) as f:
        written = json.load(f)
    with open(str(tmp_path / 'theirs.json')) as f:
        expected = json.load(f)
    assert len(written) > len(ours) and written == expected
    assert our_names[1:] == their_names[1:] and our_values[1:] == their_values[1:]
    assert 10 < float(our_values[-1]) < 100
