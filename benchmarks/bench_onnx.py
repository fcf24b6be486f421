"""Detector inference on the CPU: MXNet (hybridized) vs ONNX Runtime, float32 and int8.

For each network, with random weights that detect (``detecting_random_weights``:
many overlapping boxes, so the comparison means something), every runtime takes
the same BCCD test images (640x480 JPEG through the model's validation transform).

A ``_custom`` name gets BCCD's 3 classes. SSD, YOLOv3 and CenterNet names (fixed input size,
the zoo's; YOLOv3 and CenterNet exported with their own graphs, deploy kinds ``yolo3`` and
``center_net``; CenterNet, whose validation keeps the aspect ratio, takes the zoo's square as
GluonCV's validation does, the images resized to it):

- latency: batch 1, median seconds per call;
- throughput: batch ``--batch`` (default 8), images per second.

Faster R-CNN and Mask R-CNN names (``faster_rcnn_*``, ``mask_rcnn_*``; their masks compared
too): latency at batch 1 only. Each image is resized
keeping its ratio (the zoo's short side and max size, or ``--rcnn-short``/
``--rcnn-max-size``: the network is built with them, as a training with
``--image-short`` would be) and padded at the bottom and right to its
multiple (32 with FPN): BCCD's 640x480 at 600/1000 gives 600x800, 608x800 with FPN; at
800/1333 with FPN 800x1088. ONNX Runtime runs ``export_onnx``'s static batch-1 model of
that size (a Faster R-CNN is exported for one input size); MXNet takes the same padded
array. The float detections are compared on the first ``--rcnn-compare`` test images,
each at batch 1. Where ONNX Runtime (fp32 or int8) is under the 1.5x goal (``--profile
auto``), or always (``--profile on``), its per-node profile (``enable_profiling``, the
timed calls after a warm-up) is printed: milliseconds per call by stage (backbone + RPN
head, proposals, ROI Align, box head, post-processing), by operator type, and the
``--profile-top`` slowest nodes. A fixed-size network's profile (batch 1, by operator
type and slowest nodes) is printed with ``--profile on`` only. ``--mxnet-profile`` adds
MXNet's per-operator profile (batch 1); it turns MXNet's bulk execution off
(MXNET_EXEC_BULK_EXEC_INFERENCE=0, else the profiler sees only fused segments), so that
run's MXNet times are not the benchmark's.

The runtimes: MXNet runs the Gluon net hybridized with static_alloc/static_shape;
ONNX Runtime runs ``export_onnx``'s model (SSD: dynamic batch) with ORT_ENABLE_ALL, and
its int8 version (``quantize_onnx``, calibrated on ``--calib-images`` BCCD trainval
images, preprocessed as the model is fed). Both use ``--threads`` threads (default:
every core; MXNet's own default is half the cores): OMP_NUM_THREADS is set before MXNet
loads, ONNX Runtime gets ``intra_op_num_threads``. ``--mxnet-threads`` gives MXNet
another count: ``--mxnet-threads 1`` on two cores compares the runtimes at their own
defaults (MXNet half the cores, ONNX Runtime all of them). Each runtime is timed in turn,
twice over (best of the two medians), so machine load hits all alike. The float detections
of MXNet and ONNX Runtime are compared (``compare_detections``: detections scoring
>= 0.05, scores within 1e-4, boxes within 0.01 px); if they differ, the script still
prints every figure, then exits with status 1. int8 detections differ by design
(measure its mAP with ``benchmarks/onnx_check.py``). Printed ratios: MXNet time / ONNX
Runtime time.

    .venv/bin/python benchmarks/bench_onnx.py [--networks ssd_512_mobilenet1.0_voc,...]
        [--batch 8] [--repeat 7] [--threads 2] [--mxnet-threads 1] [--calib-images 32]
        [--rcnn-short 600 --rcnn-max-size 1000] [--rcnn-compare 8]
        [--profile auto|on|off] [--profile-top 12] [--mxnet-profile]
"""
import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

from common import Checks

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd', 'BCCD')
CLASSES = ('RBC', 'WBC', 'Platelets')
NETWORKS = ('ssd_512_mobilenet1.0_voc,ssd_300_vgg16_atrous_voc,'
            'faster_rcnn_fpn_resnet18_v1b_custom,faster_rcnn_resnet50_v1b_voc')
