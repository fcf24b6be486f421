"""VOC07 mAP (update + get) on 5,000 images x 100 detections, 20 classes: gluondet vs GluonCV.

Both metrics see the same batches in the same run; the script prints each
time, the speed-up and checks that the mAPs (and every class AP) are identical (else
exit status 1).

    .venv/bin/python benchmarks/bench_voc_metric.py [--images 5000] [--batch 16]
"""
import argparse
import sys
import time

import numpy as np

from gluondet.metrics import VOC07MApMetric

from common import Checks


def make_batches(num_images, batch_size, num_dets=100, max_gts=20, num_classes=20, seed=0):
    """Random VOC-like batches: jittered copies of the ground truths plus clutter."""
    rng = np.random.default_rng(seed)
    batches = []
    for first in range(0, num_images, batch_size):
        size = min(batch_size, num_images - first)
        xy = rng.uniform(0, 400, (size, max_gts, 2))
        wh = rng.uniform(10, 200, (size, max_gts, 2))
        gt_boxes = np.concatenate([xy, xy + wh], -1).astype(np.float32)
        gt_labels = rng.integers(0, num_classes, (size, max_gts)).astype(np.float32)
        difficult = (rng.random((size, max_gts)) < 0.1).astype(np.float32)
        num_gts = rng.integers(1, max_gts + 1, size)
        pad = np.arange(max_gts) >= num_gts[:, None]
        gt_labels[pad], difficult[pad], gt_boxes[pad] = -1, -1, -1
        pick = (rng.random((size, num_dets)) * num_gts[:, None]).astype(int)
        rows = np.arange(size)[:, None]
        boxes = gt_boxes[rows, pick] + rng.normal(0, 8, (size, num_dets, 4)).astype(np.float32)
        labels = gt_labels[rows, pick]
        wrong = rng.random((size, num_dets)) < 0.3
        labels[wrong] = rng.integers(0, num_classes, wrong.sum())
        scores = rng.random((size, num_dets)).astype(np.float32)
        batches.append((boxes, labels, scores, gt_boxes, gt_labels, difficult))
    return batches


def run(metric, batches):
    """Seconds for update over all batches plus get, and the result."""
    start = time.perf_counter()
    for batch in batches:
        metric.update(*batch)
    result = metric.get()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=5000)
    parser.add_argument('--batch', type=int, default=16)
    args = parser.parse_args()
    from gluoncv.utils.metrics.voc_detection import VOC07MApMetric as GluonCVMetric
    names = ['class%d' % i for i in range(20)]
    batches = make_batches(args.images, args.batch)
    ours_s, (_, ours) = run(VOC07MApMetric(class_names=names), batches)
    theirs_s, (_, theirs) = run(GluonCVMetric(class_names=names), batches)
    print('VOC07 mAP, %d images x 100 detections, 20 classes, batch %d'
          % (args.images, args.batch))
    print('gluondet  %8.3f s  mAP %.6f' % (ours_s, ours[-1]))
    print('gluoncv   %8.3f s  mAP %.6f' % (theirs_s, theirs[-1]))
    print('speed-up  %8.1fx' % (theirs_s / ours_s))
    checks = Checks()
    if checks.check(np.array_equal(np.array(ours), np.array(theirs), equal_nan=True),
                    'APs differ: gluondet %s, gluoncv %s' % (ours, theirs)):
        print('identical per-class APs and mAP')
    return checks.status()


if __name__ == '__main__':
    sys.exit(main())
