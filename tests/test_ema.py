"""Model EMA (`gluondet.engine.ema`, issue 26 item 2) on the engine's toy tasks: the rule
against numpy, validation and params files on the averaged weights, training unchanged,
checkpoint and resume, frozen parameters, several devices, the flags."""
import dataclasses
import json
import os
import subprocess
import sys
import types

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluondet.engine import HookBase, TrainConfig, fit, read_manifest
from gluondet.engine.ema import EMAHook, ema_decay
from gluondet.errors import UserError
from gluondet.train import flags
from gluondet.train.config import train_config

from distributed import (demo_root, driver_command, failure, horovodrun, identical, load_params,
                         need_horovod, run_spec)
from test_engine_toy import ToyNet, make_image_task, make_task, toy_config

HERE = os.path.dirname(os.path.abspath(__file__))


class RecordWeights(HookBase):
    """After every step: the net's parameters as numpy, statistics averaged over the devices
    (``save_parameters``'s mean), by structural name."""

    def __init__(self):
        self.steps = []

    def after_step(self):
        self.steps.append({name: np.mean([d.asnumpy() for d in p.list_data()], axis=0)
                           for name, p in self.loop.net._collect_params_with_prefix().items()})


def numpy_ema(steps, decay, start=0):
    """The EMA of ``steps[start:]`` by the module's rule, in float32 numpy."""
    average = {k: v.astype(np.float32).copy() for k, v in steps[start].items()}
    for n, weights in enumerate(steps[start + 1:], start=2):
        rate = np.float32(1.0 - min(decay, (1.0 + n) / (10.0 + n)))
        for k in average:
            average[k] = average[k] + (weights[k] - average[k]) * rate
    return average


def params_file(path):
    return {k: v.asnumpy() for k, v in nd.load(str(path)).items()}


def checkpoint_arrays(prefix):
    """``(trained weights, {EMA key: array})`` of the run's last checkpoint."""
    manifest = read_manifest(prefix + '_last.json')
    folder = os.path.dirname(prefix)
    states = params_file(os.path.join(folder, manifest['states']))
    return (params_file(os.path.join(folder, manifest['params'])),
            {k[len('EMAHook/'):]: v for k, v in states.items() if k.startswith('EMAHook/')})


def test_decay_ramps_up_to_its_cap():
    assert ema_decay(0.9998, 2) == pytest.approx(3 / 12)
    assert ema_decay(0.9998, 1000) == pytest.approx(1001 / 1010)
    assert ema_decay(0.9, 81) == 0.9 and ema_decay(0.9, 79) < 0.9


