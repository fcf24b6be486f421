"""SSD network pieces: gluondet vs GluonCV 0.10.5 on the same inputs, in one run.

Three measurements on the same random network weights shape (random init,
both hybridized with static_alloc/static_shape), each the median of
alternating repetitions so machine load hits both sides alike:

- train step: forward in training mode + SSDMultiBoxLoss + backward on a
  pre-staged batch with precomputed targets (no optimizer, no data loading);
- targets: the SSD training targets of a batch (GluonCV: its
  SSDTargetGenerator once per image, as its training transform does;
  gluondet: SSDTargetGenerator once on the padded batch);
- inference: forward + decoding + per-class NMS.

Each line prints ``gluoncv / gluondet`` (above 1: gluondet is faster).

    .venv/bin/python benchmarks/bench_ssd_net.py [--network ssd_512_mobilenet1.0_voc]
        [--batch-size 4] [--size 512] [--repeat 7]
"""
import argparse
import time
import warnings

import mxnet as mx
import numpy as np
from mxnet import autograd

from gluondet.losses import SSDMultiBoxLoss
from gluondet.model_zoo import get_model
from gluondet.nn import SSDTargetGenerator


def _nets(name):
    import gluoncv
    theirs = gluoncv.model_zoo.get_model(name, pretrained=False, pretrained_base=False)
    ours = get_model(name, pretrained_base=False)
    for net in (theirs, ours):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            net.initialize()
        net.hybridize(static_alloc=True, static_shape=True)
    return theirs, ours


def _ground_truths(rng, batch, size, per_image=6):
    boxes = -np.ones((batch, per_image, 4), np.float32)
    ids = -np.ones((batch, per_image, 1), np.float32)
    for i in range(batch):
        count = rng.randint(1, per_image + 1)
        xy = rng.uniform(0, size * 0.7, (count, 2))
        boxes[i, :count] = np.concatenate([xy, np.minimum(xy + rng.uniform(16, size * 0.5,
                                                                           (count, 2)), size)], 1)
        ids[i, :count, 0] = rng.randint(0, 20, count)
    return boxes, ids


def _median_times(functions, repeat):
    """Median seconds of each function, run alternately ``repeat`` times after one warm-up."""
    for fn in functions:
        fn()
    times = [[] for _ in functions]
    for _ in range(repeat):
        for fn, spent in zip(functions, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def _train_step(net, loss_fn, x, cls_t, box_t):
    def step():
        with autograd.record():
            cls_pred, box_pred, _ = net(x)
            sums, _, _ = loss_fn([cls_pred], [box_pred], [cls_t], [box_t])
        autograd.backward(sums)
        mx.nd.waitall()
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='ssd_512_mobilenet1.0_voc')
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--size', type=int, default=512)
    parser.add_argument('--repeat', type=int, default=7)
    args = parser.parse_args()
    from gluoncv.loss import SSDMultiBoxLoss as GluonCVLoss
    from gluoncv.model_zoo.ssd.target import SSDTargetGenerator as GluonCVTargets

    rng = np.random.RandomState(0)
    theirs, ours = _nets(args.network)
    x = mx.nd.array(rng.uniform(-2, 2, (args.batch_size, 3, args.size, args.size)))
    with autograd.train_mode():
        anchors = ours(x)[2]
    boxes, ids = _ground_truths(rng, args.batch_size, args.size)
    our_targets = SSDTargetGenerator()
    our_targets.hybridize(static_alloc=True)
    their_targets = GluonCVTargets(negative_mining_ratio=-1)
    cls_t, box_t = our_targets(anchors, mx.nd.array(boxes), mx.nd.array(ids))

    def gluoncv_targets():
        for b, i in zip(boxes, ids):
            keep = i[:, 0] >= 0
            out = their_targets(anchors, None, mx.nd.array(b[keep][None]),
                                mx.nd.array(i[keep][None]))
        out[0].wait_to_read()

    def gluondet_targets():
        our_targets(anchors, mx.nd.array(boxes), mx.nd.array(ids))[0].wait_to_read()

    def inference(net):
        def run():
            ids = net(x)[0]
            ids.wait_to_read()
            assert ids.shape == (args.batch_size, 100, 1), 'not the inference graph'
        return run

    # A hybridized GluonCV SSD keeps the graph of its first call (here: training);
    # set_nms clears it, as GluonCV's own validation does. gluondet retraces by itself.

    rows = [
        ('train step', _train_step(theirs, GluonCVLoss(), x, cls_t, box_t),
         _train_step(ours, SSDMultiBoxLoss(), x, cls_t, box_t)),
        ('targets', gluoncv_targets, gluondet_targets),
        ('inference', inference(theirs), inference(ours)),
    ]
    print('%s, batch %d, %dx%d, median of %d' % (args.network, args.batch_size, args.size,
                                                  args.size, args.repeat))
    for label, baseline, candidate in rows:
        if label == 'inference':
            theirs.set_nms(0.45, 400, 100)
        base, cand = _median_times([baseline, candidate], args.repeat)
        print('%-11s gluoncv %8.1f ms  gluondet %8.1f ms  ratio %.2f'
              % (label, base * 1e3, cand * 1e3, base / cand))


if __name__ == '__main__':
    main()