GOAL = 1.5     # issue 9: ONNX Runtime at least 1.5x MXNet at batch 1 (Faster R-CNN)


def zoo_kwargs(name):
    """``get_model``'s arguments besides the name: BCCD's classes for a ``_custom`` one."""
    return {'classes': CLASSES} if name.endswith('_custom') else {}


def images(dataset, count, height, width):
    """``count`` images of ``dataset`` through the validation transform, one NCHW batch."""
    import numpy as np
    from gluondet.tasks.ssd import SSDValTransform
    transform = SSDValTransform(width, height)
    return np.stack([transform(*dataset[i % len(dataset)])[0] for i in range(count)])


def rcnn_images(dataset, count, spec):
    """``count`` images of ``dataset`` through a keep-ratio validation transform (``spec``,
    :func:`~gluondet.data.preprocess.preprocessing_of`), each padded at the bottom and
    right to the first image's network input (its size rounded up to the multiple), as
    the predictor feeds them; one NCHW batch."""
    import numpy as np
    from gluondet.data.preprocess import padded_shape, val_transform
    from gluondet.deploy.calibration import val_preprocess
    first = val_transform(spec)(*dataset[0])[0]
    height, width = padded_shape(spec, first.shape[1:])
    prepare = val_preprocess((width, height), spec)   # fit to that input, zero padding
    return np.stack([prepare(dataset[i % len(dataset)][0]) for i in range(count)])


