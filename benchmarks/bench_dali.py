"""SSD training-data throughput: DALI (``--dali``) against the engine's DataLoader, one run.

Both read the same dataset with the same batches (the engine's `EpochBatchSampler`)
and the SSD training augmentation at ``--size`` (colour jitter, zoom-out with
p=0.5, constrained crop, resize, flip, normalize) into the batch the SSD task trains
on (``images B x 3 x size x size``, ``labels B x M x 6``):

- DataLoader: ``gluondet.engine.TrainData`` over `SSDTrainTransform` (OpenCV + numpy)
  with ``--workers`` worker processes;
- DALI: ``gluondet.data.dali.DaliTrainData`` with `SSDDaliAugment` on the CPU with
  ``--workers`` threads.

The data: BCCD trainval (292 photographs, 640x480 JPEG) from ../shared/datasets when
present, else the demo set (256x256 JPEG). One warm-up epoch each, then ``--epochs``
epochs of each, alternating (so both meet the same load on a shared machine); prints the
median images/s of both and their ratio DALI / DataLoader. Every
batch is checked (shapes, dtypes, boxes inside the image, class ids); a failed check
exits non-zero.

    .venv/bin/python benchmarks/bench_dali.py [--epochs 5] [--batch-size 16] [--workers 2]
"""
import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import gluondet  # noqa: F401  (numpy aliases before mxnet)
from gluondet.data import DemoDetection, VOCDetection
from gluondet.data.batchify import Pad, Stack, Tuple
from gluondet.data.dali import DaliTrainData, SSDDaliAugment, require_dali
from gluondet.engine import EpochBatchSampler, TrainData
from gluondet.tasks.ssd import SSDTrainTransform

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd')
CLASSES = ('RBC', 'WBC', 'Platelets')


def dataset():
    """BCCD trainval if present, else 300 demo images; and its name."""
    if os.path.isdir(os.path.join(BCCD, 'BCCD')):
        return VOCDetection(os.path.join(BCCD, 'BCCD'), splits='trainval',
                            classes=CLASSES), 'BCCD trainval (640x480 JPEG)'
    root = os.path.join(tempfile.gettempdir(), 'gluondet-bench-dali')
    return DemoDetection('train', 300, root=root), 'demo train (256x256 JPEG)'


def check(batch, batch_size, size, num_class):
    """Problems with one batch, as strings (none: it is what the SSD task trains on)."""
    images, labels = [x.asnumpy() for x in batch]
    problems = []
    if images.shape != (batch_size, 3, size, size) or images.dtype != np.float32:
        problems.append('images %s %s' % (images.shape, images.dtype))
    if labels.ndim != 3 or labels.shape[0] != batch_size or labels.shape[2] != 6:
        return problems + ['labels %s' % (labels.shape,)]
    real = labels[labels[:, :, 4] >= 0]
    if not np.isfinite(images).all() or not np.isfinite(labels).all():
        problems.append('non-finite values')
    if len(real) and (real[:, :4].min() < -1e-3 or real[:, :4].max() > size + 1e-3
                      or (real[:, 2] <= real[:, 0]).any() or (real[:, 3] <= real[:, 1]).any()):
        problems.append('boxes outside the image or empty')
    if len(real) and (real[:, 4].max() >= num_class or (real[:, 4] != np.round(real[:, 4])).any()):
        problems.append('class ids %s' % np.unique(real[:, 4]))
    return problems


def timed_epoch(data, epoch, batch_size, size, num_class, failures):
    """Images/s of one epoch of ``data``, every batch checked."""
    start, count = time.perf_counter(), 0
    for batch in data.epoch(epoch):
        batch[0].wait_to_read()
        count += batch[0].shape[0]
        failures.extend(check(batch, batch_size, size, num_class))
    return count / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--size', type=int, default=300)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    require_dali()
    data, name = dataset()
    print('data: %s, %d images; SSD augmentation to %dx%d, batch %d, %d workers/threads'
          % (name, len(data), args.size, args.size, args.batch_size, args.workers))

    def sampler():
        return EpochBatchSampler(len(data), args.batch_size, args.seed)

    loader = TrainData(data.transform(SSDTrainTransform(args.size, args.size)),
                       Tuple(Stack(), Pad(pad_val=-1)), args.batch_size, args.workers,
                       args.seed, sampler=sampler())
    dali = DaliTrainData(SSDDaliAugment(args.size, args.size), data, sampler(), args.seed,
                         num_threads=args.workers)
    failures = []
    rates = {'loader': [], 'dali': []}
    for epoch in range(args.epochs + 1):    # alternating, so both see the same machine load
        for name, data_ in (('loader', loader), ('dali', dali)):
            rate = timed_epoch(data_, epoch, args.batch_size, args.size, data.num_class,
                               failures)
            if epoch:                       # epoch 0 warms up
                rates[name].append(rate)
    ours, fast = (statistics.median(rates[name]) for name in ('loader', 'dali'))
    ratios = [d / o for d, o in zip(rates['dali'], rates['loader'])]
    print('DataLoader (%d worker processes)  %7.1f images/s' % (args.workers, ours))
    print('DALI CPU   (%d threads)           %7.1f images/s' % (args.workers, fast))
    print('DALI / DataLoader: x%.2f (epoch by epoch: %s)'
          % (fast / ours, ', '.join('x%.2f' % r for r in ratios)))
    if failures:
        print('FAILED checks: %s' % '; '.join(sorted(set(failures))[:10]))
        sys.exit(1)


if __name__ == '__main__':
    main()
