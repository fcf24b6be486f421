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

Checks that both sides give the same result (else exit status 1). The augmentation and
the crop sampler are random and draw in another order on each side (gluondet: one numpy
generator, the crop windows drawn at once; GluonCV: numpy's and Python's global
generators, one window at a time), so their outputs are compared step by step on the
same parameters, on every image: resize to 300x300 (each of OpenCV's five methods):
pixels within 1 level (MXNet links its own OpenCV build, gluondet opencv-python's: a
few rounding differences), boxes within 1e-3 px; flip: boxes equal; a crop window that keeps
part of the boxes (without centre outside): the same boxes, within 1e-4 px; normalize:
within 1e-5; and every augmented image is 3x300x300 with its boxes inside it. IoU: the
same matrix within 1e-6.

Usage: .venv/bin/python benchmarks/bench_transforms.py [--images 40] [--repeat 3]
"""
import argparse
import glob
import os
import random
import time
import xml.etree.ElementTree as ET

import sys

import cv2
import numpy as np

import gluondet  # noqa: F401  (numpy aliases before mxnet)
import mxnet as mx
from gluondet.bbox import bbox_iou
from gluondet.data import transforms as T

from common import Checks

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


def check_steps(checks, samples):
    """The augmentation's deterministic steps, gluondet vs GluonCV, on the same parameters."""
    from gluoncv.data.transforms import bbox as gbbox, image as gimage
    worst = {'resize pixels': 0, 'resize boxes': 0., 'flip boxes': 0., 'crop boxes': 0.,
             'normalize': 0.}
    crop_sizes = set()
    differing = [0, 0]      # resized pixel values that differ, of all
    for img, label in samples:
        h, w = img.shape[:2]
        nd_img = mx.nd.array(img, dtype='uint8')
        for interp in range(5):
            ours, our_label = T.resize(img, label, 300, interp=interp)
            theirs = gimage.imresize(nd_img, 300, 300, interp=interp).asnumpy()
            diff = np.abs(ours.astype(int) - theirs.astype(int))
            worst['resize pixels'] = max(worst['resize pixels'], int(diff.max()))
            differing[0] += int((diff > 0).sum())
            differing[1] += diff.size
            worst['resize boxes'] = max(worst['resize boxes'], float(np.abs(
                our_label[:, :4] - gbbox.resize(label.copy(), (w, h), (300, 300))[:, :4]).max()))
        worst['flip boxes'] = max(worst['flip boxes'], float(np.abs(
            T.bbox_flip(label, (w, h), flip_x=True)
            - gbbox.flip(label.copy(), (w, h), flip_x=True)).max()))
        crop = (w // 5, h // 6, w // 2, h // 2)
        ours = T.bbox_crop(label, crop, allow_outside_center=False)
        theirs = gbbox.crop(label.copy(), crop, allow_outside_center=False)
        crop_sizes.add((len(label), len(ours)))
        same_count = ours.shape == theirs.shape
        checks.check(same_count, 'crop: %d boxes kept by gluondet, %d by GluonCV'
                     % (len(ours), len(theirs)))
        if same_count and len(ours):
            worst['crop boxes'] = max(worst['crop boxes'], float(np.abs(ours - theirs).max()))
        theirs = mx.nd.image.normalize(mx.nd.image.to_tensor(nd_img), T.IMAGENET_MEAN,
                                       T.IMAGENET_STD).asnumpy()
        worst['normalize'] = max(worst['normalize'], float(np.abs(T.normalize(img)
                                                                   - theirs).max()))
    tolerances = {'resize pixels': 1, 'resize boxes': 1e-3, 'flip boxes': 0,
                  'crop boxes': 1e-4, 'normalize': 1e-5}
    print('same parameters, gluondet vs gluoncv, max differences on %d images: %s; resized '
          'pixel values differing: %.4f%%'
          % (len(samples), ', '.join('%s %.3g (tolerance %g)' % (k, v, tolerances[k])
                                     for k, v in worst.items()),
             100 * differing[0] / differing[1]))
    for key, value in worst.items():
        checks.check(value <= tolerances[key], '%s differ by %.3g' % (key, value))
    kept = sum(k for _, k in crop_sizes) / max(1, sum(n for n, _ in crop_sizes))
    checks.check(0 < kept < 1, 'the crop check window kept %.0f%% of the boxes' % (100 * kept))


def check_augmented(checks, samples, augment, label_name):
    """Every augmented image is 3x300x300 with its boxes inside it."""
    bad = 0
    for img, label in samples:
        out, box = augment(img, label)
        out = out.asnumpy() if isinstance(out, mx.nd.NDArray) else out
        box = np.asarray(box)
        if out.shape != (3, 300, 300) or (len(box) and (box[:, :4].min() < -1e-3 or
                                                        box[:, :4].max() > 300 + 1e-3)):
            bad += 1
    checks.check(not bad, '%s: %d augmented images of the wrong shape or with boxes outside'
                 % (label_name, bad))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=40)
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    from gluoncv.data.transforms.presets.ssd import SSDDefaultTrainTransform
    from gluoncv.data.transforms.experimental.bbox import random_crop_with_constraints
    from gluoncv.utils.bbox import bbox_iou as gcv_iou

    checks = Checks()
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

    iou_diff = max(float(np.abs(bbox_iou(a, b) - gcv_iou(a, b)).max()) for a, b in gts)
    print('IoU: max difference %.2g (tolerance 1e-6)' % iou_diff)
    checks.check(iou_diff <= 1e-6, 'IoU differs by %.2g' % iou_diff)
    check_steps(checks, samples)
    check_augmented(checks, samples, ssd_augment, 'gluondet')
    check_augmented(checks, nd_samples, gcv_augment, 'gluoncv')
    return checks.status()


if __name__ == '__main__':
    sys.exit(main())
