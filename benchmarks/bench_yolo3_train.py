"""YOLOv3 training throughput: gluondet's engine vs GluonCV 0.10.5's train_yolo3.py loop.

Three loops train ``--network`` (a ``yolo3_*_custom`` name both libraries have, default
``yolo3_mobilenet1.0_custom``, BCCD's three classes, no pretrained base, all starting from the
same random weights, `run_weights`) at batch ``--batch-size`` on one CPU context, on the same
images (the first images of BCCD trainval, 640x480 JPEG, read from disk, YOLOv3's full
augmentation: colour distortion, zoom-out, constrained crop, resize with a random interpolation,
flip, the training targets made in the loader), each in its own process:

- ``gluoncv``: GluonCV's ``train_yolo3.py`` (0.10) loop rebuilt from GluonCV's own parts:
  ``gutils.random.seed``, ``VOCDetection``, ``YOLO3DefaultTrainTransform`` with the
  network (targets made in the loader), ``Tuple(Stack() x 6, Pad(-1))``, a ``DataLoader``
  (``--no-random-shape``) or its ``RandomTransformDataLoader`` (a new size every 10
  batches), ``net.hybridize()``, the network's own losses
  (``net(x, gt_boxes, *targets)``), ``autograd.backward`` of their sum, a ``gluon.Trainer``
  SGD with its ``LRSequential`` warmup + step schedule and ``kvstore='local'``,
  ``trainer.step(batch_size)`` and its four loss metrics updated every step;
- ``gluondet``: ``gluondet.engine.fit`` on a ``YOLO3Task``: loader, targets, multi-scale
  sampler, hooks, logging and all; ``hybridize(static_alloc=True, static_shape=True)``;
- ``compute``: gluondet's forward + losses + backward + SGD step on batches staged in
  memory beforehand: no loading, no hooks.

Both loaders run ``--workers`` worker processes (GluonCV's ``-j``; 0: in the training
process). Every loop runs with the same environment: ``OMP_NUM_THREADS`` is set to
``--threads`` (default: every CPU) unless the caller set it (gluondet, imported first,
would otherwise choose its own count and ``OMP_WAIT_POLICY``; GluonCV MXNet's default,
half the CPUs).

Sizes: ``--sizes fixed`` trains at ``--data-shape`` (GluonCV's ``--no-random-shape``);
``--sizes random`` at 320 to 608 px, a size every 10 batches, as GluonCV's default. The
sizes are drawn by gluondet's sampler (from the seed and the step); GluonCV's loader is
made to draw the same ones in the same order (`replay_sizes`: it draws with
``numpy.random.choice`` in the training process), so both train at the same sizes, which
is checked (each step's input shape, else exit 1).

Each loop times ``--steps`` steps after ``--warmup`` steps (samples/s over the timed
steps, and its training process's CPU seconds per sample); the losses must be finite
(else exit 1). The loops run in turn, ``--rounds`` times; a loop's figure is its median.
Printed: gluondet / GluonCV (goal >= 1.25) and gluondet / compute, per size mode.

``--profile`` instead runs each loop once (the first ``--sizes`` mode) under MXNet's
profiler over its timed steps, bulk execution off, and prints each one's milliseconds a step
in every operator, side by side (loader work shows only with ``--workers 0``).

    .venv/bin/python benchmarks/bench_yolo3_train.py [--network yolo3_mobilenet1.0_custom]
        [--sizes fixed,random] [--data-shape 416] [--batch-size 4] [--steps 20]
        [--warmup 2] [--rounds 1] [--workers 2] [--threads 2] [--seed 233]
        [--profile [--top 20]]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_rcnn_train import (LR, MOMENTUM, WD, _compute_setup, _compute_step, _config, _init,
                              _summary, operator_rows)   # train_yolo3.py's lr, wd, momentum too
from bench_ssd_train import BCCD, CLASSES, ROLES, Head
from common import Checks

ROLES = ROLES[:3]
RANDOM_SHAPES = tuple(x * 32 for x in range(10, 20))   # train_yolo3.py's transform sizes
INTERVAL = 10                                           # its batches per size


def size_sequence(args):
    """The side of every step's input: gluondet's draws (`SizedBatchSampler`) with
    ``--sizes random``, else ``--data-shape``."""
    count = args.warmup + args.steps
    if args.mode == 'fixed':
        return [args.data_shape] * count
    from gluondet.engine import SizedBatchSampler
    sampler = SizedBatchSampler(None, RANDOM_SHAPES, INTERVAL, args.seed)
    return [sampler.size_at(step)[0] for step in range(count)]


def replay_sizes(sides):
    """Make GluonCV's ``RandomTransformDataLoader`` take the transform of ``sides[s]`` at
    step ``s``. It draws a transform with ``numpy.random.choice`` once when its iterator is
    made and again every ``INTERVAL`` batches (the first at batch 0), in the training
    process; this replaces the ``numpy`` its module sees by one whose ``random.choice``
    returns those transforms in turn (the draws of a size at each ``INTERVAL``-th step).
    Call it after the loader is made (its worker processes keep the real numpy)."""
    import numpy
    import gluoncv.data.dataloader as module
    draws = iter([sides[0]] + sides[::INTERVAL])

    class Random:
        @staticmethod
        def choice(transforms):
            side = next(draws)
            return next(t for t in transforms if t._width == side)

    class Numpy:
        random = Random()

        def __getattr__(self, name):
            return getattr(numpy, name)

    module.np = Numpy()


class StepProfile:
    """With ``--profile``: MXNet's aggregate operator statistics over a loop's timed steps
    (`after_step` after each step, `finish` at the end; ``table`` then holds them)."""

    def __init__(self, args):
        self.args, self.table = args, None

    def after_step(self, done):
        import mxnet as mx
        if self.args.profile and done == self.args.warmup:
            mx.nd.waitall()
            mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename=os.path.join(
                tempfile.gettempdir(), 'bench_yolo3_profile_%d.json' % os.getpid()))
            mx.profiler.set_state('run')

    def finish(self):
        import mxnet as mx
        if self.args.profile:
            mx.nd.waitall()
            mx.profiler.set_state('stop')
            self.table = mx.profiler.dumps(reset=True, format='table', sort_by='total',
                                           ascending=False)


def run_gluoncv(args):
    import mxnet as mx
    from mxnet import autograd, gluon
    from gluoncv import model_zoo, utils as gutils
    from gluoncv.data import VOCDetection
    from gluoncv.data.batchify import Pad, Stack, Tuple
    from gluoncv.data.dataloader import RandomTransformDataLoader
    from gluoncv.data.transforms.presets.yolo import YOLO3DefaultTrainTransform
    from gluoncv.utils import LRScheduler, LRSequential

    class BCCDVOC(VOCDetection):
        CLASSES = tuple(c.lower() for c in CLASSES)     # it lower-cases the files' names

    gutils.random.seed(args.seed)
    ctx = [mx.cpu()]
    net = model_zoo.get_model(args.network, classes=BCCDVOC.CLASSES, pretrained_base=False)
    net.load_parameters(args.weights)
    dataset = Head(BCCDVOC(root=BCCD, splits=[('BCCD', 'trainval')]), args.images)
    batchify = Tuple(*([Stack() for _ in range(6)] + [Pad(axis=0, pad_val=-1)]))
    sides = size_sequence(args)
    if args.mode == 'fixed':
        loader = gluon.data.DataLoader(
            dataset.transform(YOLO3DefaultTrainTransform(args.data_shape, args.data_shape, net)),
            args.batch_size, True, batchify_fn=batchify, last_batch='rollover',
            num_workers=args.workers)
    else:
        loader = RandomTransformDataLoader(
            [YOLO3DefaultTrainTransform(s, s, net) for s in RANDOM_SHAPES], dataset,
            batch_size=args.batch_size, interval=INTERVAL, last_batch='rollover', shuffle=True,
            batchify_fn=batchify, num_workers=args.workers)
        replay_sizes(sides)
    num_batches = len(dataset) // args.batch_size       # its num_samples // batch_size
    lr_scheduler = LRSequential([
        LRScheduler('linear', base_lr=0, target_lr=LR, nepochs=0, iters_per_epoch=num_batches),
        LRScheduler('step', base_lr=LR, nepochs=200, iters_per_epoch=num_batches,
                    step_epoch=[160, 180], step_factor=0.1, power=2)])
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'wd': WD, 'momentum': MOMENTUM, 'lr_scheduler': lr_scheduler},
                            kvstore='local', update_on_kvstore=None)
    metrics = [mx.metric.Loss(name) for name in
               ('ObjLoss', 'BoxCenterLoss', 'BoxScaleLoss', 'ClassLoss')]
    mx.nd.waitall()
    net.hybridize()
    times, losses, shapes, profile = [], [], [], StepProfile(args)
    for batch in loader:
        batch_size = batch[0].shape[0]
        data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0)
        fixed_targets = [gluon.utils.split_and_load(batch[i], ctx_list=ctx, batch_axis=0)
                         for i in range(1, 6)]
        gt_boxes = gluon.utils.split_and_load(batch[6], ctx_list=ctx, batch_axis=0)
        terms, sum_losses = [[] for _ in metrics], []
        with autograd.record():
            for ix, x in enumerate(data):
                out = net(x, gt_boxes[ix], *[t[ix] for t in fixed_targets])
                sum_losses.append(out[0] + out[1] + out[2] + out[3])
                for record, loss in zip(terms, out):
                    record.append(loss)
            autograd.backward(sum_losses)
        trainer.step(batch_size)
        for metric, record in zip(metrics, terms):
            metric.update(0, record)
        times.append((time.perf_counter(), time.process_time()))
        losses.append(sum(float(loss.sum().asscalar()) for loss in sum_losses))
        shapes.append(batch[0].shape[2])
        profile.after_step(len(times))
    profile.finish()
    del loader                          # terminates its worker processes
    return times, losses, shapes, profile.table


def run_weights(args):
    """Write the weights both loops start from, a GluonCV file (gluondet reads those):
    `bench_rcnn_train._initializer`'s, but the prediction layers start as gluondet's (near
    zero, biases at its priors). From GluonCV's own start (MXNet's default uniform) its loop
    diverged here within 10 steps, as from gluondet's default initialization."""
    import mxnet as mx
    from mxnet import autograd
    from gluoncv import model_zoo
    from gluondet.model_zoo import get_model
    mx.random.seed(args.seed)
    theirs = model_zoo.get_model(args.network, classes=CLASSES, pretrained_base=False)
    ours = get_model(args.network, classes=CLASSES, pretrained_base=False)
    for net in (theirs, ours):
        _init(net)
        with autograd.train_mode():    # sets the deferred shapes
            net(mx.nd.zeros((1, 3, args.data_shape, args.data_shape)))
    ours = ours._collect_params_with_prefix()
    for name, param in theirs._collect_params_with_prefix().items():
        if '.prediction.' in name:
            param.set_data(ours[name].data())
    theirs.save_parameters(args.weights)


