"""CenterNet training throughput: gluondet's engine vs GluonCV 0.10.5's train_center_net.py loop.

Three loops train ``--network`` (default ``center_net_resnet18_v1b``: GluonCV's ResNet-18 v1b
under its three deconvolutions, heads of 64 channels; BCCD's three classes, no pretrained
base, all starting from the same random weights, `run_weights`) at batch ``--batch-size`` and
``--data-shape`` px on one CPU context, on the same images (the first images of BCCD
trainval, 640x480 JPEG, read from disk, CenterNet's augmentation: flip, random centre and
scale by one affine to the input size, colour jitter and PCA lighting, the heatmap, size and
offset targets made in the loader), each in its own process:

- ``gluoncv``: GluonCV's ``train_center_net.py`` (0.10) loop rebuilt from GluonCV's own parts:
  ``gutils.random.seed``, ``get_model('center_net_<network>_voc', norm_layer=BatchNorm)``
  with ``reset_class`` to BCCD's classes (GluonCV has no ``_custom`` CenterNet), its
  ``VOCDetection``, ``CenterNetDefaultTrainTransform`` (``scale_factor=net.scale``),
  ``Tuple(Stack() x 6)``, a ``DataLoader`` (``last_batch='rollover'``), ``net.hybridize()``,
  ``HeatmapFocalLoss(from_logits=True)`` and two ``MaskedL1Loss`` (``--wh-weight`` 0.1,
  ``--center-reg-weight`` 1), ``autograd.backward`` of their sums, a ``gluon.Trainer`` Adam
  (lr 1.25e-4, wd 1e-4 off the biases) with its ``LRSequential`` warmup + step schedule,
  ``trainer.step(1)`` (its number of devices) and its three loss metrics updated every step;
- ``gluondet``: ``gluondet.engine.fit`` on a ``CenterNetTask``: loader, targets in the
  workers, hooks, logging and all; Adam as ``train_center_net.py``;
  ``hybridize(static_alloc=True, static_shape=True)``;
- ``compute``: gluondet's forward + losses + backward + Adam step on batches staged in
  memory beforehand: no loading, no hooks.

Both loaders run ``--workers`` worker processes (GluonCV's ``-j``; 0: in the training
process); every loop runs with ``OMP_NUM_THREADS`` = ``--threads`` unless the caller set it.
Each loop times ``--steps`` steps after ``--warmup`` (samples/s over the timed steps, and its
training process's CPU seconds per sample); the losses must be finite (else exit 1). The
loops run in turn, ``--rounds`` times; a loop's figure is its median. Printed: gluondet /
GluonCV (goal >= 1.25) and gluondet / compute.

``--amp`` trains gluondet's loop with ``--amp`` (bfloat16 on a CPU; GluonCV's
train_center_net.py has no AMP): what a user of ours gets over GluonCV's script.

``--profile`` instead runs each loop once under MXNet's profiler over its timed steps, bulk
execution off, and prints each one's milliseconds a step in every operator, side by side
(loader work shows only with ``--workers 0``).

    .venv/bin/python benchmarks/bench_center_net_train.py [--network center_net_resnet18_v1b]
        [--data-shape 384] [--batch-size 4] [--steps 12] [--warmup 2] [--rounds 1]
        [--workers 2] [--threads 2] [--seed 233] [--amp] [--profile [--top 20]]
"""
import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

from bench_rcnn_train import _config, _summary
from bench_ssd_train import BCCD, CLASSES, ROLES, Head
from bench_yolo3_train import StepProfile, print_profiles, time_compute, time_fit
from common import Checks

ROLES = ROLES[:3]
# train_center_net.py's defaults: Adam, lr, wd (off the biases), the losses' weights, its
# schedule (140 epochs, x0.1 at 90 and 120, no warmup)
LR, WD, WH_WEIGHT, CENTER_REG_WEIGHT = 1.25e-4, 1e-4, 0.1, 1.0
EPOCHS, DECAY_EPOCHS = 140, (90, 120)


