"""Mask R-CNN training throughput and peak memory: gluondet's engine vs GluonCV 0.10.5's loop.

Two loops (three with ``--roles``' ``compute``) train GluonCV's ``custom_mask_rcnn_fpn`` on
``--network`` (default ``resnet18_v1b``) with the defaults of GluonCV's ``train_mask_rcnn.py
custom-model`` (`CUSTOM_MODEL`: FPN of 256 filters, two dense layers of 1024, 14 x 14 ROI Align,
4 mask convolutions, 12000 / 2000 RPN proposals, 512 sampled regions), frozen BatchNorm and
GluonCV's trainable parameters (``collect_train_params``), built by each library's own
``custom_mask_rcnn_fpn`` from the same keywords and loaded from the same random weights
(`write_weights`), at batch ``--batch-size`` on one CPU context, each loop in its own process.
The data: one demo image a sample (``DemoDetection``'s shapes at ``--image-size`` px, one to
four objects each) with their masks as polygons in a COCO instances json (`write_data`), read
from disk by each library's COCO dataset and resized to ``--short`` / ``--max-size`` (default:
not resized) with a random flip:

- ``gluoncv``: GluonCV's ``train_mask_rcnn.py`` (0.10) loop rebuilt from its parts:
  ``gutils.random.seed``, ``COCOInstance``, ``MaskRCNNDefaultTrainTransform`` (polygons
  rasterized after the resize and flip, the RPN targets made in the loader's ``--workers``
  processes, its ``-j`` default 4), ``MaskRCNNTrainBatchify``, ``SplitSortedBucketSampler``,
  ``ForwardBackwardTask`` (its five losses, the mask targets) run by a ``Parallel``
  executor thread (``--executor-threads``, its default 1), a ``gluon.Trainer`` SGD on
  ``collect_train_params`` with the kvstore it creates (``--gluoncv-kvstore``: its default
  ``nccl`` is not in a CPU build), biases without weight decay, its linear warmup of the
  learning rate set every step, the next batch fetched before ``trainer.step(batch_size)``,
  its eleven metrics updated every step, ``hybridize(static_alloc=...)`` (its
  ``--static-alloc``, off by default: ``--gluoncv-static-alloc`` turns it on; then its losses
  diverge within 8 steps, as any of these networks hybridized with ``static_alloc`` and
  without ``static_shape``), and the MXNet variables its script sets at import
  (``--no-gluoncv-env`` leaves them out);
- ``gluondet``: ``gluondet.engine.fit`` on a ``MaskRCNNTask`` (loader with ``--workers``
  processes, grouped batch sampler, RPN, R-CNN and mask targets on the device, hooks, logging
  and all; hybridized as ``train_mask_rcnn.py`` by default: without ``static_alloc``;
  ``--static-alloc on``: with ``static_alloc`` and ``static_shape``, the script's
  ``--static-alloc``), with GluonCV's lr, wd, momentum and warmup;
- ``compute`` (in ``--roles``): gluondet's forward + targets + losses + backward + SGD step
  on batches staged in memory: no loading, no hooks, hybridized as gluondet's loop.
  ``--compute-roi-backward mxnet`` trains its ROI Align with MXNet's backward instead of
  gluondet's sparse one: where its memory goes.

Every loop runs with ``OMP_NUM_THREADS`` set to each of ``--threads`` in turn. Each times
``--steps`` steps after ``--warmup`` (samples/s over the timed steps, its training process's
CPU seconds per sample) and reports the peak resident memory of its training process
(``ru_maxrss``; the loader processes, forked from it, are not counted). The loops alternate:
in each of ``--rounds`` rounds, for each thread count, GluonCV then gluondet (odd rounds) or
gluondet then GluonCV (even rounds), so both see the same machine; a loop's samples/s is its
median over the rounds, its peak memory the largest. Printed per thread count: gluondet /
GluonCV samples/s (goal >= 1.1; of the medians, and each round's, whose two loops ran back
to back) and peak memory (goal <= 1). The checks (else exit 1): every loop's losses finite,
both sides trained at the same input sizes. With the defaults a run takes about 10 minutes
on 2 cores.

``--profile`` instead runs each loop once (the first ``--threads``) under MXNet's profiler over
its timed steps, bulk execution off, and prints each one's milliseconds a step in every
operator, side by side (loader work shows only with ``--workers 0``).

    .venv/bin/python benchmarks/bench_mask_rcnn_train.py [--network resnet18_v1b]
        [--image-size 512] [--short S] [--max-size M] [--batch-size 1] [--steps 6]
        [--warmup 2] [--rounds 2] [--threads 1,2] [--workers 4] [--executor-threads 1]
        [--gluoncv-kvstore device] [--gluoncv-static-alloc] [--no-gluoncv-env]
        [--roles gluoncv,gluondet,compute] [--static-alloc on|off]
        [--compute-roi-backward sparse|mxnet]
        [--seed 233] [--profile [--top 20]]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

from bench_rcnn_train import GLUONCV_ENV, _config, _peak_mb, _summary, build_prepared
from bench_yolo3_train import StepProfile, print_profiles, time_compute, time_fit
from common import Checks

SPLIT = 'instances_bench'
MOMENTUM, WD, WARMUP_FACTOR = 0.9, 1e-4, 1. / 3   # train_mask_rcnn.py's defaults
# train_mask_rcnn.py's environment: train_faster_rcnn.py's, with these two changed or added
MASK_ENV = dict(GLUONCV_ENV, MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF='28', MXNET_USE_FUSION='0')
# train_mask_rcnn.py custom-model's defaults, as it passes them to custom_mask_rcnn_fpn (the
# image sizes are --short / --max-size here); gluondet's custom_mask_rcnn_fpn takes the same
CUSTOM_MODEL = dict(
    num_fpn_filters=256, num_box_head_conv=4, num_box_head_conv_filters=256,
    num_box_head_dense_filters=1024, min_stage=2, max_stage=6, nms_thresh=0.5, nms_topk=-1,
    post_nms=-1, roi_mode='align', roi_size=(14, 14), strides=(4, 8, 16, 32, 64), clip=4.14,
    rpn_channel=256, base_size=16, scales=(2, 4, 8, 16, 32), ratios=(0.5, 1, 2),
    alloc_size=(384, 384), rpn_nms_thresh=0.7, rpn_train_pre_nms=12000, rpn_train_post_nms=2000,
    rpn_test_pre_nms=6000, rpn_test_post_nms=1000, rpn_min_size=1, num_sample=512,
    pos_iou_thresh=0.5, pos_ratio=0.25, max_num_gt=100, target_roi_scale=2, num_fcn_convs=4)


def learning_rate(batch_size):
    """train_mask_rcnn.py's defaults: ``0.00125`` per image, warmup ``max(8000 / batch,
    1000)`` iterations."""
    return 0.00125 * batch_size, max(8000 // batch_size, 1000)


def network_kwargs(args, classes):
    """The keywords both libraries' ``custom_mask_rcnn_fpn`` get (GluonCV's also
    ``per_device_batch_size``, which gluondet's ignores)."""
    return dict(CUSTOM_MODEL, classes=list(classes), pretrained_base=False,
                base_network_name=args.network, short=args.short, max_size=args.max_size,
                per_device_batch_size=args.batch_size)


