"""fit() on the toy task, in this process: learning, log files, params files, checkpoints."""
import contextlib
import dataclasses
import errno
import functools
import hashlib
import json
import multiprocessing
import os
import re
import signal

import mxnet as mx
import numpy as np
import pytest

from gluondet.engine import (CheckpointError, HookBase, NonFiniteLossError, TrainConfig,
                             TrainingInterrupted, fit, read_manifest)
from gluondet.engine.wording import flag, keyword, speaking
from filetools import tensorboard_events
from test_engine_toy import ToyNet, ToyTask, toy_config


_config = functools.partial(toy_config, epochs=2, lr_decay_epoch=(6,))


def _jsonl(prefix):
    with open(prefix + '_metrics.jsonl') as f:
        return [json.loads(line) for line in f]


def _event_tags(logdir):
    """Scalar tags in the TensorBoard event files of ``logdir``."""
    return {value.tag for event in tensorboard_events(logdir) for value in event.summary.value}


def test_fit_learns_and_writes_every_log(tmp_path):
    logdir = str(tmp_path / 'tb')
    cfg = _config(tmp_path, epochs=8, save_interval=4, logdir=logdir, warmup_epochs=1)
    result = fit(ToyTask(), cfg)
    prefix = cfg.save_prefix

    records = _jsonl(prefix)
    train = [r for r in records if r['type'] == 'train']
    val = [r for r in records if r['type'] == 'val']
    assert len(train) == 16 and len(val) == 8      # 8 steps/epoch, log every 4, validate each
    assert set(train[0]) == {'type', 'epoch', 'batch', 'iteration', 'lr', 'samples_per_sec',
                             'losses', 'time'}
    assert (train[0]['epoch'], train[0]['batch'], train[0]['iteration']) == (0, 3, 4)
    assert train[0]['lr'] == pytest.approx(0.005 * (1 / 3 + 2 / 3 * 3 / 8))   # warmup
    assert set(val[0]) == {'type', 'epoch', 'iteration', 'metrics', 'time'}
    assert set(val[0]['metrics']) == {'mAP', 'mse'}

    # The loss goes down: the last epoch's mean L2 loss is under a quarter of the first's.
    def epoch_loss(epoch):
        return np.mean([r['losses']['loss_l2'] for r in train if r['epoch'] == epoch])
    assert epoch_loss(7) < 0.25 * epoch_loss(0)
    assert result.metrics['mse'] < 0.2
    assert result.best == max(r['metrics']['mAP'] for r in val)
    assert (result.epoch, result.iteration) == (8, 64)

    with open(prefix + '_train.log') as f:
        log = f.read()
    assert re.search(r'^\[Epoch 0\]\[Batch 3\], Speed: [\d.]+ samples/sec, loss_l2=[\d.]+, '
                     r'loss_l1=[\d.]+, lr=0\.00\d+$', log, re.M)
    assert re.search(r'^\[Epoch 7\] Training cost: [\d.]+, loss_l2=[\d.]+, loss_l1=[\d.]+$',
                     log, re.M)
    assert re.search(r'^\[Epoch 7\] Validation: \nmAP=[\d.]+\nmse=[\d.]+$', log, re.M)

    assert {'train/loss_l2', 'train/loss_l1', 'train/lr', 'train/samples_per_sec',
            'val/mAP', 'val/mse'} <= _event_tags(logdir)

    best_epoch = max(val, key=lambda r: r['metrics']['mAP'])['epoch']
    with open(prefix + '_best_map.log') as f:
        assert f.read().splitlines()[-1] == '%04d:\t%.4f' % (best_epoch, result.best)
    for epoch in (3, 7):
        value = [r for r in val if r['epoch'] == epoch][0]['metrics']['mAP']
        path = '%s_%04d_%.4f.params' % (prefix, epoch, value)
        net = ToyNet()
        net.load_parameters(path)
        with open(path[:-len('.params')] + '.json') as f:
            info = json.load(f)
        assert info['meta'] == {'network': 'toy_mlp', 'dim': 8} and info['epoch'] == epoch
    ToyNet().load_parameters(prefix + '_best.params')

    manifest = read_manifest(prefix + '_last.json')
    assert (manifest['epoch'], manifest['batch'], manifest['iteration']) == (8, 0, 64)
    assert manifest['hooks']['ValidationHook']['best'] == result.best
    assert manifest['config'] == cfg.to_dict()