def _task(args):
    from gluondet.data import VOCDetection
    from gluondet.tasks import YOLO3Task

    class BenchTask(YOLO3Task):
        def build_net(self, ctx_list):
            """Starting from the weights of GluonCV's loop (`run_weights`)."""
            net = super().build_net(ctx_list)
            net.load_parameters(args.weights, ctx=ctx_list)
            return net

    train = Head(VOCDetection(os.path.join(BCCD, 'BCCD'), splits='trainval', classes=CLASSES),
                 args.images)
    return BenchTask(args.network, train, None, args.data_shape,
                     random_shapes=RANDOM_SHAPES if args.mode == 'random' else None,
                     pretrained_base=False)


def time_fit(args, task, config_at):
    """Each step's clocks, summed loss and input size of `gluondet.engine.fit` on ``task``
    with the config ``config_at(prefix)``, and its profile table (also bench_center_net_train's
    gluondet loop)."""
    from gluondet.engine import HookBase, fit

    class Clock(HookBase):
        def __init__(self):
            self.times, self.losses, self.shapes = [], [], []
            self.profile = StepProfile(args)

        def after_step(self):
            self.times.append((time.perf_counter(), time.process_time()))
            self.losses.append(sum(self.loop.state.loss_values().values()))
            self.shapes.append(self.loop.current_batch[0].shape[2])
            self.profile.after_step(len(self.times))

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        fit(task, config_at(os.path.join(tmp, 'bench')), hooks=[clock])
    clock.profile.finish()
    return clock.times, clock.losses, clock.shapes, clock.profile.table


