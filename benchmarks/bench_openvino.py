"""OpenVINO against ONNX Runtime and MXNet on the CPU: each detector at batch 1, in one run.

The detectors are the BCCD recipes' networks (model_zoo/bccd_*.sh): SSD (mobilenet0.5,
320x320), Faster R-CNN FPN and RetinaNet (ResNet-18, short side 320, max size 427: a 640x480
photo is 320x427, padded to its multiple) and YOLOv3 (mobilenet0.5, 320x320). Each takes
its trained weights (``--ssd PARAMS`` ..., a training output with its json) or random
weights made to detect (``detecting_random_weights``: many boxes, NMS busy as in a trained
model). Every backend runs what ``gluondet`` runs: MXNet the Gluon network (hybridized, as
``gluondet infer``), ONNX Runtime and OpenVINO the ``gluondet export --dynamic-batch`` ONNX
model (a keep-ratio network's height and width dynamic too), fp32, and its int8 version
(``--precision int8``: ONNX Runtime's static QDQ quantization, calibrated on
``--calib-images`` BCCD trainval photos), run by both. OpenVINO computes in fp32 (not its
bf16 default on CPUs that have bf16).

Timed: one runner call on a BCCD test photo preprocessed as the predictor does (the forward
with box decoding and NMS until the outputs are numpy arrays; MXNet synchronized), median
of ``--iters`` calls after ``--warmup``; every backend in turn, ``--rounds`` times over
(the best median kept), so that machine load hits all alike. Every backend gets
``--threads`` threads (MXNet's OpenMP threads, set before it loads; ONNX Runtime's intra-op
threads; OpenVINO's inference threads). The fp32 detections of OpenVINO and ONNX Runtime
on the photo are compared (scores within 1e-4, boxes within 5e-3 px); the script exits
with status 1 if they differ. Printed: milliseconds per image, and the speed ratios
(ONNX Runtime time / OpenVINO time: above 1, OpenVINO is faster; likewise MXNet / OpenVINO).

    .venv/bin/python benchmarks/bench_openvino.py [--threads 1] [--iters 30] [--rounds 2]
        [--calib-images 16] [--ssd PARAMS] [--faster-rcnn PARAMS] [--retinanet PARAMS]
        [--yolo3 PARAMS] [--detectors ssd,faster_rcnn,retinanet,yolo3] [--output FILE.json]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd', 'BCCD')
CLASSES = ['RBC', 'WBC', 'Platelets']
KEEP_RATIO = dict(short=320, max_size=427)
DETECTORS = {       # name shown, zoo name, architecture of the BCCD recipe, input size
    'ssd': ('SSD', 'ssd_160_mobilenet0.5_custom', {}, 320),
    'faster_rcnn': ('Faster R-CNN FPN', 'faster_rcnn_fpn_resnet18_v1b_custom', KEEP_RATIO,
                    None),
    'retinanet': ('RetinaNet', 'retinanet_resnet18_v1b_custom',
                  dict(KEEP_RATIO, fpn_channels=128, head_channels=64, head_norm='group',
                       head_init='msra'), None),
    'yolo3': ('YOLOv3', 'yolo3_mobilenet0.5_custom', {}, 320),
}
BACKENDS = ('mxnet', 'onnxruntime', 'openvino', 'onnxruntime int8', 'openvino int8')


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--iters', type=int, default=30)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--calib-images', type=int, default=16)
    parser.add_argument('--detectors', default=','.join(DETECTORS))
    for key in DETECTORS:
        parser.add_argument('--' + key.replace('_', '-'), dest=key, metavar='PARAMS',
                            help='trained weights (a training output .params, its json beside)')
    parser.add_argument('--output', help='also write the figures as json')
    return parser.parse_args()


def random_training_output(key, folder, photo):
    """Random detecting weights of ``key``'s network saved as a training output."""
    import mxnet as mx
    from gluondet.data.base import empty_label
    from gluondet.data.preprocess import preprocessing_of, val_transform
    from gluondet.deploy import detecting_random_weights
    from gluondet.model_zoo import get_model
    _, network, kwargs, size = DETECTORS[key]
    net = get_model(network, classes=CLASSES, pretrained_base=False, **kwargs)
    spec = preprocessing_of(net, size and (size, size))
    data = val_transform(spec)(photo, empty_label())[0]
    detecting_random_weights(net, mx.nd.array(data[None]))
    params = os.path.join(folder, key + '.params')
    net.save_parameters(params)
    meta = dict(network=network, classes=CLASSES, model_kwargs=kwargs, **KEEP_RATIO) \
        if size is None else dict(network=network, classes=CLASSES, data_shape=[size, size])
    with open(params[:-len('.params')] + '.json', 'w') as f:
        json.dump({'meta': meta}, f)
    return params