def _initializer():
    """`bench_rcnn_train._initializer`'s (Gaussian, variance 1 / fan-in) for the weights, zeros
    for the vectors: GluonCV's FPN is a SymbolBlock whose biases have no initializer of their
    own, and the Xavier initializer refuses vectors."""
    import mxnet as mx

    class FanIn(mx.init.Xavier):
        def _init_weight(self, name, arr):
            if len(arr.shape) < 2:
                arr[:] = 0
            else:
                super()._init_weight(name, arr)

    return FanIn(rnd_type='gaussian', factor_type='in', magnitude=1)


def gluoncv_net(args, classes):
    """GluonCV's network as train_mask_rcnn.py custom-model builds it (no pretrained base)."""
    from gluoncv.model_zoo import get_model
    return get_model('custom_mask_rcnn_fpn', transfer=None, dataset='custom',
                     **network_kwargs(args, classes))


def write_data(args):
    """The first ``args.images`` demo images with their masks, as a COCO instances json of
    polygons (each mask's outer contour) in GluonCV's layout: ``<root>/annotations/SPLIT.json``,
    the images in ``<root>/<folder>``; returns ``(root, folder)``."""
    import cv2
    from gluondet.data import DemoDetection
    from gluondet.data.coco import xyxy_to_coco
    demo = DemoDetection('train', num_images=args.images, image_size=args.image_size,
                         seed=args.seed, root=os.path.join(args.data, 'demo'), masks=True)
    folder = os.path.dirname(demo.image_path(0))
    root, name = os.path.split(folder)
    images, annotations = [], []
    for idx in range(len(demo)):
        file_name = os.path.basename(demo.image_path(idx))
        width, height = demo.image_size(idx)
        images.append(dict(id=idx + 1, width=width, height=height, file_name=file_name,
                           coco_url='http://demo/%s/%s' % (name, file_name)))
        label = demo.label(idx)
        for row, bitmap in zip(label, demo.masks(idx).bitmaps(height, width)):
            contours, _ = cv2.findContours(bitmap, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            annotations.append(dict(
                id=len(annotations) + 1, image_id=idx + 1, category_id=int(row[4]) + 1,
                bbox=xyxy_to_coco(row[:4])[0].tolist(), area=float(bitmap.sum()), iscrowd=0,
                segmentation=[c.ravel().astype(float).tolist() for c in contours
                              if len(c) >= 3]))
    categories = [dict(id=i + 1, name=c) for i, c in enumerate(demo.classes)]
    os.makedirs(os.path.join(root, 'annotations'), exist_ok=True)
    with open(os.path.join(root, 'annotations', SPLIT + '.json'), 'w') as f:
        json.dump(dict(images=images, annotations=annotations, categories=categories), f)
    return root, name


def _classes(root):
    with open(os.path.join(root, 'annotations', SPLIT + '.json')) as f:
        return [c['name'] for c in sorted(json.load(f)['categories'], key=lambda c: c['id'])]


def write_weights(args):
    """The weights every loop starts from: GluonCV's network, `_initializer`'s values."""
    import mxnet as mx
    mx.random.seed(args.seed)
    net = gluoncv_net(args, _classes(args.root))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net.initialize(_initializer())
    net(mx.nd.zeros((1, 3, args.short, args.short)))      # the deferred shapes
    net.save_parameters(args.weights)


def run_setup(args):
    args.root, args.folder = write_data(args)
    write_weights(args)
    return {'root': args.root, 'folder': args.folder}


def run_gluoncv(args):
    import mxnet as mx
    from mxnet import gluon
    from gluoncv import utils as gutils
    from gluoncv.data import COCOInstance
    from gluoncv.data.batchify import MaskRCNNTrainBatchify
    from gluoncv.data.sampler import SplitSortedBucketSampler
    from gluoncv.data.transforms.presets.rcnn import MaskRCNNDefaultTrainTransform
    from gluoncv.model_zoo.rcnn.mask_rcnn.data_parallel import ForwardBackwardTask
    from gluoncv.utils.metrics.rcnn import (MaskAccMetric, MaskFGAccMetric, RCNNAccMetric,
                                            RCNNL1LossMetric, RPNAccMetric, RPNL1LossMetric)
    from gluoncv.utils.parallel import Parallel

    class DemoInstance(COCOInstance):
        CLASSES = _classes(args.root)

    gutils.random.seed(args.seed)
    ctx = [mx.cpu()]
    batch_size = args.batch_size
    net = gluoncv_net(args, DemoInstance.CLASSES)
    net.load_parameters(args.weights)           # instead of its param.initialize()
    net.collect_params().reset_ctx(ctx)
    dataset = DemoInstance(root=args.root, splits=[SPLIT])
    sampler = SplitSortedBucketSampler(dataset.get_im_aspect_ratio(), batch_size, shuffle=True,
                                       seed=args.seed)
    loader = gluon.data.DataLoader(
        dataset.transform(MaskRCNNDefaultTrainTransform(net.short, net.max_size, net,
                                                        ashape=net.ashape, multi_stage=True)),
        batch_sampler=sampler, batchify_fn=MaskRCNNTrainBatchify(net, len(ctx)),
        num_workers=args.workers)

    kvstore = (mx.kvstore.create(args.gluoncv_kvstore) if args.gluoncv_kvstore != 'none'
               else None)
    net.collect_params().setattr('grad_req', 'null')
    with warnings.catch_warnings():     # its anchors are constants: they stay 'null'
        warnings.simplefilter('ignore')
        net.collect_train_params().setattr('grad_req', 'write')
    for param in net.collect_params('.*bias').values():
        param.wd_mult = 0.0
    base_lr, warmup = learning_rate(batch_size)
    trainer = gluon.Trainer(net.collect_train_params(), 'sgd',
                            {'learning_rate': base_lr, 'wd': WD, 'momentum': MOMENTUM},
                            update_on_kvstore=None, kvstore=kvstore)
    task = ForwardBackwardTask(
        net, trainer, gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False),
        gluon.loss.HuberLoss(rho=1. / 9.), gluon.loss.SoftmaxCrossEntropyLoss(),
        gluon.loss.HuberLoss(rho=1.), gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False),
        False)
    metrics = [mx.metric.Loss(name) for name in ('RPN_Conf', 'RPN_SmoothL1', 'RCNN_CrossEntropy',
                                                 'RCNN_SmoothL1', 'RCNN_Mask')]
    metrics2 = [RPNAccMetric(), RPNL1LossMetric(), RCNNAccMetric(), RCNNL1LossMetric(),
                MaskAccMetric(), MaskFGAccMetric()]
    executor = Parallel(args.executor_threads, task) if args.executor_threads else None
    net.hybridize(static_alloc=args.gluoncv_static_alloc)

    def split_and_load(batch):         # its split_and_load: one shard per context
        return [[x.as_in_context(c) for x, c in zip(data, ctx)]
                if isinstance(data, (list, tuple)) else [data.as_in_context(ctx[0])]
                for data in batch]

    count = args.warmup + args.steps
    times, losses, shapes, profile = [], [], [], StepProfile(args)
    batches = iter(loader)
    batch = split_and_load(next(batches))
    for i in range(count):
        if i <= warmup:
            alpha = i / warmup
            trainer.set_learning_rate(base_lr * (WARMUP_FACTOR * (1 - alpha) + alpha))
        metric_losses, add_losses = [[] for _ in metrics], [[] for _ in metrics2]
        if executor is not None:
            for data in zip(*batch):
                executor.put(data)
        for _ in range(len(ctx)):
            result = executor.get() if executor is not None else task.forward_backward(
                list(zip(*batch))[0])
            for k, record in enumerate(metric_losses):
                record.append(result[k])
            for k, record in enumerate(add_losses):
                record.append(result[len(metric_losses) + k])
        shapes.append(batch[0][0].shape[2])
        if i + 1 < count:              # it fetches the next batch before the update
            batch = split_and_load(next(batches))
        trainer.step(batch_size)
        for metric, record in zip(metrics, metric_losses):
            metric.update(0, record)
        for metric, records in zip(metrics2, add_losses):
            for pred in records:
                metric.update(pred[0], pred[1])
        times.append((time.perf_counter(), time.process_time()))
        losses.append(sum(float(x.sum().asscalar()) for record in metric_losses
                          for x in record))
        profile.after_step(len(times))
    profile.finish()
    del executor, batches, loader       # stops its threads; ends and reaps the loader processes
    return times, losses, shapes, profile.table