def gluoncv_net(args):
    """GluonCV's network as its script makes it without pretrained base (``net.initialize()``:
    MXNet's default uniform, the heads' and deconvolutions' own initializers), its heatmap head
    remade for BCCD's classes by ``reset_class`` (which needs the shapes set: one forward)."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from gluoncv import model_zoo
    net = model_zoo.get_model(args.network + '_voc', pretrained_base=False,
                              norm_layer=gluon.nn.BatchNorm)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net.initialize()
    with autograd.train_mode():
        net(mx.nd.zeros((1, 3, args.data_shape, args.data_shape)))
    net.reset_class([c.lower() for c in CLASSES])
    return net


def run_weights(args):
    """Write the weights every loop starts from (`gluoncv_net`'s), a GluonCV file (gluondet
    reads those)."""
    import mxnet as mx
    mx.random.seed(args.seed)
    gluoncv_net(args).save_parameters(args.weights)


def run_gluoncv(args):
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluoncv as gcv
    from gluoncv import utils as gutils
    from gluoncv.data import VOCDetection
    from gluoncv.data.batchify import Stack, Tuple
    from gluoncv.data.transforms.presets.center_net import CenterNetDefaultTrainTransform
    from gluoncv.utils import LRScheduler, LRSequential

    class BCCDVOC(VOCDetection):
        CLASSES = tuple(c.lower() for c in CLASSES)     # it lower-cases the files' names

    gutils.random.seed(args.seed)
    ctx = [mx.cpu()]
    net = gluoncv_net(args)
    net.load_parameters(args.weights, ctx=ctx)
    dataset = Head(BCCDVOC(root=BCCD, splits=[('BCCD', 'trainval')]), args.images)
    loader = gluon.data.DataLoader(
        dataset.transform(CenterNetDefaultTrainTransform(
            args.data_shape, args.data_shape, num_class=len(dataset.classes),
            scale_factor=net.scale)),
        args.batch_size, True, batchify_fn=Tuple([Stack() for _ in range(6)]),
        last_batch='rollover', num_workers=args.workers)
    num_batches = len(dataset) // args.batch_size       # its num_samples // batch_size
    lr_scheduler = LRSequential([
        LRScheduler('linear', base_lr=0, target_lr=LR, nepochs=0, iters_per_epoch=num_batches),
        LRScheduler('step', base_lr=LR, nepochs=EPOCHS, iters_per_epoch=num_batches,
                    step_epoch=list(DECAY_EPOCHS), step_factor=0.1, power=2)])
    for param in net.collect_params('.*bias').values():
        param.wd_mult = 0.0
    trainer = gluon.Trainer(net.collect_params(), 'adam',
                            {'learning_rate': LR, 'wd': WD, 'lr_scheduler': lr_scheduler})
    heatmap_loss = gcv.loss.HeatmapFocalLoss(from_logits=True)
    wh_loss = gcv.loss.MaskedL1Loss(weight=WH_WEIGHT)
    center_reg_loss = gcv.loss.MaskedL1Loss(weight=CENTER_REG_WEIGHT)
    metrics = [mx.metric.Loss(name) for name in ('HeatmapFocal', 'WHL1', 'CenterRegL1')]
    mx.nd.waitall()
    net.hybridize()
    times, losses, shapes, profile = [], [], [], StepProfile(args)
    for batch in loader:
        split = [gluon.utils.split_and_load(part, ctx_list=ctx, batch_axis=0) for part in batch]
        with autograd.record():
            sum_losses, terms = [], [[], [], []]
            for x, heatmap, wh, wh_mask, reg, reg_mask in zip(*split):
                heatmap_pred, wh_pred, reg_pred = net(x)
                terms[0].append(heatmap_loss(heatmap_pred, heatmap))
                terms[1].append(wh_loss(wh_pred, wh, wh_mask))
                terms[2].append(center_reg_loss(reg_pred, reg, reg_mask))
                sum_losses.append(terms[0][-1] + terms[1][-1] + terms[2][-1])
            autograd.backward(sum_losses)
        trainer.step(len(sum_losses))
        for metric, record in zip(metrics, terms):
            metric.update(0, record)
        times.append((time.perf_counter(), time.process_time()))
        losses.append(sum(float(loss.sum().asscalar()) for loss in sum_losses))
        shapes.append(batch[0].shape[2])
        profile.after_step(len(times))
    profile.finish()
    del loader                          # terminates its worker processes
    return times, losses, shapes, profile.table


def _task(args):
    from gluondet.data import VOCDetection
    from gluondet.tasks import CenterNetTask

    class BenchTask(CenterNetTask):
        def build_net(self, ctx_list):
            """Starting from the weights of GluonCV's loop (`run_weights`)."""
            net = super().build_net(ctx_list)
            net.load_parameters(args.weights, ctx=ctx_list)
            return net

    train = Head(VOCDetection(os.path.join(BCCD, 'BCCD'), splits='trainval', classes=CLASSES),
                 args.images)
    return BenchTask(args.network + '_custom', train, None, args.data_shape,
                     wh_weight=WH_WEIGHT, center_reg_weight=CENTER_REG_WEIGHT,
                     pretrained_base=False)


