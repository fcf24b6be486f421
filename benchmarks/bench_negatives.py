"""Background images (negatives) in training: false detections on held-out negatives, and mAP.

The cards RetinaNet recipe (``model_zoo/cards_retinanet.sh``: its flags, run as it is, the
dataset root the folder built here) trains twice on the same LabelImg folder, built
deterministically in ``--workdir``:

- ``data/train``: the cards' ``train`` photos (``../shared/datasets/cards/images``) with their
  xml (symlinks), and the background images a user would add, without an xml: up to
  ``--crops-per-photo`` windows of each of those photos (``--crop-every K``: of every K-th)
  that touch no card (the first squares of 0.4 of the photo's shorter side, in a grid of
  quarter steps, at least ``MARGIN`` px from every card box, not overlapping), JPEGs at the
  photo's resolution;
- ``data/test``: the cards' ``test`` photos with their xml (the recipe's validation split).

``without`` runs the recipe as it is (images without an xml are not read); ``with`` adds
``--background-images``: the crops train as negatives. ``--concurrent`` runs the two trainings
at once (two processes, ``nice -n 5``, one thread each); each logs to ``runs/<run>.log``.
Held out: the windows of the cards' ``test`` photos (up to two a photo, not overlapping), on
which a detection scoring at least 0.5 (also 0.25 and 0.1: ``SCORES``) is a false detection.
Each run's saved model (``_best.params``) is loaded with ``Predictor.from_model``; printed per
run: false detections per negative and the share of negatives with any, at each score, the
cards test mAP (VOC07; checked against the run's own validation), the run's wall minutes.

    .venv/bin/python benchmarks/bench_negatives.py [--epochs 12] [--concurrent] [--workdir DIR]
    .venv/bin/python benchmarks/bench_negatives.py --reuse   # evaluate the runs in --workdir
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gluondet.data import VOCDetection  # noqa: E402
from gluondet.data.base import read_image  # noqa: E402
from gluondet.deploy import Predictor  # noqa: E402
from gluondet.files import atomic_write  # noqa: E402
from gluondet.metrics.evaluation import evaluate_voc07  # noqa: E402
from gluondet.plots import MetricsLog, metrics_path  # noqa: E402

from common import Checks  # noqa: E402

CARDS = os.path.join(os.path.dirname(ROOT), 'shared', 'datasets', 'cards', 'images')
CARD_CLASSES = ('nine', 'ten', 'jack', 'queen', 'king', 'ace')
RECIPE = os.path.join('model_zoo', 'cards_retinanet.sh')
WINDOW = 0.4        # window side, of the photo's shorter side
MARGIN = 8          # px between a window and every card box
SCORES = (0.5, 0.25, 0.1)   # a detection scoring at least this on a negative is false
RUNS = (('without', ()), ('with', ('--background-images',)))


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


def write_crops(split, folder, per_photo, every=1):
    """The card-free windows of every ``every``-th of the cards' ``split`` photos as JPEGs (at
    the photo's own resolution) in ``folder``; returns their paths."""
    photos = VOCDetection(CARDS, splits=(split,), classes=CARD_CLASSES)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(0, len(photos), every):
        width, height = photos.image_size(i)
        windows = card_free_windows(width, height, photos.label(i), per_photo)
        if not windows:
            continue
        image = read_image(photos.image_path(i)).asnumpy()
        stem = os.path.splitext(os.path.basename(photos.image_path(i)))[0]
        for k, (x0, y0, x1, y1) in enumerate(windows):
            path = os.path.join(folder, 'bg_%s_%d.jpg' % (stem, k))
            ok, data = cv2.imencode('.jpg', cv2.cvtColor(image[y0:y1, x0:x1], cv2.COLOR_RGB2BGR),
                                    [cv2.IMWRITE_JPEG_QUALITY, 95])
            assert ok, path
            atomic_write(path, data.tobytes())
            paths.append(path)
    return paths


def link_split(split, folder):
    """Symlinks in ``folder`` to every file (photos and xml) of the cards' ``split``."""
    source = os.path.join(CARDS, split)
    os.makedirs(folder, exist_ok=True)
    for name in sorted(os.listdir(source)):
        link = os.path.join(folder, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(source, name), link)


def build_folder(workdir, per_photo, every):
    """The dataset root (``train``: photos with xml and card-free crops without; ``test``)
    and the held-out negatives; returns ``(root, train crops, held-out paths)``."""
    root = os.path.join(workdir, 'data')
    link_split('train', os.path.join(root, 'train'))
    link_split('test', os.path.join(root, 'test'))
    crops = write_crops('train', os.path.join(root, 'train'), per_photo, every)
    held_out = write_crops('test', os.path.join(workdir, 'negatives'), per_photo=2)
    return root, crops, held_out