def test_fit_splits_batches_over_two_cpu_contexts_without_hybridizing(tmp_path):
    hook = HookBase()
    cfg = _config(tmp_path, cpus=2, epochs=2, hybridize=False, val_interval=0, save_interval=2)
    result = fit(ToyTask(), cfg, hooks=[hook])
    assert hook.loop.runtime.ctx == (mx.cpu(0), mx.cpu(1))
    assert all(len(terms) == 2 for terms in hook.loop.state.losses.values())
    assert not hook.loop.net._active
    # val_interval=0 validates only the epoch whose params are saved (the name holds the metric).
    assert [r['epoch'] for r in _jsonl(cfg.save_prefix) if r['type'] == 'val'] == [1]
    assert os.path.exists('%s_0001_%.4f.params' % (cfg.save_prefix, result.metrics['mAP']))


def _digests(prefix):
    folder = os.path.dirname(prefix)
    out = {}
    for name in sorted(os.listdir(folder)):
        if '_last' in name:
            with open(os.path.join(folder, name), 'rb') as f:
                out[name] = hashlib.sha1(f.read()).hexdigest()
    return out


def test_nonfinite_loss_stops_and_keeps_the_last_checkpoint(tmp_path):
    # 8 steps per epoch, a checkpoint every 5 steps: the last good one is at step 10.
    cfg = _config(tmp_path, epochs=3, checkpoint_interval=5)
    hook = HookBase()

    class Snapshot(HookBase):
        def after_step(self):
            if self.loop.state.iteration == 11:
                self.files = _digests(cfg.save_prefix)
    snapshot = Snapshot()
    with pytest.raises(NonFiniteLossError, match=r'epoch 1, iteration 12 \(batch 3 of the epoch'
                                                 r'.*loss_l2=nan.*toy_last\.json.*untouched'):
        fit(ToyTask(nan_at_call=12), cfg, hooks=[snapshot, hook])
    assert _digests(cfg.save_prefix) == snapshot.files
    assert read_manifest(cfg.save_prefix + '_last.json')['iteration'] == 10
    with open(cfg.save_prefix + '_train.log') as f:
        assert 'non-finite loss at epoch 1, iteration 12' in f.read()


@pytest.mark.parametrize('language, hint', [
    (flag, ' (a lower --lr, a longer --lr-warmup or --clip-gradient may keep it finite)'),
    (keyword, ' (a lower lr=, a longer lr_warmup= or clip_gradient= may keep it finite)'),
    (None, '')])
def test_nonfinite_loss_names_the_settings_in_the_words_of_the_caller(tmp_path, language, hint):
    # the flags are the default: not spoken
    with contextlib.nullcontext() if language is flag else speaking(language):
        with pytest.raises(NonFiniteLossError) as stopped:
            fit(ToyTask(nan_at_call=2), _config(tmp_path, epochs=1))
    loss_l1 = re.search(r'loss_l1=([^;]+);', str(stopped.value)).group(1)
    assert str(stopped.value) == (
        'non-finite loss at epoch 0, iteration 2 (batch 1 of the epoch, lr 0.005): loss_l2=nan, '
        'loss_l1=%s; training stopped%s. No checkpoint had been written yet.' % (loss_l1, hint))


@pytest.mark.parametrize('language, then', [
    (flag, ', then continue with --resume auto'), (keyword, ", then continue with resume='auto'"),
    (None, '')])
def test_a_failed_checkpoint_says_how_to_continue_in_the_words_of_the_caller(
        tmp_path, monkeypatch, language, then):
    from gluondet.engine import checkpoint
    written = []

    def save_parameters(net, path):     # the disk fills after the first checkpoint
        if written:
            raise OSError(errno.ENOSPC, 'No space left on device')
        written.append(path)
        net.save_parameters(path)
    monkeypatch.setattr(checkpoint, 'save_parameters', save_parameters)
    cfg = _config(tmp_path, epochs=1, checkpoint_interval=2)
    with speaking(language), pytest.raises(CheckpointError) as failed:
        fit(ToyTask(), cfg)
    assert str(failed.value).endswith('the last good checkpoint, %s_last.json, is intact: make '
                                      'space (or the folder writable)%s' % (cfg.save_prefix, then))