def input_batch(predictor, photo):
    """``1 x 3 x H x W``: the photo as the predictor feeds it (padded to its input size)."""
    import numpy as np
    from gluondet.data.base import empty_label
    from gluondet.data.preprocess import padded_shape
    data = predictor.transform(photo, empty_label())[0]
    batch = np.zeros((1, 3) + padded_shape(predictor.preprocessing, data.shape[1:],
                                           predictor.data_shape), np.float32)
    batch[0, :, :data.shape[1], :data.shape[2]] = data
    return batch


def calibration_folder(folder, count):
    with open(os.path.join(BCCD, 'ImageSets', 'Main', 'trainval.txt')) as f:
        names = f.read().split()[:count]
    path = os.path.join(folder, 'calibration')
    os.makedirs(path)
    for name in names:
        os.symlink(os.path.abspath(os.path.join(BCCD, 'JPEGImages', name + '.jpg')),
                   os.path.join(path, name + '.jpg'))
    return path


def bench(key, args, photo, folder, calibration):
    """``{backend: ms}``, the input shape, the fp32 comparison and the weights used."""
    import mxnet as mx
    from gluondet.deploy import compare_detections
    from gluondet.deploy.benchmark import time_runs
    from gluondet.deploy.commands import export_model
    from gluondet.deploy.predictor import Predictor
    params = getattr(args, key)
    weights = params or 'random (detecting)'
    params = params or random_training_output(key, folder, photo)
    paths = {}
    for precision in ('fp32', 'int8'):
        paths[precision] = os.path.join(folder, '%s_%s.onnx' % (key, precision))
        export_model(params, paths[precision], 'onnx', dynamic_batch=True, precision=precision,
                     calibration_images=calibration if precision == 'int8' else None,
                     verbose=False)
    predictors = {'mxnet': Predictor.from_model(params)}
    for backend in BACKENDS[1:]:
        runtime, _, precision = backend.partition(' ')
        predictors[backend] = Predictor.from_model(paths[precision or 'fp32'], runtime,
                                                   threads=args.threads)
    batch = input_batch(predictors['onnxruntime'], photo)
    comparison = compare_detections(predictors['onnxruntime'].runner(batch),
                                    predictors['openvino'].runner(batch), box_tol=5e-3)
    best = {}
    for _ in range(args.rounds):
        for backend, predictor in predictors.items():
            sync = mx.nd.waitall if backend == 'mxnet' else None
            times = time_runs(predictor.runner, batch, args.warmup, args.iters, sync=sync)
            median = statistics.median(times) * 1000
            best[backend] = min(best.get(backend, median), median)
    return best, list(batch.shape[2:]), comparison, weights


def main():
    args = parse_args()
    from gluondet import threads
    if not threads.request_mxnet_threads(args.threads):     # before MXNet loads
        sys.exit('MXNet was imported before its threads could be set')
    from gluondet.data.base import read_image
    from gluondet.deploy.benchmark import machine, versions
    with open(os.path.join(BCCD, 'ImageSets', 'Main', 'test.txt')) as f:
        name = f.read().split()[0]
    photo = read_image(os.path.join(BCCD, 'JPEGImages', name + '.jpg')).asnumpy()
    keys = args.detectors.split(',')
    rows, failed = [], False
    with tempfile.TemporaryDirectory(prefix='bench-openvino-') as folder:
        calibration = calibration_folder(folder, args.calib_images)
        for key in keys:
            ms, shape, comparison, weights = bench(key, args, photo, folder, calibration)
            failed |= not comparison.ok
            print('%s (%s weights), input %s: openvino vs onnxruntime fp32: %s'
                  % (DETECTORS[key][0], weights, 'x'.join(map(str, shape)), comparison),
                  flush=True)
            rows.append(dict(detector=DETECTORS[key][0], weights=weights, input=shape, ms=ms,
                             parity=str(comparison)))
    print('\nms per image at batch 1, %d thread(s), median of %d calls, best of %d rounds; '
          '%s\n' % (args.threads, args.iters, args.rounds, machine()['cpu']))
    print('| detector | input | MXNet | ORT fp32 | OpenVINO fp32 | ORT / OV | MXNet / OV '
          '| ORT int8 | OpenVINO int8 | ORT int8 / OV int8 |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for row in rows:
        ms = row['ms']
        print('| %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %.2f |' % (
            row['detector'], 'x'.join(map(str, row['input'])), ms['mxnet'], ms['onnxruntime'],
            ms['openvino'], ms['onnxruntime'] / ms['openvino'], ms['mxnet'] / ms['openvino'],
            ms['onnxruntime int8'], ms['openvino int8'],
            ms['onnxruntime int8'] / ms['openvino int8']))
    if args.output:
        with open(args.output, 'w') as f:
            json.dump(dict(vars(args), rows=rows, machine=machine(), versions=versions()), f,
                      indent=2)
    if failed:
        print('openvino and onnxruntime fp32 detections differ', file=sys.stderr)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