def timed(fn, repeat):
    """Median seconds of ``fn()`` over ``repeat`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def best_of_two(runs, repeat):
    """Per run, the better of two medians (each runtime timed in turn, twice over)."""
    return [min(pair) for pair in zip(*[[timed(run, repeat) for run in runs]
                                        for _ in range(2)])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--networks', default=NETWORKS)
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--repeat', type=int, default=7)
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--mxnet-threads', type=int,
                        help="MXNet's OpenMP threads (default: --threads)")
    parser.add_argument('--calib-images', type=int, default=32)
    parser.add_argument('--rcnn-short', type=int,
                        help="Faster R-CNN: shorter side of the input (default: the zoo's)")
    parser.add_argument('--rcnn-max-size', type=int,
                        help="Faster R-CNN: longest side at most (default: the zoo's)")
    parser.add_argument('--rcnn-compare', type=int, default=8,
                        help='Faster R-CNN: test images whose float detections are compared')
    parser.add_argument('--profile', choices=('auto', 'on', 'off'), default='auto',
                        help="ONNX Runtime's per-node profile (auto: a Faster R-CNN's where "
                             "under the %.1fx goal; an SSD's with 'on' only)" % GOAL)
    parser.add_argument('--profile-top', type=int, default=12)
    parser.add_argument('--mxnet-profile', action='store_true',
                        help="MXNet's per-operator profile too, batch 1 (bulk execution "
                             "off: that run's MXNet times are not the benchmark's)")
    args = parser.parse_args()
    args.mxnet_threads = args.mxnet_threads or args.threads
    os.environ['OMP_NUM_THREADS'] = str(args.mxnet_threads)   # before MXNet loads
    if args.mxnet_profile:
        os.environ['MXNET_EXEC_BULK_EXEC_INFERENCE'] = '0'
    if not os.path.isdir(BCCD):
        print('skipped: the BCCD dataset is not at %s' % BCCD)
        return 0

    import mxnet as mx
    import onnxruntime as ort
    from gluondet.data import VOCDetection

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = args.threads
    print('onnxruntime %s with %d threads, mxnet %s with %d' % (
        ort.__version__, args.threads, mx.__version__, args.mxnet_threads), flush=True)
    if args.mxnet_profile:
        print('MXNET_EXEC_BULK_EXEC_INFERENCE=0 (--mxnet-profile): MXNet times of this run '
              'are not the benchmark\'s', flush=True)
    test = VOCDetection(BCCD, splits='test', classes=CLASSES)
    calib = VOCDetection(BCCD, splits='trainval', classes=CLASSES)
    checks = Checks()
    for name in args.networks.split(','):
        if name.startswith(('faster_rcnn', 'mask_rcnn')):
            bench_rcnn(name, args, options, test, calib, checks)
        else:
            bench_fixed(name, args, options, test, calib, checks)
    return checks.status()


def bench_fixed(name, args, options, test, calib, checks):
    """A fixed-size network's rows (SSD, YOLOv3, CenterNet at its zoo square): latency at
    batch 1, throughput at ``--batch``."""
    import mxnet as mx
    import numpy as np
    import onnx
    import onnxruntime as ort
    from gluondet.deploy import compare_detections, detecting_random_weights, export_onnx
    from gluondet.deploy.calibration import CalibrationBatches
    from gluondet.deploy.quantize import quantize_onnx
    from gluondet.model_zoo import get_model, get_model_info

    height, width = get_model_info(name).data_shape
    data = images(test, args.batch, height, width)
    net = get_model(name, pretrained_base=False, **zoo_kwargs(name))
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
        models = [onnx.load(p) for p in (path, int8_path)]
    for batch in (1, args.batch):
        x_np = np.ascontiguousarray(data[:batch])
        x_nd = mx.nd.array(x_np)
        runs = [lambda x_nd=x_nd: [o.asnumpy() for o in net(x_nd)]]
        runs += [lambda s=s, x_np=x_np: s.run(None, {'data': x_np}) for s in sessions]
        comparison = compare_detections(runs[0](), runs[1]())
        times = best_of_two(runs, args.repeat)
        label = 'latency, batch 1' if batch == 1 else 'throughput, batch %d' % batch
        print('%s %s: mxnet %.1f ms (%.1f img/s), onnxruntime %.1f ms (%.1f img/s), '
              'onnxruntime int8 %.1f ms (%.1f img/s); ratio %.2f, int8 ratio %.2f; '
              'float detections: %s'
              % (name, label, times[0] * 1e3, batch / times[0], times[1] * 1e3,
                 batch / times[1], times[2] * 1e3, batch / times[2], times[0] / times[1],
                 times[0] / times[2], comparison), flush=True)
        checks.check(comparison.ok, '%s %s: float detections of ONNX Runtime differ from '
                     "MXNet's: %s" % (name, label, comparison))
    x_np = np.ascontiguousarray(data[:1])
    if args.profile == 'on':
        print_ort_profile('%s onnxruntime fp32, batch 1' % name, models[0], None,
                          options, x_np, args.repeat, args.profile_top)
    if args.mxnet_profile:
        x_nd = mx.nd.array(x_np)
        print_mxnet_profile('%s, batch 1,' % name, lambda: [o.asnumpy() for o in net(x_nd)],
                            args.repeat, args.profile_top)


def bench_rcnn(name, args, options, test, calib, checks):
    """A Faster R-CNN's (or Mask R-CNN's) row: latency at batch 1 on the model's own
    preprocessing."""
    import mxnet as mx
    import numpy as np
    import onnx
    import onnxruntime as ort
    from gluondet.data.preprocess import preprocessing_of
    from gluondet.deploy import compare_detections, detecting_random_weights, export_onnx
    from gluondet.deploy.calibration import CalibrationBatches
    from gluondet.deploy.compare import compare_masks
    from gluondet.deploy.quantize import quantize_onnx
    from gluondet.model_zoo import get_model

    kwargs = zoo_kwargs(name)
    if args.rcnn_short is not None:
        kwargs['short'] = args.rcnn_short
    if args.rcnn_max_size is not None:
        kwargs['max_size'] = args.rcnn_max_size
    net = get_model(name, pretrained_base=False, **kwargs)
    spec = preprocessing_of(net)
    data = rcnn_images(test, max(1, args.rcnn_compare), spec)
    height, width = data.shape[2:]
    detecting_random_weights(net, mx.nd.array(data[:1]))
    net.hybridize(static_alloc=True, static_shape=True)
    with tempfile.TemporaryDirectory() as tmp:
        path, int8_path = os.path.join(tmp, 'fp32.onnx'), os.path.join(tmp, 'int8.onnx')
        export_onnx(net, path, (height, width), batch_size=1)
        start = time.perf_counter()
        quantize_onnx(path, int8_path, CalibrationBatches(
            [calib.image_path(i) for i in range(args.calib_images)], (width, height),
            batch_size=1, preprocessing=spec))
        print('%s: input %dx%d (short %d, max_size %s, padded to a multiple of %d); int8 '
              'calibration on %d images took %.0f s'
              % (name, height, width, spec['short'], spec['max_size'], spec['multiple'],
                 args.calib_images, time.perf_counter() - start), flush=True)
        models = [onnx.load(p) for p in (path, int8_path)]
        sessions = [ort.InferenceSession(p, options, providers=['CPUExecutionProvider'])
                    for p in (path, int8_path)]

    def mxnet(x):
        return [o.asnumpy() for o in net(mx.nd.array(x))]

    def detections(run):   # every compared image at batch 1, their outputs stacked
        outputs = [run(data[i:i + 1]) for i in range(len(data))]
        return [np.concatenate(parts) for parts in zip(*outputs)]
    expected = detections(mxnet)
    got = detections(lambda x: sessions[0].run(None, {'data': x}))
    comparison = (compare_masks(expected, got, (width, height)) if len(expected) > 3
                  else compare_detections(expected, got))    # Mask R-CNN: and its masks

    x_np = np.ascontiguousarray(data[:1])
    x_nd = mx.nd.array(x_np)
    runs = [lambda: [o.asnumpy() for o in net(x_nd)]]
    runs += [lambda s=s: s.run(None, {'data': x_np}) for s in sessions]
    times = best_of_two(runs, args.repeat)
    print('%s latency, batch 1, %dx%d: mxnet %.1f ms, onnxruntime %.1f ms, onnxruntime int8 '
          '%.1f ms; ratio mxnet/onnxruntime %.2f, mxnet/onnxruntime int8 %.2f (goal %.1f); '
          'float detections on %d images: %s'
          % (name, height, width, times[0] * 1e3, times[1] * 1e3, times[2] * 1e3,
             times[0] / times[1], times[0] / times[2], GOAL, len(data), comparison), flush=True)
    checks.check(comparison.ok, "%s: float detections of ONNX Runtime differ from MXNet's: %s"
                 % (name, comparison))

    stages = rcnn_stages(models[0])     # the int8 model keeps the float one's node names
    for label, model, ratio in zip(('fp32', 'int8'), models,
                                   (times[0] / times[1], times[0] / times[2])):
        if args.profile == 'on' or (args.profile == 'auto' and ratio < GOAL):
            print_ort_profile('%s onnxruntime %s' % (name, label), model, stages, options,
                              x_np, args.repeat, args.profile_top)
    if args.mxnet_profile:
        print_mxnet_profile(name, runs[0], args.repeat, args.profile_top)


BODY, PROPOSALS, ROI_ALIGN, HEAD, POST = ('backbone + RPN head', 'proposals', 'ROI Align',
                                         'box head', 'post-processing')
REORDERS, OTHER = 'NCHWc reorders', 'other'


def rcnn_stages(model):
    """The stage of every node and tensor name of a float Faster R-CNN export, from its
    order: the body, then ``proposals/`` nodes up to the ``proposals`` tensor (decoding,
    top-k, NMS), ROI Align up to ``pooled``, the box head up to the first
    ``postprocess/`` node, the post-processing. (Its int8 version keeps these names, but
    not their order; its quantize/dequantize nodes are named after their tensors.)"""
    stage, stages = BODY, {}
    for node in model.graph.node:
        if node.name.startswith('postprocess/'):
            stage = POST
        elif stage == BODY and node.name.startswith('proposals/'):
            stage = PROPOSALS
        for key in [node.name] + list(node.output):
            stages.setdefault(key, stage)
        if 'proposals' in node.output:
            stage = ROI_ALIGN
        elif 'pooled' in node.output:
            stage = HEAD
    return stages


def _stage(name, op, stages):
    """The stage of a node ONNX Runtime ran: its own name, or the export's node it was
    made from (``fused X``, ``X_nchwc``, ``X_token_N``, quantization suffixes)."""
    if op in ('ReorderInput', 'ReorderOutput'):
        return REORDERS
    key = name[len('fused '):] if name.startswith('fused ') else name
    for _ in range(3):
        if key in stages:
            return stages[key]
        for suffix in ('_nchwc', '_quant', '_QuantizeLinear', '_DequantizeLinear',
                       '_QuantizeLinear_Output', '_DequantizeLinear_Output'):
            if key.endswith(suffix):
                key = key[:-len(suffix)]
        if '_token_' in key:
            key = key[:key.rindex('_token_')]
    return OTHER


def _share(ms, total):
    return '%.1f ms (%.0f%%)' % (ms, 100 * ms / total if total else 0)


def print_ort_profile(label, model, stages, options, x, repeat, top):
    """ONNX Runtime's per-node profile of ``model`` on ``x``: ``repeat`` calls after a
    warm-up, milliseconds per call by stage (``stages``: :func:`rcnn_stages` of the float
    export; None: no stages), by operator type and the ``top`` slowest nodes."""
    staged = stages is not None
    stages = stages or {}
    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as tmp:
        profiled = ort.SessionOptions()
        profiled.graph_optimization_level = options.graph_optimization_level
        profiled.intra_op_num_threads = options.intra_op_num_threads
        profiled.enable_profiling = True
        profiled.profile_file_prefix = os.path.join(tmp, 'ort')
        session = ort.InferenceSession(model.SerializeToString(), profiled,
                                       providers=['CPUExecutionProvider'])
        for _ in range(1 + repeat):
            session.run(None, {'data': x})
        with open(session.end_profiling()) as f:
            events = json.load(f)
    calls = sorted((e for e in events if e.get('name') == 'model_run'), key=lambda e: e['ts'])
    after = calls[0]['ts'] + calls[0]['dur']      # the warm-up call left out
    timed_calls = calls[1:]
    nodes = [e for e in events if e.get('cat') == 'Node' and e['ts'] >= after
             and e['name'].endswith('_kernel_time')]
    per_call = 1e-3 / len(timed_calls)            # microseconds in all -> ms per call
    by_stage, by_op, by_node = (collections.Counter() for _ in range(3))
    ops = {}
    for e in nodes:
        name, op = e['name'][:-len('_kernel_time')], e['args'].get('op_name', '?')
        ops[name] = op
        by_stage[_stage(name, op, stages)] += e['dur'] * per_call
        by_op[op] += e['dur'] * per_call
        by_node[name] += e['dur'] * per_call
    call_ms = sum(e['dur'] for e in timed_calls) * per_call
    node_ms = sum(by_op.values())
    print('%s profile: %d calls, %.1f ms per call, %.1f ms in nodes'
          % (label, len(timed_calls), call_ms, node_ms))
    if staged:
        print('  by stage: ' + ', '.join('%s %s' % (s, _share(by_stage[s], node_ms)) for s in
                                         (BODY, PROPOSALS, ROI_ALIGN, HEAD, POST, REORDERS,
                                          OTHER) if by_stage[s]))
    print('  by operator: ' + ', '.join('%s %s' % (op, _share(ms, node_ms))
                                        for op, ms in by_op.most_common(top)))
    print('  slowest nodes: ' + '; '.join(
        '%s (%s%s) %s' % (name, ops[name], ', ' + _stage(name, ops[name], stages) if staged
                          else '', _share(ms, node_ms)) for name, ms in by_node.most_common(top)),
          flush=True)


def print_mxnet_profile(label, run, repeat, top):
    """MXNet's per-operator profile of ``repeat`` calls of ``run`` (after a warm-up): ms
    per call of the ``top`` operators (per node only with bulk execution off)."""
    import mxnet as mx
    run()
    with tempfile.TemporaryDirectory() as tmp:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                               filename=os.path.join(tmp, 'mxnet.json'))
        mx.profiler.set_state('run')
        for _ in range(repeat):
            run()
        mx.nd.waitall()
        mx.profiler.set_state('stop')
        table = json.loads(mx.profiler.dumps(reset=True, format='json'))['Time']
    operators = {name: stats['Total'] / repeat
                 for name, stats in table.get('operator', {}).items()}
    total = sum(operators.values())
    print('%s mxnet profile: %d calls, %.1f ms per call in operators; by operator: %s'
          % (label, repeat, total, ', '.join(
              '%s %s' % (name, _share(ms, total))
              for name, ms in sorted(operators.items(), key=lambda kv: -kv[1])[:top])),
          flush=True)


if __name__ == '__main__':
    sys.exit(main())
