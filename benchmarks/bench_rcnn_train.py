"""Faster R-CNN training throughput and peak memory: gluondet's engine vs GluonCV 0.10.5's loop.

Three loops train ``faster_rcnn_resnet50_v1b_voc`` (C4, random weights, no
pretrained base, the same trainable parameters: GluonCV's
``collect_train_params``, i.e. all but the stem, ``layer1`` and the frozen
BatchNorms) on one CPU context, on the same images (the first images of BCCD
trainval, 640x480 JPEG, read from disk, resized keeping the aspect ratio to
``--short`` / ``--max-size`` and randomly flipped), each in its own process:

- ``gluoncv``: GluonCV's ``train_faster_rcnn.py`` (0.10) loop rebuilt from
  GluonCV's own parts: ``VOCDetection``, ``FasterRCNNDefaultTrainTransform``
  making the RPN targets in ``--gluoncv-workers`` loader processes (its ``-j``
  default 4), ``FasterRCNNTrainBatchify``, ``SplitSortedBucketSampler``,
  ``get_model(..., per_device_batch_size=B)``, ``ForwardBackwardTask`` run by
  ``Parallel`` executor threads (``--executor-threads``, its default 1), its
  four Gluon losses, ``net.collect_train_params()`` on a ``gluon.Trainer``
  SGD with the kvstore it creates (``--gluoncv-kvstore``: its default
  ``nccl`` is not in a CPU build, ``device`` is the CPU's), ``trainer.step(B)``
  and its eight metrics updated every step; ``hybridize(static_alloc=True)``
  (its ``--static-alloc``), and the MXNet environment variables its script sets
  at import (``--no-gluoncv-env`` leaves them out);
- ``gluondet``: ``gluondet.engine.fit`` on a ``FasterRCNNTask``: loader
  (``--workers``), grouped batch sampler, RPN and R-CNN targets on the device,
  hooks, logging and all; ``hybridize(static_alloc=True, static_shape=True)``;
- ``compute``: gluondet's forward + targets + losses + backward + SGD step on
  batches staged in memory beforehand: no loading, no hooks.

Both networks keep the VOC network's 20-class heads; BCCD's three classes are
fed as ids 0-2 (the heads' cost does not depend on which ids they see). Both
start from the same initializer (see `_initializer`: the one deviation from GluonCV's
script, whose default uniform init diverges from scratch).
GluonCV's own recipe for this network is one image per device
(``--batch-size 1`` on one device: ``per_device_batch_size`` 1); both loops can
put several images on one device, so ``--batch-sizes 1,2`` measures both.

Each loop times ``--steps`` steps after ``--warmup`` steps (samples/s over the
timed steps; keep ``--warmup`` at 2: GluonCV's first step runs in the main
thread, its second is the executor thread's first, whose MKLDNN primitives are
made anew) and prints: the CPU seconds per sample of its training process over
those steps (all its threads; loader processes not included: a figure that
moves less than samples/s when other work shares the machine), its per-step
total loss (each side's own sum of its four losses; checked finite; the mean of
the last third against the first third says whether it decreases), and the peak
resident memory of its training process (``ru_maxrss``) beside its resident
memory just before the first step; GluonCV's line also gives its largest
loader worker's peak (it runs ``--gluoncv-workers`` of them). The loops run in
turn, ``--rounds`` times; a loop's figure is its median. Printed: gluondet /
GluonCV (goal >= 1.25) and gluondet / compute. With the defaults (600 px,
batch 1 and 2, 6 steps each) a round takes about 8 minutes on 2 idle cores.

``--profile`` instead runs gluondet's compute loop under MXNet's profiler
(aggregate statistics over the timed steps) and prints the top operators.

    .venv/bin/python benchmarks/bench_rcnn_train.py [--short 600] [--max-size 1000]
        [--batch-sizes 1,2] [--steps 4] [--warmup 2] [--rounds 1]
        [--gluoncv-workers 4] [--executor-threads 1] [--gluoncv-kvstore device]
        [--workers 0] [--gluondet-trainable gluoncv|task] [--profile [--top 25]]
    .venv/bin/python benchmarks/bench_rcnn_train.py --short 320 --steps 3 --warmup 1  # quick
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

from bench_ssd_train import BCCD, CLASSES, ROLES, Head  # noqa: E402  (this folder's)

NETWORK = 'faster_rcnn_resnet50_v1b_voc'
LR, WD, MOMENTUM = 0.001, 5e-4, 0.9            # GluonCV's VOC defaults for this script
# Set by GluonCV's train_faster_rcnn.py before it imports mxnet (the GPU ones do nothing here).
GLUONCV_ENV = {
    'MXNET_CUDNN_AUTOTUNE_DEFAULT': '0',
    'MXNET_GPU_MEM_POOL_TYPE': 'Round',
    'MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF': '26',
    'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD': '999',
    'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD': '25',
    'MXNET_GPU_COPY_NTHREADS': '1',
    'MXNET_OPTIMIZER_AGGREGATION_SIZE': '54',
}


def _rss_mb():
    """Resident memory of this process now, in MB."""
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024.
    return float('nan')


def _peak_mb(who=resource.RUSAGE_SELF):
    return resource.getrusage(who).ru_maxrss / 1024.


def _initializer():
    """One initializer on both sides: Gaussian with variance 1 / fan-in. From scratch, the
    backbone's frozen BatchNorms hold identity statistics, so nothing rescales the signal:
    MXNet's default uniform init (GluonCV's script) or gluondet's He-style init (variance
    2 / fan-out) make ResNet-50's residual sums grow until the losses diverge within a few
    steps (measured: 34, 787, 21925, 7e22), and diverged proposals change the work of NMS and
    ROI sampling. Parameters with their own initializer (heads, RPN, anchors) keep it."""
    import mxnet as mx
    return mx.init.Xavier(rnd_type='gaussian', factor_type='in', magnitude=1)


def _init(net):
    """Initialize ``net`` with `_initializer` (a second ``initialize`` keeps these values)."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net.initialize(_initializer())