@pytest.mark.parametrize('cpus', [1, 2])
def test_the_average_follows_numpy_and_fit_returns_it(tmp_path, cpus):
    """24 steps at decay 0.7 (the ramp binds up to step 20); two CPU devices split each
    batch: their BatchNorm statistics differ, the average takes their mean."""
    record = RecordWeights()
    config = toy_config(tmp_path, epochs=3, ema=True, ema_decay=0.7, cpus=cpus)
    result = fit(make_task(), config, hooks=[record])
    assert len(record.steps) == 24
    expected = numpy_ema(record.steps, 0.7)
    _, saved = checkpoint_arrays(config.save_prefix)
    assert sorted(saved) == sorted(expected)
    for name, param in result.net._collect_params_with_prefix().items():
        assert saved[name].dtype == np.float32
        np.testing.assert_allclose(saved[name], expected[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
        # the net fit returns holds the average, on every device
        for data in param.list_data():
            np.testing.assert_array_equal(data.asnumpy(), saved[name], err_msg=name)
    assert not np.array_equal(expected['body.1.weight'], record.steps[-1]['body.1.weight'])


class RecordValidation:
    """The toy task whose ``validate`` also keeps the weights it was given."""

    def __init__(self, task):
        self.task, self.validated = task, []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def validate(self, net, ctx_list):
        self.validated.append({k: p.data().asnumpy().copy()
                               for k, p in net._collect_params_with_prefix().items()})
        return self.task.validate(net, ctx_list)


def _validate_file(task, path):
    net = ToyNet()
    net.load_parameters(str(path), ctx=[mx.cpu()])
    return task.validate(net, [mx.cpu()])


def test_validation_and_params_files_use_the_average_and_training_the_weights(tmp_path):
    """The metric is the average's (a manual evaluation of _best.params gives it; the trained
    weights give another), the epoch's params file is the average, and the trained weights
    are those of the same run without EMA, bit for bit."""
    config = toy_config(tmp_path, epochs=2, ema=True, ema_decay=0.9, save_interval=2,
                        checkpoint_interval=5)
    task = RecordValidation(make_task(dropout=0.0))
    result = fit(task, config)
    trained, averaged = checkpoint_arrays(config.save_prefix)
    for name, value in averaged.items():     # the last validation saw the average
        np.testing.assert_array_equal(task.validated[-1][name], value)
    prefix = config.save_prefix
    best = json.load(open(prefix + '_best.json'))
    manual = _validate_file(task, prefix + '_best.params')
    assert manual['mAP'] == best['metrics']['mAP'] == result.best
    epoch_file = params_file('%s_0001_%.4f.params' % (prefix, result.metrics['mAP']))
    for name, value in averaged.items():
        np.testing.assert_array_equal(epoch_file[name], value)
    # the trained weights validate differently
    last = os.path.join(os.path.dirname(prefix), read_manifest(prefix + '_last.json')['params'])
    assert _validate_file(task, last)['mAP'] != result.metrics['mAP']
    # and are the plain run's
    plain = dataclasses.replace(config, ema=False, save_prefix=str(tmp_path / 'plain' / 'toy'))
    fit(make_task(dropout=0.0), plain)
    plain_trained, none = checkpoint_arrays(plain.save_prefix)
    assert none == {} and sorted(plain_trained) == sorted(trained)
    for name in trained:
        np.testing.assert_array_equal(plain_trained[name], trained[name], err_msg=name)


def test_frozen_parameters_are_left_and_frozen_statistics_stay_exact(tmp_path):
    """The image toy freezes its stem (convolution and BatchNorm): the convolution and
    gamma/beta are not averaged; the frozen statistics, averaged, keep their values."""
    config = toy_config(tmp_path, epochs=2, ema=True, ema_decay=0.9, batch_size=4)
    result = fit(make_image_task(), config)
    trained, averaged = checkpoint_arrays(config.save_prefix)
    frozen = {name for name, p in result.net._collect_params_with_prefix().items()
              if p.grad_req == 'null'}
    assert frozen and all(n.startswith('stem.') for n in frozen)
    assert sorted(averaged) == sorted(n for n in trained
                                      if n not in frozen or n.endswith(('_mean', '_var')))
    for name in frozen & set(averaged):
        np.testing.assert_array_equal(averaged[name], trained[name])


def test_resume_continues_the_average_and_starts_one_where_the_checkpoint_has_none(tmp_path):
    """Two epochs straight = one epoch, then resume: the average bit for bit. A checkpoint
    written without EMA resumed with it: the average starts from the weights after the first
    resumed step. One written with EMA resumed without it: trains, the average unused."""
    config = toy_config(tmp_path, epochs=2, ema=True, ema_decay=0.9, lr_decay_epoch=())
    straight = dataclasses.replace(config, save_prefix=str(tmp_path / 'straight' / 'toy'))
    fit(make_task(), straight)
    fit(make_task(), dataclasses.replace(config, epochs=1))
    fit(make_task(), dataclasses.replace(config, resume='auto'))
    for a, b in zip(checkpoint_arrays(straight.save_prefix), checkpoint_arrays(
            config.save_prefix)):
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert read_manifest(config.save_prefix + '_last.json')['hooks']['EMAHook'] == {
        'updates': 16}

    plain = dataclasses.replace(config, ema=False, epochs=1,
                                save_prefix=str(tmp_path / 'plain' / 'toy'))
    fit(make_task(), plain)
    record = RecordWeights()
    fit(make_task(), dataclasses.replace(plain, ema=True, epochs=2, resume='auto'),
        hooks=[record])
    _, averaged = checkpoint_arrays(plain.save_prefix)
    expected = numpy_ema(record.steps, 0.9)
    assert len(record.steps) == 8
    assert read_manifest(plain.save_prefix + '_last.json')['hooks']['EMAHook'] == {
        'updates': 8}
    for name in averaged:
        np.testing.assert_allclose(averaged[name], expected[name], rtol=1e-6, atol=1e-7)
    fit(make_task(), dataclasses.replace(plain, ema=False, epochs=3, resume='auto'))
    assert 'EMAHook' not in read_manifest(plain.save_prefix + '_last.json')['hooks']


def test_a_checkpoint_of_other_averaged_parameters_is_refused():
    net = ToyNet()
    net.initialize(ctx=[mx.cpu()])
    net(nd.ones((2, 8)))
    hook = EMAHook(0.9)
    hook.loop = types.SimpleNamespace(net=net)
    with pytest.raises(UserError, match=r'model EMA does not fit the net: it lacks the average '
                       r'of 8 parameters of this run \(body.0.beta, .*; it averages 1 '
                       r'parameters this run does not \(body.9.weight\)$'):
        hook.load_state_arrays({'body.9.weight': nd.ones(1)})


def test_the_flags_set_the_config_and_a_bad_decay_is_one_line(tmp_path):
    parser = flags.parser('test')
    flags.add_training_args(parser)
    args = parser.parse_args(['--ema', '--ema-decay', '0.999', '--gpus', ''])
    config = train_config(args, str(tmp_path / 'run'))
    assert config.ema is True and config.ema_decay == 0.999
    assert train_config(parser.parse_args(['--gpus', '']), 'x').ema is False
    with pytest.raises(UserError, match=r'^--ema-decay must be in \(0, 1\), got 1.0$'):
        train_config(parser.parse_args(['--ema-decay', '1', '--gpus', '']), 'x')
    with pytest.raises(ValueError, match='ema_decay must be in'):
        TrainConfig(ema_decay=0.0)


@pytest.mark.slow
def test_two_horovod_ranks_keep_one_average(tmp_path):
    """SSD (plain BatchNorm, whose statistics differ between the ranks) on two Horovod ranks:
    both end with the same averaged weights, which rank 0 saved as _best.params, while the
    checkpoint holds the trained ones."""
    need_horovod()
    demo = demo_root(str(tmp_path / 'demo'))
    out = tmp_path / 'two'
    spec = run_spec('ssd', out, out / 'ssd', batch_size=8, epochs=1, val_interval=1, ema=True,
                    ema_decay=0.9, horovod=True)
    code, log, _ = horovodrun(driver_command(tmp_path, 'ema', spec), tmp_path,
                              env={'GLUONDET_TEST_DEMO': demo})
    assert code == 0, failure(log)
    ranks = [load_params(out / ('rank%d.params' % r)) for r in range(2)]
    assert identical(*ranks)
    assert identical(ranks[0], load_params(out / 'ssd_best.params'))
    trained, averaged = checkpoint_arrays(str(out / 'ssd'))
    assert set(averaged) < set(trained) and not identical(trained, ranks[0])
    assert {k for k in trained if k.endswith(('_mean', '_var'))} < set(averaged)


_AMP = '''
import json, os
import numpy as np
from mxnet import nd
from gluondet.engine import fit, read_manifest
from test_engine_toy import make_task, toy_config
from test_ema import RecordWeights, checkpoint_arrays, numpy_ema
import pathlib
record = RecordWeights()
config = toy_config(pathlib.Path('.'), epochs=2, ema=True, ema_decay=0.9, amp=True)
fit(make_task(), config, hooks=[record])
_, averaged = checkpoint_arrays(config.save_prefix)
expected = numpy_ema(record.steps, 0.9)
print(json.dumps({'dtypes': sorted({str(v.dtype) for v in averaged.values()}),
                  'amp': read_manifest(config.save_prefix + '_last.json')['config']['amp'],
                  'diff': max(float(np.abs(averaged[k] - expected[k]).max()) for k in averaged)}))
'''


@pytest.mark.skipif(not mx.runtime.Features().is_enabled('MKLDNN'),
                    reason='AMP on the CPU (bfloat16) needs MXNet with oneDNN')
def test_the_average_under_amp_is_float32(tmp_path):
    """bfloat16 AMP (in a process of its own: amp.init changes the whole process): the
    weights stay float32, and so does their average, which follows numpy."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get('PYTHONPATH', '')]))
    out = subprocess.run([sys.executable, '-c', _AMP], capture_output=True, text=True,
                         cwd=str(tmp_path), env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report['dtypes'] == ['float32'] and report['amp'] is True
    assert report['diff'] < 1e-6
