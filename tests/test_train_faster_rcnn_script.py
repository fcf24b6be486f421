"""scripts/train_faster_rcnn.py: GluonCV's flags and defaults, per-dataset defaults, notices,
refusals, network names, a CPU run end to end; mixup in the task; exact resume after kill -9."""
import argparse
import ast
import logging
import os
import signal
import sys
import types

import mxnet as mx
import numpy as np
import pytest

from gluondet.errors import UserError
from gluondet.data import DemoDetection
from gluondet.engine import SampleIndex, TrainConfig
from gluondet.engine.testing import check_resume
from gluondet.tasks import FasterRCNNTask
from gluondet.train import common, config as train_config
from script_runs import run, run_cpu_command

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, 'scripts', 'train_faster_rcnn.py')

# GluonCV 0.10.5 scripts/detection/faster_rcnn/train_faster_rcnn.py, parse_args: every flag
# and its default ('' marks the per-dataset ones, filled after parsing).
GLUONCV_FLAGS = {
    '--network': 'resnet50_v1b', '--dataset': 'voc', '--num-workers': 4, '-j': 4,
    '--batch-size': 1, '--gpus': '0', '--epochs': '', '--resume': '', '--start-epoch': 0,
    '--lr': '', '--lr-decay': 0.1, '--lr-decay-epoch': '', '--lr-warmup': '',
    '--lr-warmup-factor': 1. / 3., '--momentum': 0.9, '--wd': '', '--log-interval': 100,
    '--save-prefix': '', '--save-interval': 1, '--val-interval': 1, '--seed': 233,
    '--verbose': False, '--mixup': False, '--no-mixup-epochs': 20, '--norm-layer': None,
    '--rpn-smoothl1-rho': 1. / 9., '--rcnn-smoothl1-rho': 1., '--use-fpn': False,
    '--disable-hybridization': False, '--static-alloc': False, '--amp': False,
    '--horovod': False, '--executor-threads': 1, '--kv-store': 'nccl',
}
PER_DATASET = {'--epochs', '--lr', '--lr-decay-epoch', '--lr-warmup', '--wd'}
# Unset here, with GluonCV's meaning of its default: --batch-size, one image per device (and
# per horovodrun process); --gpus, GPU 0 (the CPU, after a warning, on a machine without one).
UNSET_WITH_GLUONCV_MEANING = {'--batch-size', '--gpus'}
# Its `custom-model` subcommand's (GluonCV uses them for custom_faster_rcnn_fpn only; here
# unset sizes mean the network's own, GluonCV's per zoo name).
GLUONCV_CUSTOM_MODEL = {'--no-pretrained-base': False, '--image-short': '800',
                        '--image-max-size': 1333}
OURS_FOR_CUSTOM_MODEL = {'--no-pretrained-base': False, '--image-short': None,
                         '--image-max-size': None}
# Flags the issue asks for that GluonCV's Faster R-CNN script lacks, from its other scripts.
GLUONCV_ELSEWHERE = {'--dataset-root': '~/.mxnet/datasets/',   # ssd/train_ssd.py
                     '--clip-gradient': -1.}                   # mask_rcnn/train_mask_rcnn.py
# Its parse_args after parsing, per --dataset.
GLUONCV_DATASET_DEFAULTS = {
    'voc': dict(epochs=20, lr=0.001, lr_decay_epoch='14,20', lr_warmup=-1, wd=5e-4),
    'coco': dict(epochs=26, lr=0.00125, lr_decay_epoch='17,23', lr_warmup=1000, wd=1e-4),
}


def _script():
    from gluondet.train import faster_rcnn
    return faster_rcnn


def _parse(*argv):
    return _script().parse_args(list(argv))


def _parser_defaults(argv_parser):
    """``{option string: default}`` of a parser, a store_false flag as 'set' = not default."""
    out = {}
    for action in argv_parser._actions:
        default = action.default
        if isinstance(action, argparse._StoreFalseAction):
            default = not default
        for option in action.option_strings:
            out[option] = default
    return out


def test_every_gluoncv_flag_with_its_default():
    ours = _parser_defaults(_script().build_parser())
    for flag, default in GLUONCV_FLAGS.items():
        assert flag in ours, flag
        unset = flag in PER_DATASET or flag in UNSET_WITH_GLUONCV_MEANING
        expected = None if unset else default
        assert ours[flag] == (pytest.approx(expected) if isinstance(expected, float)
                              else expected), flag
    for flag, default in dict(OURS_FOR_CUSTOM_MODEL, **GLUONCV_ELSEWHERE).items():
        assert ours[flag] == default, flag
    script = _script()
    assert script.DATASET_DEFAULTS == GLUONCV_DATASET_DEFAULTS


