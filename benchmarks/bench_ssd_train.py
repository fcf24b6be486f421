"""SSD training throughput: gluondet's engine vs GluonCV 0.10.5's loop, and vs compute alone.

Three loops train ``--network`` (default ``ssd_512_mobilenet1.0_voc``, random
weights, hybridized with static_alloc/static_shape) at batch ``--batch-size``
on the same images (the first images of BCCD trainval, 640x480 JPEG, read from
disk, full SSD augmentation), each in its own process:

- ``gluoncv``: GluonCV's ``train_ssd.py`` loop rebuilt from GluonCV's own
  parts (``VOCDetection``, ``SSDDefaultTrainTransform`` with targets made in
  the loader, ``SSDMultiBoxLoss``, ``gluon.Trainer`` SGD, the two loss
  metrics updated every step);
- ``gluondet``: ``gluondet.engine.fit`` on an ``SSDTask``: loader, targets,
  hooks, logging and all;
- ``compute``: gluondet's forward (targets included) + backward + SGD step on
  batches staged in memory beforehand: no loading, no hooks. Staging the batches
  (reading, augmenting, targets' inputs) is timed too: loading ms a batch;
- ``overlap`` (with ``--overlap``): ``gluondet`` with the engine loading the next
  batch while the asynchronous step runs (``loop.overlap_loading``, the engine's
  default on GPUs; on CPUs it waits for the step).

All loops run with MXNet's OpenMP pool (``OMP_NUM_THREADS`` if set; else
MXNet's default, half the CPUs on x86); ``--gluoncv-omp-threads N`` sets it
for GluonCV's loop alone.

Each loop times ``--steps`` steps after ``--warmup`` steps. The loops run in
turn, ``--rounds`` times; a loop's figure is its median samples/s. Printed:
gluondet / GluonCV (goal >= 1.25), gluondet / compute (goal >= 0.95), overlap /
compute and overlap / gluondet, and the compute loop's loading and step milliseconds a
batch (the step's share of the two).

    .venv/bin/python benchmarks/bench_ssd_train.py [--network ssd_512_mobilenet1.0_voc]
        [--batch-size 4] [--steps 12] [--warmup 3] [--rounds 3]
        [--gluoncv-workers 4] [--workers 0] [--gluoncv-omp-threads 0] [--overlap]
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

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd')
CLASSES = ('RBC', 'WBC', 'Platelets')
ROLES = ('gluoncv', 'gluondet', 'compute', 'overlap')


class Head:
    """The first ``count`` items of a dataset (lazily), keeping ``classes``, ``transform`` and
    (when the dataset has it) ``image_size``; bench_rcnn_train.py uses it too."""

    def __init__(self, dataset, count):
        self.dataset, self.count = dataset, min(count, len(dataset))
        self.classes = dataset.classes
        if hasattr(dataset, 'image_size'):
            self.image_size = dataset.image_size

    def __len__(self):
        return self.count

    def __getitem__(self, idx):
        if not 0 <= idx < self.count:
            raise IndexError(idx)
        return self.dataset[idx]

    def transform(self, fn, lazy=True):
        from mxnet import gluon
        return gluon.data.SimpleDataset(self).transform(fn, lazy)


def _steps_per_second(step_times, warmup):
    """Samples are counted by the caller; this is steps/s after ``warmup`` steps."""
    timed = step_times[warmup:]
    return (len(timed) - 1) / (timed[-1] - timed[0])


def run_gluoncv(args):
    import mxnet as mx
    from mxnet import autograd, gluon
    import gluoncv
    from gluoncv.data import VOCDetection
    from gluoncv.data.batchify import Stack, Tuple
    from gluoncv.data.transforms.presets.ssd import SSDDefaultTrainTransform

    class BCCDVOC(VOCDetection):
        CLASSES = tuple(c.lower() for c in CLASSES)

    mx.random.seed(0)
    net = gluoncv.model_zoo.get_model(args.network, pretrained_base=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net.initialize()
    net.hybridize(static_alloc=True, static_shape=True)
    size = args.data_shape
    with autograd.train_mode():
        _, _, anchors = net(mx.nd.zeros((1, 3, size, size)))
    dataset = Head(BCCDVOC(root=BCCD, splits=[('BCCD', 'trainval')]), args.images)
    loader = gluon.data.DataLoader(
        dataset.transform(SSDDefaultTrainTransform(size, size, anchors)), args.batch_size,
        shuffle=True, batchify_fn=Tuple(Stack(), Stack(), Stack()), last_batch='rollover',
        num_workers=args.gluoncv_workers)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': 0.001, 'wd': 0.0005, 'momentum': 0.9})
    mbox_loss = gluoncv.loss.SSDMultiBoxLoss()
    ce_metric, smoothl1_metric = mx.metric.Loss('CrossEntropy'), mx.metric.Loss('SmoothL1')
    ctx = [mx.cpu()]
    times = []
    for batch in loader:
        batch_size = batch[0].shape[0]
        data = gluon.utils.split_and_load(batch[0], ctx_list=ctx, batch_axis=0)
        cls_targets = gluon.utils.split_and_load(batch[1], ctx_list=ctx, batch_axis=0)
        box_targets = gluon.utils.split_and_load(batch[2], ctx_list=ctx, batch_axis=0)
        with autograd.record():
            cls_preds, box_preds = [], []
            for x in data:
                cls_pred, box_pred, _ = net(x)
                cls_preds.append(cls_pred)
                box_preds.append(box_pred)
            sum_loss, cls_loss, box_loss = mbox_loss(cls_preds, box_preds, cls_targets,
                                                     box_targets)
            autograd.backward(sum_loss)
        trainer.step(1)
        ce_metric.update(0, [loss * batch_size for loss in cls_loss])
        smoothl1_metric.update(0, [loss * batch_size for loss in box_loss])
        times.append(time.perf_counter())
    return times


def _task(args):
    from gluondet.data import VOCDetection
    from gluondet.model_zoo.ssd import VOC_CLASSES
    from gluondet.tasks import SSDTask
    # BCCD's labels (ids 0-2) fed to the 20-class VOC network, as on the GluonCV side.
    train = Head(VOCDetection(os.path.join(BCCD, 'BCCD'), splits='trainval', classes=CLASSES),
                 args.images)
    return SSDTask(args.network, train, None, args.data_shape, classes=VOC_CLASSES,
                   pretrained_base=False, steps='zoo')


def _config(args, prefix):
    from gluondet.engine import TrainConfig
    return TrainConfig.from_dict(dict(
        gpus='', batch_size=args.batch_size, num_workers=args.workers, epochs=1, lr=0.001,
        val_interval=0, save_interval=0, log_interval=10 ** 6, save_prefix=prefix, seed=0))


def run_gluondet(args, overlap=False):
    from gluondet.engine import HookBase, fit

    class StepClock(HookBase):
        def __init__(self):
            self.times = []

        def before_train(self):
            if overlap:
                self.loop.overlap_loading = True

        def after_step(self):
            self.times.append(time.perf_counter())

    clock = StepClock()
    with tempfile.TemporaryDirectory() as tmp:
        fit(_task(args), _config(args, os.path.join(tmp, 'bench')), hooks=[clock])
    return clock.times


def run_overlap(args):
    return run_gluondet(args, overlap=True)


def run_compute(args):
    import mxnet as mx
    from mxnet import autograd, gluon
    from gluondet.engine import TrainData, split_batch
    task = _task(args)
    config = _config(args, 'unused')
    net = task.build_net([mx.cpu()])
    net.hybridize(static_alloc=True, static_shape=True)
    data = TrainData(task.train_dataset(), task.train_batchify, config.batch_size,
                     config.num_workers, config.seed)
    start = time.perf_counter()
    staged = [split_batch(batch, [mx.cpu()]) for batch in data.epoch(0)]
    mx.nd.waitall()
    args.load_ms = 1e3 * (time.perf_counter() - start) / len(staged)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': 0.001, 'wd': 0.0005, 'momentum': 0.9})
    times = []
    for parts in staged:
        with autograd.record():
            losses = task.losses(net, parts)
            total = mx.nd.add_n(*[t.sum() for terms in losses.values() for t in terms])
        autograd.backward(total)
        trainer.step(1)
        total.asscalar()
        times.append(time.perf_counter())
    return times


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='ssd_512_mobilenet1.0_voc')
    parser.add_argument('--data-shape', type=int, default=512)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--steps', type=int, default=12, help='timed steps per loop')
    parser.add_argument('--warmup', type=int, default=3, help='untimed first steps')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--gluoncv-workers', type=int, default=4,
                        help="GluonCV loader worker processes (its train_ssd.py's default)")
    parser.add_argument('--workers', type=int, default=0,
                        help="gluondet's loader worker processes")
    parser.add_argument('--gluoncv-omp-threads', type=int, default=0,
                        help="OMP_NUM_THREADS for GluonCV's loop alone (0: as the others)")
    parser.add_argument('--overlap', action='store_true',
                        help='also time gluondet with loading overlapped with the step')
    parser.add_argument('--role', choices=ROLES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.images = (args.warmup + args.steps) * args.batch_size
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.role:
        times = globals()['run_' + args.role](args)
        print(json.dumps({'samples_per_sec': args.batch_size * _steps_per_second(
            times, args.warmup), 'steps': len(times), 'load_ms': getattr(args, 'load_ms', None)}))
        return
    if not os.path.isdir(BCCD):
        raise SystemExit('BCCD not found at %s (../shared/datasets/bccd)' % BCCD)
    roles = ROLES if args.overlap else ROLES[:3]
    rates = {role: [] for role in roles}
    load_ms = []
    argv = [a for a in (argv if argv is not None else sys.argv[1:])]
    for r in range(args.rounds):
        for role in roles:
            env = dict(os.environ)
            if role == 'gluoncv' and args.gluoncv_omp_threads:
                env['OMP_NUM_THREADS'] = str(args.gluoncv_omp_threads)
            out = subprocess.run([sys.executable, __file__, '--role', role] + argv, check=True,
                                 stdout=subprocess.PIPE, text=True, env=env).stdout
            result = json.loads(out.strip().splitlines()[-1])
            rates[role].append(result['samples_per_sec'])
            if result['load_ms'] is not None:
                load_ms.append(result['load_ms'])
            print('round %d %-8s %.3f samples/s' % (r + 1, role, result['samples_per_sec']),
                  flush=True)
    med = {role: statistics.median(v) for role, v in rates.items()}
    print('%s, batch %d, %d px, %d timed steps after %d, median of %d rounds; GluonCV %d '
          'loader workers, OMP threads %s; gluondet %d loader workers' % (
              args.network, args.batch_size, args.data_shape, args.steps, args.warmup,
              args.rounds, args.gluoncv_workers, args.gluoncv_omp_threads or 'default',
              args.workers))
    for role in roles:
        print('%-8s %.3f samples/s' % (role, med[role]))
    print('gluondet / gluoncv  %.2f (goal >= 1.25)' % (med['gluondet'] / med['gluoncv']))
    print('gluondet / compute  %.2f (goal >= 0.95)' % (med['gluondet'] / med['compute']))
    if args.overlap:
        print('overlap / compute   %.2f (loading overlapped with the step)'
              % (med['overlap'] / med['compute']))
        print('overlap / gluondet  %.2f' % (med['overlap'] / med['gluondet']))
    step_ms, load = 1e3 * args.batch_size / med['compute'], statistics.median(load_ms)
    print('compute loop: loading %.0f ms a batch (staging), step %.0f ms: the step is %.0f%% '
          'of loading + step' % (load, step_ms, 100 * step_ms / (step_ms + load)))


if __name__ == '__main__':
    main()
