"""Background images (negatives) in training: false detections on held-out negatives, and mAP.

One detector (YOLOv3's demo recipe: ``yolo3_mobilenet0.5_custom`` at 160 px from scratch,
the recipe's settings, ``--epochs`` epochs) trains twice on the same LabelImg folder, built
here deterministically:

- ``--demo-images`` images of the demo's train split, each with its VOC xml;
- background images without an xml: a window of each photo of the cards' ``train`` folder
  (``../shared/datasets/cards/images``) that touches no card (the first square of 0.4 of
  the photo's shorter side, in a grid of quarter steps, at least ``MARGIN`` px from every
  card box), saved as a 256 px JPEG.

``without`` reads the folder as before (images without an xml are not seen); ``with`` reads
it with ``background_images`` (``--background-images``): the crops train as negatives.
Held out: the windows of the cards' ``test`` photos (up to two a photo, not overlapping),
on which a detection scoring at least 0.5 (also 0.25 and 0.1: ``SCORES``) is a false
detection, and the demo's ``val`` split, the test split of the mAP (VOC07). Printed per run:
false detections per negative image and the share of negatives with any, at each score, the
mAP, the minutes (of training; with ``--reuse``, of evaluating the model a run saved).

    nice -n 5 .venv/bin/python benchmarks/bench_negatives.py [--epochs 10] [--workdir DIR]
"""
import argparse
import os
import sys
import time

import cv2
import mxnet as mx
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gluondet.data import DemoDetection, VOCDetection  # noqa: E402
from gluondet.data.base import read_image  # noqa: E402
from gluondet.data.demo import DEMO_CLASSES  # noqa: E402
from gluondet.demo import recipe_of  # noqa: E402
from gluondet.deploy import Predictor  # noqa: E402
from gluondet.engine import TrainConfig, fit  # noqa: E402
from gluondet.files import atomic_write  # noqa: E402
from gluondet.metrics.evaluation import evaluate_voc07  # noqa: E402

from common import Checks  # noqa: E402

CARDS = os.path.join(os.path.dirname(ROOT), 'shared', 'datasets', 'cards', 'images')
CARD_CLASSES = ('nine', 'ten', 'jack', 'queen', 'king', 'ace')
WINDOW = 0.4        # window side, of the photo's shorter side
MARGIN = 8          # px between a window and every card box
SCORES = (0.5, 0.25, 0.1)   # a detection scoring at least this on a negative is false
CROP_SIZE = 256     # the demo images' size