def _gluoncv_parse_args(path):
    """GluonCV's parse_args, run from its script's source; returns (parser, parse)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                    and n.name == 'parse_args')
    made = []

    class Recording(argparse.ArgumentParser):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    namespace = {'argparse': argparse.Namespace(ArgumentParser=Recording), 'hvd': None}
    exec(compile(ast.Module([function], []), path, 'exec'), namespace)

    def parse(*argv):
        saved, sys.argv = sys.argv, ['train_faster_rcnn.py'] + list(argv)
        try:
            return namespace['parse_args']()
        finally:
            sys.argv = saved
    parse()
    return made[0], made[1], parse


@pytest.mark.skipif(not os.environ.get('GLUONCV_SCRIPT'),
                    reason='set GLUONCV_SCRIPT to GluonCV\'s train_faster_rcnn.py to compare')
def test_the_table_is_gluoncvs_own_parse_args():
    """The tables above against GluonCV's script itself (its parse_args run from source)."""
    main, custom, parse = _gluoncv_parse_args(os.environ['GLUONCV_SCRIPT'])
    theirs = {k: v for k, v in _parser_defaults(main).items() if k not in ('-h', '--help')}
    assert theirs == GLUONCV_FLAGS
    custom = _parser_defaults(custom)
    assert {k: custom[k] for k in GLUONCV_CUSTOM_MODEL} == GLUONCV_CUSTOM_MODEL
    for dataset, expected in GLUONCV_DATASET_DEFAULTS.items():
        args = parse('--dataset', dataset)
        assert {k: getattr(args, k) for k in expected} == expected


def test_dataset_defaults_fill_only_unset_flags_and_say_so():
    script = _script()
    args = _parse('--dataset', 'coco', '--lr', '0.02', '--epochs', '3')
    before = dict(vars(args))
    resolved, message = train_config.dataset_defaults(args, script.DATASET_DEFAULTS, 'voc')
    assert vars(args) == before and args.wd is None         # the parsed args stay as parsed
    assert (resolved.lr, resolved.epochs) == (0.02, 3)
    assert (resolved.wd, resolved.lr_decay_epoch, resolved.lr_warmup) == (1e-4, '17,23', 1000)
    assert message == ("GluonCV's coco defaults for the flags left unset: "
                       '--lr-decay-epoch 17,23, --lr-warmup 1000, --wd 0.0001')
    config = train_config.train_config(resolved, 'x')
    assert (config.warmup_iters, config.warmup_epochs, config.lr_decay_epoch) == (1000, 0, (17, 23))
    resolved, message = train_config.dataset_defaults(_parse('--dataset', 'demo'),
                                             script.DATASET_DEFAULTS, 'voc')
    assert message.startswith("GluonCV has none for --dataset demo; its voc defaults")
    config = train_config.train_config(resolved, 'x')
    assert (config.epochs, config.lr, config.wd, config.warmup_iters) == (20, 0.001, 5e-4, 0)
    everything = ('--epochs', '2', '--lr', '0.1', '--lr-decay-epoch', '1', '--lr-warmup', '5',
                  '--wd', '0')
    assert train_config.dataset_defaults(_parse(*everything), script.DATASET_DEFAULTS,
                                         'voc')[1] == ''


def test_new_engine_flags_reach_the_config():
    args = _parse('--dataset', 'demo', '--no-wd', '--clip-gradient', '5', '--mixup',
                  '--no-mixup-epochs', '3', '--lr-warmup-factor', '0.1', '--lr-warmup', '50',
                  '--disable-hybridization')
    resolved, _ = train_config.dataset_defaults(args, _script().DATASET_DEFAULTS, 'voc')
    config = train_config.train_config(resolved, 'x')
    assert (config.no_wd, config.clip_gradient, config.mixup, config.no_mixup_epochs) == (
        True, 5.0, True, 3)
    assert (config.warmup_factor, config.warmup_iters, config.hybridize) == (0.1, 50, False)