def _updater_states(trainer):
    """Every updater's states as numpy, by parameter index and slot."""
    out = []
    for updater in trainer._updaters:
        states = {}
        for index, state in updater.states.items():
            parts = state if isinstance(state, (tuple, list)) else (state,)
            states[index] = [p.asnumpy() for p in parts]
        out.append(states)
    return out


def _mean_data(param):
    return np.mean([d.asnumpy() for d in param.list_data()], axis=0)


@pytest.mark.parametrize('optimizer, cpus', [('sgd', 1), ('sgd', 2), ('adam', 1)])
def test_checkpoint_round_trip_restores_the_optimizer_exactly(tmp_path, optimizer, cpus):
    cfg = _config(tmp_path, epochs=1, optimizer=optimizer, cpus=cpus)
    first, second = HookBase(), HookBase()
    fit(ToyTask(), cfg, hooks=[first])
    # Resuming a finished run restores everything and trains no further step.
    fit(ToyTask(), TrainConfig.from_dict(dict(cfg.to_dict(), resume='auto')), hooks=[second])
    saved, restored = _updater_states(first.loop.trainer), _updater_states(second.loop.trainer)
    assert len(restored) == cpus and saved[0].keys() == restored[0].keys()
    assert len(saved[0]) == 6      # BatchNorm gamma, beta and the two Dense weights, biases
    for states in restored:
        for index, parts in saved[0].items():
            for a, b in zip(parts, states[index]):
                np.testing.assert_array_equal(a, b)
    opt_a, opt_b = first.loop.trainer._optimizer, second.loop.trainer._optimizer
    assert opt_b.num_update == opt_a.num_update == 8
    assert opt_b._all_index_update_counts == opt_a._all_index_update_counts
    # Params files hold the mean over contexts (BatchNorm running statistics differ per context).
    for a, b in zip(first.loop.net.collect_params().values(),
                    second.loop.net.collect_params().values()):
        np.testing.assert_allclose(_mean_data(a), _mean_data(b), rtol=0, atol=1e-7)
    assert second.loop.state.position() == (1, 0, 8)


def test_optimizer_states_are_stored_without_pickle(tmp_path):
    cfg = _config(tmp_path, epochs=1)
    fit(ToyTask(), cfg)
    manifest = read_manifest(cfg.save_prefix + '_last.json')
    path = os.path.join(os.path.dirname(cfg.save_prefix), manifest['states'])
    with open(path, 'rb') as f:
        assert f.read(2) != b'\x80\x04'        # not a pickle stream
    arrays = mx.nd.load(path)
    assert sorted(arrays) == sorted(manifest['optimizer']['layout'].values())
    assert 'body.1.weight' in arrays


def test_resume_from_params_is_weights_only(tmp_path):
    cfg = _config(tmp_path, epochs=1)
    fit(ToyTask(), cfg)
    hook = HookBase()
    result = fit(ToyTask(), _config(tmp_path, epochs=2, start_epoch=1, save_prefix=str(
        tmp_path / 'second' / 'toy'), resume=cfg.save_prefix + '_best.params'), hooks=[hook])
    assert (result.epoch, result.iteration) == (2, 16)
    records = _jsonl(str(tmp_path / 'second' / 'toy'))
    assert [r['iteration'] for r in records if r['type'] == 'train'] == [12, 16]


def test_resume_rejects_a_corrupt_checkpoint(tmp_path):
    cfg = _config(tmp_path, epochs=1)
    fit(ToyTask(), cfg)
    manifest = read_manifest(cfg.save_prefix + '_last.json')
    path = os.path.join(os.path.dirname(cfg.save_prefix), manifest['params'])
    with open(path, 'ab') as f:
        f.write(b'x')
    with pytest.raises(CheckpointError, match=re.escape(path) + ' does not match the sha1'):
        fit(ToyTask(), _config(tmp_path, epochs=2, resume='auto'))