def time_compute(args, task, config):
    """`time_fit`'s figures of the forward, losses, backward and step alone, on batches
    staged in memory (also bench_center_net_train's compute loop)."""
    task, net, trainer, staged = _compute_setup(task, config)
    times, losses, profile = [], [], StepProfile(args)
    for parts in staged:
        losses.append(_compute_step(task, net, trainer, parts))
        times.append((time.perf_counter(), time.process_time()))
        profile.after_step(len(times))
    profile.finish()
    return times, losses, [parts[0][0].shape[2] for parts in staged], profile.table


def run_gluondet(args):
    return time_fit(args, _task(args), lambda prefix: _config(args, prefix))


def run_compute(args):
    return time_compute(args, _task(args), _config(args, 'unused'))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='yolo3_mobilenet1.0_custom',
                        help='a yolo3_*_custom name of both libraries (mobilenet1.0, '
                             'mobilenet0.25, darknet53)')
    parser.add_argument('--sizes', default='fixed,random',
                        help='size modes, comma-separated: fixed (--data-shape) and/or random '
                             '(320-608, a size every 10 steps)')
    parser.add_argument('--data-shape', type=int, default=416)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--steps', type=int, default=20, help='timed steps per loop')
    parser.add_argument('--warmup', type=int, default=2, help='untimed first steps (>= 1)')
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--workers', type=int, default=2,
                        help='loader worker processes of both loops (GluonCV\'s -j)')
    parser.add_argument('--threads', type=int, default=os.cpu_count(),
                        help='OMP_NUM_THREADS of every loop, unless already set')
    parser.add_argument('--seed', type=int, default=233)
    parser.add_argument('--profile', action='store_true',
                        help="instead, MXNet's operator profile of each loop's timed steps "
                             '(first --sizes mode, one round, bulk execution off)')
    parser.add_argument('--top', type=int, default=20, help='operators shown by --profile')
    parser.add_argument('--role', choices=ROLES + ('weights',), help=argparse.SUPPRESS)
    parser.add_argument('--weights', help=argparse.SUPPRESS)
    parser.add_argument('--mode', choices=('fixed', 'random'), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.sizes.split(',') if m.strip()]
    if not args.modes or set(args.modes) - {'fixed', 'random'}:
        parser.error('--sizes takes fixed and/or random, got %r' % args.sizes)
    if args.warmup < 1 or args.steps < 1:
        parser.error('--warmup and --steps must be >= 1')
    if not (args.network.startswith('yolo3_') and args.network.endswith('_custom')):
        parser.error('--network must be a yolo3_*_custom name, got %r' % args.network)
    args.images = (args.warmup + args.steps) * args.batch_size
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.role == 'weights':
        run_weights(args)
        return
    if args.role:
        times, losses, shapes, table = globals()['run_' + args.role](args)
        if len(times) < args.warmup + 1:
            raise SystemExit('%s: only %d steps ran' % (args.role, len(times)))
        result = _summary(times, losses, args.warmup, args.batch_size)
        result.update(shapes=shapes, profile=table)
        print(json.dumps(result))
        return
    if not os.path.isdir(BCCD):
        raise SystemExit('BCCD not found at %s (../shared/datasets/bccd)' % BCCD)
    env = dict(os.environ)
    env.setdefault('OMP_NUM_THREADS', str(args.threads))
    args.omp_threads = env['OMP_NUM_THREADS']
    with tempfile.TemporaryDirectory() as tmp:
        argv = list(argv if argv is not None else sys.argv[1:])
        argv += ['--weights', os.path.join(tmp, 'start.params')]
        subprocess.run([sys.executable, os.path.abspath(__file__), '--role', 'weights'] + argv,
                       check=True, env=env)
        compare(args, argv, env)


