"""Speed of gluondet's box and image primitives against GluonCV 0.10.5, in one run.

Measures, on real BCCD photographs (640x480) when ../shared/datasets is present
(random images otherwise):

- the SSD training augmentation (colour jitter, expand with p=0.5, constrained
  crop, resize to 300x300 with a random interpolation, flip, normalize):
  gluondet.data.transforms (numpy + OpenCV) vs GluonCV's
  SSDDefaultTrainTransform without anchors (mx.nd);
- the SSD constrained-crop sampler alone (boxes only);
- pairwise IoU of 8732 SSD-300 anchors with 20 boxes.

Prints the time per call of each and the speed-up (GluonCV time / gluondet time).

Usage: .venv/bin/python benchmarks/bench_transforms.py [--images 40] [--repeat 3]
"""
import argparse
import glob
import os
import random
import time
import xml.etree.ElementTree as ET

import cv2
import numpy as np

import gluondet  # noqa: F401  (numpy aliases before mxnet)
import mxnet as mx
from gluondet.bbox import bbox_iou
from gluondet.data import transforms as T

DATASETS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'shared', 'datasets')


def load_samples(count):
    """(RGB uint8 image, N x 6 label) pairs from BCCD, or random ones if it is absent."""
    xmls = sorted(glob.glob(os.path.join(DATASETS, 'bccd', 'BCCD', 'Annotations', '*.xml')))
    samples = []
    for path in xmls[:count]:
        rows = [[float(o.find('bndbox').find(k).text) for k in ('xmin', 'ymin', 'xmax', 'ymax')]
                + [0, 0] for o in ET.parse(path).getroot().iter('object')]
        jpg = path.replace('Annotations', 'JPEGImages').replace('.xml', '.jpg')
        samples.append((cv2.imread(jpg)[:, :, ::-1].copy(), np.array(rows, np.float32)))
    rng = np.random.RandomState(0)
    while len(samples) < count:
        xy = rng.uniform(0, 500, (12, 2))
        label = np.hstack([xy, xy + rng.uniform(20, 120, (12, 2)), np.zeros((12, 2))])
        samples.append((rng.randint(0, 256, (480, 640, 3)).astype(np.uint8),
                        label.astype(np.float32)))
    return samples, bool(xmls)


def ssd_augment(img, label, rng=None):
    """The SSD training augmentation with gluondet.data.transforms."""
    rng = np.random if rng is None else rng
    img = T.random_color_distort(img, rng=rng)
    if rng.uniform(0, 1) > 0.5:
        img, label, _ = T.random_expand(img, label, rng=rng)
    img, label, _ = T.random_crop_with_constraints(img, label, rng=rng)
    img, label = T.resize(img, label, 300, interp=T.INTERP_RANDOM, rng=rng)
    img, label, _ = T.random_flip(img, label, rng=rng)
    return T.normalize(img), label


def per_call(fn, items, repeat):
    """Best-of-``repeat`` seconds per item of ``fn`` over ``items``."""
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for item in items:
            fn(*item)
        best = min(best, (time.perf_counter() - start) / len(items))
    return best


def report(name, ours, theirs):
    print('%-34s gluondet %8.3f ms   gluoncv %8.3f ms   speed-up x%.2f'
          % (name, ours * 1e3, theirs * 1e3, theirs / ours))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=40)
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    from gluoncv.data.transforms.presets.ssd import SSDDefaultTrainTransform
    from gluoncv.data.transforms.experimental.bbox import random_crop_with_constraints
    from gluoncv.utils.bbox import bbox_iou as gcv_iou

    samples, real = load_samples(args.images)
    print('data: %d %s images, %d boxes' % (len(samples), 'BCCD' if real else 'random',
                                           sum(len(lab) for _, lab in samples)))
    np.random.seed(0)
    random.seed(0)
    nd_samples = [(mx.nd.array(img, dtype='uint8'), lab) for img, lab in samples]
    gcv = SSDDefaultTrainTransform(300, 300)

    def gcv_augment(img, label):
        out, box = gcv(img, label)
        out.wait_to_read()
        return out, box

    report('SSD train augmentation', per_call(ssd_augment, samples, args.repeat),
           per_call(gcv_augment, nd_samples, args.repeat))

    boxes = [(lab, (img.shape[1], img.shape[0])) for img, lab in samples]
    ours_crop = per_call(lambda lab, size: T.random_crop_with_constraints(
        np.zeros((size[1], size[0], 1), np.uint8), lab), boxes, args.repeat)
    report('SSD crop sampler (boxes only)', ours_crop,
           per_call(random_crop_with_constraints, boxes, args.repeat))

    rng = np.random.RandomState(1)
    xy = rng.uniform(0, 280, (8732, 2))
    anchors = np.hstack([xy, xy + rng.uniform(5, 150, (8732, 2))]).astype(np.float32)
    gts = [(anchors, lab[:20, :4]) for _, lab in samples[:10]]
    report('IoU 8732 anchors x 20 boxes', per_call(bbox_iou, gts, args.repeat),
           per_call(gcv_iou, gts, args.repeat))


if __name__ == '__main__':
    main()
