"""Engine checks any task can reuse in its tests: interrupt a run, resume it, compare.

`check_resume` is issue 3's resume test for a task: train N epochs straight;
train the first epoch (of the same N-epoch config), start the rest in a child process,
stop that child in the middle of epoch 2 (``kill -9``, SIGTERM or SIGINT), resume to the end; the
final parameters and optimizer states must equal the straight run's.
"""
import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
import time

from mxnet import nd

from ..files import atomic_write
from .checkpoint import read_manifest
from .config import TrainConfig
from .hookbase import HookBase
from .loop import fit
from .signals import SignalHook

_EXIT_CODES = {signal.SIGKILL: -signal.SIGKILL, signal.SIGTERM: 128 + signal.SIGTERM,
               signal.SIGINT: 128 + signal.SIGINT}


def load_factory(spec):
    """The callable named by ``'package.module:function'``."""
    module, _, name = spec.partition(':')
    if not name:
        raise ValueError('task factory must look like "module:function", got %r' % spec)
    return getattr(importlib.import_module(module), name)


def train(factory, config, factory_kwargs=None, hooks=()):
    """Build the task from ``factory`` and `fit` it in this process."""
    task = load_factory(factory)(**(factory_kwargs or {}))
    return fit(task, config, hooks=hooks)


def check_resume(factory, config, workdir, factory_kwargs=None, kill_signal=signal.SIGKILL,
                 reference=None, pythonpath=(), timeout=600):
    """Compare a straight run with one interrupted in epoch 2 and resumed.

    Parameters
    ----------
    factory : str
        ``'module:function'`` returning the task, importable in a child
        process (add its folder to ``pythonpath``).
    config : TrainConfig
        ``epochs >= 2``; ``num_workers=0`` and a fixed seed for exactness.
        ``checkpoint_interval`` > 0 makes the child leave a mid-epoch checkpoint.
    workdir : str
        Empty folder for the runs.
    factory_kwargs : dict, optional
    kill_signal : int
        SIGKILL, SIGTERM or SIGINT.
    reference : str, optional
        ``save_prefix`` of a finished straight run with this config (see
        `train`) to compare against; trained here when None.
    pythonpath : sequence of str
    timeout : float
        Seconds to wait for the child.

    Returns
    -------
    dict
        ``params_diff`` and ``states_diff`` (max abs differences of the final
        parameters and optimizer states), ``paused_at`` (iteration when the
        child was stopped), ``resumed_from`` (iteration of the checkpoint the
        last run resumed), ``returncode`` of the child.
    """
    if config.epochs < 2:
        raise ValueError('check_resume needs epochs >= 2, got %d' % config.epochs)
    if reference is None:
        reference = os.path.join(workdir, 'straight', 'run')
        train(factory, dataclasses.replace(config, save_prefix=reference, resume=''),
              factory_kwargs)
    prefix = os.path.join(workdir, 'resumed', 'run')
    # The first epoch under the same config (its epochs decide the cosine schedule and the
    # mixup epochs), stopped once the epoch's checkpoint and validation are written.
    try:
        train(factory, dataclasses.replace(config, save_prefix=prefix, resume=''),
              factory_kwargs, hooks=[_StopAfterEpoch(0)])
    except _Stopped:
        pass
    rest = dataclasses.replace(config, save_prefix=prefix, resume='auto')
    paused, code = _run_and_stop(factory, factory_kwargs, rest, kill_signal, workdir,
                                 pythonpath, timeout)
    resumed_from = read_manifest(prefix + '_last.json')['iteration']
    _check_stop(paused, code, kill_signal, resumed_from)
    train(factory, rest, factory_kwargs)
    return dict(params_diff=_max_diff(reference, prefix, 'params'),
                states_diff=_max_diff(reference, prefix, 'states'),
                paused_at=paused['iteration'], resumed_from=resumed_from, returncode=code)


class _Stopped(Exception):
    """Raised by `_StopAfterEpoch`."""