def _adam_config(args, prefix):
    """`bench_rcnn_train._config` with train_center_net.py's optimizer and schedule (and
    ``--amp``: bfloat16 on a CPU, float16 on a GPU)."""
    return dataclasses.replace(_config(args, prefix), optimizer='adam', lr=LR, wd=WD,
                               lr_decay_epoch=DECAY_EPOCHS, amp=args.amp)


def run_gluondet(args):
    return time_fit(args, _task(args), lambda prefix: _adam_config(args, prefix))


def run_compute(args):
    return time_compute(args, _task(args), _adam_config(args, 'unused'))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='center_net_resnet18_v1b',
                        help='a CenterNet of both libraries, without its dataset suffix '
                             '(center_net_resnet{18,50,101}_v1b, center_net_dla34, '
                             'center_net_mobilenetv3_large_duc)')
    parser.add_argument('--data-shape', type=int, default=384)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--steps', type=int, default=12, help='timed steps per loop')
    parser.add_argument('--warmup', type=int, default=2, help='untimed first steps (>= 1)')
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--workers', type=int, default=2,
                        help='loader worker processes of both loops (GluonCV\'s -j)')
    parser.add_argument('--threads', type=int, default=os.cpu_count(),
                        help='OMP_NUM_THREADS of every loop, unless already set')
    parser.add_argument('--seed', type=int, default=233)
    parser.add_argument('--amp', action='store_true',
                        help="gluondet's loop with --amp (GluonCV's train_center_net.py has "
                             'none; the compute loop stays float32)')
    parser.add_argument('--profile', action='store_true',
                        help="instead, MXNet's operator profile of each loop's timed steps "
                             '(one round, bulk execution off)')
    parser.add_argument('--top', type=int, default=20, help='operators shown by --profile')
    parser.add_argument('--role', choices=ROLES + ('weights',), help=argparse.SUPPRESS)
    parser.add_argument('--weights', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error('--warmup and --steps must be >= 1')
    if not args.network.startswith('center_net_') or args.network.endswith(
            ('_voc', '_coco', '_custom')) or '_dcnv2' in args.network:
        parser.error('--network must be a CenterNet name without its dataset suffix and '
                     'without _dcnv2, got %r' % args.network)
    if args.network == 'center_net_mobilenetv3_small_duc':
        parser.error("GluonCV's reset_class gives center_net_mobilenetv3_small_duc's heatmap "
                     'head the neck\'s width (32) as its input, not the 64 it gets')
    args.images = (args.warmup + args.steps) * args.batch_size
    args.modes = ['fixed']      # the one size mode (bench_yolo3_train.print_profiles reads it)
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
        print_profiles(args, {role: _child(role, argv, env) for role in ROLES})
        return
    checks = Checks()
    results = {role: [] for role in ROLES}
    for r in range(args.rounds):
        for role in ROLES:
            res = _child(role, argv, env)
            results[role].append(res)
            print('round %d %-8s %.3f samples/s  %.2f CPU s/sample  loss %s' % (
                r + 1, role, res['samples_per_sec'], res['cpu_per_sample'],
                ' '.join('%.3g' % l for l in res['losses'])), flush=True)
            checks.check(res['finite'], '%s: losses not finite' % role)
            checks.check(set(res['shapes']) == {args.data_shape},
                         '%s trained at sizes %s, not %d' % (role, sorted(set(res['shapes'])),
                                                            args.data_shape))
    med = {role: statistics.median(r['samples_per_sec'] for r in results[role])
           for role in ROLES}
    cpu = {role: statistics.median(r['cpu_per_sample'] for r in results[role])
           for role in ROLES}
    print('%s at %d px, batch %d, one CPU context, %d timed steps after %d, median of %d '
          'round(s); OMP_NUM_THREADS %s; %d loader workers each%s' % (
              args.network, args.data_shape, args.batch_size, args.steps, args.warmup,
              args.rounds, args.omp_threads, args.workers,
              '; gluondet with --amp (bfloat16)' if args.amp else ''))
    for role in ROLES:
        print('  %-8s %.3f samples/s  %.2f CPU s/sample' % (role, med[role], cpu[role]))
    print('  gluondet / gluoncv  %.2f (goal >= 1.25)' % (med['gluondet'] / med['gluoncv']))
    print('  gluondet / compute  %.2f' % (med['gluondet'] / med['compute']))
    checks.exit()


def _child(role, argv, env):
    """The result of one loop run in its own process."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), '--role', role] + argv,
                         check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == '__main__':
    main()