def run_gluoncv(args):
    import mxnet as mx
    from mxnet import gluon
    import gluoncv
    from gluoncv.data import VOCDetection
    from gluoncv.data.batchify import FasterRCNNTrainBatchify
    from gluoncv.data.sampler import SplitSortedBucketSampler
    from gluoncv.data.transforms.presets.rcnn import FasterRCNNDefaultTrainTransform
    from gluoncv.model_zoo.rcnn.faster_rcnn.data_parallel import ForwardBackwardTask
    from gluoncv.utils.metrics.rcnn import (RCNNAccMetric, RCNNL1LossMetric, RPNAccMetric,
                                            RPNL1LossMetric)
    from gluoncv.utils.parallel import Parallel

    class BCCDVOC(VOCDetection):
        CLASSES = tuple(c.lower() for c in CLASSES)

    gluoncv.utils.random.seed(args.seed)
    ctx = [mx.cpu()]
    batch_size = args.batch_size
    net = gluoncv.model_zoo.get_model(NETWORK, pretrained_base=False,
                                      per_device_batch_size=batch_size // len(ctx))
    _init(net)
    net.collect_params().reset_ctx(ctx)

    dataset = Head(BCCDVOC(root=BCCD, splits=[('BCCD', 'trainval')]), args.images)
    ratios = (dataset.get_im_aspect_ratio() if hasattr(dataset, 'get_im_aspect_ratio')
              else [1.] * len(dataset))
    sampler = SplitSortedBucketSampler(ratios, batch_size, shuffle=True, seed=args.seed)
    loader = gluon.data.DataLoader(
        dataset.transform(FasterRCNNDefaultTrainTransform(args.short, args.max_size, net,
                                                          ashape=net.ashape, multi_stage=False)),
        batch_sampler=sampler, batchify_fn=FasterRCNNTrainBatchify(net, len(ctx)),
        num_workers=args.gluoncv_workers)

    net.collect_params().setattr('grad_req', 'null')
    with warnings.catch_warnings():     # its anchors are constants: they stay 'null'
        warnings.simplefilter('ignore')
        net.collect_train_params().setattr('grad_req', 'write')
    kvstore = (mx.kvstore.create(args.gluoncv_kvstore) if args.gluoncv_kvstore != 'none'
               else None)
    trainer = gluon.Trainer(net.collect_train_params(), 'sgd',
                            {'learning_rate': LR, 'wd': WD, 'momentum': MOMENTUM},
                            update_on_kvstore=None, kvstore=kvstore)
    rpn_cls_loss = gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)
    rpn_box_loss = gluon.loss.HuberLoss(rho=1. / 9.)
    rcnn_cls_loss = gluon.loss.SoftmaxCrossEntropyLoss()
    rcnn_box_loss = gluon.loss.HuberLoss(rho=1.)
    metrics = [mx.metric.Loss('RPN_Conf'), mx.metric.Loss('RPN_SmoothL1'),
               mx.metric.Loss('RCNN_CrossEntropy'), mx.metric.Loss('RCNN_SmoothL1')]
    metrics2 = [RPNAccMetric(), RPNL1LossMetric(), RCNNAccMetric(), RCNNL1LossMetric()]
    task = ForwardBackwardTask(net, trainer, rpn_cls_loss, rpn_box_loss, rcnn_cls_loss,
                               rcnn_box_loss, mix_ratio=1.0, amp_enabled=False)
    executor = Parallel(args.executor_threads, task) if args.executor_threads else None
    net.hybridize(static_alloc=True)

    times, losses = [], []
    rss_before = _rss_mb()
    for batch in loader:
        # its split_and_load: one shard per context
        batch = [[x.as_in_context(c) for x, c in zip(data, ctx)]
                 if isinstance(data, (list, tuple)) else [data.as_in_context(ctx[0])]
                 for data in batch]
        metric_losses = [[] for _ in metrics]
        add_losses = [[] for _ in metrics2]
        if executor is not None:
            for data in zip(*batch):
                executor.put(data)
        for _ in range(len(ctx)):
            result = executor.get() if executor is not None else task.forward_backward(
                list(zip(*batch))[0])
            for k in range(len(metric_losses)):
                metric_losses[k].append(result[k])
            for k in range(len(add_losses)):
                add_losses[k].append(result[len(metric_losses) + k])
        trainer.step(batch_size)
        for metric, record in zip(metrics, metric_losses):
            metric.update(0, record)
        for metric, records in zip(metrics2, add_losses):
            for pred in records:
                metric.update(pred[0], pred[1])
        times.append((time.perf_counter(), time.process_time()))
        losses.append(sum(float(x.sum().asscalar()) for record in metric_losses
                          for x in record))
        if len(times) == args.warmup + args.steps:
            break
    peak = _peak_mb()
    del executor                       # stops its threads (Parallel.__del__)
    del loader                         # terminates and reaps the loader processes
    return times, losses, rss_before, peak, _peak_mb(resource.RUSAGE_CHILDREN)


