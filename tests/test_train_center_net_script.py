"""scripts/train_center_net.py: GluonCV's train_center_net.py flags and defaults, the
refusals, an epoch of the demo data as a user runs it then a resume, and a kill -9 resume
that ends where the straight run does."""
import json
import os
import signal

import pytest

from gluondet.engine import TrainConfig
from gluondet.engine.testing import check_resume
from gluondet.errors import UserError
from gluondet.train import center_net as script
from script_runs import run_cpu_command, run_on_small_demo

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, 'scripts', 'train_center_net.py')
NAME = 'center_net_mobilenet0.5_custom'
SMALL = ['--backbone', 'mobilenet0.5', '--data-shape', '128', '--batch-size', '4',
         '--dataset', 'demo', '--gpus', '', '--no-pretrained-base', '-j', '0',
         '--warmup-epochs', '1', '--lr', '0.002', '--save-interval', '0']


def test_gluoncv_flags_and_defaults():
    args = script.parse_args([])
    assert (args.network, args.data_shape, args.batch_size, args.epochs, args.lr,
            args.lr_mode, args.lr_decay, args.lr_decay_epoch, args.warmup_lr, args.lr_warmup,
            args.momentum, args.wd, args.log_interval, args.save_interval, args.val_interval,
            args.seed, args.num_samples, args.num_workers, args.wh_weight,
            args.center_reg_weight, args.flip_validation, args.resume, args.start_epoch) == (
        'resnet18_v1b', 512, 32, 140, 1.25e-4, 'step', 0.1, '90,120', 0.0, 0.0, 0.9, 1e-4,
        100, 10, 1, 233, -1, 4, 0.1, 1.0, False, '', 0)
    flags = script.parse_args(['--syncbn', '--amp', '--horovod', '--kv-store', 'dist_sync',
                               '--flip-validation', '--warmup-epochs', '2', '--resume', 'auto',
                               '--network', 'dla34'])
    assert flags.syncbn and flags.amp and flags.horovod and flags.flip_validation
    assert flags.kv_store == 'dist_sync' and flags.lr_warmup == 2 and flags.resume == 'auto'
    assert script.network_name(flags) == 'center_net_dla34_voc'
    assert script.network_name(script.parse_args(['--dataset', 'coco'])) == \
        'center_net_resnet18_v1b_coco'
    assert script.network_name(script.parse_args(['--dataset', 'demo'])) == \
        'center_net_resnet18_v1b_custom'
    # gluondet's small network has a custom preset only
    assert script.network_name(script.parse_args(['--network', 'mobilenet0.5'])) == NAME
    for name, dataset in (('center_net_resnet18_v1b_voc', 'voc'), (NAME, 'demo'),
                          ('center_net_mobilenetv3_small_duc_coco', 'coco')):
        argv = script.network_flags(name) + ['--dataset', dataset]
        assert script.network_name(script.parse_args(argv)) == name


def test_gluoncvs_schedule_and_optimizer_reach_the_config():
    """Adam, the warmup from 0 (GluonCV's LRScheduler('linear', base_lr=0)), --warmup-lr,
    --num-samples's epochs of that many images."""
    args = script.parse_args(['--warmup-epochs', '2'])
    config = script.config.train_config(args, 'x', **script.schedule(args))
    assert (config.optimizer, config.warmup_factor, config.warmup_epochs, config.wd,
            config.lr_decay_epoch) == ('adam', 0.0, 2.0, 1e-4, (90, 120))
    args = script.parse_args(['--warmup-lr', '2.5e-5'])
    assert script.schedule(args) == {'optimizer': 'adam', 'warmup_factor': 0.2}
    args = script.parse_args(['--num-samples', '640', '--batch-size', '64', '--warmup-epochs',
                              '2'])
    assert script.schedule(args) == {'optimizer': 'adam', 'lr_decay_iters': (900, 1200),
                                     'warmup_iters': 20, 'warmup_epochs': 0.0}
    with pytest.raises(UserError, match='--num-samples .* --lr-mode cosine'):
        script.schedule(script.parse_args(['--num-samples', '640', '--lr-mode', 'cosine']))


class _Built(Exception):
    pass


def test_the_flags_reach_the_task(monkeypatch, tmp_path):
    def fit(task, config):
        raise _Built(task, config)
    monkeypatch.setattr(script, 'fit', fit)
    with pytest.raises(_Built) as built:
        script.main(['--dataset', 'demo', '--gpus', '', '--no-pretrained-base', '--network',
                     'mobilenet0.5', '--data-shape', '192', '--wh-weight', '0.2',
                     '--center-reg-weight', '0.5', '--flip-validation', '--syncbn',
                     '--save-prefix', str(tmp_path) + '/'])
    task, config = built.value.args
    assert (task.network, task.data_shape, task.flip_validation) == (NAME, 192, True)
    assert task.loss._weights == (1.0, 0.2, 0.5)
    assert task.model_kwargs == {'norm_layer': 'syncbn', 'size': 192}
    assert config.optimizer == 'adam' and config.save_prefix == str(tmp_path) + '/' + NAME


@pytest.mark.parametrize('argv, expected', [
    (['--network', 'darknet53'], "unknown --network 'darknet53'; CenterNet has dla34, "),
    (['--dataset', 'demo', '--gpus', '', '--data-shape', '16'], 'data_shape must be an int'),
])
def test_mistakes_are_one_line(argv, expected):
    with pytest.raises(UserError, match=expected):
        script.main(argv)


def test_an_epoch_as_typed_then_a_resume(tmp_path):
    """The demo data as a user types it, flipped validation; then ``--resume auto`` trains
    one more epoch."""
    out, log = run_cpu_command(SCRIPT, SMALL + ['--epochs', '1', '--flip-validation'],
                               tmp_path, NAME, train=16, val=4)
    assert "optimizer='adam'" in log and 'loss_heatmap=' in log and 'loss_wh=' in log
    last = tmp_path / (NAME + '_last.json')
    manifest = json.loads(last.read_text())
    assert manifest['epoch'] == 1 and manifest['meta']['model_kwargs'] == {'size': 128}
    again = run_on_small_demo(SCRIPT, SMALL + ['--epochs', '2', '--resume', 'auto'], tmp_path,
                              train=16, val=4)
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'Start training from [Epoch 1]' in again.stderr
    assert json.loads(last.read_text())['epoch'] == 2


def make_task():
    """The small network on 8 small demo images (factory for check_resume)."""
    from test_center_net_task import make_task as small
    return small(num_images=8, data_shape=96)


# 8 images, batch 2: 4 steps an epoch; the child pauses at step 6 (epoch 2, batch 2) after
# the checkpoint at step 5. Adam's states and update counts are in the checkpoint.
RESUME_CONFIG = TrainConfig(batch_size=2, num_workers=0, epochs=2, optimizer='adam', lr=2e-3,
                            wd=1e-4, warmup_iters=3, warmup_factor=0.0, log_interval=1,
                            save_interval=0, val_interval=0, checkpoint_interval=5, seed=7)


def test_center_net_resume_after_kill_9_equals_the_straight_run(tmp_path):
    report = check_resume('test_train_center_net_script:make_task', RESUME_CONFIG,
                          str(tmp_path), kill_signal=signal.SIGKILL, pythonpath=[HERE])
    assert (report['paused_at'], report['resumed_from']) == (6, 5)
    assert report['params_diff'] <= 1e-6 and report['states_diff'] <= 1e-6
