"""SSD inference on the CPU: MXNet (hybridized) vs ONNX Runtime, float32 and int8.

For each network, with random weights that detect (``detecting_random_weights``:
many overlapping boxes, so the comparison means something), every runtime takes
the same BCCD test images (640x480 JPEG through the validation transform):

- latency: batch 1, median seconds per call;
- throughput: batch ``--batch`` (default 8), images per second.

The runtimes: MXNet runs the Gluon net hybridized with static_alloc/static_shape;
ONNX Runtime runs ``export_onnx``'s dynamic-batch model with ORT_ENABLE_ALL, and its
int8 version (``quantize_onnx``, calibrated on ``--calib-images`` BCCD trainval
images). Both use ``--threads`` threads (default: every core; MXNet's own default is
half the cores): OMP_NUM_THREADS is set before MXNet loads, ONNX Runtime gets
``intra_op_num_threads``. Calls alternate between runtimes so machine load hits all
alike. The float detections of MXNet and ONNX Runtime are compared
(``compare_detections``: detections scoring >= 0.05, scores within 1e-4, boxes within
0.01 px); int8 detections differ by design (measure its mAP with ``gluondet
evaluate``). Printed ratios: MXNet time / ONNX Runtime time.

    .venv/bin/python benchmarks/bench_onnx.py [--networks ssd_512_mobilenet1.0_voc,...]
        [--batch 8] [--repeat 7] [--threads 2] [--calib-images 32]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd', 'BCCD')


def images(dataset, count, height, width):
    """``count`` images of ``dataset`` through the validation transform, one NCHW batch."""
    import numpy as np
    from gluondet.tasks.ssd import SSDValTransform
    transform = SSDValTransform(width, height)
    return np.stack([transform(*dataset[i % len(dataset)])[0] for i in range(count)])


def timed(fn, repeat):
    """Median seconds of ``fn()`` over ``repeat`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--networks', default='ssd_512_mobilenet1.0_voc,ssd_300_vgg16_atrous_voc')
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--repeat', type=int, default=7)
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--calib-images', type=int, default=32)
    args = parser.parse_args()
    os.environ['OMP_NUM_THREADS'] = str(args.threads)   # before MXNet loads
    if not os.path.isdir(BCCD):
        print('skipped: the BCCD dataset is not at %s' % BCCD)
        return 0

    import mxnet as mx
    import numpy as np
    import onnxruntime as ort
    from gluondet.data import VOCDetection
    from gluondet.deploy import compare_detections, detecting_random_weights, export_onnx
    from gluondet.deploy.calibration import CalibrationBatches
    from gluondet.deploy.quantize import quantize_onnx
    from gluondet.model_zoo import get_model, get_model_info

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = args.threads
    print('onnxruntime %s, mxnet %s, %d threads each' % (ort.__version__, mx.__version__,
                                                         args.threads), flush=True)
    classes = ('RBC', 'WBC', 'Platelets')
    test = VOCDetection(BCCD, splits='test', classes=classes)
    calib = VOCDetection(BCCD, splits='trainval', classes=classes)
    for name in args.networks.split(','):
        height, width = get_model_info(name).data_shape
        data = images(test, args.batch, height, width)
        net = get_model(name, pretrained_base=False)
        detecting_random_weights(net, mx.nd.array(data))
        net.hybridize(static_alloc=True, static_shape=True)
        with tempfile.TemporaryDirectory() as tmp:
            path, int8_path = os.path.join(tmp, 'fp32.onnx'), os.path.join(tmp, 'int8.onnx')
            export_onnx(net, path, (height, width), dynamic_batch=True)
            start = time.perf_counter()
            quantize_onnx(path, int8_path, CalibrationBatches(
                [calib.image_path(i) for i in range(args.calib_images)], (width, height)))
            print('%s: int8 calibration on %d images took %.0f s'
                  % (name, args.calib_images, time.perf_counter() - start), flush=True)
            sessions = [ort.InferenceSession(p, options, providers=['CPUExecutionProvider'])
                        for p in (path, int8_path)]
        for batch in (1, args.batch):
            x_np = np.ascontiguousarray(data[:batch])
            x_nd = mx.nd.array(x_np)
            runs = [lambda: [o.asnumpy() for o in net(x_nd)]]
            runs += [lambda s=s: s.run(None, {'data': x_np}) for s in sessions]
            comparison = compare_detections(runs[0](), runs[1]())
            times = [min(pair) for pair in zip(*[[timed(run, args.repeat) for run in runs]
                                                 for _ in range(2)])]
            label = 'latency, batch 1' if batch == 1 else 'throughput, batch %d' % batch
            print('%s %s: mxnet %.1f ms (%.1f img/s), onnxruntime %.1f ms (%.1f img/s), '
                  'onnxruntime int8 %.1f ms (%.1f img/s); ratio %.2f, int8 ratio %.2f; '
                  'float detections: %s'
                  % (name, label, times[0] * 1e3, batch / times[0], times[1] * 1e3,
                     batch / times[1], times[2] * 1e3, batch / times[2], times[0] / times[1],
                     times[0] / times[2], comparison), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