def compare(args, argv, env):
    """Run the loops (each in its own process, ``argv`` passed on) and print their figures,
    or with ``--profile`` their operator profiles."""
    if args.profile:
        # one row per operator: bulk execution would merge neighbouring operators into one
        env.update(MXNET_EXEC_BULK_EXEC_TRAIN='0', MXNET_EXEC_BULK_EXEC_INFERENCE='0')
        print_profiles(args, {role: _child(role, args.modes[0], argv, env)
                              for role in ROLES})
        return
    checks = Checks()
    results = {(mode, role): [] for mode in args.modes for role in ROLES}
    for r in range(args.rounds):
        for mode in args.modes:
            for role in ROLES:
                res = _child(role, mode, argv, env)
                results[mode, role].append(res)
                print('round %d %-6s %-8s %.3f samples/s  %.2f CPU s/sample  sizes %s  loss %s'
                      % (r + 1, mode, role, res['samples_per_sec'], res['cpu_per_sample'],
                         _runs(res['shapes']), ' '.join('%.3g' % l for l in res['losses'])),
                      flush=True)
                checks.check(res['finite'], '%s %s: losses not finite' % (mode, role))
                checks.check(res['shapes'] == results[mode, ROLES[0]][-1]['shapes'],
                             '%s %s trained at other sizes than gluoncv: %s vs %s' % (
                                 mode, role, _runs(res['shapes']),
                                 _runs(results[mode, ROLES[0]][-1]['shapes'])))
    print('%s, batch %d, one CPU context, %d timed steps after %d, median of %d round(s); '
          'OMP_NUM_THREADS %s; %d loader workers each' % (
              args.network, args.batch_size, args.steps, args.warmup, args.rounds,
              args.omp_threads, args.workers))
    for mode in args.modes:
        med = {role: statistics.median(r['samples_per_sec'] for r in results[mode, role])
               for role in ROLES}
        cpu = {role: statistics.median(r['cpu_per_sample'] for r in results[mode, role])
               for role in ROLES}
        print('%s sizes (%s)' % (mode, _runs(results[mode, ROLES[0]][0]['shapes'])))
        for role in ROLES:
            print('  %-8s %.3f samples/s  %.2f CPU s/sample' % (role, med[role], cpu[role]))
        print('  gluondet / gluoncv  %.2f (goal >= 1.25)' % (med['gluondet'] / med['gluoncv']))
        print('  gluondet / compute  %.2f' % (med['gluondet'] / med['compute']))
    checks.exit()


