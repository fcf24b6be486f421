"""SSD inference on the CPU: MXNet (hybridized) vs ONNX Runtime on gluondet's exact ONNX.

For each network (random weights, BatchNorm statistics set from the images so the
features are not degenerate), both runtimes take the same preprocessed BCCD images
(640x480 JPEG through the validation transform):

- latency: batch 1, median seconds per call;
- throughput: batch ``--batch`` (default 8), images per second.

MXNet runs the Gluon net hybridized with static_alloc/static_shape; ONNX Runtime
runs ``export_onnx``'s dynamic-batch model with ORT_ENABLE_ALL. Calls alternate
between the two so machine load hits both alike. The detections of the two are
compared (``compare_detections``: every detection scoring >= 0.01 paired, worst
score and box differences printed). Printed ratio: MXNet time / ONNX Runtime time.

    .venv/bin/python benchmarks/bench_onnx.py [--networks ssd_512_mobilenet1.0_voc,...]
        [--batch 8] [--repeat 7]
"""
import argparse
import os
import statistics
import tempfile
import time
import warnings

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

from gluondet.data import VOCDetection
from gluondet.deploy import compare_detections, export_onnx
from gluondet.model_zoo import get_model, get_model_info
from gluondet.tasks.ssd import SSDValTransform

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd', 'BCCD')


def images(count, height, width):
    """``count`` BCCD test images through the validation transform, as one NCHW batch."""
    dataset = VOCDetection(BCCD, splits='test', classes=('RBC', 'WBC', 'Platelets'))
    transform = SSDValTransform(width, height)
    return np.stack([transform(*dataset[i % len(dataset)])[0] for i in range(count)])


def network(name, x):
    """``name`` with random weights and BatchNorm statistics taken from ``x``."""
    net = get_model(name, pretrained_base=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net.initialize(mx.init.Xavier())

    def set_statistics(block, inputs):
        mean = inputs[0].mean(axis=(0, 2, 3), keepdims=True)
        block.running_mean.set_data(mean.reshape(-1))
        block.running_var.set_data(((inputs[0] - mean) ** 2).mean(axis=(0, 2, 3)) + 1e-3)

    net(x)
    hooks = []
    net.apply(lambda b: hooks.append(b.register_forward_pre_hook(set_statistics))
              if isinstance(b, nn.BatchNorm) else None)
    net(x)
    for hook in hooks:
        hook.detach()
    net.hybridize(static_alloc=True, static_shape=True)
    return net


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
    args = parser.parse_args()
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    print('onnxruntime %s, mxnet %s, OMP_NUM_THREADS=%s'
          % (ort.__version__, mx.__version__, os.environ.get('OMP_NUM_THREADS')))
    for name in args.networks.split(','):
        height, width = get_model_info(name).data_shape
        data = images(args.batch, height, width)
        net = network(name, mx.nd.array(data[:1]))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, 'model.onnx')
            export_onnx(net, path, (height, width), dynamic_batch=True)
            session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
        for batch in (1, args.batch):
            x_np = np.ascontiguousarray(data[:batch])
            x_nd = mx.nd.array(x_np)

            def run_mxnet():
                return [o.asnumpy() for o in net(x_nd)]

            def run_ort():
                return session.run(None, {'data': x_np})

            comparison = compare_detections(run_mxnet(), run_ort(), min_score=0.01)
            t_mx, t_ort = timed(run_mxnet, args.repeat), timed(run_ort, args.repeat)
            t_mx2, t_ort2 = timed(run_mxnet, args.repeat), timed(run_ort, args.repeat)
            t_mx, t_ort = min(t_mx, t_mx2), min(t_ort, t_ort2)
            label = 'latency, batch 1' if batch == 1 else 'throughput, batch %d' % batch
            print('%s %s: mxnet %.1f ms (%.1f img/s), onnxruntime %.1f ms (%.1f img/s), '
                  'ratio %.2f; %s' % (name, label, t_mx * 1e3, batch / t_mx, t_ort * 1e3,
                                      batch / t_ort, t_mx / t_ort, comparison), flush=True)


if __name__ == '__main__':
    main()
