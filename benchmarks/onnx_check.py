"""A trained detector on real images: the Gluon net vs its float and int8 ONNX models.

Exports the model (a training output ``PREFIX_best.params``, its json beside; any
detector) to a dynamic-batch float ONNX model and to an int8 one calibrated on
``--calib-split`` images, then on every image of ``--split``:

- pairs the detections of ONNX Runtime with the Gluon net's (``compare_detections``:
  every detection scoring >= 0.05, scores within 1e-4, boxes within 0.01 px in
  original pixels); the int8 model's differences are printed too, for information.
  A fixed-size model (SSD, YOLOv3) runs at ``--data-shape`` (default the training's)
  in all three. A keep-ratio model's (Faster R-CNN, RetinaNet) ONNX model takes one input
  size (``--data-shape``, default its ``short x max_size`` rounded up to its multiple):
  the Gluon net is compared on the same inputs, each image resized to fit and padded to
  that size;
- prints the VOC07 mAP of each of the three (``gluondet evaluate``'s code; a keep-ratio
  Gluon net's with each image at its own size).

Checks (the figures print first; any failed check ends in exit status 1): the float ONNX
model's detections pair with the Gluon net's within the tolerances above, and its mAP
equals the Gluon net's within 0.001; with ``--int8-drop D``, also that the int8 model's mAP
is at most D below the Gluon net's (int8 differs by design: a bound, not a parity check).
Calibration methods: those ``quantize_onnx`` offers (minmax, percentile).

    .venv/bin/python benchmarks/onnx_check.py \
        --model runs/bccd/ssd_160_mobilenet0.5_custom_best.params
        [--dataset-root ../shared/datasets/bccd/BCCD --split test --calib-split trainval
         --calib-batches 8 --method minmax --data-shape 608,800 --workdir onnx_check
         --int8-drop 0.03]
"""
import argparse
import os
import sys
import time

from gluondet.data import VOCDetection
from gluondet.deploy import Predictor, compare_detections
from gluondet.deploy.commands import evaluate_model, export_model

from common import Checks

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd', 'BCCD')


class AtFixedInput:
    """A runner fed as a fixed-size export is (its ``input_shape`` makes the Predictor fit
    and pad keep-ratio images to it): the Gluon net on the inputs of its ONNX model."""

    def __init__(self, runner, shape):
        self.runner, self.input_shape = runner, (3,) + tuple(shape)
        self.batch_range = runner.batch_range

    def __call__(self, batch):
        return self.runner(batch)


def data_shape(text):
    sides = [int(v) for v in text.split(',')]
    return tuple(sides * 2 if len(sides) == 1 else sides)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', required=True)
    parser.add_argument('--dataset-root', default=BCCD)
    parser.add_argument('--split', default='test')
    parser.add_argument('--calib-split', default='trainval')
    parser.add_argument('--calib-batches', type=int, default=8)
    parser.add_argument('--method', default='minmax', choices=('minmax', 'percentile'))
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--data-shape', type=data_shape,
                        help="input S or HEIGHT,WIDTH: a fixed-size model's, or the ONNX input "
                             "of a keep-ratio model (default: the model's)")
    parser.add_argument('--workdir', default='onnx_check')
    parser.add_argument('--int8-drop', type=float,
                        help="check that the int8 model's mAP is at most this far below the "
                             "Gluon net's (default: not checked)")
    args = parser.parse_args()
    checks = Checks()
    os.makedirs(args.workdir, exist_ok=True)

    reference = Predictor.from_model(args.model)
    if args.data_shape and reference.preprocessing['resize'] == 'fixed':    # as exported
        reference = Predictor.from_model(args.model, data_shape=args.data_shape)
    gluon_shape = reference.data_shape      # a keep-ratio net's: None, each image its own
    calib = VOCDetection(args.dataset_root, splits=args.calib_split, classes=reference.classes)
    calib_folder = os.path.join(args.workdir, 'calibration_images')
    os.makedirs(calib_folder, exist_ok=True)
    for i in range(len(calib)):      # the calibration split only, as a folder for the CLI
        link = os.path.join(calib_folder, os.path.basename(calib.image_path(i)))
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(calib.image_path(i)), link)

    float_path = os.path.join(args.workdir, 'fp32.onnx')
    int8_path = os.path.join(args.workdir, 'int8.onnx')
    export_model(args.model, float_path, 'onnx', data_shape=args.data_shape, dynamic_batch=True)
    start = time.perf_counter()
    export_model(args.model, int8_path, 'onnx', data_shape=args.data_shape, dynamic_batch=True,
                 precision='int8', calibration_images=calib_folder,
                 calibration_batches=args.calib_batches, calibration_method=args.method)
    print('int8 export (%s calibration, %d batches of 8 %s images): %.0f s'
          % (args.method, args.calib_batches, args.calib_split, time.perf_counter() - start))

    data = VOCDetection(args.dataset_root, splits=args.split, classes=reference.classes)
    paths = [data.image_path(i) for i in range(len(data))]

    def detections(predictor):
        return [p.detections for p in predictor.predict(paths, args.batch)]
    exported = {name: Predictor.from_model(path)
                for name, path in (('onnx fp32', float_path), ('onnx int8', int8_path))}
    fixed = exported['onnx fp32'].data_shape
    if reference.data_shape != fixed:       # a keep-ratio network exported at one size
        print('comparing on inputs of %dx%d, as the ONNX models take them' % fixed)
        reference = Predictor(AtFixedInput(reference.runner, fixed), reference.classes,
                              reference.preprocessing, reference.backend)
    expected = detections(reference)
    for name, predictor in exported.items():
        result = compare_detections(expected, detections(predictor))
        print('%s vs gluon on %d %s images: %s%s' % (name, len(paths), args.split, result,
                                                   '' if result.ok else ' (NOT within tolerance)'))
        if name == 'onnx fp32':
            checks.check(result.ok, "onnx fp32 detections differ from the Gluon net's: %s"
                         % (result,))
    maps = {}
    for name, path, shape in (('gluon', args.model, gluon_shape),
                              ('onnx fp32', float_path, None), ('onnx int8', int8_path, None)):
        print('%s:' % name, flush=True)
        maps[name] = evaluate_model(path, 'voc', args.dataset_root, args.split,
                                    batch_size=args.batch, progress=False,
                                    data_shape=shape)['mAP']
    print('VOC07 mAP: gluon %.4f, onnx fp32 %.4f, onnx int8 (%s) %.4f'
          % (maps['gluon'], maps['onnx fp32'], args.method, maps['onnx int8']))
    checks.check(abs(maps['onnx fp32'] - maps['gluon']) <= 1e-3,
                 "onnx fp32 mAP %.4f is not the Gluon net's %.4f (within 0.001)"
                 % (maps['onnx fp32'], maps['gluon']))
    if args.int8_drop is not None:
        checks.check(maps['onnx int8'] >= maps['gluon'] - args.int8_drop,
                     "onnx int8 mAP %.4f is more than %g below the Gluon net's %.4f"
                     % (maps['onnx int8'], args.int8_drop, maps['gluon']))
    return checks.status()


if __name__ == '__main__':
    sys.exit(main())