def test_a_failing_validation_leaves_the_epoch_checkpoint_and_runs_on_resume(tmp_path):
    cfg = _config(tmp_path, epochs=2, val_metric='AP')
    with pytest.raises(KeyError, match=r"\['mAP', 'mse'\] but not val_metric 'AP'"):
        fit(ToyTask(), cfg)
    assert read_manifest(cfg.save_prefix + '_last.json')['iteration'] == 8
    # Resuming validates epoch 0 on the checkpointed weights before training epoch 1.
    fit(ToyTask(), _config(tmp_path, epochs=2, resume='auto'))
    records = [(r['type'], r['epoch'], r['iteration']) for r in _jsonl(cfg.save_prefix)]
    assert records == [('train', 0, 4), ('train', 0, 8), ('val', 0, 8), ('train', 1, 12),
                       ('train', 1, 16), ('val', 1, 16)]


def test_a_kill_before_the_manifest_is_committed_leaves_the_previous_checkpoint(
        tmp_path, monkeypatch):
    import gluondet.engine.checkpoint as checkpoint
    cfg = _config(tmp_path, epochs=2)
    fit(ToyTask(), TrainConfig.from_dict(dict(cfg.to_dict(), epochs=1)))

    def killed(path, data):
        raise SystemExit('killed while writing %s' % path)
    monkeypatch.setattr(checkpoint, 'atomic_write', killed)
    with pytest.raises(SystemExit, match='killed while writing .*toy_last.json'):
        fit(ToyTask(), _config(tmp_path, epochs=2, resume='auto'))
    monkeypatch.undo()
    folder = os.path.dirname(cfg.save_prefix)
    data = sorted(n for n in os.listdir(folder) if n.startswith('toy_last-'))
    assert [n[:17] for n in data] == ['toy_last-00000008'] * 2 + ['toy_last-00000016'] * 2
    assert read_manifest(cfg.save_prefix + '_last.json')['iteration'] == 8

    result = fit(ToyTask(), _config(tmp_path, epochs=2, resume='auto'))
    assert result.iteration == 16
    assert sorted(n[:17] for n in os.listdir(folder) if n.startswith('toy_last-')) == [
        'toy_last-00000016'] * 2


class _SignalAfter(HookBase):
    """Sends this process SIGTERM after step ``iteration``, as ``kill`` would."""

    def __init__(self, iteration):
        self.iteration = iteration

    def after_step(self):
        if self.loop.state.iteration == self.iteration:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_stop_says_how_to_resume_in_the_words_of_the_caller(tmp_path):
    # this and the next test send themselves SIGTERM; pytest workers vanished at it (issue
    # 35) when an earlier test had freed OpenVINO Cores out of order: see
    # tests/test_openvino.py's test_a_signal_after_openvino_predictors_are_freed_is_handled
    cfg = _config(tmp_path)
    last = cfg.save_prefix + '_last.json'
    with pytest.raises(TrainingInterrupted) as stopped:     # the training commands' flag
        fit(ToyTask(), cfg, hooks=[_SignalAfter(2)])
    assert stopped.value.code == 128 + signal.SIGTERM
    assert str(stopped.value).endswith('checkpoint %s. Resume with --resume auto or --resume %s.'
                                       % (last, last))
    with speaking(keyword), pytest.raises(TrainingInterrupted) as stopped:
        fit(ToyTask(), dataclasses.replace(cfg, resume='auto'), hooks=[_SignalAfter(5)])
    assert str(stopped.value).endswith("Resume with resume='auto' or resume=%r." % last)
    with speaking(None), pytest.raises(TrainingInterrupted) as stopped:    # gluondet demo's
        fit(ToyTask(), cfg, hooks=[_SignalAfter(1)])
    assert str(stopped.value) == ('SIGTERM: stopped at epoch 0, batch 2, iteration 2; checkpoint '
                                  '%s. This command does not resume: run again, it starts over.'
                                  % last)


def test_the_loader_processes_end_with_the_run(tmp_path):
    # Gluon ends them when the loader is garbage collected: the loop's reference cycles
    # left them running into whatever this process did next
    before = set(multiprocessing.active_children())
    fit(ToyTask(), _config(tmp_path, num_workers=2, epochs=1))
    assert set(multiprocessing.active_children()) <= before
    with pytest.raises(TrainingInterrupted):
        fit(ToyTask(), _config(tmp_path / 'stopped', num_workers=2), hooks=[_SignalAfter(2)])
    assert set(multiprocessing.active_children()) <= before