def build_prepared(build_net, ctx_list, prepare):
    """A task's ``build_net(ctx_list)`` with ``prepare(net)`` run on the network ``get_model``
    returns, before the task initializes it: the task skips initialized parameters, so
    preparing the weights first (rather than again afterwards) leaves no second copy of them
    in the process to count in its memory."""
    from gluondet.tasks import base as task_module
    real = task_module.get_model

    def get_model(*args, **kwargs):
        net = real(*args, **kwargs)
        prepare(net)
        return net

    task_module.get_model = get_model
    try:
        return build_net(ctx_list)
    finally:
        task_module.get_model = real


def _task(args):
    from gluondet.data import VOCDetection
    from gluondet.model_zoo.registry import VOC_CLASSES
    from gluondet.tasks import FasterRCNNTask

    class BenchTask(FasterRCNNTask):
        """The task with the benchmark's initializer, training GluonCV's parameter selection
        (``--gluondet-trainable gluoncv``)."""

        def build_net(self, ctx_list):
            return build_prepared(super().build_net, ctx_list, _init)

        def train_params(self, net):
            if args.gluondet_trainable == 'gluoncv':
                return net.collect_train_params()
            return super().train_params(net)

    train = Head(VOCDetection(os.path.join(BCCD, 'BCCD'), splits='trainval', classes=CLASSES),
                 args.images)
    return BenchTask(NETWORK, train, None, classes=VOC_CLASSES, short=args.short,
                     max_size=args.max_size, pretrained_base=False)