def _task(args):
    from gluondet.data import COCODetection
    from gluondet.tasks import MaskRCNNTask

    class BenchTask(MaskRCNNTask):
        """The task on the benchmark's weights, training GluonCV's parameter selection."""

        def build_net(self, ctx_list):
            return build_prepared(super().build_net, ctx_list,
                                  lambda net: net.load_parameters(args.weights))

        def train_params(self, net):
            if args.role == 'compute':
                if args.compute_roi_backward == 'mxnet':
                    net.roi_extractor.sparse_backward = False
            return net.collect_train_params()

    train = COCODetection(annotation_file=os.path.join(args.root, 'annotations', SPLIT + '.json'),
                          image_root=os.path.join(args.root, args.folder), masks=True)
    kwargs = network_kwargs(args, train.classes)
    for key in ('classes', 'pretrained_base', 'short', 'max_size'):
        kwargs.pop(key)
    kwargs['norm_kwargs'] = {'use_global_stats': True}     # frozen, as GluonCV's
    return BenchTask('custom_mask_rcnn_fpn', train, None, short=args.short,
                     max_size=args.max_size, pretrained_base=False, model_kwargs=kwargs)


def _mask_config(args, prefix):
    """`bench_rcnn_train._config` with train_mask_rcnn.py's optimizer settings."""
    import dataclasses
    lr, warmup = learning_rate(args.batch_size)
    return dataclasses.replace(_config(args, prefix), lr=lr, wd=WD, momentum=MOMENTUM,
                               warmup_iters=warmup, warmup_factor=WARMUP_FACTOR,
                               static_alloc=args.static_alloc == 'on')


