"""Training input speed from MXNet RecordIO files against the image folder, on BCCD.

BCCD trainval (292 photographs, 640x480 JPEG) is converted with ``gluondet convert``'s
function into one IndexedRecordIO file (sequence mode, so record i is folder item i), in a
temporary folder. Both datasets then feed the same SSD training input: `SSDTrainTransform`
at 300x300 (colour jitter, zoom out, constrained crop, resize, flip, normalize) and the SSD
task's batchify (stack images, pad labels), through the engine's training loader
(`gluondet.engine.data.TrainData`: a seeded shuffle, augmentation seeded per sample, worker
processes) with the same batch size, workers and seed, so both do the same work. One
warm-up epoch (page cache, worker start), then ``--epochs`` timed epochs of each, taken in
turn, per number of workers: the median images/s of each and the ratio records / folder.

Before timing, every label of the records must equal the folder's, the first images must
decode to the same pixels and the first training batches must be equal: if not, it prints
what differs and exits with status 1.

    .venv/bin/python benchmarks/bench_records.py [--epochs 3] [--batch-size 16] [--workers 0 2]
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
import mxnet as mx

from gluondet.data import RecordDetection, VOCDetection
from gluondet.data.batchify import Pad, Stack, Tuple
from gluondet.engine.data import TrainData
from gluondet.tasks.ssd import SSDTrainTransform
from gluondet.tools.convert import convert

BCCD = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'shared', 'datasets', 'bccd')
CLASSES = ('RBC', 'WBC', 'Platelets')


def check_same(folder, records, pixels=8):
    """What differs between the two datasets (empty: nothing)."""
    problems = []
    if len(folder) != len(records):
        return ['%d images in the folder, %d in the records' % (len(folder), len(records))]
    for i in range(len(folder)):
        if folder.image_size(i) != records.image_size(i) or not np.array_equal(
                folder.label(i), records.label(i)):
            problems.append('item %d: %s vs %s' % (i, folder.image_path(i), records.image_path(i)))
    for i in range(min(pixels, len(folder))):
        if not np.array_equal(folder[i][0].asnumpy(), records[i][0].asnumpy()):
            problems.append('item %d: pixels differ' % i)
    return problems


def train_data(dataset, workers, batch_size, seed=0):
    """The engine's training loader (seeded shuffle, per-sample seeded augmentation) with
    the SSD task's transform and batchify."""
    return TrainData(dataset.transform(SSDTrainTransform(300, 300)),
                     Tuple(Stack(), Pad(pad_val=-1)), batch_size, workers, seed)


def epoch_rate(data, epoch):
    start = time.perf_counter()
    count = 0
    for images, _ in data.epoch(epoch):
        count += images.shape[0]
    mx.nd.waitall()
    return count / (time.perf_counter() - start)


def images_per_second(datasets, workers, batch_size, epochs):
    """Median images/s of each dataset over the same epochs (the same samples, the same
    augmentation), their epochs taken in turn so that a change in the machine's load falls
    on both."""
    loaders = [train_data(d, workers, batch_size) for d in datasets]
    for data in loaders:    # warm-up: page cache, worker start
        epoch_rate(data, 0)
    rates = [[] for _ in loaders]
    for epoch in range(1, epochs + 1):
        for data, rate in zip(loaders, rates):
            rate.append(epoch_rate(data, epoch))
    return [statistics.median(r) for r in rates]


def same_batches(datasets, batch_size):
    """Whether the first training batches of the datasets are equal (images and labels)."""
    batches = [next(train_data(d, 0, batch_size).epoch(0)) for d in datasets]
    return all(np.array_equal(a.asnumpy(), b.asnumpy())
               for other in batches[1:] for a, b in zip(batches[0], other))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--workers', type=int, nargs='+', default=[0, 2])
    args = parser.parse_args()
    logging.getLogger('gluondet').setLevel(logging.ERROR)
    logging.getLogger('gluondet.data').setLevel(logging.ERROR)  # BCCD's two zero-area boxes

    folder = VOCDetection(os.path.join(BCCD, 'BCCD'), splits='trainval', classes=CLASSES)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, 'bccd')
        start = time.perf_counter()
        convert(folder, prefix, partition_mode='sequence')
        seconds = time.perf_counter() - start
        path = prefix + '-fold-000-of-001-shard-00000-of-00001.rec'
        records = RecordDetection(path)
        size = os.path.getsize(path) / 2 ** 20
        problems = check_same(folder, records)
        if not problems and not same_batches((folder, records), args.batch_size):
            problems = ['the first training batches differ']
        if problems:
            print('records and folder differ (%d): %s' % (len(problems), '; '.join(problems[:5])))
            return 1
        print('BCCD trainval, %d images; converted in %.2f s to %.1f MiB; labels, pixels and '
              'first batches checked equal; SSD train transform 300x300, batch %d; median of %d '
              'epochs; %s'
              % (len(folder), seconds, size, args.batch_size, args.epochs,
                 time.strftime('%Y-%m-%d %H:%M')))
        print('%-10s %8s %10s %10s' % ('source', 'workers', 'images/s', 'ratio'))
        for workers in args.workers:
            rates = images_per_second((folder, records), workers, args.batch_size, args.epochs)
            for name, rate in zip(('folder', 'records'), rates):
                print('%-10s %8d %10.1f %9.2fx' % (name, workers, rate, rate / rates[0]))
        del records
    return 0


if __name__ == '__main__':
    sys.exit(main())