def _config(args, prefix):
    from gluondet.engine import TrainConfig
    return TrainConfig.from_dict(dict(
        gpus='', batch_size=args.batch_size, num_workers=args.workers, epochs=1, lr=LR, wd=WD,
        momentum=MOMENTUM, val_interval=0, save_interval=0, log_interval=10 ** 6,
        save_prefix=prefix, seed=args.seed))


def run_gluondet(args):
    from gluondet.engine import HookBase, fit

    class Clock(HookBase):
        def __init__(self):
            self.times, self.losses, self.rss_before = [], [], None

        def before_train(self):
            self.rss_before = _rss_mb()

        def after_step(self):
            self.times.append((time.perf_counter(), time.process_time()))
            self.losses.append(sum(self.loop.state.loss_values().values()))

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        fit(_task(args), _config(args, os.path.join(tmp, 'bench')), hooks=[clock])
    return clock.times, clock.losses, clock.rss_before, _peak_mb(), None


def _compute_setup(task, config):
    """gluondet's net, trainer and staged batches of ``task``, built as `engine.fit` builds
    them (bench_yolo3_train.py uses it too)."""
    import mxnet as mx
    from gluondet.engine import local_runtime, split_batch, trainable_params
    from gluondet.engine.data import seed_all
    from gluondet.engine.loop import train_data
    runtime = local_runtime(config)
    seed_all(config.seed)
    net = task.build_net(list(runtime.ctx))
    params = trainable_params(task, net)
    net.hybridize(static_alloc=True, static_shape=True)
    data = train_data(task, config, runtime)
    staged = [split_batch(batch, list(runtime.ctx)) for batch in data.epoch(0)]
    mx.nd.waitall()
    return task, net, runtime.make_trainer(params, config), staged


def _compute_step(task, net, trainer, parts):
    import mxnet as mx
    from mxnet import autograd
    with autograd.record():
        losses = task.losses(net, parts)
        total = mx.nd.add_n(*[t.sum() for terms in losses.values() for t in terms])
    autograd.backward(total)
    trainer.step(1)
    return float(total.asscalar())


def run_compute(args):
    task, net, trainer, staged = _compute_setup(_task(args), _config(args, 'unused'))
    times, losses = [], []
    rss_before = _rss_mb()
    for parts in staged:
        losses.append(_compute_step(task, net, trainer, parts))
        times.append((time.perf_counter(), time.process_time()))
    return times, losses, rss_before, _peak_mb(), None


def run_profile(args):
    """gluondet's compute loop; MXNet's aggregate operator table over the timed steps."""
    import mxnet as mx
    task, net, trainer, staged = _compute_setup(_task(args), _config(args, 'unused'))
    for parts in staged[:args.warmup]:
        _compute_step(task, net, trainer, parts)
    mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                           filename=os.path.join(tempfile.gettempdir(),
                                                 'bench_rcnn_profile_%d.json' % os.getpid()))
    mx.profiler.set_state('run')
    tic = time.perf_counter()
    for parts in staged[args.warmup:]:
        _compute_step(task, net, trainer, parts)
    mx.nd.waitall()
    wall = time.perf_counter() - tic
    mx.profiler.set_state('stop')
    table = mx.profiler.dumps(reset=True, format='table', sort_by='total', ascending=False)
    return wall, table


def _summary(times, losses, warmup, batch_size):
    """samples/s over the steps after ``warmup`` (from the end of the last warmup step), and
    the training process's CPU seconds per sample (all its threads) over the same steps."""
    (wall0, cpu0), (wall1, cpu1) = times[warmup - 1], times[-1]
    samples = batch_size * (len(times) - warmup)
    third = max(1, len(losses) // 3)
    return {'samples_per_sec': samples / (wall1 - wall0),
            'cpu_per_sample': (cpu1 - cpu0) / samples,
            'steps': len(times), 'losses': losses,
            'finite': all(l == l and abs(l) != float('inf') for l in losses),
            'first': statistics.mean(losses[:third]), 'last': statistics.mean(losses[-third:])}


def operator_rows(table):
    """``[(operator, calls, total ms)]``: the operator section of MXNet's aggregate table
    (``profiler.dumps(format='table')``) in its order; None if it has none."""
    lines = table.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == 'operator'), None)
    if start is None:
        return None
    rows = []
    for line in lines[start + 4:]:
        parts = line.split()
        if len(parts) < 6 or line.startswith('='):
            break
        rows.append((' '.join(parts[:-5]), int(parts[-5]), float(parts[-4])))
    return rows