@pytest.mark.parametrize('argv, name', [
    ((), 'faster_rcnn_resnet50_v1b_voc'),
    (('--dataset', 'coco'), 'faster_rcnn_resnet50_v1b_coco'),
    (('--dataset', 'coco', '--use-fpn'), 'faster_rcnn_fpn_resnet50_v1b_coco'),
    (('--use-fpn',), 'faster_rcnn_fpn_resnet50_v1b_custom'),          # GluonCV has no FPN VOC
    (('--network', 'resnet18_v1b', '--dataset', 'voc'), 'faster_rcnn_resnet18_v1b_custom'),
    (('--classes', 'a,b'), 'faster_rcnn_resnet50_v1b_custom'),
    (('--dataset', 'coco', '--train-json', 'a.json', '--val-json', 'b.json'),
     'faster_rcnn_resnet50_v1b_custom'),
    (('--network', 'resnet18_v1b', '--use-fpn', '--dataset', 'demo'),
     'faster_rcnn_fpn_resnet18_v1b_custom'),
    (('--dataset', 'kitti'), 'faster_rcnn_resnet50_v1b_custom'),
    (('--dataset', 'coco', '--use-fpn', '--norm-layer', 'syncbn'),
     'faster_rcnn_fpn_syncbn_resnet50_v1b_coco'),
    (('--dataset', 'coco', '--norm-layer', 'syncbn'),                 # FPN implied
     'faster_rcnn_fpn_syncbn_resnet50_v1b_coco'),
    (('--network', 'resnet18_v1b', '--dataset', 'demo', '--norm-layer', 'syncbn'),
     'faster_rcnn_fpn_syncbn_resnet18_v1b_custom'),
])
def test_network_names_as_gluoncv(argv, name):
    assert _script().network_name(_parse(*argv)) == name


def test_notices_for_fallbacks_and_flags_the_engine_does_not_need():
    script = _script()
    args = _parse('--dataset', 'demo')
    assert script.notices(args, script.network_name(args)) == []
    args = _parse('--use-fpn', '--executor-threads', '4', '--static-alloc')
    lines = script.notices(args, script.network_name(args))
    assert lines[0] == ('GluonCV has no faster_rcnn_fpn_resnet50_v1b_voc: training '
                        'faster_rcnn_fpn_resnet50_v1b_custom on the voc classes')
    assert lines[1].startswith('--executor-threads 4: ignored, MXNet already runs')
    assert lines[2].startswith('--static-alloc: ignored, the engine always hybridizes')
    assert len(lines) == 3
    args = _parse('--dataset', 'coco', '--norm-layer', 'syncbn')
    assert script.notices(args, script.network_name(args)) == [
        '--norm-layer syncbn: training faster_rcnn_fpn_syncbn_resnet50_v1b_coco, with FPN '
        '(GluonCV has synchronized BatchNorm only with FPN)']


def test_the_log_gets_the_lines_and_with_verbose_the_trainable_parameters(caplog):
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(2, in_units=3), mx.gluon.nn.Dense(1, in_units=2))
    net.initialize()
    frozen = next(iter(net.collect_params().values()))
    frozen.grad_req = 'null'
    hook = common.StartupLog(['a notice', ''], trainable=True)
    hook.loop = types.SimpleNamespace(net=net)
    with caplog.at_level(logging.INFO, logger='gluondet'):
        hook.before_train()
    assert caplog.messages[0] == 'a notice'
    assert caplog.messages[1].startswith('Trainable parameters (3): ')
    assert frozen.name not in caplog.messages[1] and len(caplog.messages) == 2


@pytest.mark.parametrize('argv, message', [
    (('--kv-store', 'dist_sync'), 'kv_store dist_sync: this process was not started by '
                                  'a parameter-server launcher'),
    (('--horovod', '--gpus', '0'), '--gpus (gpus) 0 asks for GPU 0, but this machine has no '
                                   'GPU'),
    (('--network', 'resnet152_v1d'), 'no Faster R-CNN on --network resnet152_v1d in gluondet'),
    (('--network', 'resnet34_v1b', '--norm-layer', 'syncbn'),
     'no Faster R-CNN on --network resnet34_v1b with --norm-layer syncbn in gluondet; it has '
     'resnet18_v1b, resnet50_v1b'),
])
def test_refusals_are_one_line_without_a_traceback(argv, message, tmp_path):
    out = run(SCRIPT, '--dataset', 'demo', '--gpus', '', *argv, cwd=str(tmp_path),
           env=dict(os.environ, GLUONDET_HOME=str(tmp_path)))
    assert out.returncode != 0
    assert 'Traceback' not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_a_bad_flag_value_is_one_line():
    resolved, _ = train_config.dataset_defaults(_parse('--lr-decay-epoch', '3,x'),
                                       _script().DATASET_DEFAULTS, 'voc')
    with pytest.raises(UserError, match='--lr-decay-epoch must be comma-separated'):
        train_config.train_config(resolved, 'x')
    resolved, _ = train_config.dataset_defaults(_parse('--lr', '-1'), _script().DATASET_DEFAULTS,
                                                'voc')
    with pytest.raises(UserError, match='--lr must be > 0'):
        train_config.train_config(resolved, 'x')


