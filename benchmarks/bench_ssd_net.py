"""SSD network pieces: gluondet vs GluonCV 0.10.5 with the same trained weights, in one run.

Both networks get the same weights, a trained model's: ``--params`` (a gluondet
training output ``PREFIX_best.params`` with its json beside it, e.g. ``make demo``'s
``demo_out/ssd_160_mobilenet0.5_custom_best.params``), else the script first trains
one with the demo recipe cut to ``--train-epochs`` epochs (``gluondet demo``'s
``ssd_160_mobilenet0.5_custom`` from scratch on the demo data: the recipe's 8-10 s
epochs on two idle cores, 6 minutes in all on a busy machine) and keeps it in
``--workdir`` for the next runs. gluondet loads the
file; GluonCV's network (its zoo's of that name, or for the demo network the same
architecture built with GluonCV's ``get_ssd``) gets the same arrays through gluondet's
key table (GluonCV and gluondet SSDs load each other's weights:
``tests/test_gluoncv_compat.py``). Inputs: ``--batch-size`` demo val images through
the validation transform at the network's size; ground truths: those images' boxes.
Both networks hybridized with static_alloc/static_shape. ``--random-weights NETWORK``
instead gives both sides the same random weights of a zoo network (the case where
almost every class score passes the threshold).

Three rows, each the median of alternating repetitions (machine load hits both alike):

- train step: forward in training mode + SSDMultiBoxLoss + backward on the staged
  batch with precomputed targets (no optimizer, no data loading);
- targets: the SSD training targets of the batch (GluonCV: its SSDTargetGenerator
  once per image, as its training transform does; gluondet: SSDTargetGenerator once
  on the padded batch);
- inference: forward + decoding + per-class NMS (both: score > 0.01, 400 before NMS,
  IoU 0.45, 100 kept).

Each row prints ``gluoncv / gluondet`` (above 1: gluondet is faster), and checks that
both sides give the same result (else exit status 1): train step: the raw class and
box predictions within 1e-4 (absolute, plus 1e-5 relative), the three losses within
1e-5 relative and the gradients' global norm within 1e-4 relative; targets: equal
class targets, box targets within 1e-5; inference: ``compare_detections`` (every
detection scoring >= 0.05 paired, scores within 1e-4, boxes within 0.01 px). Also
printed: the share of class scores above the 0.01 threshold (the 6-epoch demo model:
8%; random weights: 95%, the case where picking the top 400 before NMS
gains most).

    .venv/bin/python benchmarks/bench_ssd_net.py [--params PREFIX_best.params]
        [--workdir /tmp/bench_ssd_net] [--train-epochs 6] [--batch-size 8] [--repeat 7]
        [--random-weights ssd_512_mobilenet1.0_voc]
"""
import argparse
import os
import re
import sys
import time
import warnings

import numpy as np

import gluondet  # noqa: F401  (numpy aliases before mxnet)
import mxnet as mx
from mxnet import autograd

from common import Checks
from gluondet.losses import SSDMultiBoxLoss
from gluondet.nn import SSDTargetGenerator

SCORE_THRESH = 0.01
# a GluonCV symbol backbone's instance prefix (features.mobilenet0_conv0_weight)
_INSTANCE = re.compile(r'^features\.\w*?(mobilenet|resnetv1)\d+_')
# GluonCV's get_ssd arguments of gluondet networks GluonCV's zoo does not name (the demo's
# MobileNet 0.5 at strides 8, 16, 32: the pointwise ReLUs of blocks 4, 10 and 12)
GLUONCV_SPECS = {'ssd_160_mobilenet0.5_custom': dict(
    name='mobilenet0.5', base_size=160, features=['relu10_fwd', 'relu22_fwd', 'relu26_fwd'],
    filters=[], sizes=[24, 44, 76, 110], ratios=[[1, 2, 0.5]] * 3, steps=[8, 16, 32])}


def train_quickly(args):
    """The demo SSD recipe cut to ``--train-epochs`` epochs; its ``_best.params``."""
    from gluondet.demo import NETWORK, run_demo
    path = os.path.join(args.workdir, NETWORK + '_best.params')
    if os.path.exists(path):
        print('trained model: %s (from an earlier run; delete it to retrain)' % path)
        return path
    start = time.perf_counter()
    metrics = run_demo(args.workdir, 'ssd', epochs=args.train_epochs)
    print('trained %s with the demo recipe for %d epochs in %.0f s: demo val mAP %.3f; %s'
          % (NETWORK, args.train_epochs, time.perf_counter() - start, metrics['mAP'], path),
          flush=True)
    return path


def _gluoncv_key(key, table):
    """gluondet's table key of a GluonCV parameter name (instance prefix dropped; the
    backbone of ``get_ssd`` with a backbone name has no ``mobilenetN_`` prefix at all)."""
    plain = _INSTANCE.sub(r'features.\1_', key)
    if plain not in table and key.startswith('features.'):
        plain = 'features.mobilenet_' + key[len('features.'):]
    return plain


