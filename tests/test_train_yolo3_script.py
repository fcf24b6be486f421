"""scripts/train_yolo3.py: GluonCV's train_yolo3.py flags and defaults, the refusals, an
epoch of the demo data as a user runs it (multi-scale, mixup, resume), and a kill -9 resume
that ends where the straight run does."""
import dataclasses
import json
import os
import signal

import pytest

from gluondet import cli as gluondet_cli
from gluondet.data import DemoDetection
from gluondet.engine import TrainConfig, read_manifest
from gluondet.engine.testing import check_resume
from gluondet.errors import UserError
from gluondet.tasks import YOLO3Task
from gluondet.train import yolo3 as script
from script_runs import run_cpu_command, run_on_small_demo

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, 'scripts', 'train_yolo3.py')
SMALL = ['--backbone', 'mobilenet0.5', '--data-shape', '128', '--batch-size', '4',
         '--dataset', 'demo', '--gpus', '', '--no-pretrained-base', '-j', '0',
         '--warmup-epochs', '1', '--save-interval', '0']


def test_gluoncv_flags_and_defaults():
    args = script.parse_args([])
    assert (args.network, args.data_shape, args.batch_size, args.epochs, args.lr,
            args.lr_mode, args.lr_decay, args.lr_decay_epoch, args.lr_decay_period,
            args.warmup_lr, args.lr_warmup, args.momentum, args.wd, args.log_interval,
            args.save_interval, args.val_interval, args.seed, args.num_samples,
            args.no_mixup_epochs, args.num_workers) == (
        'darknet53', 416, 64, 200, 0.001, 'step', 0.1, '160,180', 0, 0.0, 0.0, 0.9, 5e-4,
        100, 10, 1, 233, -1, 20, 4)
    flags = script.parse_args(['--syncbn', '--no-random-shape', '--no-wd', '--mixup',
                               '--label-smooth', '--amp', '--horovod', '--warmup-epochs', '2',
                               '--warmup-lr', '0.0001', '--start-epoch', '3'])
    assert flags.syncbn and flags.no_random_shape and flags.no_wd and flags.mixup
    assert flags.label_smooth and flags.amp and flags.horovod and flags.lr_warmup == 2
    assert script.network_name(flags) == 'yolo3_darknet53_voc'
    assert script.network_name(script.parse_args(['--dataset', 'demo'])) == \
        'yolo3_darknet53_custom'


def test_schedule_in_gluoncvs_terms():
    args = script.parse_args(['--warmup-lr', '0.0001', '--warmup-epochs', '2',
                              '--lr-decay-period', '30', '--epochs', '100'])
    assert script.schedule(args) == {'warmup_factor': 0.1, 'lr_decay_epoch': (30, 60, 90)}
    args = script.parse_args(['--num-samples', '640', '--batch-size', '64', '--warmup-epochs',
                              '2'])
    assert script.schedule(args) == {'lr_decay_iters': (1600, 1800), 'warmup_iters': 20,
                                     'warmup_epochs': 0.0}
    with pytest.raises(UserError, match='--num-samples .* --lr-mode cosine'):
        script.schedule(script.parse_args(['--num-samples', '640', '--lr-mode', 'cosine']))


class _Built(Exception):
    pass


@pytest.mark.parametrize('argv, zoom, thresh', [([], True, None),
                                                 (['--no-zoom', '--anchor-iou-thresh', '0.2'],
                                                  False, 0.2)])
def test_gluondets_flags_reach_the_task(argv, zoom, thresh, monkeypatch, tmp_path):
    def fit(task, config):
        raise _Built(task)
    monkeypatch.setattr(script, 'fit', fit)
    with pytest.raises(_Built) as built:
        script.main(['--dataset', 'demo', '--gpus', '', '--no-pretrained-base',
                     '--network', 'mobilenet0.5', '--save-prefix', str(tmp_path) + '/'] + argv)
    task = built.value.args[0]
    assert task.zoom is zoom and task.train_transform().zoom is zoom
    assert task.anchor_iou_thresh == thresh


@pytest.mark.parametrize('argv, expected', [
    (['--network', 'resnet50'], "unknown --network 'resnet50'; YOLOv3 has darknet53, "
                                'mobilenet0.25, mobilenet0.5, mobilenet1.0'),
    (['--dali', '--dataset', 'demo', '--gpus', ''], '--dali: YOLOv3 makes its targets in the '
                                                    'data loader'),
])
def test_mistakes_are_one_line(argv, expected, capsys):
    assert gluondet_cli.main(['train', 'yolo3'] + argv) == 1
    err = capsys.readouterr().err
    assert 'Traceback' not in err and expected in err, err


def test_an_epoch_at_random_shapes_with_mixup_then_a_resume(tmp_path):
    """GluonCV's multi-scale training (a size of 320 to 608 every 10 batches) with mixup, as
    typed; then ``--resume auto`` trains one more epoch."""
    out, log = run_cpu_command(SCRIPT, SMALL + ['--epochs', '1', '--mixup',
                                                '--no-mixup-epochs', '0'],
                               tmp_path, 'yolo3_mobilenet0.5_custom', train=16, val=4)
    assert 'mixup=True' in log and 'loss_obj=' in log
    last = tmp_path / 'yolo3_mobilenet0.5_custom_last.json'
    assert json.loads(last.read_text())['epoch'] == 1
    again = run_on_small_demo(SCRIPT, SMALL + ['--epochs', '2', '--resume', 'auto'], tmp_path,
                              train=16, val=4)
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'Start training from [Epoch 1]' in again.stderr
    assert json.loads(last.read_text())['epoch'] == 2


def make_task(num_images=8):
    """The demo network on small demo images, sizes of 64 to 128 px every 2 batches, label
    smoothing (factory for check_resume)."""
    train = DemoDetection('train', num_images=num_images, image_size=96)
    val = DemoDetection('val', num_images=4, image_size=96)
    task = YOLO3Task('yolo3_mobilenet0.5_custom', train, val, 96, random_shapes=(64, 96, 128),
                     label_smooth=True, pretrained_base=False)
    task.train_size_interval = 2
    return task


# 8 images, batch 2: 4 steps an epoch, a new size every 2 steps; the child pauses at step 6
# (epoch 2, batch 2) after the checkpoint at step 5, mid size block, mixup in epoch 1 only.
RESUME_CONFIG = TrainConfig(batch_size=2, num_workers=0, epochs=2, lr=0.005, warmup_iters=4,
                            mixup=True, no_mixup_epochs=1, log_interval=1, save_interval=0,
                            val_interval=0, checkpoint_interval=5, seed=7)


def test_yolo3_resume_after_kill_9_equals_the_straight_run(tmp_path):
    """With the model EMA, whose averaged weights are in the checkpoint's states file."""
    config = dataclasses.replace(RESUME_CONFIG, ema=True, ema_decay=0.9)
    report = check_resume('test_train_yolo3_script:make_task', config, str(tmp_path),
                          kill_signal=signal.SIGKILL, pythonpath=[HERE])
    assert (report['paused_at'], report['resumed_from']) == (6, 5)
    assert report['params_diff'] <= 1e-6 and report['states_diff'] <= 1e-6
    assert read_manifest(str(tmp_path / 'resumed' / 'run_last.json'))['hooks']['EMAHook'] == {
        'updates': 8}