# The documented CPU command, run as written in a subprocess; only the demo set is smaller
# (DemoDetection's default size is patched in that process, the command line is the same).
CPU_COMMAND = ['--network', 'resnet18_v1b', '--use-fpn', '--dataset', 'demo', '--gpus', '',
               '--epochs', '1', '--no-pretrained-base', '--image-short', '128',
               '--image-max-size', '160']


def test_cpu_command_trains_validates_and_logs_its_defaults(tmp_path):
    name = 'faster_rcnn_fpn_resnet18_v1b_custom'
    stdout, log = run_cpu_command(SCRIPT, CPU_COMMAND, tmp_path, name, 12, 6)
    assert ("GluonCV has none for --dataset demo; its voc defaults for the flags left unset: "
            '--lr 0.001, --lr-decay-epoch 14,20, --lr-warmup -1, --wd 0.0005') in log
    assert "epochs=1, " in log and 'batch_size=1, ' in log
    assert 'static_alloc=True, ' in log     # always, whatever GluonCV's --static-alloc says
    assert (tmp_path / (name + '_0000_%s.params' % stdout.split('mAP=')[1][:6])).exists()


def make_task(num_images=8, image_size=96):
    """A handful of small demo images on the FPN ResNet-18 (factory for check_resume)."""
    train = DemoDetection('train', num_images=num_images, image_size=image_size)
    val = DemoDetection('val', num_images=4, image_size=image_size)
    return FasterRCNNTask('faster_rcnn_fpn_resnet18_v1b_custom', train, val, short=image_size,
                          max_size=128, pretrained_base=False)


def test_mixup_blends_at_half_and_halves_each_loss():
    """GluonCV's Faster R-CNN mixes at a fixed 0.5 and multiplies the losses by it."""
    task = make_task(num_images=4)
    dataset = task.train_dataset()
    image, label = dataset[SampleIndex(1, 0, mixup=False)]
    assert label.shape[1] == 7 and np.all(label[:, 6] == 1)
    mixed_image, mixed = dataset[SampleIndex(1, 0, mixup=True)]
    assert np.all(mixed[:, 6] == 0.5) and len(mixed) > len(label)
    net = task.build_net([mx.cpu()])
    parts = [task.train_batchify([(image, label), (mixed_image, mixed)])]
    with mx.autograd.record():
        losses = task.losses(net, parts)
    assert set(losses) == {'loss_rpn_obj', 'loss_rpn_box', 'loss_cls', 'loss_box'}
    assert all(np.isfinite(v[0].asnumpy()).all() for v in losses.values())
    task.loss = lambda *outputs: {'loss_cls': [mx.nd.ones((2,))]}      # the weights alone
    with mx.autograd.record():
        weighted = task.losses(net, parts)['loss_cls'][0]
    np.testing.assert_array_equal(weighted.asnumpy(), [1, 0.5])


# 8 images, batch 2: 4 steps per epoch; the child pauses at step 6 (epoch 2, batch 2) after
# the checkpoint at step 5, so the kill -9 loses a step. Mixup in both epochs, a warmup in
# iterations, no wd on biases and clipping: the features the script adds, resumed exactly.
RESUME_CONFIG = TrainConfig(batch_size=2, num_workers=0, epochs=2, lr=0.01, lr_decay_epoch=(1,),
                            warmup_iters=4, warmup_factor=0.25, no_wd=True, clip_gradient=2.0,
                            mixup=True, no_mixup_epochs=0, log_interval=1, save_interval=0,
                            val_interval=0, checkpoint_interval=5, seed=5)


def test_faster_rcnn_resume_after_kill_9_equals_the_straight_run(tmp_path):
    report = check_resume('test_train_faster_rcnn_script:make_task', RESUME_CONFIG,
                          str(tmp_path), kill_signal=signal.SIGKILL, pythonpath=[HERE])
    assert (report['paused_at'], report['resumed_from']) == (6, 5)
    assert report['params_diff'] <= 1e-6
    assert report['states_diff'] <= 1e-6


def test_roi_align_trains_with_the_sparse_backward_on_cpus_in_any_number_of_processes():
    """One CPU process or several (Horovod, the parameter server): the sparse backward (see
    FasterRCNNTask.build_net)."""
    from gluondet import collectives
    assert make_task(num_images=2).build_net([mx.cpu()]).roi_extractor.sparse_backward
    with collectives.activated(types.SimpleNamespace(world_size=2, synchronous=True)):
        net = make_task(num_images=2).build_net([mx.cpu()])
    assert net.roi_extractor.sparse_backward