def random_net(network):
    """gluondet's ``network`` with random weights (MXNet's default initialization)."""
    from gluondet.model_zoo import get_model, get_model_info
    ours = get_model(network, pretrained_base=False)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ours.initialize()
    return ours, {'network': network, 'classes': tuple(ours.classes),
                  'data_shape': tuple(get_model_info(network).data_shape)}


def same_weight_nets(ours, info, x):
    """GluonCV's network with gluondet's ``ours``' arrays; both hybridized."""
    import gluoncv
    from gluoncv.model_zoo.ssd.ssd import get_ssd
    from gluondet.model_zoo.gluoncv_compat import ssd_key_table
    ours(x)         # random weights: shapes known
    network = info['network']
    kwargs = {'classes': info['classes']} if network.endswith('_custom') else {}
    if network in GLUONCV_SPECS:
        theirs = get_ssd(dataset='custom', pretrained=False, pretrained_base=False,
                         **GLUONCV_SPECS[network], **kwargs)
    else:
        theirs = gluoncv.model_zoo.get_model(network, pretrained=False, pretrained_base=False,
                                             **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        theirs.initialize()
    theirs(x)
    table = ssd_key_table(ours)
    source = ours._collect_params_with_prefix()    # pylint: disable=protected-access
    target = theirs._collect_params_with_prefix()  # pylint: disable=protected-access
    unmatched = [k for k in target if _gluoncv_key(k, table) not in table]
    if unmatched or len(target) != len(source):
        raise SystemExit('GluonCV %s does not take these weights: %d of its %d parameters '
                         'unmatched (%s), gluondet has %d' % (network, len(unmatched),
                                                              len(target), unmatched[:3],
                                                              len(source)))
    for key, param in target.items():
        param.set_data(source[table[_gluoncv_key(key, table)]].data())
    for net in (theirs, ours):
        net.hybridize(static_alloc=True, static_shape=True)
    return theirs


def val_batch(info, count):
    """``count`` demo val images at the network's input and their ``count x N x 6`` labels."""
    from gluondet.data import DemoDetection
    from gluondet.data.preprocess import SSDValTransform
    height, width = info['data_shape']
    data = DemoDetection('val', count, seed=0)
    transform = SSDValTransform(width, height)
    images, labels = [], []
    for i in range(count):
        image, label = data[i]
        img, label, size = transform(image, label)
        label = label.copy()
        label[:, (0, 2)] *= width / size[1]     # boxes at the network's input
        label[:, (1, 3)] *= height / size[0]
        images.append(img)
        labels.append(label)
    padded = -np.ones((count, max(len(lab) for lab in labels), 6), np.float32)
    for i, label in enumerate(labels):
        padded[i, :len(label)] = label
    return np.stack(images), padded


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
    """A timed step, and an untimed one returning predictions, losses and gradient norm."""
    def step(keep=False):
        with autograd.record():
            cls_pred, box_pred, _ = net(x)
            sums, cls_loss, box_loss = loss_fn([cls_pred], [box_pred], [cls_t], [box_t])
        autograd.backward(sums)
        mx.nd.waitall()
        if not keep:
            return None
        grads = [p.grad().asnumpy() for p in net.collect_params().values()
                 if p.grad_req != 'null']
        return dict(cls_pred=cls_pred.asnumpy(), box_pred=box_pred.asnumpy(),
                    losses=np.array([l.asnumpy().sum() for l in (sums[0], cls_loss[0],
                                                                 box_loss[0])]),
                    grad_norm=float(np.sqrt(sum((g.astype(np.float64) ** 2).sum()
                                                for g in grads))))
    return step


def _close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def check_train_step(checks, theirs, ours):
    pred_diff = max(np.abs(theirs[k] - ours[k]).max() for k in ('cls_pred', 'box_pred'))
    pred_ok = all(np.allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-4)
                  for k in ('cls_pred', 'box_pred'))
    loss_ok = all(_close(a, b, 1e-5) for a, b in zip(theirs['losses'], ours['losses']))
    grad_ok = _close(theirs['grad_norm'], ours['grad_norm'], 1e-4)
    print('  train step: predictions max diff %.2g; losses (sum, class, box) gluoncv %s '
          'gluondet %s; gradient norm %.6g vs %.6g'
          % (pred_diff, np.array2string(theirs['losses'], precision=6),
             np.array2string(ours['losses'], precision=6), theirs['grad_norm'],
             ours['grad_norm']))
    checks.check(pred_ok, 'train step: predictions differ by %.2g' % pred_diff)
    checks.check(loss_ok, 'train step: losses differ: %s vs %s' % (theirs['losses'],
                                                                  ours['losses']))
    checks.check(grad_ok, 'train step: gradient norms differ: %.8g vs %.8g'
                 % (theirs['grad_norm'], ours['grad_norm']))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--params', help='a gluondet SSD training output (json beside it)')
    parser.add_argument('--random-weights', metavar='NETWORK',
                        help="instead: this zoo network with random weights (MXNet's "
                             "initialization), the same on both sides")
    parser.add_argument('--workdir', default='/tmp/bench_ssd_net')
    parser.add_argument('--train-epochs', type=int, default=6,
                        help='epochs of the demo recipe when no --params is given')
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--repeat', type=int, default=7)
    args = parser.parse_args()
    from gluoncv.loss import SSDMultiBoxLoss as GluonCVLoss
    from gluoncv.model_zoo.ssd.target import SSDTargetGenerator as GluonCVTargets
    from gluondet.deploy import compare_detections

    checks = Checks()
    if args.random_weights:
        ours, info = random_net(args.random_weights)
        params = 'random (the same on both sides)'
    else:
        from gluondet.deploy.networks import load_network
        params = args.params or train_quickly(args)
        ours, info = load_network(params)
    images, labels = val_batch(info, args.batch_size)
    x = mx.nd.array(images)
    theirs = same_weight_nets(ours, info, x)
    boxes, ids = labels[:, :, :4], labels[:, :, 4:5]
    with autograd.train_mode():
        cls_pred, _, anchors = ours(x)
    probs = mx.nd.softmax(cls_pred, axis=-1).asnumpy()[:, :, 1:]
    our_targets = SSDTargetGenerator()
    our_targets.hybridize(static_alloc=True)
    their_targets = GluonCVTargets(negative_mining_ratio=-1)
    cls_t, box_t = our_targets(anchors, mx.nd.array(boxes), mx.nd.array(ids))

    def gluoncv_targets(keep=False):
        out = []
        for b, i in zip(boxes, ids):
            real = i[:, 0] >= 0
            out.append(their_targets(anchors, None, mx.nd.array(b[real][None]),
                                     mx.nd.array(i[real][None]))[:2])
        out[-1][0].wait_to_read()
        return [np.concatenate([o[k].asnumpy() for o in out]) for k in (0, 1)] if keep else None

    def gluondet_targets(keep=False):
        out = our_targets(anchors, mx.nd.array(boxes), mx.nd.array(ids))
        out[0].wait_to_read()
        return [o.asnumpy() for o in out] if keep else None

    def inference(net):
        def run(keep=False):
            out = net(x)
            out[0].wait_to_read()
            if out[0].shape != (args.batch_size, 100, 1):
                raise RuntimeError('not the inference graph: %s' % (out[0].shape,))
            return [o.asnumpy() for o in out] if keep else None
        return run

    print('%s (%s), batch %d, %dx%d, weights %s; median of %d; %.1f%% of class scores > %g'
          % (info['network'], ', '.join(info['classes']), args.batch_size,
             info['data_shape'][0], info['data_shape'][1], params, args.repeat,
             100 * (probs > SCORE_THRESH).mean(), SCORE_THRESH), flush=True)
    train_rows = (_train_step(theirs, GluonCVLoss(), x, cls_t, box_t),
                  _train_step(ours, SSDMultiBoxLoss(), x, cls_t, box_t))
    rows = [('train step', *train_rows), ('targets', gluoncv_targets, gluondet_targets),
            ('inference', inference(theirs), inference(ours))]
    for label, baseline, candidate in rows:
        if label == 'inference':
            # A hybridized GluonCV SSD keeps the graph of its first call (training);
            # set_nms clears it, as GluonCV's own validation does.
            theirs.set_nms(0.45, 400, 100)
        base, cand = _median_times([baseline, candidate], args.repeat)
        print('%-11s gluoncv %8.1f ms  gluondet %8.1f ms  ratio %.2f'
              % (label, base * 1e3, cand * 1e3, base / cand), flush=True)
        expected, got = baseline(keep=True), candidate(keep=True)
        if label == 'train step':
            check_train_step(checks, expected, got)
        elif label == 'targets':
            cls_same = np.array_equal(expected[0], got[0])
            box_diff = np.abs(expected[1] - got[1]).max()
            print('  targets: class targets %s, box targets max diff %.2g (%d positive anchors)'
                  % ('equal' if cls_same else 'DIFFER', box_diff, (got[0] > 0).sum()))
            checks.check(cls_same, 'targets: class targets differ')
            checks.check(box_diff <= 1e-5, 'targets: box targets differ by %.2g' % box_diff)
        else:
            result = compare_detections(expected, got)
            print('  inference: gluondet vs gluoncv: %s' % (result,))
            checks.check(result.ok, 'inference: detections differ: %s' % (result,))
    return checks.status()


if __name__ == '__main__':
    sys.exit(main())
