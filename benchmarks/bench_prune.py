"""Pruning on BCCD (issue 13): parameters, multiply-adds, CPU latency and test mAP of a trained
detector before pruning, after ``gluondet prune``, and after retraining with ``--pruned-model``.

For each stage:

- parameters: of the convolution, dense and norm layers (``gluondet.tools.prune.count_params``);
- multiply-adds: of one image through the convolutions and dense layers of the inference graph
  at the model's input size (SSD: its fixed size; Faster R-CNN and RetinaNet: ``short x
  max_size`` padded to the model's multiple; dense layers over a Faster R-CNN's regions count
  once per region) (``count_macs``);
- latency: the median over ``--repeat`` runs (after 2 warm-up runs) of the hybridized network
  on one random image of that size, batch 1, in MXNet on the CPU (``--threads`` OpenMP
  threads), detections included; the stages' models run in turns, so that other load on the
  machine falls on each alike;
- mAP: VOC07 mAP on BCCD's test split through ``gluondet evaluate``'s function
  (``deploy.commands.evaluate_model``), the evaluation every other figure uses.

The trained model comes from ``--model`` (a training output ``PREFIX_best.params``), or, with
``--train-epochs N``, is trained here by the BCCD recipe of the detector (``model_zoo/bccd_*.sh``'s
flags) cut to N epochs. The retraining runs the same recipe's script on BCCD trainval with
``--pruned-model`` for ``--retrain-epochs`` epochs at ``--retrain-lr`` (cosine, no warm-up),
validating on test at its end; 0 skips it, ``--retrained PATH`` measures a model retrained
before. Results go to ``--out``/``results.json`` and a
markdown table on stdout.

Before pruning it prints how weak the trained model's weakest filters are, as the prune
scores them (``--normalizer``: with ``max``, each filter's L2 norm over its layer's
largest): per prunable layer its weakest filter's score, the lowest of any layer and the
median layer's; and per channel group (the layers that share channels, their scores merged
by ``--eq``) the lowest, below which ``-pth`` removes nothing.

    .venv/bin/python benchmarks/bench_prune.py --detector retinanet \
        --model /tmp/bccd_ret/retinanet_resnet18_v1b_custom_best.params --out /tmp/prune_ret \
        [--pth 0.1 --nf 16 --pg 8 --eq union --normalizer max] [--retrain-epochs 3]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BCCD = os.path.join(os.path.dirname(ROOT), 'shared', 'datasets', 'bccd', 'BCCD')
CLASSES = 'RBC,WBC,Platelets'

# the recipes of model_zoo/bccd_*.sh: script, its network and size flags, training flags
RECIPES = {
    'ssd': ('train_ssd.py', 'ssd_160_mobilenet0.5_custom',
            ['--network', 'mobilenet0.5', '--data-shape', '320'],
            ['--batch-size', '8', '--lr', '0.01', '--lr-mode', 'cosine', '--lr-warmup', '2']),
    'retinanet': ('train_retinanet.py', 'retinanet_resnet18_v1b_custom',
                  ['--network', 'resnet18_v1b', '--resize', '320', '--max-size', '427',
                   '--anchor-scales', '0.5,0.63,0.79', '--fpn-channels', '128',
                   '--head-channels', '64', '--head-norm', 'group', '--head-init', 'msra',
                   '--focal-alpha', '0.5', '--focal-gamma', '1'],
                  ['--batch-size', '4', '--lr', '0.02', '--lr-mode', 'cosine', '--lr-warmup',
                   '100', '--wd', '1e-4']),
    'faster_rcnn': ('train_faster_rcnn.py', 'faster_rcnn_fpn_resnet18_v1b_custom',
                    ['--network', 'resnet18_v1b', '--use-fpn', '--image-short', '320',
                     '--image-max-size', '427'],
                    ['--batch-size', '4', '--lr', '0.02', '--lr-mode', 'cosine',
                     '--lr-warmup', '100', '--wd', '1e-4']),
}


def _train(args, prefix, epochs, extra):
    """Run the detector's recipe script for ``epochs`` on BCCD; returns its best params."""
    script, name, network, training = RECIPES[args.detector]
    command = [sys.executable, os.path.join(ROOT, 'scripts', script)] + network + [
        '--dataset', 'voc', '--dataset-root', args.dataset_root, '--classes', CLASSES,
        '--train-split', 'trainval', '--val-split', 'test', '--no-pretrained-base', '--gpus',
        '', '-j', '0', '--epochs', str(epochs), '--val-interval', str(epochs),
        '--save-interval', '0', '--log-interval', '10', '--seed', '1', '--save-prefix',
        prefix] + training + extra
    print('$ ' + ' '.join(command), flush=True)
    start = time.time()
    subprocess.run(command, check=True, cwd=ROOT)
    print('trained in %.1f min' % ((time.time() - start) / 60), flush=True)
    return prefix + name + '_best.params'


def _measure(params, args):
    """The figures of one model file but its latency."""
    from gluondet.deploy.commands import evaluate_model
    from gluondet.deploy.networks import load_network
    from gluondet.tools.prune import count_macs, count_params
    net, info = load_network(params)
    shape = tuple(info['data_shape'])
    result = evaluate_model(params, 'voc', dataset_root=args.dataset_root, split='test',
                            progress=False)
    return {'params': count_params(net), 'macs': count_macs(net, shape), 'mAP': result['mAP'],
            'input': list(shape), 'file': params}


