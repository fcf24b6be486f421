"""TensorRT engines of a detector against ONNX Runtime: detection differences and latency.

Needs an NVIDIA GPU with ``tensorrt`` (8.5-10.x), ``cuda-python`` and
``onnxruntime`` (``onnxruntime-gpu`` to time ONNX Runtime on the GPU too).
Without them it prints ``skipped: ...`` and exits 0.

1. exports the network (a zoo name with its published weights, or a training output
   ``PREFIX_best.params`` with its json beside) to ONNX at one input size (batch 1);
2. builds fp32, fp16 and int8 engines (int8 calibrated one image at a time,
   the model's batch, on images kept apart from the compared ones when there
   are enough; the cache is kept in the work folder and reused);
   a precision the GPU has no fast kernels for is reported and left out;
3. runs ONNX Runtime and every engine on the same images, preprocessed as the
   network is for validation, and prints per engine ``compare_detections`` against
   ONNX Runtime (detections scoring >= 0.05) and the median latency of one
   batch-1 call, host to host.

The check (the figures print first; exit status 1 if it fails): the fp32 engine's
detections pair with ONNX Runtime's, scores within 5e-3 and boxes within 1 px (TensorRT
may run fp32 layers in TF32 on Ampere and later GPUs). fp16 and int8 differ by design
and are printed only.

Without ``--images`` demo images are rendered (synthetic shapes: a VOC or COCO
network finds little in them, so photos make the comparison more telling).

    python benchmarks/trt_check.py [--network ssd_512_mobilenet1.0_voc | yolo3_darknet53_voc
        | runs/bccd/yolo3_mobilenet0.5_custom_best.params] [--images DIR]
        [--num-images 50] [--calib-images 128] [--repeat 50] [--workdir trt_check]
"""
import argparse
import os
import sys
import time

import cv2
import numpy as np

from common import Checks


def _missing_runtime():
    """None if tensorrt, cuda-python and onnxruntime import, else why not."""
    for module, install in (('tensorrt', 'tensorrt'), ('cuda', 'cuda-python'),
                            ('onnxruntime', 'onnxruntime-gpu')):
        try:
            __import__(module)
        except (ImportError, OSError) as err:
            return ('%s is not usable here (%s): run on a machine with an NVIDIA GPU after '
                    '`pip install %s`' % (module, err, install))
    return None


def _image_paths(args):
    """``(compared, calibration)`` image files; demo images are rendered if no folder is given."""
    if args.images:
        names = sorted(n for n in os.listdir(args.images)
                       if n.lower().endswith(('.jpg', '.jpeg', '.png', '.bmp')))
        paths = [os.path.join(args.images, n) for n in names]
    else:
        from gluondet.data.demo import render_demo_image
        folder = os.path.join(args.workdir, 'demo_images')
        os.makedirs(folder, exist_ok=True)
        count = args.num_images + args.calib_images
        paths = []
        for i in range(count):
            path = os.path.join(folder, '%05d.jpg' % i)
            if not os.path.exists(path):
                image, _ = render_demo_image(0, 'val', i, image_size=320)
                cv2.imwrite(path, cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
            paths.append(path)
    compared = paths[:args.num_images]
    calibration = paths[args.num_images:args.num_images + args.calib_images] or compared
    if calibration is compared:
        print('note: int8 is calibrated on the compared images (no others in %s)' % args.images)
    return compared, calibration


def _median_ms(fn, batch, repeat):
    fn(batch)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(batch)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _run_all(fn, batches):
    """Outputs of every batch-1 input, concatenated into one ``(ids, scores, boxes)``."""
    outputs = [fn(batch) for batch in batches]
    return tuple(np.concatenate([np.asarray(o[k]) for o in outputs]) for k in range(3))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='ssd_512_mobilenet1.0_voc',
                        help='a zoo name (its published weights) or a training output .params')
    parser.add_argument('--images', help='folder of photos (default: rendered demo images)')
    parser.add_argument('--num-images', type=int, default=50)
    parser.add_argument('--calib-images', type=int, default=128)
    parser.add_argument('--repeat', type=int, default=50)
    parser.add_argument('--workdir', default='trt_check')
    args = parser.parse_args(argv)

    missing = _missing_runtime()
    if missing:
        print('skipped: %s' % missing)
        return 0

    import onnxruntime as ort

    from gluondet.data.base import read_image
    from gluondet.deploy import compare_detections, export_onnx
    from gluondet.deploy.calibration import CalibrationBatches, val_preprocess
    from gluondet.deploy.networks import load_network
    from gluondet.deploy.tensorrt import TensorRTRunner, build_engine

    os.makedirs(args.workdir, exist_ok=True)
    net, info = load_network(args.network, pretrained=not args.network.endswith('.params'))
    name = info['network']
    height, width = info['data_shape']
    onnx_path = os.path.join(args.workdir, '%s.onnx' % name)
    export_onnx(net, onnx_path, (height, width), batch_size=1, dynamic_batch=False)

    compared, calibration = _image_paths(args)
    preprocess = val_preprocess((width, height), info['preprocessing'])
    batches = [preprocess(read_image(path))[None] for path in compared]

    providers = [p for p in ('CUDAExecutionProvider', 'CPUExecutionProvider')
                 if p in ort.get_available_providers()]
    session = ort.InferenceSession(onnx_path, providers=providers)
    input_name = session.get_inputs()[0].name

    def run_ort(batch):
        return session.run(['ids', 'scores', 'boxes'], {input_name: batch})
    reference = _run_all(run_ort, batches)
    print('%s at %dx%d, %d images; reference: ONNX Runtime (%s)'
          % (name, width, height, len(compared), session.get_providers()[0]))
    print('onnxruntime  %8.2f ms' % _median_ms(run_ort, batches[0], args.repeat))

    checks = Checks()
    for precision in ('fp32', 'fp16', 'int8'):
        calibrator = None
        if precision == 'int8':
            calibrator = CalibrationBatches(
                calibration, (width, height), batch_size=1, preprocessing=info['preprocessing'],
                cache_path=os.path.join(args.workdir, '%s.calib' % name))
        engine_path = os.path.join(args.workdir, '%s_%s.engine' % (name, precision))
        start = time.perf_counter()
        try:
            build_engine(onnx_path, engine_path, precision=precision, calibrator=calibrator)
        except RuntimeError as err:
            print('%-12s not built: %s' % (precision, err))
            continue
        built = time.perf_counter() - start
        with TensorRTRunner(engine_path) as runner:
            outputs = _run_all(runner, batches)
            latency = _median_ms(runner, batches[0], args.repeat)
        tolerances = dict(score_tol=5e-3, box_tol=1.0) if precision == 'fp32' else {}
        comparison = compare_detections(reference, outputs, min_score=0.05, **tolerances)
        print('tensorrt %-4s %8.2f ms  (built in %.0f s)  vs onnxruntime: %s'
              % (precision, latency, built, comparison))
        if precision == 'fp32':
            checks.check(comparison.ok, "fp32 engine's detections differ from ONNX "
                         "Runtime's: %s" % (comparison,))
    return checks.status()


if __name__ == '__main__':
    sys.exit(main())
