"""Test-time augmentation: VOC07 mAP on the BCCD test split with and without ``--tta``.

For each trained model (``--models``: training outputs ``PREFIX_best.params``; default the
BCCD recipe models that exist: YOLOv3 of the EMA runs, and SSD, Faster R-CNN and RetinaNet
under ``/work/runs27/<name>/`` once their ``done`` file is there), the predictor's MXNet
backend is evaluated on the 72 test images by ``gluondet.metrics.evaluation.evaluate``:

- ``none``: the predictor alone;
- ``wbf``: ``ViewPredictor`` with the default ``TTA`` (scales 1, 0.83, 0.67, each also
  mirrored: 6 views) merged by weighted box fusion (IoU 0.55);
- ``nms``: the same views merged by class-wise NMS (IoU 0.55);
- ``flip``: the image and its mirror only (scale 1), weighted box fusion.

``--onnx`` also exports the first model to ONNX (a temporary folder) and evaluates it with
``wbf`` on ONNX Runtime: checked to give the MXNet backend's mAP within 1e-3.

    .venv/bin/python benchmarks/bench_tta.py [--models A_best.params ...]
        [--variants none,wbf,nms,flip] [--onnx]
"""
import argparse
import glob
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_slicing import BCCD, TRAIN_YOLO3, YOLO3  # noqa: E402
from benchmarks.common import Checks  # noqa: E402
from gluondet.data import VOCDetection  # noqa: E402
from gluondet.deploy.commands import export_model  # noqa: E402
from gluondet.deploy.predictor import Predictor  # noqa: E402
from gluondet.deploy.views import TTA, ViewPredictor  # noqa: E402
from gluondet.metrics.evaluation import evaluate_voc07  # noqa: E402

RUNS = '/work/runs27'     # the recipes' runs: sh model_zoo/bccd_NAME.sh /work/runs27/NAME/
VARIANTS = {'none': None, 'wbf': TTA(), 'nms': TTA(merge='nms'), 'flip': TTA(scales=(1,))}


def recipe_models():
    """The trained BCCD recipe models that exist now."""
    found = [YOLO3] if os.path.exists(YOLO3) else []
    for name in ('ssd', 'faster_rcnn', 'retinanet'):
        if os.path.exists(os.path.join(RUNS, name, 'done')):
            found += sorted(glob.glob(os.path.join(RUNS, name, '*_best.params')))
    return found


def run(model, predictor, variant, tta):
    test = VOCDetection(BCCD, splits='test', classes=predictor.classes)
    views = predictor if tta is None else ViewPredictor(predictor, tta=tta)
    start = time.time()
    result = evaluate_voc07(views, test)
    print('| %s | %s | %s | %.4f | %s | %.0f |' % (
        os.path.basename(model), predictor.backend, variant, result['mAP'],
        ' / '.join('%.3f' % result['AP/' + c] for c in predictor.classes),
        time.time() - start), flush=True)
    return result['mAP']


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', default=recipe_models())
    parser.add_argument('--variants', default=','.join(VARIANTS))
    parser.add_argument('--onnx', action='store_true')
    args = parser.parse_args()
    variants = args.variants.split(',')
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not args.models:
        parser.error('unknown variants %s' % unknown if unknown else
                     'no model: train %s' % TRAIN_YOLO3)
    checks = Checks()
    print('| model | backend | TTA | VOC07 mAP | AP (classes) | seconds |')
    print('|---|---|---|---|---|---|')
    for model in args.models:
        predictor = Predictor.from_model(model)
        found = {variant: run(model, predictor, variant, VARIANTS[variant])
                 for variant in variants}
        if args.onnx and model == args.models[0]:
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, 'model.onnx')
                export_model(model, path, 'onnx', dynamic_batch=True, verbose=False)
                onnx = run(model, Predictor.from_model(path), 'wbf', VARIANTS['wbf'])
            if 'wbf' in found:
                checks.check(abs(onnx - found['wbf']) < 1e-3, 'TTA mAP on ONNX Runtime %.4f, '
                             'on MXNet %.4f' % (onnx, found['wbf']))
    checks.exit()


if __name__ == '__main__':
    main()