def _child(role, mode, argv, env):
    """The result of one loop run in its own process."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), '--role', role,
                          '--mode', mode] + argv, check=True, stdout=subprocess.PIPE,
                         text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_profiles(args, results):
    """Each loop's milliseconds a timed step in MXNet's operators, the ``--top`` operators of
    any loop side by side, and their sums."""
    per_step = {role: {name: ms / args.steps for name, _, ms in operator_rows(res['profile'])}
                for role, res in results.items()}
    names = sorted(set().union(*per_step.values()),
                   key=lambda name: -max(ops.get(name, 0) for ops in per_step.values()))
    print('%s, batch %d, %s sizes (%s), ms a step in each operator over %d timed steps after '
          '%d; OMP_NUM_THREADS %s, %d loader workers; bulk execution off' % (
              args.network, args.batch_size, args.modes[0],
              _runs(results[ROLES[0]]['shapes']), args.steps, args.warmup,
              args.omp_threads, args.workers))
    print('%-36s' % 'operator' + ''.join('%10s' % role for role in results))
    for name in names[:args.top]:
        print('%-36s' % name[:36] + ''.join('%10.1f' % per_step[role].get(name, 0)
                                            for role in results))
    print('%-36s' % ('all %d operators' % len(names)) + ''.join(
        '%10.1f' % sum(per_step[role].values()) for role in results))
    print('%-36s' % 'wall, a step' + ''.join(
        '%10.1f' % (1e3 * args.batch_size / res['samples_per_sec'])
        for res in results.values()))


def _runs(sides):
    """``416 x20`` or ``448 x10, 352 x10``: each side and how many steps in a row took it."""
    runs = []
    for side in sides:
        if runs and runs[-1][0] == side:
            runs[-1][1] += 1
        else:
            runs.append([side, 1])
    return ', '.join('%d x%d' % (side, count) for side, count in runs)


if __name__ == '__main__':
    main()
