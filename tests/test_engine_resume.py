"""Issue 3 part 8 on the toy task: stop a run in epoch 2 (kill -9, SIGTERM, SIGINT), resume it,
and get the straight run's parameters and optimizer states."""
import dataclasses
import json
import os
import signal

import pytest
from mxnet import nd

from gluondet.engine import TrainConfig, read_manifest
from gluondet.engine.testing import check_resume, train

HERE = os.path.dirname(os.path.abspath(__file__))
FACTORY = 'test_engine_toy:make_task'
# 8 steps per epoch and a checkpoint every 5 steps: the child pauses at step 12 (the middle of
# epoch 2) after the checkpoint at step 10, so a kill -9 loses two steps that must be redone.
CONFIG = TrainConfig(batch_size=8, num_workers=0, epochs=2, lr=0.005, lr_decay_epoch=(1,),
                     warmup_epochs=0.5, log_interval=4, save_interval=0, checkpoint_interval=5,
                     seed=11)


@pytest.fixture(scope='module')
def straight(tmp_path_factory):
    """save_prefix of the run trained 2 epochs without interruption."""
    prefix = str(tmp_path_factory.mktemp('straight') / 'run')
    train(FACTORY, dataclasses.replace(CONFIG, save_prefix=prefix))
    return prefix


def _records(prefix):
    """metrics.jsonl without the wall-clock fields."""
    with open(prefix + '_metrics.jsonl') as f:
        records = [json.loads(line) for line in f]
    for record in records:
        del record['time']
        record.pop('samples_per_sec', None)
    return records


def _values(record):
    return record['losses'] if record['type'] == 'train' else record['metrics']


@pytest.mark.parametrize('kill_signal, resumed_from', [
    (signal.SIGKILL, 10),     # the last mid-epoch checkpoint
    (signal.SIGTERM, 13),     # the step after the pause: checkpoint at the current iteration
    pytest.param(signal.SIGINT, 13, marks=pytest.mark.slow),
])
def test_stopped_and_resumed_run_equals_the_straight_run(tmp_path, straight, kill_signal,
                                                         resumed_from):
    report = check_resume(FACTORY, CONFIG, str(tmp_path), kill_signal=kill_signal,
                          reference=straight, pythonpath=[HERE])
    assert report['paused_at'] == 12
    assert report['resumed_from'] == resumed_from
    assert report['params_diff'] <= 1e-6
    assert report['states_diff'] <= 1e-6
    prefix = str(tmp_path / 'resumed' / 'run')
    final = read_manifest(prefix + '_last.json')
    assert (final['epoch'], final['batch'], final['iteration']) == (2, 0, 16)
    # The resumed run's metrics file is the straight run's: nothing repeated, nothing lost.
    resumed, expected = _records(prefix), _records(straight)
    assert [(r['type'], r['iteration']) for r in resumed] == [
        (r['type'], r['iteration']) for r in expected]
    for a, b in zip(resumed, expected):
        assert _values(a) == pytest.approx(_values(b), abs=1e-6)


def test_a_killed_run_with_model_ema_resumes_to_the_straight_runs_average(tmp_path):
    """kill -9 in epoch 2 with ``ema``: the averaged weights, in the checkpoint's states file,
    equal the straight run's bit for bit, as the trained ones and the optimizer states do."""
    config = dataclasses.replace(CONFIG, ema=True, ema_decay=0.9)
    report = check_resume(FACTORY, config, str(tmp_path), kill_signal=signal.SIGKILL,
                          pythonpath=[HERE])
    assert report['resumed_from'] == 10
    assert report['params_diff'] == 0 and report['states_diff'] == 0
    runs = {}
    for name in ('straight', 'resumed'):
        manifest = read_manifest(str(tmp_path / name / 'run_last.json'))
        assert manifest['hooks']['EMAHook'] == {'updates': 16}
        runs[name] = {k: v for k, v in nd.load(str(tmp_path / name / manifest['states'])).items()
                      if k.startswith('EMAHook/')}
    assert len(runs['resumed']) == 8 and sorted(runs['resumed']) == sorted(runs['straight'])
    for key, value in runs['straight'].items():
        assert (runs['resumed'][key] == value).min().asscalar() == 1, key