def run_gluondet(args):
    return time_fit(args, _task(args), lambda prefix: _mask_config(args, prefix))


def run_compute(args):
    return time_compute(args, _task(args), _mask_config(args, 'unused'))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='resnet18_v1b',
                        help="custom_mask_rcnn_fpn's base_network_name (resnet18_v1b, "
                             'resnet50_v1b, resnet101_v1d)')
    parser.add_argument('--image-size', type=int, default=512, help='side of the demo images')
    parser.add_argument('--short', type=int, default=None,
                        help='shorter side (default --image-size: not resized)')
    parser.add_argument('--max-size', type=int, default=None,
                        help='longer side limit (default short x 1333 / 800, as 800 / 1333)')
    parser.add_argument('--batch-size', type=int, default=1,
                        help='images per step on the one CPU context (GluonCV: 1 per device)')
    parser.add_argument('--steps', type=int, default=6, help='timed steps per loop')
    parser.add_argument('--warmup', type=int, default=2, help='untimed first steps (>= 1)')
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--threads', default='1,2',
                        help='OMP_NUM_THREADS of every loop, each in turn, comma-separated')
    parser.add_argument('--workers', type=int, default=4,
                        help="loader processes of both loops (both scripts' -j default: 4)")
    parser.add_argument('--executor-threads', type=int, default=1,
                        help="GluonCV's Parallel executor threads (its default; 0: main thread)")
    parser.add_argument('--gluoncv-kvstore', default='device', choices=('device', 'local', 'none'),
                        help='kvstore GluonCV creates and hands its Trainer (its default nccl '
                             'is not in a CPU build)')
    parser.add_argument('--gluoncv-static-alloc', action='store_true',
                        help="GluonCV's --static-alloc (off by default in its script)")
    parser.add_argument('--no-gluoncv-env', action='store_true',
                        help="do not set the MXNET_* variables GluonCV's script sets")
    parser.add_argument('--roles', default='gluoncv,gluondet',
                        help='loops, comma-separated: gluoncv, gluondet, compute (gluondet\'s '
                             'step on staged batches)')
    parser.add_argument('--static-alloc', choices=('on', 'off'), default='off',
                        help="gluondet's loops hybridized with static_alloc and static_shape "
                             "(train_mask_rcnn.py --static-alloc) or without (its default)")
    parser.add_argument('--compute-roi-backward', choices=('sparse', 'mxnet'), default='sparse',
                        help="the compute loop's ROI Align backward: gluondet's sparse one "
                             "(the task's on CPUs) or MXNet's")
    parser.add_argument('--seed', type=int, default=233)
    parser.add_argument('--profile', action='store_true',
                        help="instead, MXNet's operator profile of each loop's timed steps "
                             '(first --threads, one round, bulk execution off)')
    parser.add_argument('--top', type=int, default=20, help='operators shown by --profile')
    parser.add_argument('--role', choices=('setup', 'gluoncv', 'gluondet', 'compute'),
                        help=argparse.SUPPRESS)
    for hidden in ('--data', '--root', '--folder', '--weights'):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error('--warmup and --steps must be >= 1')
    try:
        args.thread_list = [int(t) for t in args.threads.split(',') if t.strip()]
    except ValueError:
        parser.error('--threads takes thread counts, comma-separated, got %r' % args.threads)
    if not args.thread_list or min(args.thread_list) < 1:
        parser.error('--threads takes counts >= 1, got %r' % args.threads)
    args.short = args.short or args.image_size
    args.max_size = args.max_size or int(round(args.short * 1333. / 800))
    args.images = (args.warmup + args.steps) * args.batch_size
    args.roles = tuple(r.strip() for r in args.roles.split(',') if r.strip())
    if not args.roles or set(args.roles) - {'gluoncv', 'gluondet', 'compute'}:
        parser.error('--roles takes gluoncv, gluondet and/or compute, got %r' % args.roles)
    # read by bench_yolo3_train.print_profiles
    args.modes, args.omp_threads = ['fixed'], str(args.thread_list[0])
    args.network_name = 'custom_mask_rcnn_fpn (%s)' % args.network
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.role == 'setup':
        print(json.dumps(run_setup(args)))
        return
    if args.role:
        times, losses, shapes, table = globals()['run_' + args.role](args)
        if len(times) < args.warmup + 1:
            raise SystemExit('%s: only %d steps ran' % (args.role, len(times)))
        result = _summary(times, losses, args.warmup, args.batch_size)
        result.update(shapes=shapes, profile=table, peak_mb=_peak_mb())
        print(json.dumps(result))
        return
    argv = list(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        argv += ['--data', tmp, '--weights', os.path.join(tmp, 'start.params')]
        where = _child('setup', argv, dict(os.environ))
        argv += ['--root', where['root'], '--folder', where['folder']]
        compare(args, argv)


def _env(args, role, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if role == 'gluoncv' and not args.no_gluoncv_env:
        for key, value in MASK_ENV.items():
            env.setdefault(key, value)
    if args.profile:        # one row per operator: bulk execution merges neighbouring ones
        env.update(MXNET_EXEC_BULK_EXEC_TRAIN='0', MXNET_EXEC_BULK_EXEC_INFERENCE='0')
    return env


def compare(args, argv):
    """Run the loops (each in its own process, ``argv`` passed on) and print their figures,
    or with ``--profile`` their operator profiles."""
    if args.profile:
        args.network = args.network_name
        threads = args.thread_list[0]
        print_profiles(args, {role: _child(role, argv, _env(args, role, threads))
                              for role in args.roles})
        return
    checks = Checks()
    results = {(t, role): [] for t in args.thread_list for role in args.roles}
    for r in range(args.rounds):
        for threads in args.thread_list:
            for role in (args.roles if r % 2 == 0 else args.roles[::-1]):
                res = _child(role, argv, _env(args, role, threads))
                results[threads, role].append(res)
                print('round %d threads %d %-8s %.3f samples/s  %.2f CPU s/sample  peak %.0f MiB'
                      '  loss %s' % (r + 1, threads, role, res['samples_per_sec'],
                                     res['cpu_per_sample'], res['peak_mb'],
                                     ' '.join('%.3g' % l for l in res['losses'])), flush=True)
                checks.check(res['finite'], 'threads %d %s: losses not finite' % (threads, role))
                first = results[threads, args.roles[0]]
                if first:
                    checks.check(res['shapes'] == first[-1]['shapes'],
                                 'threads %d %s trained at other sizes than %s: %s vs %s' % (
                                     threads, role, args.roles[0], res['shapes'],
                                     first[-1]['shapes']))
    print_summary(args, results)
    checks.exit()


def print_summary(args, results):
    """Per thread count: each loop's median samples/s and CPU seconds a sample, its largest
    peak, and gluondet / GluonCV."""
    print('%s, %d demo images of %d px at %dx%d max (short/max), batch %d, one CPU context, '
          '%d timed steps after %d, median of %d round(s); %d loader processes each; GluonCV '
          '%d executor thread(s), kvstore %s, static_alloc %s, script env %s; gluondet: '
          'static_alloc %s; compute: ROI Align backward %s' % (
              args.network_name, args.images, args.image_size, args.short, args.max_size,
              args.batch_size, args.steps, args.warmup, args.rounds, args.workers,
              args.executor_threads, args.gluoncv_kvstore,
              'on' if args.gluoncv_static_alloc else 'off',
              'off' if args.no_gluoncv_env else 'on', args.static_alloc,
              args.compute_roi_backward))
    for threads in args.thread_list:
        runs = {role: results[threads, role] for role in args.roles}
        med = {role: statistics.median(r['samples_per_sec'] for r in runs[role])
               for role in args.roles}
        peak = {role: max(r['peak_mb'] for r in runs[role]) for role in args.roles}
        print('OMP_NUM_THREADS %d' % threads)
        for role in args.roles:
            print('  %-8s %.3f samples/s  %.2f CPU s/sample  peak %.0f MiB' % (
                role, med[role], statistics.median(r['cpu_per_sample'] for r in runs[role]),
                peak[role]))
        if {'gluoncv', 'gluondet'} <= set(args.roles):
            paired = [ours['samples_per_sec'] / theirs['samples_per_sec']
                      for ours, theirs in zip(runs['gluondet'], runs['gluoncv'])]
            print('  gluondet / gluoncv  samples/s %.2f (goal >= 1.1)  peak memory %.2f '
                  '(goal <= 1)' % (med['gluondet'] / med['gluoncv'],
                                   peak['gluondet'] / peak['gluoncv']))
            print('  gluondet / gluoncv  samples/s round by round: %s, median %.2f' % (
                ' '.join('%.2f' % x for x in paired), statistics.median(paired)))


def _child(role, argv, env):
    """The result of one loop (or the setup) run in its own process."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), '--role', role] + argv,
                         check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == '__main__':
    main()
