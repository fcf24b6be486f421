"""RetinaNet on the CPU: gluondet's ``retinanet_resnet50_v1b_coco`` against torchvision's
``retinanet_resnet50_fpn``, the network a PyTorch user would pick, in one run.

Both networks are ResNet-50 + FPN P3-P7 RetinaNets with 80 classes, random weights (no
pretrained backbone: torchvision then uses plain BatchNorm and trains every layer; gluondet
gets BatchNorm with batch statistics, everything trained), the same ``--size`` square
inputs (a multiple of 128, so neither pads or resizes: torchvision's transform gets
``min_size = max_size = size``), the same synthetic images and boxes, the same thread count
(``--threads``: OMP_NUM_THREADS before MXNet loads, ``torch.set_num_threads``, ONNX
Runtime's ``intra_op_num_threads``). Each side runs in its own process, in turn, and the
printed figure of each is the median over ``--rounds``:

- training: samples/s over ``--steps`` SGD steps (lr 0.01, momentum 0.9, wd 1e-4) of batch
  ``--batch`` after ``--warmup`` steps; gluondet's step is what its engine runs (targets on
  the device, ``RetinaNetLoss``, ``Trainer.step``), hybridized with static_alloc/shape;
  torchvision's is ``loss = sum(model(images, targets).values())``, backward, step;
- inference at batch 1: median latency of torchvision eager (``model.eval()``,
  ``torch.no_grad()``), gluondet in MXNet (hybridized) and gluondet's ONNX export in ONNX
  Runtime (ORT_ENABLE_ALL).

Ratios printed: gluondet / torchvision training samples/s (goal >= 1.0), torchvision
latency / ONNX Runtime latency (goal >= 1.5), MXNet latency / ONNX Runtime latency.

torchvision lives in its own environment (``--torch-python``, made by ``make
bench-torch-venv``: torch 2.14.1 and torchvision 0.29.1, several GB), not in ``make venv``.

    .venv/bin/python benchmarks/bench_retinanet.py [--size 512] [--batch 2] [--steps 5]
        [--warmup 2] [--repeat 7] [--threads 2] [--rounds 1] [--torch-python .venv-torch/bin/python]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NETWORK = 'retinanet_resnet50_v1b_coco'
NUM_CLASSES = 80
LR, MOMENTUM, WD = 0.01, 0.9, 1e-4


def _data(args):
    """``(images B x 3 x S x S float32 normalized, boxes list of N x 4, labels list of N)``,
    the same arrays for both sides (seeded)."""
    import numpy as np
    rng = np.random.RandomState(0)
    images = rng.normal(0, 1, (args.batch, 3, args.size, args.size)).astype(np.float32)
    boxes, labels = [], []
    for _ in range(args.batch):
        n = 6
        xy = rng.uniform(0, args.size * 0.7, (n, 2))
        wh = rng.uniform(args.size * 0.05, args.size * 0.3, (n, 2))
        boxes.append(np.concatenate([xy, np.minimum(xy + wh, args.size - 1)], 1).astype(
            np.float32))
        labels.append(rng.randint(0, NUM_CLASSES, n))
    return images, boxes, labels


def _time(step, warmup, count):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


# ---------------------------------------------------------------- gluondet (this venv)

def _gluondet_net():
    import mxnet as mx
    from gluondet.model_zoo import get_model
    net = get_model(NETWORK, pretrained_base=False, norm_kwargs={'use_global_stats': False})
    net.initialize(mx.init.Xavier(rnd_type='gaussian', factor_type='out', magnitude=2))
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def run_gluondet_train(args):
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon
    from gluondet.losses import RetinaNetLoss
    from gluondet.nn import AnchorTargetGenerator
    images, boxes, labels = _data(args)
    net = _gluondet_net()
    x = mx.nd.array(images)
    label = np.full((args.batch, max(len(b) for b in boxes), 6), -1, np.float32)
    for i, (b, l) in enumerate(zip(boxes, labels)):
        label[i, :len(b), :4], label[i, :len(b), 4], label[i, :len(b), 5] = b, l, 0
    label = mx.nd.array(label)
    targets = AnchorTargetGenerator(0.5, net.box_decoder.stds, ignore_thresh=0.4)
    loss = RetinaNetLoss()
    with autograd.record():
        net(x)
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': LR, 'momentum': MOMENTUM, 'wd': WD})

    def step():
        with autograd.record():
            cls_pred, box_pred, anchors = net(x)
            with autograd.pause():
                cls_t, box_t = targets(anchors, label[:, :, :4], label[:, :, 4:5])
            out = loss([cls_pred], [box_pred], [cls_t], [box_t])
            total = out['loss_cls'][0].sum() + out['loss_box'][0].sum()
        total.backward()
        trainer.step(1)
        mx.nd.waitall()
        return float(total.asscalar())

    times = _time(step, args.warmup, args.steps)
    return {'samples_per_s': args.batch * len(times) / sum(times), 'loss': step()}


def run_gluondet_infer(args):
    import mxnet as mx
    import onnxruntime as ort
    from gluondet.deploy import export_onnx
    images, _, _ = _data(args)
    net = _gluondet_net()
    x = mx.nd.array(images[:1])

    def mxnet_call():
        net(x)[0].wait_to_read()

    mxnet = _time(mxnet_call, 2, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'retinanet.onnx')
        export_onnx(net, path, (args.size, args.size))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
        feed = {'data': images[:1]}
        onnx = _time(lambda: session.run(None, feed), 2, args.repeat)
    return {'mxnet_s': statistics.median(mxnet), 'onnxruntime_s': statistics.median(onnx)}


# ---------------------------------------------------------------- torchvision (its venv)

def _torch_model(args):
    import torch
    import torchvision
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    return torchvision.models.detection.retinanet_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=NUM_CLASSES, min_size=args.size,
        max_size=args.size)


def _torch_inputs(args):
    import torch
    images, boxes, labels = _data(args)
    # torchvision normalizes inside the model: give it the images it turns into ``images``
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    tensors = [torch.from_numpy(image) * std + mean for image in images]
    targets = [{'boxes': torch.from_numpy(b), 'labels': torch.from_numpy(l).long()}
               for b, l in zip(boxes, labels)]
    return tensors, targets


def run_torch_train(args):
    import torch
    model = _torch_model(args)
    model.train()
    images, targets = _torch_inputs(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)

    def step():
        losses = model(images, targets)
        total = sum(losses.values())
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        return float(total)

    times = _time(step, args.warmup, args.steps)
    return {'samples_per_s': args.batch * len(times) / sum(times), 'loss': step()}


def run_torch_infer(args):
    import torch
    model = _torch_model(args)
    model.eval()
    images, _ = _torch_inputs(args)

    def call():
        with torch.no_grad():
            model(images[:1])

    return {'torch_s': statistics.median(_time(call, 2, args.repeat))}


# ---------------------------------------------------------------- the run

def _child(python, role, args):
    argv = [python, os.path.abspath(__file__), '--role', role] + [
        '--%s=%s' % (k.replace('_', '-'), v) for k, v in vars(args).items()
        if k not in ('role', 'torch_python', 'rounds')]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=ROOT)
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit('%s failed:\n%s' % (role, out.stderr[-3000:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--size', type=int, default=512)
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeat', type=int, default=7)
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--torch-python', default=os.path.join(ROOT, '.venv-torch', 'bin',
                                                                'python'))
    parser.add_argument('--role', default='', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(globals()['run_' + args.role.replace('-', '_')](args)))
        return
    if args.size % 128:
        raise SystemExit('--size must be a multiple of 128 (neither network then pads)')
    if not os.path.exists(args.torch_python):
        raise SystemExit('no torchvision environment at %s: make bench-torch-venv'
                         % args.torch_python)
    results = {}
    for _ in range(args.rounds):
        for role, python in (('gluondet-train', sys.executable),
                             ('torch-train', args.torch_python),
                             ('gluondet-infer', sys.executable),
                             ('torch-infer', args.torch_python)):
            out = _child(python, role, args)
            print(role, json.dumps(out), flush=True)
            for key, value in out.items():
                results.setdefault(key + '/' + role, []).append(value)
    med = {k: statistics.median(v) for k, v in results.items()}
    train = med['samples_per_s/gluondet-train'] / med['samples_per_s/torch-train']
    torch_s, onnx_s = med['torch_s/torch-infer'], med['onnxruntime_s/gluondet-infer']
    print('%s vs torchvision retinanet_resnet50_fpn, %dx%d, batch %d, %d threads, random '
          'weights:' % (NETWORK, args.size, args.size, args.batch, args.threads))
    print('  training: gluondet %.3f samples/s, torchvision %.3f: ratio %.2f (goal >= 1.0)'
          % (med['samples_per_s/gluondet-train'], med['samples_per_s/torch-train'], train))
    print('  inference, batch 1: torchvision eager %.1f ms, MXNet %.1f ms, ONNX Runtime %.1f ms;'
          ' torchvision / ONNX Runtime %.2f (goal >= 1.5), MXNet / ONNX Runtime %.2f'
          % (torch_s * 1e3, med['mxnet_s/gluondet-infer'] * 1e3, onnx_s * 1e3, torch_s / onnx_s,
             med['mxnet_s/gluondet-infer'] / onnx_s))


if __name__ == '__main__':
    main()
