"""scripts/train_mask_rcnn.py: GluonCV's flags and defaults, a CPU run end to end (plain and
custom-model), exact resume after kill -9."""
import os
import signal

import pytest

from gluondet.data import DemoDetection
from gluondet.engine import TrainConfig
from gluondet.engine.testing import check_resume
from gluondet.tasks import MaskRCNNTask
from gluondet.train import mask_rcnn
from script_runs import run_cpu_command
from test_train_faster_rcnn_script import _parser_defaults

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), 'scripts', 'train_mask_rcnn.py')

# GluonCV's scripts/instance/mask_rcnn/train_mask_rcnn.py, parse_args: every flag and its
# default ('' marks those filled after parsing from the batch size, `_gluoncv_defaults`).
GLUONCV_FLAGS = {
    '--network': 'resnet50_v1b', '--dataset': 'coco', '--num-workers': 4, '-j': 4,
    '--batch-size': 8, '--gpus': '0', '--epochs': '', '--resume': '', '--start-epoch': 0,
    '--lr': '', '--lr-decay': 0.1, '--lr-decay-epoch': '', '--lr-warmup': '',
    '--lr-warmup-factor': 1. / 3., '--clip-gradient': -1.0, '--momentum': 0.9, '--wd': '',
    '--log-interval': 100, '--save-prefix': '', '--save-interval': 1, '--val-interval': 1,
    '--seed': 233, '--verbose': False, '--norm-layer': None, '--rpn-smoothl1-rho': 1. / 9.,
    '--rcnn-smoothl1-rho': 1.0, '--use-fpn': False, '--disable-hybridization': False,
    '--static-alloc': False, '--amp': False, '--horovod': False, '--use-ext': False,
    '--executor-threads': 1, '--kv-store': 'nccl'}
FILLED = {'--epochs', '--lr', '--lr-decay-epoch', '--lr-warmup', '--wd'}
# --gpus: GPU 0 as GluonCV (the CPU, after a warning, on a machine without one)
UNSET_WITH_GLUONCV_MEANING = {'--gpus'}
# Its custom-model subcommand's (less --no-pretrained-base, --image-short, --image-max-size,
# which it also has and gluondet takes on either side)
GLUONCV_CUSTOM_MODEL = {
    '--num-fpn-filters': 256, '--num-box-head-conv': 4, '--num-box-head-conv-filters': 256,
    '--num_box_head_dense_filters': 1024, '--nms-thresh': 0.5, '--nms-topk': -1,
    '--post-nms': -1, '--roi-mode': 'align', '--roi-size': '14,14',
    '--strides': '4,8,16,32,64', '--clip': 4.14, '--rpn-channel': 256, '--anchor-base-size': 16,
    '--anchor-aspect-ratio': '0.5,1,2', '--anchor-scales': '2,4,8,16,32',
    '--anchor-alloc-size': '384,384', '--rpn-nms-thresh': 0.7, '--rpn-train-pre-nms': 12000,
    '--rpn-train-post-nms': 2000, '--rpn-test-pre-nms': 6000, '--rpn-test-post-nms': 1000,
    '--rpn-min-size': 1, '--rcnn-num-samples': 512, '--rcnn-pos-iou-thresh': 0.5,
    '--rcnn-pos-ratio': 0.25, '--max-num-gt': 100, '--target-roi-scale': 2,
    '--num-mask-head-convs': 4}


def test_every_gluoncv_flag_with_its_default():
    parser = mask_rcnn.build_parser()
    ours = _parser_defaults(parser)
    for flag, default in GLUONCV_FLAGS.items():
        assert flag in ours, flag
        unset = flag in FILLED or flag in UNSET_WITH_GLUONCV_MEANING
        expected = None if unset else default
        assert ours[flag] == (pytest.approx(expected) if isinstance(expected, float)
                              else expected), flag
    custom = next(a for a in parser._actions if a.dest == 'custom_model').choices['custom-model']
    theirs = _parser_defaults(custom)
    for flag, default in GLUONCV_CUSTOM_MODEL.items():
        assert theirs[flag] == (pytest.approx(default) if isinstance(default, float)
                                else default), flag


CPU_COMMAND = ['--network', 'resnet18_v1b', '--use-fpn', '--dataset', 'demo', '--gpus', '',
               '--epochs', '1', '--no-pretrained-base', '--image-short', '128',
               '--image-max-size', '160', '--batch-size', '2']


def test_cpu_command_trains_validates_box_and_mask_ap_and_logs_its_defaults(tmp_path):
    name = 'mask_rcnn_fpn_resnet18_v1b_custom'
    stdout, log = run_cpu_command(SCRIPT, CPU_COMMAND, tmp_path, name, 8, 4)
    assert ("GluonCV has none for --dataset demo; its coco defaults for the flags left unset: "
            '--epochs 26') not in log      # --epochs was given
    assert '--lr 0.0025, --lr-decay-epoch 17,23, --lr-warmup 4000, --wd 0.0001' in log
    assert 'mask_AP=' in stdout and 'bbox_AP=' in stdout
    assert 'static_alloc=False, ' in log     # GluonCV's default: plain hybridize


def test_custom_model_command_trains_gluoncvs_custom_mask_rcnn_fpn_with_ema_static(tmp_path):
    argv = ['--network', 'resnet18_v1b', '--dataset', 'demo', '--gpus', '', '--epochs', '1',
            '--batch-size', '2', '--ema', '--static-alloc', 'custom-model',
            '--no-pretrained-base',
            '--image-short', '128',
            '--image-max-size', '160', '--num-fpn-filters', '64', '--rpn-channel', '64',
            '--num_box_head_dense_filters', '128', '--roi-size', '7,7',
            '--num-mask-head-convs', '1', '--rcnn-num-samples', '64',
            '--rpn-train-pre-nms', '1000', '--rpn-train-post-nms', '200',
            '--rpn-test-pre-nms', '500', '--rpn-test-post-nms', '100', '--post-nms', '50']
    stdout, log = run_cpu_command(SCRIPT, argv, tmp_path, 'custom_mask_rcnn_fpn', 8, 4)
    assert 'mask_AP=' in stdout and 'ema=True' in log and 'static_alloc=True, ' in log


def make_task(num_images=8, image_size=96):
    """A handful of small demo images on the FPN ResNet-18 (factory for check_resume)."""
    train = DemoDetection('train', num_images=num_images, image_size=image_size, masks=True)
    val = DemoDetection('val', num_images=4, image_size=image_size, masks=True)
    return MaskRCNNTask('mask_rcnn_fpn_resnet18_v1b_custom', train, val, short=image_size,
                        max_size=128, pretrained_base=False)


# 8 images, batch 2: 4 steps per epoch; the child pauses at step 6 after the checkpoint at
# step 5, so the kill -9 loses a step.
RESUME_CONFIG = TrainConfig(batch_size=2, num_workers=0, epochs=2, lr=0.01, lr_decay_epoch=(1,),
                            warmup_iters=4, warmup_factor=0.25, clip_gradient=2.0,
                            log_interval=1, save_interval=0, val_interval=0,
                            checkpoint_interval=5, seed=5)


def test_mask_rcnn_resume_after_kill_9_equals_the_straight_run(tmp_path):
    report = check_resume('test_train_mask_rcnn_script:make_task', RESUME_CONFIG,
                          str(tmp_path), kill_signal=signal.SIGKILL, pythonpath=[HERE])
    assert (report['paused_at'], report['resumed_from']) == (6, 5)
    assert report['params_diff'] <= 1e-6
    assert report['states_diff'] <= 1e-6
