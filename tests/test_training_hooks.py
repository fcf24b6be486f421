"""TAO's training options as engine hooks: early stopping (monitor, min_delta, patience) and
TensorBoard images of the augmented training batches with their boxes (visualizer)."""
import functools

import cv2
import numpy as np
import pytest

from gluondet.data import DemoDetection
from gluondet.engine import HookBase, TrainConfig, fit, read_manifest
from gluondet.engine.early_stopping import EarlyStoppingHook
from gluondet.tasks import RetinaNetTask, SSDTask
from filetools import tensorboard_events
from test_engine_toy import ToyTask, toy_config


class ScriptedTask(ToyTask):
    """The toy task whose validation returns ``values[k]`` as ``mAP`` at its k-th call
    (counting from ``start``)."""

    def __init__(self, values, start=0, **kwargs):
        super().__init__(**kwargs)
        self.values, self.count = list(values), start

    def validate(self, net, ctx_list):
        value = self.values[self.count]
        self.count += 1
        return {'mAP': value, 'mse': 1.0 - value}


class _Stop(Exception):
    pass


class StopAt(HookBase):
    """Ends the run (as a kill would, after its checkpoints) once ``iteration`` is done."""

    def __init__(self, iteration):
        self.iteration = iteration

    def after_step(self):
        state = self.loop.state
        if state.iteration == self.iteration and state.batch < state.batches_per_epoch:
            raise _Stop()

    def after_epoch(self):      # at an epoch's end: after its checkpoint and validation
        if self.loop.state.iteration == self.iteration:
            raise _Stop()


_config = functools.partial(toy_config, epochs=10, val_interval=1)


def _log(config):
    with open(config.save_prefix + '_train.log') as f:
        return f.read()


def _early(config):
    return read_manifest(config.save_prefix + '_last.json')['hooks']['EarlyStoppingHook']


# ---------------------------------------------------------------- early stopping

