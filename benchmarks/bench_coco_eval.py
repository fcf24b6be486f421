"""COCO box evaluation: gluondet's coco_evaluate vs pycocotools and faster-coco-eval.

Two problems: a COCO-sized synthetic one (5,000 images, about 7 ground
truths and 100 detections each, 80 categories, some crowds) and the BCCD
validation json with jittered, partly wrong detections. Each tool goes from
the same ground-truth dict and detection list to the 12 summary numbers
(pycocotools: loadRes + evaluate + accumulate + summarize, prints silenced);
the script prints the best of up to 3 runs (1 for runs over 20 s), the
speed-ups, and checks the numbers are equal.

    .venv/bin/python benchmarks/bench_coco_eval.py [--images 5000] [--skip-pycocotools]
"""
import argparse
import contextlib
import copy
import io
import json
import logging
import os
import sys
import time

import numpy as np

from gluondet.metrics.coco_eval import STAT_NAMES, coco_evaluate

from common import Checks

BCCD_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                         'datasets', 'bccd', 'coco', 'instances_val.json')


def synthetic_problem(num_images, num_cats=80, dets_per_image=100, seed=0):
    """COCO-like ground truth dict and detection list."""
    rng = np.random.default_rng(seed)
    images, anns = [], []
    for image_id in range(1, num_images + 1):
        images.append({'id': image_id, 'width': 640, 'height': 480})
        for _ in range(rng.poisson(7)):
            w, h = np.exp(rng.uniform(np.log(4), np.log(400), 2))
            x, y = rng.uniform(0, 640 - min(w, 600)), rng.uniform(0, 480 - min(h, 440))
            anns.append({'id': len(anns) + 1, 'image_id': image_id,
                         'category_id': int(rng.zipf(1.3) % num_cats) + 1,
                         'bbox': [x, y, w, h], 'area': w * h * rng.uniform(0.4, 1.0),
                         'iscrowd': int(rng.random() < 0.01)})
    gt = {'images': images, 'annotations': anns,
          'categories': [{'id': i + 1, 'name': 'c%d' % i} for i in range(num_cats)]}
    return gt, detections_for(gt, rng, dets_per_image)


def detections_for(gt, rng, dets_per_image):
    """Jittered copies of each ground truth (some with a wrong class) plus clutter."""
    by_image = {}
    for ann in gt['annotations']:
        by_image.setdefault(ann['image_id'], []).append(ann)
    cats = [c['id'] for c in gt['categories']]
    dets = []
    for image in gt['images']:
        own = by_image.get(image['id'], [])
        for ann in own:
            for _ in range(rng.integers(1, 5)):
                x, y, w, h = ann['bbox']
                jx, jy, jw, jh = rng.normal(0, 0.1, 4) * [w, h, w, h]
                wrong = rng.random() < 0.15
                dets.append({'image_id': image['id'],
                             'category_id': int(rng.choice(cats)) if wrong else ann['category_id'],
                             'bbox': [x + jx, y + jy, max(w + jw, 1.), max(h + jh, 1.)],
                             'score': float(rng.uniform(0.3, 1.0))})
        own_cats = [a['category_id'] for a in own] or cats
        for _ in range(max(dets_per_image - 3 * len(own), 0)):
            w, h = np.exp(rng.uniform(np.log(4), np.log(400), 2))
            x, y = rng.uniform(0, 600), rng.uniform(0, 440)
            cat = int(rng.choice(own_cats)) if rng.random() < 0.5 else int(rng.choice(cats))
            dets.append({'image_id': image['id'], 'category_id': cat, 'bbox': [x, y, w, h],
                         'score': float(rng.uniform(0.0, 0.6))})
    return dets


def run_pycocotools(gt, dets):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        evaluator = COCOeval(coco_gt, coco_gt.loadRes(dets), 'bbox')
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.array(evaluator.stats)


def run_faster_coco_eval(gt, dets):
    from faster_coco_eval import COCO, COCOeval_faster
    logging.getLogger('faster_coco_eval').setLevel(logging.WARNING)
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(gt)
        evaluator = COCOeval_faster(coco_gt, coco_gt.loadRes(dets), 'bbox')
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.array(evaluator.stats[:12])


def run_gluondet(gt, dets):
    stats = coco_evaluate(gt, dets)
    return np.array([stats[name] for name in STAT_NAMES])


def timed(fn, gt, dets, repeat=3, budget=20.):
    """Best time of up to ``repeat`` runs (fewer once ``budget`` seconds are spent)."""
    best, spent = float('inf'), 0.
    for _ in range(repeat):
        gt_copy, dets_copy = copy.deepcopy(gt), copy.deepcopy(dets)  # pycocotools edits them
        start = time.perf_counter()
        stats = fn(gt_copy, dets_copy)
        elapsed = time.perf_counter() - start
        best, spent = min(best, elapsed), spent + elapsed
        if spent > budget:
            break
    return best, stats


def compare(title, gt, dets, skip_pycocotools, checks):
    print('%s: %d images, %d ground truths, %d detections, %d categories'
          % (title, len(gt['images']), len(gt['annotations']), len(dets),
             len(gt['categories'])))
    ours_s, ours = timed(run_gluondet, gt, dets)
    print('  gluondet         %8.2f s   AP %.6f  AP50 %.6f  AR100 %.6f'
          % (ours_s, ours[0], ours[1], ours[8]))
    tools = [('faster-coco-eval', run_faster_coco_eval)]
    if not skip_pycocotools:
        tools.insert(0, ('pycocotools', run_pycocotools))
    for name, fn in tools:
        their_s, theirs = timed(fn, gt, dets)
        diff = np.abs(theirs - ours).max()
        print('  %-16s %8.2f s   gluondet is %.1fx faster; max |stat difference| %.2g'
              % (name, their_s, their_s / ours_s, diff))
        if name == 'pycocotools':
            checks.check(diff <= 1e-12, '%s: stats differ from pycocotools by %.3g: %s vs %s'
                         % (title, diff, ours, theirs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=5000)
    parser.add_argument('--skip-pycocotools', action='store_true',
                        help='pycocotools takes minutes on the synthetic problem')
    args = parser.parse_args()
    checks = Checks()
    gt, dets = synthetic_problem(args.images)
    compare('synthetic', gt, dets, args.skip_pycocotools, checks)
    if os.path.exists(BCCD_JSON):
        with open(BCCD_JSON) as f:
            bccd = json.load(f)
        compare('BCCD val', bccd, detections_for(bccd, np.random.default_rng(1), 100),
                args.skip_pycocotools, checks)
    else:
        print('BCCD json not found at %s: skipped' % BCCD_JSON)
    return checks.status()


if __name__ == '__main__':
    sys.exit(main())