class _StopAfterEpoch(HookBase):
    """Ends training after epoch ``epoch``'s hooks (checkpoint, validation) have run."""

    def __init__(self, epoch):
        self.epoch = epoch

    def after_epoch(self):
        if self.loop.state.epoch == self.epoch:
            raise _Stopped()


class PauseHook(HookBase):
    """In a child run: in the middle of epoch ``epoch``, write ``marker`` and wait
    for a signal (at most ``max_wait`` seconds)."""

    def __init__(self, epoch, marker, max_wait=300.0):
        self.epoch, self.marker, self.max_wait = epoch, marker, max_wait
        self._done = False

    def after_step(self):
        state = self.loop.state
        if self._done or state.epoch != self.epoch or state.batch != max(
                1, state.batches_per_epoch // 2):
            return
        self._done = True
        atomic_write(self.marker, json.dumps(
            {'epoch': state.epoch, 'batch': state.batch, 'iteration': state.iteration}))
        signals = [h for h in self.loop.hooks if isinstance(h, SignalHook)]
        deadline = time.time() + self.max_wait
        while time.time() < deadline and not any(h.requested for h in signals):
            time.sleep(0.02)


def _child_main(argv):
    """Entry of the child process: ``{factory, kwargs, config, marker}`` as JSON."""
    spec = json.loads(argv[0])
    config = TrainConfig.from_dict(spec['config'], source='check_resume child')
    train(spec['factory'], config, spec['kwargs'], hooks=[PauseHook(1, spec['marker'])])


def _run_and_stop(factory, factory_kwargs, config, kill_signal, workdir, pythonpath, timeout):
    marker = os.path.join(workdir, 'paused.json')
    log_path = os.path.join(workdir, 'child.log')
    spec = json.dumps({'factory': factory, 'kwargs': factory_kwargs or {},
                       'config': config.to_dict(), 'marker': marker})
    code = 'import sys; from gluondet.engine.testing import _child_main; _child_main(sys.argv[1:])'
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(list(pythonpath) + [env.get('PYTHONPATH', '')])
    with open(log_path, 'w') as log:
        child = subprocess.Popen([sys.executable, '-c', code, spec], stdout=log,
                                 stderr=subprocess.STDOUT, env=env)
        try:
            _wait_for(marker, child, log_path, timeout)
            child.send_signal(kill_signal)
            returncode = child.wait(timeout)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    with open(marker) as f:
        return json.load(f), returncode


def _wait_for(marker, child, log_path, timeout):
    deadline = time.time() + timeout
    while not os.path.exists(marker):
        if child.poll() is not None:
            raise AssertionError('the child run exited (code %s) before pausing in epoch 2:\n%s'
                                 % (child.returncode, _tail(log_path)))
        if time.time() > deadline:
            raise AssertionError('the child run did not reach epoch 2 within %ss:\n%s'
                                 % (timeout, _tail(log_path)))
        time.sleep(0.05)


def _check_stop(paused, code, kill_signal, resumed_from):
    expected = _EXIT_CODES[kill_signal]
    if code != expected:
        raise AssertionError('child stopped by signal %d exited with %s, expected %s'
                             % (kill_signal, code, expected))
    if kill_signal != signal.SIGKILL and resumed_from <= paused['iteration']:
        raise AssertionError('after signal %d the checkpoint is at iteration %d, not after the '
                             'pause at %d' % (kill_signal, resumed_from, paused['iteration']))


def _max_diff(prefix_a, prefix_b, kind):
    a, b = (_load(p, kind) for p in (prefix_a, prefix_b))
    if sorted(a) != sorted(b):
        raise AssertionError('%s keys differ: %s' % (kind, sorted(set(a) ^ set(b))))
    return max([float(nd.abs(a[k] - b[k]).max().asscalar()) for k in a] or [0.0])


def _load(prefix, kind):
    path = prefix + '_last.json'
    manifest = read_manifest(path)
    return nd.load(os.path.join(os.path.dirname(path), manifest[kind]))


def _tail(path, lines=40):
    with open(path) as f:
        return ''.join(f.readlines()[-lines:])
