"""Training throughput on one machine: 2 Horovod ranks and 2 parameter-server workers
against 1 process with every core, the same SSD, data and global batch (issue 11).

    .venv/bin/python benchmarks/bench_distributed.py [--steps 24] [--batch-size 16]

Each run trains ``ssd_300_mobilenet0.25_custom`` at 256 px on demo images; samples/s is
the median of rank 0's per-step records after the first quarter of the steps (the first
steps build the graph). The check: the 2-process runs end with identical parameters on
both processes (else exit 1). The ratios are against the 1-process run of the same run.
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


def worker(args):
    from gluondet.data import DemoDetection
    from gluondet.engine import TrainConfig, fit
    from gluondet.tasks import SSDTask
    train = DemoDetection('train', num_images=args.batch_size * args.steps, image_size=256,
                          seed=0, root=args.demo)
    task = SSDTask('ssd_300_mobilenet0.25_custom', train, train, 256, pretrained_base=False)
    config = TrainConfig(batch_size=args.batch_size, num_workers=0, epochs=1, lr=0.02,
                         lr_decay_epoch=(), log_interval=1, save_interval=0, val_interval=0,
                         seed=1, save_prefix=os.path.join(args.out, 'run'),
                         horovod=args.mode == 'horovod',
                         kv_store='dist_sync' if args.mode == 'kvstore' else 'device')
    result = fit(task, config)
    result.net.save_parameters(os.path.join(args.out, 'rank%d.params' % result.rank))


def run(mode, args, folder):
    out = os.path.join(folder, mode)
    me = [sys.executable, os.path.abspath(__file__), '--worker', '--mode', mode, '--out', out,
          '--demo', os.path.join(folder, 'demo'), '--steps', str(args.steps),
          '--batch-size', str(args.batch_size)]
    prefix = {'one': [],
              'horovod': [os.path.join(os.path.dirname(sys.executable), 'horovodrun'), '--gloo',
                          '-np', '2', '-H', 'localhost:2'],
              'kvstore': [sys.executable, '-m', 'gluondet', 'launch', '-n', '2', '-s', '1',
                          '--']}[mode]
    done = subprocess.run(prefix + me, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit('%s run failed:\n%s' % (mode, (done.stdout + done.stderr)[-3000:]))
    with open(os.path.join(out, 'run_metrics.jsonl')) as f:
        speeds = [r['samples_per_sec'] for r in map(json.loads, f) if r['type'] == 'train']
    return out, statistics.median(speeds[len(speeds) // 4:])


def identical(out):
    import mxnet as mx
    a, b = (mx.nd.load(os.path.join(out, 'rank%d.params' % r)) for r in range(2))
    return sorted(a) == sorted(b) and all((a[k] == b[k]).asnumpy().all() for k in a)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=24)
    parser.add_argument('--batch-size', type=int, default=16, help='global batch')
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--mode', default='one', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    parser.add_argument('--demo', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    from gluondet.threads import physical_cores
    print('%d physical cores; global batch %d, %d steps, SSD mobilenet0.25 at 256 px'
          % (physical_cores(), args.batch_size, args.steps))
    failed = False
    with tempfile.TemporaryDirectory() as folder:
        from gluondet.data import DemoDetection
        DemoDetection('train', num_images=args.batch_size * args.steps, image_size=256, seed=0,
                      root=os.path.join(folder, 'demo'))
        base = None
        print('| run | OpenMP threads per process | samples/s | vs 1 process |')
        print('|---|---|---|---|')
        for mode, name in (('one', '1 process'), ('horovod', '2 Horovod ranks (Gloo)'),
                           ('kvstore', '2 parameter-server workers, 1 server')):
            out, speed = run(mode, args, folder)
            base = base or speed
            threads = physical_cores() // (1 if mode == 'one' else 2)
            check = '' if mode == 'one' or identical(out) else ' (ranks differ!)'
            failed = failed or bool(check)
            print('| %s | %d | %.2f | %.2fx%s |' % (name, max(1, threads), speed, speed / base,
                                                     check), flush=True)
    if failed:
        raise SystemExit('the processes of a run ended with different parameters')


if __name__ == '__main__':
    main()