def _print_profile(args, wall, table):
    """The operator rows of MXNet's aggregate table (sorted by total time), with each
    one's share of the summed operator time."""
    print('gluondet compute step profile: %s, batch %d, %dx%d max, %d steps, wall %.2f s/step '
          '(profiled, bulk execution off)' % (NETWORK, args.batch_size, args.short,
                                             args.max_size, args.steps, wall / args.steps))
    rows = operator_rows(table)
    if rows is None:
        print(table)
        return
    total = sum(r[2] for r in rows) or 1.
    print('%-44s %7s %12s %7s %12s' % ('operator', 'calls', 'total ms', 'share', 'ms / step'))
    for name, count, ms in rows[:args.top]:
        print('%-44s %7d %12.1f %6.1f%% %12.1f' % (name[:44], count, ms, 100. * ms / total,
                                                   ms / args.steps))
    print('%-44s %7d %12.1f %6.1f%% %12.1f' % ('all %d operators' % len(rows),
                                               sum(r[1] for r in rows), total, 100.,
                                               total / args.steps))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--short', type=int, default=600, help='shorter side (GluonCV: 600)')
    parser.add_argument('--max-size', type=int, default=None,
                        help='longer side limit (default 1000 x short / 600: 1000 at 600)')
    parser.add_argument('--batch-sizes', default='1,2',
                        help='images per step on the one CPU context, comma-separated')
    parser.add_argument('--steps', type=int, default=4, help='timed steps per loop')
    parser.add_argument('--warmup', type=int, default=2, help='untimed first steps (>= 1)')
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--seed', type=int, default=233)
    parser.add_argument('--gluoncv-workers', type=int, default=4,
                        help="GluonCV loader worker processes (its -j default)")
    parser.add_argument('--executor-threads', type=int, default=1,
                        help="GluonCV's Parallel executor threads (its default; 0: main thread)")
    parser.add_argument('--gluoncv-kvstore', default='device', choices=('device', 'local', 'none'),
                        help='kvstore GluonCV creates and hands its Trainer (its default nccl '
                             'is not in a CPU build)')
    parser.add_argument('--no-gluoncv-env', action='store_true',
                        help="do not set the MXNET_* variables GluonCV's script sets")
    parser.add_argument('--workers', type=int, default=0,
                        help="gluondet's loader worker processes")
    parser.add_argument('--gluondet-trainable', default='gluoncv', choices=('gluoncv', 'task'),
                        help="gluondet trains GluonCV's collect_train_params (default) or the "
                             "task's own choice (from scratch: every parameter)")
    parser.add_argument('--profile', action='store_true',
                        help="profile gluondet's compute step instead (first batch size)")
    parser.add_argument('--top', type=int, default=25, help='operators shown by --profile')
    parser.add_argument('--role', choices=ROLES + ('profile',), help=argparse.SUPPRESS)
    parser.add_argument('--batch-size', type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error('--warmup and --steps must be >= 1')
    if args.max_size is None:
        args.max_size = int(round(args.short * 1000. / 600))
    args.batch_list = [int(b) for b in args.batch_sizes.split(',') if b.strip()]
    if args.batch_size is None:
        args.batch_size = args.batch_list[0]
    args.images = (args.warmup + args.steps) * args.batch_size
    return args


def _child(role, argv, batch_size, env):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), '--role', role,
                          '--batch-size', str(batch_size)] + argv, check=True,
                         stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    args = parse_args(argv)
    if args.role == 'profile':
        wall, table = run_profile(args)
        print(json.dumps({'wall': wall, 'table': table}))
        return
    if args.role:
        times, losses, rss_before, peak, workers_peak = globals()['run_' + args.role](args)
        if len(times) < args.warmup + 1:
            raise SystemExit('%s: only %d steps ran' % (args.role, len(times)))
        result = _summary(times, losses, args.warmup, args.batch_size)
        result.update(rss_before_mb=rss_before, peak_rss_mb=peak, workers_peak_mb=workers_peak)
        print(json.dumps(result))
        return
    if not os.path.isdir(BCCD):
        raise SystemExit('BCCD not found at %s (../shared/datasets/bccd)' % BCCD)
    argv = [a for a in (argv if argv is not None else sys.argv[1:])]
    if args.profile:
        # One row per operator: bulk execution would merge neighbouring operators into one.
        env = dict(os.environ, MXNET_EXEC_BULK_EXEC_TRAIN='0', MXNET_EXEC_BULK_EXEC_INFERENCE='0')
        result = _child('profile', argv, args.batch_list[0], env)
        args.batch_size = args.batch_list[0]
        _print_profile(args, result['wall'], result['table'])
        return
    gluoncv_env = dict(os.environ)
    if not args.no_gluoncv_env:
        for key, value in GLUONCV_ENV.items():
            gluoncv_env.setdefault(key, value)
    results = {(b, role): [] for b in args.batch_list for role in ROLES}
    for r in range(args.rounds):
        for b in args.batch_list:
            for role in ROLES:
                env = gluoncv_env if role == 'gluoncv' else dict(os.environ)
                res = _child(role, argv, b, env)
                results[b, role].append(res)
                print('round %d batch %d %-8s %.3f samples/s  %.2f CPU s/sample  peak RSS %.0f MB '
                      '(%.0f before the steps)%s  loss %s  %s' % (
                          r + 1, b, role, res['samples_per_sec'], res['cpu_per_sample'],
                          res['peak_rss_mb'],
                          res['rss_before_mb'],
                          '  loader workers %.0f MB' % res['workers_peak_mb']
                          if res['workers_peak_mb'] else '',
                          ' '.join('%.3g' % l for l in res['losses']),
                          ('finite, %.3g -> %.3g (%s)' % (
                              res['first'], res['last'],
                              'decreasing' if res['last'] < res['first'] else 'NOT decreasing'))
                          if res['finite'] else 'NOT FINITE'), flush=True)
    print('%s, one CPU context, %dx%d max (short/max), %d timed steps after %d, median of %d '
          'round(s); OMP threads %s; GluonCV %d loader workers, %d executor thread(s), kvstore '
          '%s, script env %s; gluondet %d loader workers, trains %s params' % (
              NETWORK, args.short, args.max_size, args.steps, args.warmup, args.rounds,
              os.environ.get('OMP_NUM_THREADS', 'default'), args.gluoncv_workers,
              args.executor_threads, args.gluoncv_kvstore,
              'off' if args.no_gluoncv_env else 'on', args.workers, args.gluondet_trainable))
    failed = []
    for b in args.batch_list:
        med = {role: statistics.median(r['samples_per_sec'] for r in results[b, role])
               for role in ROLES}
        cpu = {role: statistics.median(r['cpu_per_sample'] for r in results[b, role])
               for role in ROLES}
        peak = {role: max(r['peak_rss_mb'] for r in results[b, role]) for role in ROLES}
        print('batch %d%s' % (b, ' (GluonCV recipe: 1 image per device)' if b == 1 else ''))
        for role in ROLES:
            print('  %-8s %.3f samples/s  %.2f CPU s/sample  peak RSS %.0f MB' % (
                role, med[role], cpu[role], peak[role]))
        print('  gluondet / gluoncv  %.2f (goal >= 1.25)' % (med['gluondet'] / med['gluoncv']))
        print('  gluondet / compute  %.2f' % (med['gluondet'] / med['compute']))
        failed += ['batch %d %s' % (b, role) for role in ROLES for r in results[b, role]
                   if not r['finite']]
    if failed:
        raise SystemExit('non-finite losses: %s' % ', '.join(failed))


if __name__ == '__main__':
    main()