def train(root, args):
    """Run the recipe for each of ``RUNS`` on ``root``, one after the other or, with
    ``--concurrent``, all at once (``nice -n 5``, one thread each); each logs to
    ``runs/<run>.log`` and has its minutes written to ``runs/<run>.json``."""
    runs = os.path.join(args.workdir, 'runs')
    env, nice = dict(os.environ), []
    if args.concurrent:
        env.update(OMP_NUM_THREADS='1', MXNET_CPU_WORKER_NTHREADS='1')
        nice = ['nice', '-n', '5']
    started = []
    for name, flags in RUNS:
        os.makedirs(os.path.join(runs, name), exist_ok=True)
        command = nice + ['sh', RECIPE, os.path.join(runs, name, ''), root,
                          '--epochs', str(args.epochs), '--seed', str(args.seed)] + list(flags)
        print(' '.join(command), flush=True)
        with open(os.path.join(runs, name + '.log'), 'w') as log:
            started.append((name, time.time(), subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)))
        if not args.concurrent:
            _finish(runs, *started.pop())
    for run in started:
        _finish(runs, *run)


def _finish(runs, name, start, process):
    """Wait for one run; exit naming its log if it failed, else write its minutes."""
    if process.wait():
        sys.exit('bench_negatives: the %s run failed (exit %d), see %s'
                 % (name, process.returncode, os.path.join(runs, name + '.log')))
    atomic_write(os.path.join(runs, name + '.json'),
                 json.dumps(dict(minutes=(time.time() - start) / 60)).encode())


def evaluate(name, test, held_out, workdir, checks):
    """A run's saved model: its false detections on ``held_out`` at each of ``SCORES``, its
    mAP on ``test`` (checked against the run's own best validation) and its minutes."""
    runs = os.path.join(workdir, 'runs')
    saved = glob.glob(os.path.join(runs, name, '*_best.params'))
    if len(saved) != 1:
        sys.exit('bench_negatives: expected one *_best.params in %s, found %d (train without '
                 '--reuse first)' % (os.path.join(runs, name), len(saved)))
    predictor = Predictor.from_model(saved[0])
    scores = [d.scores for d in predictor.detect([read_image(p) for p in held_out])]
    mean_ap = float(evaluate_voc07(predictor, test)['mAP'])
    validated = max(m['mAP'] for _, _, m in MetricsLog(metrics_path(
        saved[0][:-len('_best.params')])).read().val)
    checks.check(abs(mean_ap - validated) < 1e-3, '%s: mAP %.4f of the saved model, %.4f in '
                 "the run's validation" % (name, mean_ap, validated))
    with open(os.path.join(runs, name + '.json')) as f:
        row = dict(run=name, map=mean_ap, minutes=json.load(f)['minutes'])
    for score in SCORES:
        counts = np.array([int((s >= score).sum()) for s in scores])
        row[score] = (float(counts.mean()), float((counts > 0).mean()))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', default='/tmp/gluondet_bench_negatives')
    parser.add_argument('--epochs', type=int, default=12, help="the recipe's 12 by default")
    parser.add_argument('--crops-per-photo', type=int, default=1,
                        help='background images made of each train photo (at most)')
    parser.add_argument('--crop-every', type=int, default=1,
                        help='make background images of every this many-th train photo only '
                             '(8: about 10%% of the training images, as Ultralytics suggests)')
    parser.add_argument('--seed', type=int, default=1, help="the recipe's 1 by default")
    parser.add_argument('--concurrent', action='store_true',
                        help='run the two trainings at once (two processes)')
    parser.add_argument('--reuse', action='store_true',
                        help="evaluate the models the runs left in --workdir instead of training")
    args = parser.parse_args()
    checks = Checks()
    if not os.path.isdir(CARDS):
        sys.exit('bench_negatives: the cards photos are not at %s' % CARDS)
    root, crops, held_out = build_folder(args.workdir, args.crops_per_photo,
                                          args.crop_every)
    images = {}
    for name, flags in RUNS:
        read = VOCDetection(root, splits=('train',), classes=CARD_CLASSES,
                            background_images=bool(flags))
        checks.check(read.report.background == (len(crops) if flags else 0),
                     '%s: %d background images read' % (name, read.report.background))
        images[name] = '%d (%d)' % (len(read), read.report.background)
    print('dataset root %s: train %d photos with an xml and %d card-free crops without; '
          '%d held-out negatives (card-free crops of the test photos)'
          % (root, len(read) - len(crops), len(crops), len(held_out)), flush=True)
    if not args.reuse:
        train(root, args)
    test = VOCDetection(root, splits=('test',), classes=CARD_CLASSES)
    rows = [evaluate(name, test, held_out, args.workdir, checks) for name, _ in RUNS]
    print('\n| negatives in training | training images (background) | %s | cards test mAP '
          '| minutes |' % ' | '.join('false detections / negative (negatives with any), '
                                     'score >= %g' % s for s in SCORES))
    print('|---|---|%s---|---|' % ('---|' * len(SCORES)))
    for row in rows:
        print('| %s | %s | %s | %.4f | %.1f |' % (row['run'], images[row['run']], ' | '.join(
            '%.3f (%.1f%%)' % (row[s][0], 100 * row[s][1]) for s in SCORES),
            row['map'], row['minutes']))
    checks.exit()


if __name__ == '__main__':
    main()