def card_free_windows(width, height, boxes, count):
    """Up to ``count`` non-overlapping square windows ``(x0, y0, x1, y1)`` of the photo that
    stay ``MARGIN`` px from every box, in grid order (rows, then columns)."""
    side = int(WINDOW * min(width, height))
    step = max(1, side // 4)
    grown = boxes[:, :4] + np.array([-MARGIN, -MARGIN, MARGIN, MARGIN])
    found = []
    for y in range(0, height - side + 1, step):
        for x in range(0, width - side + 1, step):
            window = np.array([x, y, x + side, y + side])
            if _overlaps(window, grown) or _overlaps(window, np.array(found).reshape(-1, 4)):
                continue
            found.append(window)
            if len(found) == count:
                return found
    return found


def _overlaps(window, boxes):
    """Whether ``window`` shares area with any of ``boxes``."""
    width = np.minimum(window[2], boxes[:, 2]) - np.maximum(window[0], boxes[:, 0])
    height = np.minimum(window[3], boxes[:, 3]) - np.maximum(window[1], boxes[:, 1])
    return bool(((width > 0) & (height > 0)).any())


def write_crops(split, folder, per_photo):
    """The card-free windows of the cards' ``split`` photos as JPEGs in ``folder``."""
    photos = VOCDetection(CARDS, splits=(split,), classes=CARD_CLASSES)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(len(photos)):
        width, height = photos.image_size(i)
        windows = card_free_windows(width, height, photos.label(i), per_photo)
        if not windows:
            continue
        image = read_image(photos.image_path(i)).asnumpy()
        stem = os.path.splitext(os.path.basename(photos.image_path(i)))[0]
        for k, (x0, y0, x1, y1) in enumerate(windows):
            crop = cv2.resize(image[y0:y1, x0:x1], (CROP_SIZE, CROP_SIZE),
                              interpolation=cv2.INTER_AREA)
            path = os.path.join(folder, 'bg_%s_%d.jpg' % (stem, k))
            ok, data = cv2.imencode('.jpg', cv2.cvtColor(crop, cv2.COLOR_RGB2BGR),
                                    [cv2.IMWRITE_JPEG_QUALITY, 95])
            assert ok, path
            atomic_write(path, data.tobytes())
            paths.append(path)
    return paths


def voc_xml(filename, width, height, label, classes):
    """A LabelImg xml of ``label`` (0-based pixels; VOC writes 1-based)."""
    objects = ''.join(
        '<object><name>%s</name><difficult>0</difficult><bndbox><xmin>%g</xmin><ymin>%g'
        '</ymin><xmax>%g</xmax><ymax>%g</ymax></bndbox></object>'
        % ((classes[int(row[4])],) + tuple(float(v) + 1 for v in row[:4])) for row in label)
    return ('<annotation><filename>%s</filename><size><width>%d</width><height>%d</height>'
            '<depth>3</depth></size>%s</annotation>' % (filename, width, height, objects))


def build_folder(workdir, demo_images):
    """The training folder (demo images with xml, card-free crops without) and the held-out
    negatives; returns ``(train folder, held-out paths, crops in the train folder)``."""
    train = os.path.join(workdir, 'train')
    demo = DemoDetection('train', demo_images, seed=0, root=os.path.join(workdir, 'demo'))
    os.makedirs(train, exist_ok=True)
    for i in range(len(demo)):
        name = 'demo_%06d.jpg' % i
        link = os.path.join(train, name)
        if not os.path.exists(link):
            os.symlink(demo.image_path(i), link)
        width, height = demo.image_size(i)
        atomic_write(os.path.join(train, 'demo_%06d.xml' % i),
                     voc_xml(name, width, height, demo.label(i), DEMO_CLASSES).encode())
    crops = write_crops('train', train, per_photo=1)
    held_out = write_crops('test', os.path.join(workdir, 'negatives'), per_photo=2)
    return train, held_out, crops


def run(name, train, val, held_out, args):
    """Train the recipe on ``train`` (or, with ``--reuse``, load the model it saved); its
    false detections on ``held_out`` at each of ``SCORES`` and its val mAP."""
    recipe = recipe_of('yolo3')
    prefix = os.path.join(args.workdir, 'runs', name, recipe.network)
    start = time.time()
    if args.reuse and os.path.isfile(prefix + '_best.params'):
        predictor = Predictor.from_model(prefix + '_best.params')
        mean_ap = evaluate_voc07(predictor, val)['mAP']
    else:
        task = recipe.make_task(train, val, 0)
        result = fit(task, TrainConfig.from_dict(dict(
            recipe.settings, epochs=args.epochs, val_interval=args.epochs, seed=recipe.seed,
            num_workers=0, gpus='', log_interval=50, save_prefix=prefix),
            source='bench_negatives'))
        predictor, mean_ap = task.predictor(result.net, [mx.cpu()]), result.metrics['mAP']
    scores = [d.scores for d in predictor.detect([read_image(p) for p in held_out])]
    row = dict(run=name, images=len(train), background=train.report.background,
               map=float(mean_ap), minutes=(time.time() - start) / 60)
    for score in SCORES:
        counts = np.array([int((s >= score).sum()) for s in scores])
        row[score] = (float(counts.mean()), float((counts > 0).mean()))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', default='/tmp/gluondet_bench_negatives')
    parser.add_argument('--demo-images', type=int, default=600)
    parser.add_argument('--val-images', type=int, default=200)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--reuse', action='store_true',
                        help="evaluate the models a run left in --workdir instead of training")
    args = parser.parse_args()
    checks = Checks()
    if not os.path.isdir(CARDS):
        sys.exit('bench_negatives: the cards photos are not at %s' % CARDS)
    folder, held_out, crops = build_folder(args.workdir, args.demo_images)
    val = DemoDetection('val', args.val_images, seed=0, root=os.path.join(args.workdir, 'demo'))
    print('training folder %s: %d demo images with an xml, %d card-free crops without; '
          '%d held-out negatives (cards test photos)' % (folder, args.demo_images, len(crops),
                                                        len(held_out)), flush=True)
    rows = []
    for name, background in (('without', False), ('with', True)):
        train = VOCDetection(folder, classes=DEMO_CLASSES, layout='labelimg',
                             background_images=background)
        checks.check(train.report.background == (len(crops) if background else 0),
                     '%s: %d background images read' % (name, train.report.background))
        rows.append(run(name, train, val, held_out, args))
        print(rows[-1], flush=True)
    print('\n| negatives in training | training images (background) | %s | demo val mAP | '
          'minutes |' % ' | '.join('false detections / negative (negatives with any), score '
                                   '>= %g' % score for score in SCORES))
    print('|---|---|%s---|---|' % ('---|' * len(SCORES)))
    for row in rows:
        print('| %s | %d (%d) | %s | %.4f | %.1f |' % (
            row['run'], row['images'], row['background'], ' | '.join(
                '%.3f (%.1f%%)' % (row[s][0], 100 * row[s][1]) for s in SCORES),
            row['map'], row['minutes']))
    checks.exit()


if __name__ == '__main__':
    main()
