"""Sliced inference on large images: BCCD test images in 4 x 4 mosaics, with and without slicing.

Each mosaic is ``--grid`` x ``--grid`` BCCD test images (640 x 480) at full resolution
(2560 x 1920 for 4 x 4), the images of each drawn without replacement from the 72 of the
test split by a seeded generator (``--mosaics`` of them: every image appears in several,
at different places, so tile edges cut different cells), their boxes shifted with them.
One trained model (``--model``, default the BCCD YOLOv3 of the EMA runs, 320 x 320 input)
is evaluated on them by ``gluondet.metrics.evaluation.evaluate``:

- ``whole``: the predictor on each mosaic, shrunk to the model's input as any image is;
- ``slice``: ``ViewPredictor`` tiles of ``--tile`` (default 480x640: one BCCD image, what
  the model was trained on) with ``--overlap`` (0.2), merged by NMS;
- ``slice+full``: the same and one pass over the whole mosaic.

Printed for each: VOC07 mAP (IoU 0.5, 11-point), recall at IoU 0.5 of all detections and of
those scoring at least 0.25 (non-difficult boxes, each matched once), tiles per mosaic and
seconds. Check: a tile as large as the mosaic gives the predictor's own detections.

    .venv/bin/python benchmarks/bench_slicing.py [--model PARAMS] [--tile 480x640]
        [--overlap 0.2] [--mosaics 18] [--grid 4] [--seed 0] [--backend mxnet]
"""
import argparse
import os
import sys
import time

import numpy as np
from mxnet.gluon.data import SimpleDataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.common import Checks  # noqa: E402
from gluondet.data import VOCDetection  # noqa: E402
from gluondet.deploy.predictor import Predictor  # noqa: E402
from gluondet.deploy.views import Slicing, ViewPredictor  # noqa: E402
from gluondet.metrics.evaluation import evaluate, voc_metric, voc_result  # noqa: E402

BCCD = os.path.join(ROOT, '..', 'shared', 'datasets', 'bccd', 'BCCD')
YOLO3 = '/tmp/ema_bccd/base/yolo3_mobilenet0.5_custom_best.params'
TRAIN_YOLO3 = ('the 15-epoch BCCD YOLOv3 of docs/benchmarks.md#model-ema-issue-26 (its first '
               'command), or give --model')
MIN_SCORE = 0.25


def mosaics(dataset, count, grid, seed):
    """``count`` mosaics of ``grid x grid`` images of ``dataset`` (all of one size) with their
    labels: a list of ``(H x W x 3 uint8, N x 6 label)``."""
    rng = np.random.RandomState(seed)
    height, width = dataset[0][0].shape[:2]
    out = []
    for _ in range(count):
        picks = rng.choice(len(dataset), grid * grid, replace=False)
        image = np.zeros((grid * height, grid * width, 3), np.uint8)
        labels = []
        for cell, index in enumerate(picks):
            part, label = dataset[int(index)]
            part = part.asnumpy()
            if part.shape[:2] != (height, width):
                raise ValueError('%s: %s is not %d x %d' % (BCCD, dataset.image_path(index),
                                                           width, height))
            y, x = (cell // grid) * height, (cell % grid) * width
            image[y:y + height, x:x + width] = part
            label = label.copy()
            label[:, [0, 2]] += x
            label[:, [1, 3]] += y
            labels.append(label)
        out.append((image, np.concatenate(labels)))
    return out


class AboveScore:
    """A VOC metric fed only the detections scoring at least ``score``."""

    def __init__(self, metric, score):
        self.metric, self.score = metric, score

    def update(self, boxes, labels, scores, *gt):
        keep = scores[0] >= self.score
        self.metric.update(boxes[:, keep], labels[:, keep], scores[:, keep], *gt)


def recall(metric):
    """Matched non-difficult boxes / all of them, over the classes."""
    curves = [c for c in metric.curves() if c.num_gt]
    found = sum((c.recall[-1] if len(c.recall) else 0) * c.num_gt for c in curves)
    return found / sum(c.num_gt for c in curves)


def run(name, predictor, data, tiles):
    voc, above = voc_metric(predictor.classes), voc_metric(predictor.classes)
    start = time.time()
    evaluate(predictor, data, [voc, AboveScore(above, MIN_SCORE)], batch_size=1)
    seconds = time.time() - start
    result = voc_result(voc)
    print('| %s | %d | %.4f | %.4f | %.4f | %s | %.0f |' % (
        name, tiles, result['mAP'], recall(voc), recall(above),
        ' / '.join('%.3f' % result['AP/' + c] for c in predictor.classes), seconds), flush=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default=YOLO3)
    parser.add_argument('--backend')
    parser.add_argument('--tile', default='480x640', help='HxW')
    parser.add_argument('--overlap', type=float, default=0.2)
    parser.add_argument('--mosaics', type=int, default=18)
    parser.add_argument('--grid', type=int, default=4)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    if not os.path.exists(args.model):
        parser.error('no model at %s: train %s' % (args.model, TRAIN_YOLO3))
    tile = tuple(int(v) for v in args.tile.split('x'))
    checks = Checks()
    predictor = Predictor.from_model(args.model, args.backend)
    test = VOCDetection(BCCD, splits='test', classes=predictor.classes)
    data = SimpleDataset(mosaics(test, args.mosaics, args.grid, args.seed))
    height, width = data[0][0].shape[:2]
    print('%s (%s), %d mosaics of %d x %d BCCD test images (%d x %d, %d boxes), tiles %dx%d '
          'overlap %g' % (args.model, predictor, len(data), args.grid, args.grid, width, height,
                          sum(len(label) for _, label in data), tile[0], tile[1],
                          args.overlap))
    whole = ViewPredictor(predictor, slice=(height, width))
    image = data[0][0]
    a, b = whole.detect([image])[0], predictor.detect([image])[0]
    same = [np.array_equal(a[name], b[name]) for name in ('ids', 'scores', 'boxes')]
    checks.check(all(same), 'a tile covering the mosaic: not the predictor\'s detections')
    sliced = Slicing(tile, args.overlap)
    tiles = len(ViewPredictor(predictor, sliced).windows(height, width))
    print('| run | passes per mosaic | VOC07 mAP | recall | recall (score >= %g) | AP %s '
          '| seconds |' % (MIN_SCORE, ' / '.join(predictor.classes)))
    print('|---|---|---|---|---|---|---|')
    run('whole', predictor, data, 1)
    run('slice', ViewPredictor(predictor, sliced), data, tiles)
    run('slice+full', ViewPredictor(predictor, sliced._replace(full=True)), data, tiles + 1)
    checks.exit()


if __name__ == '__main__':
    main()
