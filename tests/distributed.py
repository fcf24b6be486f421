"""Starting the processes of a distributed test: ``horovodrun`` and ``gluondet launch``."""
import json
import os
import re
import subprocess
import sys
import time

import mxnet as mx
import numpy as np
import pytest

from gluondet.data import DemoDetection

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, 'distributed_run.py')
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), 'horovodrun')


def need_horovod():
    try:
        import horovod.mxnet  # noqa: F401
    except ImportError as err:
        pytest.skip('horovod.mxnet is not installed (make venv builds it): %s' % err)


def demo_root(folder):
    """The driver's demo images, written once here (its ranks only read them)."""
    DemoDetection('train', num_images=32, image_size=128, seed=0, root=folder)
    DemoDetection('val', num_images=8, image_size=128, seed=0, root=folder)
    return folder


def horovodrun(command, cwd, np_=2, timeout=600, env=None):
    """``horovodrun --gloo -np 2 -H localhost:2 COMMAND``: (returncode, output, seconds)."""
    argv = [HOROVODRUN, '--gloo', '-np', str(np_), '-H', 'localhost:%d' % np_] + command
    return _run(argv, cwd, timeout, env)


SIGNS = re.compile(r'Error|error|Abort|abort|terminate|Check failed|Traceback|Signal|signal|Killed'
                   r'|Terminated|Segmentation|core dumped|warn|Thread 0x|Current thread|File "')


def failure(log, lines=80):
    """What a failed run's assertion shows: the lines of ``log`` with a sign of trouble (an
    error, an abort, a signal) first, then its end; a long log's middle is left out."""
    signs = [line for line in log.splitlines() if SIGNS.search(line)][:lines]
    return '\n'.join(['-- lines with errors or signals:'] + signs + ['-- the end:', log[-1500:]])


def _run(argv, cwd, timeout, env=None):
    tic = time.time()
    out = subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, **(env or {})))
    return out.returncode, out.stdout + out.stderr, time.time() - tic


def driver_command(tmp_path, name, spec):
    """``python tests/distributed_run.py SPEC`` with ``spec`` written to ``tmp_path``."""
    path = str(tmp_path / (name + '.json'))
    with open(path, 'w') as f:
        json.dump(spec, f)
    return [sys.executable, DRIVER, path]


def run_spec(task, out, save_prefix, **config):
    """A driver spec for ``task`` writing into ``out``."""
    defaults = dict(num_workers=0, lr=0.01, lr_decay_epoch=[], save_interval=0,
                    val_interval=0, log_interval=1, seed=5)
    return {'task': task, 'out': str(out),
            'config': dict(defaults, save_prefix=str(save_prefix), **config)}


def load_params(path):
    return {k: v.asnumpy() for k, v in mx.nd.load(str(path)).items()}


def max_difference(a, b):
    assert sorted(a) == sorted(b)
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def identical(a, b):
    return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


def rank_report(out, rank):
    with open(os.path.join(str(out), 'rank%d.json' % rank)) as f:
        return json.load(f)


def launch(command, cwd, workers=2, servers=1, timeout=600, env=None):
    """``gluondet launch -n 2 -s 1 -- COMMAND``: (returncode, output, seconds)."""
    argv = [sys.executable, '-m', 'gluondet', 'launch', '-n', str(workers), '-s', str(servers),
            '--'] + command
    return _run(argv, cwd, timeout, env)


def check_two_process_ssd_run(out, demo):
    """The checks of a 2-process SSD run of the driver (``val_interval`` 1, 32 images,
    global batch 8): both ranks end bit-identical with the same metrics, only rank 0 wrote
    files, and the gathered validation is one process's on the same weights."""
    from distributed_run import make_task
    assert identical(*[load_params(os.path.join(str(out), 'rank%d.params' % r))
                       for r in range(2)])
    reports = [rank_report(out, r) for r in range(2)]
    assert [r['world_size'] for r in reports] == [2, 2] and reports[0]['iteration'] == 4
    assert reports[0]['metrics'] == reports[1]['metrics']
    assert sorted(f for f in os.listdir(str(out)) if not f.startswith(('rank', 'ssd_last-'))) == [
        'ssd' + s for s in ('_best.json', '_best.params', '_best_map.log', '_curves.png',
                            '_last.json', '_metrics.jsonl', '_train.log')]
    os.environ['GLUONDET_TEST_DEMO'] = demo
    try:
        task = make_task('ssd')
    finally:
        del os.environ['GLUONDET_TEST_DEMO']
    net = task.build_net([mx.cpu()])
    net.load_parameters(os.path.join(str(out), 'rank0.params'), ctx=[mx.cpu()])
    assert task.validate(net, [mx.cpu()]) == reports[0]['metrics']
