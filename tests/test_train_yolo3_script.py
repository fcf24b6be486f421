"""scripts/train_yolo3.py: GluonCV's train_yolo3.py flags and defaults, the refusals, and an
epoch of the demo data as a user runs it (multi-scale, mixup, resume)."""
import json
import os

import pytest

from gluondet import cli as gluondet_cli
from gluondet.errors import UserError
from gluondet.train import yolo3 as script
from script_runs import run_cpu_command, run_on_small_demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
