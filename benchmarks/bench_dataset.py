"""Dataset iteration speed on BCCD: images/s for decode + label through a DataLoader.

gluondet's VOCDetection (on the VOC xml) and COCODetection (on the COCO json)
against GluonCV 0.10.5's VOCDetection on the same folder, measured in the same
run (if GluonCV is not installed, the baseline is plain ``mx.image.imread`` of
the same files). Each loader reads the 292 images of BCCD trainval (640x480
JPEG) with ``gluon.data.DataLoader`` at 0 and 2 workers, the workers being
processes (the default) or threads (``thread_pool=True``: no pickling of the
decoded images); batches are plain lists, so only reading and labels are
timed. One warm-up epoch, then the median of ``--epochs`` timed epochs.
Construction times are printed too.

    .venv/bin/python benchmarks/bench_dataset.py [--epochs 5] [--batch-size 8]
"""
import argparse
import logging
import os
import statistics
import time

import mxnet as mx
from mxnet import gluon

from gluondet.data import COCODetection, VOCDetection

BCCD = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                    'datasets', 'bccd')
CLASSES = ('RBC', 'WBC', 'Platelets')


def collate(samples):
    """Keep the batch as a list: time reading, not stacking."""
    return samples


def gluoncv_voc():
    """GluonCV's VOCDetection on BCCD (it wants lower-case class names)."""
    from gluoncv.data import VOCDetection as GluonCVVOC

    class BCCD_VOC(GluonCVVOC):
        CLASSES = tuple(c.lower() for c in CLASSES)

    return BCCD_VOC(root=BCCD, splits=[('BCCD', 'trainval')])


def imread_baseline(paths):
    """``mx.image.imread`` of each path, with no label: the fallback baseline."""
    return gluon.data.SimpleDataset(paths).transform(lambda path: (mx.image.imread(path), None))


def builders():
    """``(name, build)`` for the baseline first, then the gluondet datasets."""
    ours = [
        ('gluondet VOCDetection', lambda: VOCDetection(
            os.path.join(BCCD, 'BCCD'), splits='trainval', classes=CLASSES)),
        ('gluondet COCODetection', lambda: COCODetection(
            annotation_file=os.path.join(BCCD, 'coco', 'instances_trainval.json'),
            image_root=os.path.join(BCCD, 'BCCD'), classes=CLASSES)),
    ]
    try:
        import gluoncv  # noqa: F401
        baseline = ('GluonCV VOCDetection', gluoncv_voc)
    except ImportError:
        voc = ours[0][1]()
        paths = [voc.image_path(i) for i in range(len(voc))]
        baseline = ('mx.image.imread', lambda: imread_baseline(paths))
    return [baseline] + ours


def images_per_second(dataset, num_workers, thread_pool, batch_size, epochs):
    loader = gluon.data.DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                                   thread_pool=thread_pool, batchify_fn=collate)
    for _ in loader:  # warm-up: page cache, worker start
        pass
    rates = []
    for _ in range(epochs):
        start = time.perf_counter()
        count = sum(len(batch) for batch in loader)
        mx.nd.waitall()  # mx.image.imread decodes asynchronously
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=5)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--workers', type=int, nargs='+', default=[0, 2])
    args = parser.parse_args()
    logging.getLogger('gluondet.data').setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.ERROR)  # GluonCV warns about the zero-area boxes

    datasets = []
    for name, build in builders():
        start = time.perf_counter()
        dataset = build()
        datasets.append((name, dataset, time.perf_counter() - start))
    print('BCCD trainval, %d images; batch %d; median of %d epochs; %s'
          % (len(datasets[0][1]), args.batch_size, args.epochs, time.strftime('%Y-%m-%d %H:%M')))
    print('%-24s %8s %10s %10s' % ('construction', 'seconds', '', 'ratio'))
    for name, _, seconds in datasets:
        print('%-24s %8.3f %10s %9.2fx' % (name, seconds, '', datasets[0][2] / seconds))
    print('%-24s %8s %10s %10s' % ('iteration', 'workers', 'images/s', 'ratio'))
    for workers in args.workers:
        for thread_pool in (False, True) if workers else (False,):
            baseline = None
            for name, dataset, _ in datasets:
                rate = images_per_second(dataset, workers, thread_pool, args.batch_size,
                                         args.epochs)
                baseline = baseline or rate
                print('%-24s %8s %10.1f %9.2fx' % (name, '%d%s' % (workers, 't' * thread_pool),
                                                   rate, rate / baseline))
    print("workers: processes; 't': threads (DataLoader(thread_pool=True))")


if __name__ == '__main__':
    main()
