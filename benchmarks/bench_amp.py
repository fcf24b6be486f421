"""Training step time with AMP (bfloat16 on this CPU) against float32, same net, data and
seed, in one run (issue 12).

    .venv/bin/python benchmarks/bench_amp.py [--steps 40] [--batch-size 8]

Each precision trains in a process of its own (MXNet's AMP converts a whole process) on
demo images: the SSD demo recipe's network (``ssd_160_mobilenet0.5_custom`` at 160 px)
and RetinaNet ResNet-18 at 256 px. Samples/s is the median of the per-step records after
the first quarter of the steps (the first steps build the graph). The check: both runs'
losses are finite and their first-step losses agree within 5% (else exit 1): bfloat16
changes the rounding, not the model.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..'))

NETS = {'ssd': ('ssd_160_mobilenet0.5_custom', 160),
        'retinanet': ('retinanet_resnet18_v1b_custom', 256)}


def worker(args):
    from gluondet.data import DemoDetection
    from gluondet.engine import TrainConfig, fit
    from gluondet.tasks import RetinaNetTask, SSDTask
    network, size = NETS[args.net]
    train = DemoDetection('train', num_images=args.batch_size * args.steps, image_size=size,
                          seed=0, root=args.demo)
    if args.net == 'ssd':
        task = SSDTask(network, train, train, size, pretrained_base=False, zoom=False)
    else:
        task = RetinaNetTask(network, train, train, short=size, max_size=size,
                             pretrained_base=False)
    config = TrainConfig(batch_size=args.batch_size, num_workers=0, epochs=1, lr=0.01,
                         lr_decay_epoch=(), log_interval=1, save_interval=0, val_interval=0,
                         seed=1, save_prefix=os.path.join(args.out, 'run'), amp=args.amp)
    fit(task, config)


def run(net, amp, args, folder):
    out = os.path.join(folder, '%s-%s' % (net, 'amp' if amp else 'fp32'))
    me = [sys.executable, os.path.abspath(__file__), '--worker', '--net', net, '--out', out,
          '--demo', os.path.join(folder, 'demo%s' % net), '--steps', str(args.steps),
          '--batch-size', str(args.batch_size)] + (['--amp'] if amp else [])
    done = subprocess.run(me, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit('%s run failed:\n%s' % (out, (done.stdout + done.stderr)[-3000:]))
    with open(os.path.join(out, 'run_metrics.jsonl')) as f:
        records = [r for r in map(json.loads, f) if r['type'] == 'train']
    speeds = [r['samples_per_sec'] for r in records]
    losses = [sum(r['losses'].values()) for r in records]
    return statistics.median(speeds[len(speeds) // 4:]), losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=40)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--net', default='ssd', help=argparse.SUPPRESS)
    parser.add_argument('--amp', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    parser.add_argument('--demo', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    from gluondet.threads import physical_cores
    print('%d physical cores; batch %d, %d steps' % (physical_cores(), args.batch_size,
                                                     args.steps))
    print('| network | float32 samples/s | bfloat16 samples/s | speed-up | first loss '
          'float32 / bfloat16 |')
    print('|---|---|---|---|---|')
    failed = []
    with tempfile.TemporaryDirectory() as folder:
        for net in NETS:
            (fp32, loss32), (bf16, loss16) = (run(net, amp, args, folder)
                                              for amp in (False, True))
            finite = all(map(_finite, loss32 + loss16))
            close = abs(loss16[0] - loss32[0]) <= 0.05 * abs(loss32[0])
            if not (finite and close):
                failed.append(net)
            print('| %s at %d px | %.2f | %.2f | %.2fx | %.4f / %.4f%s |' % (
                NETS[net][0], NETS[net][1], fp32, bf16, bf16 / fp32, loss32[0], loss16[0],
                '' if finite and close else ' (check failed)'), flush=True)
    if failed:
        raise SystemExit('bfloat16 losses are not finite or far from float32: %s'
                         % ', '.join(failed))


def _finite(value):
    return value == value and abs(value) != float('inf')


if __name__ == '__main__':
    main()