MAPS = [0.1, 0.2, 0.205, 0.21, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def test_early_stop_on_map_stops_after_patience_checks_without_min_delta(tmp_path):
    """0.1, 0.2 improve; 0.205 and 0.21 are not 0.01 above 0.2: the 2nd of them stops."""
    config = _config(tmp_path, early_stop_monitor='mAP', early_stop_min_delta=0.01,
                     early_stop_patience=2)
    result = fit(ScriptedTask(MAPS), config)
    assert (result.epoch, result.iteration) == (4, 32)      # epochs 0-3 trained, 8 steps each
    assert result.metrics['mAP'] == 0.21 and result.best == 0.21
    assert 'early stopping: mAP validation 0.21' in result.stop_reason
    assert 'its best, 0.2 at epoch 1' in result.stop_reason
    assert 'early stopping: mAP' in _log(config)
    manifest = read_manifest(config.save_prefix + '_last.json')
    assert (manifest['epoch'], manifest['batch']) == (4, 0)
    assert _early(config)['wait'] == 2 and _early(config)['best'] == 0.2

    # without min_delta the same values keep improving: training runs to the end
    config = _config(tmp_path / 'b', early_stop_monitor='mAP', early_stop_patience=2)
    result = fit(ScriptedTask(MAPS), config)
    assert result.epoch == 10 and result.stop_reason is None


def test_early_stop_counts_on_after_a_resume_and_a_stopped_run_stays_stopped(tmp_path):
    values = [0.5, 0.4, 0.45, 0.3, 0.2, 0.9, 0.9, 0.9]
    config = _config(tmp_path, early_stop_monitor='mAP', early_stop_patience=3)
    straight = fit(ScriptedTask(values), config)
    assert straight.epoch == 4          # 0.4, 0.45, 0.3 do not beat 0.5

    resumed = _config(tmp_path / 'r', early_stop_monitor='mAP', early_stop_patience=3)
    with pytest.raises(_Stop):          # stopped (as killed) after 2 epochs: 1 check lost
        fit(ScriptedTask(values), resumed, hooks=[StopAt(16)])
    assert _early(resumed)['wait'] == 1 and _early(resumed)['checks'] == 2
    resumed = _config(tmp_path / 'r', early_stop_monitor='mAP', early_stop_patience=3,
                      resume='auto')
    result = fit(ScriptedTask(values, start=2), resumed)
    assert (result.epoch, result.iteration) == (straight.epoch, straight.iteration)
    assert result.stop_reason == straight.stop_reason

    again = fit(ScriptedTask(values, start=4), resumed)     # nothing left to train
    assert (again.epoch, again.iteration) == (4, 32)
    assert 'stopped early before' in again.stop_reason
    more = _config(tmp_path / 'r', early_stop_monitor='mAP', early_stop_patience=4,
                   resume='auto')
    assert fit(ScriptedTask(values, start=4), more).epoch == 5      # 0.2: the 4th check


def test_early_stop_on_a_mid_epoch_validation_ends_there(tmp_path):
    config = _config(tmp_path, early_stop_monitor='mAP', early_stop_patience=1, val_iters=4,
                     val_interval=1)
    task = ScriptedTask([0.5, 0.9, 0.4, 0.9, 0.9])      # validations at iterations 4, 8, 12
    result = fit(task, config)
    assert result.iteration == 12 and task.count == 3      # none again at the epoch's end
    assert 'validation 0.4 at epoch 1, iteration 12' in result.stop_reason
    manifest = read_manifest(config.save_prefix + '_last.json')
    assert (manifest['epoch'], manifest['batch'], manifest['iteration']) == (1, 4, 12)
    assert manifest['hooks']['EarlyStoppingHook']['wait'] == 1


def test_early_stop_on_the_training_loss(tmp_path):
    # the toy's loss falls every epoch: by more than 0 it improves, by more than 1e3 never
    config = _config(tmp_path, epochs=3, early_stop_monitor='loss', early_stop_patience=1,
                     val_interval=0)
    result = fit(ToyTask(), config)
    assert result.epoch == 3 and result.stop_reason is None
    losses = _early(config)['best']
    config = _config(tmp_path / 'b', epochs=5, early_stop_monitor='loss_l2',
                     early_stop_min_delta=1e3, early_stop_patience=2, val_interval=0)
    result = fit(ToyTask(), config)
    assert result.epoch == 3 and 'loss_l2 epoch mean' in result.stop_reason
    assert 'fallen below' in result.stop_reason
    assert 0 < losses < _early(config)['best']       # the first epoch's, the best it kept

    with pytest.raises(KeyError, match="loss_cls.*'loss_l1', 'loss_l2'"):
        fit(ToyTask(), _config(tmp_path / 'c', epochs=1, early_stop_monitor='loss_cls'))


def test_early_stop_loss_sums_resume_inside_an_epoch(tmp_path):
    """The epoch mean of a run resumed mid-epoch is the straight run's."""
    config = _config(tmp_path, epochs=2, early_stop_monitor='loss', val_interval=0,
                     checkpoint_interval=4)
    fit(ToyTask(), config)
    straight = _early(config)
    part = _config(tmp_path / 'r', epochs=2, early_stop_monitor='loss', val_interval=0,
                   checkpoint_interval=4)
    with pytest.raises(_Stop):
        fit(ToyTask(), part, hooks=[StopAt(12)])
    assert _early(part)['steps'] == 4
    fit(ToyTask(), _config(tmp_path / 'r', epochs=2, early_stop_monitor='loss', val_interval=0,
                           checkpoint_interval=4, resume='auto'))
    assert _early(part)['best'] == pytest.approx(straight['best'], rel=1e-6)
    assert _early(part)['checks'] == straight['checks'] == 2


def test_early_stop_rule_and_config_checks():
    hook = EarlyStoppingHook('mAP', 0.1, 2, reporter=None)
    assert hook.improved(0.0) and not hook.improved(float('nan'))
    hook.best = 0.5
    assert hook.improved(0.61) and not hook.improved(0.6) and not hook.improved(0.55)
    hook = EarlyStoppingHook('loss', 0.1, 2, reporter=None)
    hook.best = 0.5
    assert hook.improved(0.39) and not hook.improved(0.4) and not hook.improved(0.7)
    for values, message in [
            (dict(early_stop_monitor='validation_loss'), "not a loss"),
            (dict(early_stop_monitor='mAP', val_interval=0, save_interval=0), 'nothing validates'),
            (dict(early_stop_monitor='mAP', kv_store='dist_async'), 'dist_async'),
            (dict(early_stop_patience=-1), 'patience'),
            (dict(early_stop_min_delta=-0.1), 'min_delta'),
            (dict(tb_images=2), 'logdir'),
            (dict(tb_images=-1, logdir='x'), 'tb_images must be >= 0')]:
        with pytest.raises(ValueError, match=message):
            TrainConfig(**values)
    TrainConfig(early_stop_monitor='loss', val_interval=0, save_interval=0)


# ---------------------------------------------------------------- TensorBoard images

def _images(logdir):
    """``{tag: [(step, H x W x 3 uint8)]}`` of the image summaries in ``logdir``."""
    found = {}
    for event in tensorboard_events(logdir):
        for value in event.summary.value:
            if value.HasField('image'):
                png = np.frombuffer(value.image.encoded_image_string, np.uint8)
                image = cv2.imdecode(png, cv2.IMREAD_COLOR)[:, :, ::-1]
                assert image.shape == (value.image.height, value.image.width, 3)
                found.setdefault(value.tag, []).append((event.step, image))
    return found


class KeepBatch(HookBase):
    """Keeps the batches of the steps (the engine's ``loop.current_batch``)."""

    def __init__(self):
        self.batches = {}

    def after_step(self):
        state = self.loop.state
        self.batches[state.iteration] = [x.copy() for x in self.loop.current_batch]


def _check_images(task, tmp_path, steps, interval, shown, count=2):
    logdir = str(tmp_path / 'tb')
    config = TrainConfig(batch_size=2, num_workers=0, epochs=1, max_iters=steps, lr=0.001,
                         val_interval=0, save_interval=0, log_interval=1, logdir=logdir,
                         tb_images=count, tb_images_interval=interval, hybridize=False,
                         save_prefix=str(tmp_path / 'run' / 'model'))
    keep = KeepBatch()
    fit(task, config, hooks=[keep])
    found = _images(logdir)
    assert sorted(found) == ['train/images/%d' % k for k in range(count)]
    for k in range(count):
        assert [step for step, _ in found['train/images/%d' % k]] == shown
        for step, image in found['train/images/%d' % k]:
            batch = keep.batches[step]
            raw, boxes, names = task.batch_images(batch, count)[k]
            assert image.shape == raw.shape == batch[0].shape[2:] + (3,)
            assert len(boxes) and all(name in task.classes for name in names)
            drawn = (image != raw).any(axis=2)
            assert 0 < drawn.mean() < 0.5         # the boxes, not a different image
            x0, y0, x1, y1 = np.round(boxes[0]).astype(int)
            edge = drawn[max(y0, 0):y1 + 1, max(x0 - 1, 0):x0 + 2]     # its left side
            assert edge.mean() > 0.5
            # elsewhere the image is the batch with its normalization undone
            image_mean = np.asarray(task.train_transform().mean)
            assert abs(raw[~drawn].mean() / 255 - image_mean.mean()) < 0.5


def test_tensorboard_images_of_ssd_batches(tmp_path):
    train = DemoDetection(split='train', num_images=8, image_size=96)
    task = SSDTask('ssd_300_mobilenet0.25_custom', train, train, 96, pretrained_base=False)
    _check_images(task, tmp_path, steps=3, interval=2, shown=[2])


def test_tensorboard_images_of_keep_ratio_batches_once_an_epoch(tmp_path):
    train = DemoDetection('train', num_images=8, image_size=96)
    task = RetinaNetTask('retinanet_resnet18_v1b_custom', train, train, short=64, max_size=96,
                         pretrained_base=False)
    _check_images(task, tmp_path, steps=1, interval=0, shown=[1], count=1)


def test_tensorboard_images_need_a_task_that_shows_its_batches(tmp_path):
    config = _config(tmp_path, epochs=1, logdir=str(tmp_path / 'tb'), tb_images=2)
    with pytest.raises(ValueError, match='ToyTask cannot show its training batches'):
        fit(ToyTask(), config)


def test_training_flags_set_the_hooks_config():
    from gluondet.train import config, flags
    parser = flags.parser('test')
    flags.add_training_args(parser, epochs=2, lr=0.01, lr_decay_epoch='1', batch_size=2)
    args = parser.parse_args(['--logdir', 'tb', '--tb-images', '3', '--tb-images-interval', '50',
                              '--early-stop-monitor', 'mAP', '--early-stop-min-delta', '0.001',
                              '--early-stop-patience', '4'])
    made = config.train_config(args, 'x')
    assert (made.tb_images, made.tb_images_interval) == (3, 50)
    assert (made.early_stop_monitor, made.early_stop_min_delta,
            made.early_stop_patience) == ('mAP', 0.001, 4)
    default = config.train_config(parser.parse_args([]), 'x')
    assert (default.tb_images, default.early_stop_monitor) == (0, '')