def weakest_filters(params, args):
    """Each prunable layer's and each channel group's weakest filter score, as ``gluondet
    prune`` scores them (recorded from its own decision): ``{'layer': [...], 'group':
    [...]}``."""
    import numpy as np
    from gluondet.deploy.networks import load_network
    from gluondet.tools import prune
    net, info = load_network(params)
    lowest = {'layer': [], 'group': []}
    score, decide = prune.filter_scores, prune._kept    # pylint: disable=protected-access

    def scoring(weight, normalizer):
        scores = score(weight, normalizer)
        lowest['layer'].append(float(np.min(scores)))
        return scores

    def deciding(scores, *rest):
        lowest['group'].append(float(np.min(scores)))
        return decide(scores, *rest)
    prune.filter_scores, prune._kept = scoring, deciding
    try:
        prune.prune_net(net, tuple(info['data_shape']), args.normalizer, args.eq, args.pth,
                        args.nf, args.pg)
    finally:
        prune.filter_scores, prune._kept = score, decide
    return lowest


def _latencies(stages, args):
    """Median latency (ms) of each stage's model, measured in turns (``--repeat`` rounds, a
    run of each model per round, after 2 warm-up runs each), so that other load on the
    machine falls on all alike."""
    import mxnet as mx
    import numpy as np
    from gluondet.deploy.networks import load_network
    runs = {}
    for stage, figures in stages.items():
        net, _ = load_network(figures['file'])
        x = mx.nd.array(np.random.RandomState(0).uniform(-2, 2, (1, 3) + tuple(figures['input'])))
        runs[stage] = (net, x, [])

    def once(net, x):
        mx.nd.waitall()
        start = time.perf_counter()
        for output in net(x):
            output.wait_to_read()
        return time.perf_counter() - start
    for net, x, _ in runs.values():
        once(net, x), once(net, x)
    for _ in range(args.repeat):
        for net, x, times in runs.values():
            times.append(once(net, x))
    for stage, (_, _, times) in runs.items():
        stages[stage]['latency_ms'] = 1000 * statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--detector', required=True, choices=sorted(RECIPES))
    parser.add_argument('--model', help="a trained model's PREFIX_best.params")
    parser.add_argument('--train-epochs', type=int, default=0,
                        help='without --model: train one by the recipe for this many epochs')
    parser.add_argument('--out', required=True, help='folder for the models and results.json')
    parser.add_argument('--dataset-root', default=BCCD, help='the BCCD VOC folder')
    parser.add_argument('--normalizer', default='max')
    parser.add_argument('--eq', default='union')
    parser.add_argument('--pth', type=float, default=0.1)
    parser.add_argument('--nf', type=int, default=16)
    parser.add_argument('--pg', type=int, default=8)
    parser.add_argument('--retrain-epochs', type=int, default=3)
    parser.add_argument('--retrain-lr', type=float, default=None,
                        help="default: a fifth of the recipe's")
    parser.add_argument('--retrained', help='measure this retrained model instead of retraining')
    parser.add_argument('--repeat', type=int, default=20, help='latency runs (median)')
    parser.add_argument('--threads', type=int, default=1, help='OpenMP threads')
    args = parser.parse_args(argv)
    os.environ['OMP_NUM_THREADS'] = str(args.threads)
    sys.path.insert(0, ROOT)
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out) + os.sep
    model = args.model
    if model is None:
        if not args.train_epochs:
            parser.error('give --model or --train-epochs')
        model = _train(args, out + 'base_', args.train_epochs, [])
    from gluondet.tools.prune import prune_model
    weakest = weakest_filters(model, args)
    layers, groups = weakest['layer'], weakest['group']
    print('weakest filter score (normalizer %s) of %d prunable layers: lowest %.2f, median '
          'layer %.2f; of %d channel groups (%s): median group %.2f, lowest %.2f, so -pth '
          'below it removes nothing' % (args.normalizer, len(layers), min(layers),
                                        statistics.median(layers), len(groups), args.eq,
                                        statistics.median(groups), min(groups)), flush=True)
    stages = {'trained': _measure(model, args)}
    print(json.dumps(stages['trained']), flush=True)
    pruned = prune_model(model, out + 'pruned', args.normalizer, args.eq, args.pth, args.nf,
                         args.pg)['params']
    stages['pruned'] = _measure(pruned, args)
    print(json.dumps(stages['pruned']), flush=True)
    if args.retrained:
        stages['retrained'] = _measure(args.retrained, args)
    elif args.retrain_epochs:
        training = RECIPES[args.detector][3]
        lr = args.retrain_lr or float(training[training.index('--lr') + 1]) / 5
        for old in glob.glob(out + 'retrained_*'):
            os.remove(old)
        retrained = _train(args, out + 'retrained_', args.retrain_epochs,
                           ['--pruned-model', pruned, '--lr', str(lr), '--lr-warmup', '0'])
        stages['retrained'] = _measure(retrained, args)
        print(json.dumps(stages['retrained']), flush=True)
    _latencies(stages, args)
    with open(out + 'results.json', 'w') as f:
        json.dump({'args': vars(args), 'stages': stages}, f, indent=1)
    print('| %s | parameters | multiply-adds | CPU latency (batch 1) | test mAP |' % args.detector)
    print('|---|---|---|---|---|')
    for stage, m in stages.items():
        print('| %s | %.2fM | %.2fG | %.1f ms | %.4f |' % (stage, m['params'] / 1e6,
                                                         m['macs'] / 1e9, m['latency_ms'],
                                                         m['mAP']))


if __name__ == '__main__':
    main()
