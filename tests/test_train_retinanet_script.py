"""train_retinanet.py (gluondet.train.retinanet): its flags (ODTK's and TAO's names), their
translation into the task and config, refusals in one line, and the documented CPU command run
as written."""
import os

import pytest

from gluondet.errors import UserError
from gluondet.train import config as train_config, retinanet
from script_runs import run, run_cpu_command

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, '..', 'scripts', 'train_retinanet.py')


def _script():
    return retinanet


def _parse(*argv):
    return _script().parse_args(list(argv))


def test_defaults_and_odtk_flags():
    args = _parse()
    # unset --batch-size: ODTK's two images per device (GPU, horovodrun process)
    assert (args.network, args.batch_size, args.batch_per_device, args.resize, args.max_size,
            args.jitter) == ('resnet50_v1b', None, 2, None, None, None)
    assert (args.focal_alpha, args.focal_gamma, args.smoothl1_beta, args.loss_loc_weight) == (
        0.25, 2.0, 0.11, 1.0)
    args = _parse('--backbone', 'resnet18_v1b', '--jitter', '640', '800', '--anchor-scales',
                  '1,1.5', '--anchor-ratios', '0.5,1', '--class-weights', 'car=2,person=0.5')
    assert args.network == 'resnet18_v1b' and args.jitter == [640, 800]
    assert _script().model_kwargs(args) == {'scales': (1.0, 1.5), 'ratios': (0.5, 1.0)}
    assert _script().model_kwargs(_parse()) == {}
    head = _parse('--anchor-base', '2', '--fpn-channels', '128', '--head-channels', '64',
                  '--head-layers', '2', '--head-norm', 'group', '--head-init', 'msra')
    assert _script().model_kwargs(head) == dict(anchor_base=2.0, fpn_channels=128,
                                                head_channels=64, head_layers=2,
                                                head_norm='group', head_init='msra')
    assert args.class_weights == {'car': 2.0, 'person': 0.5}
    assert _script().weights_of(('person', 'car', 'bike'), args.class_weights) == [0.5, 2.0, 1.0]
    with pytest.raises(UserError, match='--class-weights names dog'):
        _script().weights_of(('person',), {'dog': 1.0})


@pytest.mark.parametrize('argv', [('--class-weights', 'car'), ('--class-weights', 'car=-1'),
                                  ('--anchor-scales', '1,x'), ('--jitter', '640'),
                                  ('--head-norm', 'layer')])
def test_bad_values_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit):
        _parse(*argv)
    assert 'error:' in capsys.readouterr().err


def test_network_names():
    script = _script()
    assert script.network_name(_parse('--dataset', 'coco')) == 'retinanet_resnet50_v1b_coco'
    assert script.network_name(_parse('--network', 'mobilenet1.0', '--dataset', 'voc')) == \
        'retinanet_mobilenet1.0_voc'
    assert script.network_name(_parse('--dataset', 'demo')) == 'retinanet_resnet50_v1b_custom'
    with pytest.raises(UserError, match='no RetinaNet on --network vgg16'):
        script.network_name(_parse('--network', 'vgg16'))


def test_dataset_defaults_are_odtks_and_say_so():
    resolved, message = train_config.dataset_defaults(_parse('--dataset', 'demo', '--lr', '0.02'),
                                             _script().DATASET_DEFAULTS, 'coco', origin='ODTK')
    assert resolved.lr == 0.02 and resolved.epochs == 12 and resolved.lr_warmup == 1000
    assert message.startswith('ODTK has none for --dataset demo; its coco defaults')


@pytest.mark.parametrize('argv, message', [
    (('--kv-store', 'dist_async'), 'kv_store dist_async: this process was not started by'),
    (('--syncbn', '--kv-store', 'dist_sync'), 'not started by a parameter-server launcher'),
    (('--network', 'vgg16'), 'no RetinaNet on --network vgg16 in gluondet'),
])
def test_refusals_are_one_line_without_a_traceback(argv, message, tmp_path):
    out = run(SCRIPT, '--dataset', 'demo', '--gpus', '', *argv, cwd=str(tmp_path),
           env=dict(os.environ, GLUONDET_HOME=str(tmp_path)))
    assert out.returncode != 0 and 'Traceback' not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


# The documented CPU command, as written; only the demo set is smaller (patched in the process).
CPU_COMMAND = ['--network', 'resnet18_v1b', '--dataset', 'demo', '--gpus', '', '--epochs', '1',
               '--no-pretrained-base', '--resize', '128', '--max-size', '256']


def test_cpu_command_trains_validates_and_logs_its_defaults(tmp_path):
    name = 'retinanet_resnet18_v1b_custom'
    stdout, log = run_cpu_command(SCRIPT, CPU_COMMAND, tmp_path, name, 8, 4)
    assert 'ODTK has none for --dataset demo; its coco defaults for the flags left unset' in log
    assert 'epochs=1, ' in log and 'batch_size=2, ' in log
    assert (tmp_path / (name + '_0000_%s.params' % stdout.split('mAP=')[1][:6])).exists()


def _kitti_copy(dataset, folder, rename):
    """``dataset`` as a KITTI split: ``image_2`` and ``label_2``, types renamed by ``rename``."""
    import shutil
    from gluondet.data.kitti import kitti_line
    for sub in ('image_2', 'label_2'):
        os.makedirs(os.path.join(folder, sub))
    for i in range(len(dataset)):
        image = dataset.image_path(i)
        stem = '%06d' % i
        shutil.copy(image, os.path.join(folder, 'image_2', stem + os.path.splitext(image)[1]))
        with open(os.path.join(folder, 'label_2', stem + '.txt'), 'w') as f:
            for row in dataset.label(i):
                f.write(kitti_line(rename(dataset.classes[int(row[4])], i), row[:4]) + '\n')


def test_kitti_folder_with_a_many_to_one_mapping_trains(tmp_path):
    """TAO's input: KITTI ``training/`` and ``val/``, several types per class."""
    from gluondet.data import DemoDetection
    home = tmp_path / 'home'
    train = DemoDetection('train', num_images=6, seed=0, root=str(home / 'demo'))
    val = DemoDetection('val', num_images=3, seed=0, root=str(home / 'demo'))
    # circles are written as 'Ring' or 'Disc' (two KITTI types, one class); stars are dropped
    rename = {'circle': lambda i: ('Ring', 'Disc')[i % 2]}
    for dataset, split in ((train, 'training'), (val, 'val')):
        _kitti_copy(dataset, str(tmp_path / 'kitti' / split),
                    lambda name, i: rename.get(name, lambda i: name)(i))
    mapping = 'ring=circle,disc=circle,square=square,triangle=triangle,cross=cross'
    out = run(SCRIPT, '--network', 'resnet18_v1b', '--dataset', 'kitti', '--dataset-root',
              str(tmp_path / 'kitti'), '--class-mapping', mapping, '--gpus', '', '--epochs', '1',
              '--no-pretrained-base', '--resize', '128', '--max-size', '128', '-j', '0',
              cwd=str(tmp_path), env=dict(os.environ, GLUONDET_HOME=str(home)))
    assert out.returncode == 0, out.stderr[-3000:]
    names = [kv.split('=')[0] for kv in out.stdout.split('final: ')[1].strip().split(', ')]
    assert names == ['AP/circle', 'AP/square', 'AP/triangle', 'AP/cross', 'mAP']


def test_tao_options_reach_the_config_and_the_task():
    script = _script()
    args = _parse('--regularizer', 'l2', '--reg-weight', '1e-4', '--nesterov')
    assert script.regularization(args)[:2] == ({'wd': 2e-4}, 0.0)
    args = _parse('--regularizer', 'l1', '--reg-weight', '1e-4')
    overrides, l1, line = script.regularization(args)
    assert (overrides, l1) == ({'wd': 0.0}, 1e-4) and 'loss_reg' in line
    assert script.regularization(_parse())[:2] == ({}, 0.0)
    args = _parse('--freeze-bn', '--freeze-blocks', '0,1', '--lr-mode', 'soft_start_annealing',
                  '--lr-min', '1e-5', '--soft-start', '0.2', '--annealing', '0.5')
    assert args.freeze_bn is True and args.freeze_blocks == (0, 1)
    assert _parse('--freeze-bn', 'false').freeze_bn is False and _parse().freeze_bn is None
    resolved, _ = train_config.dataset_defaults(args, script.DATASET_DEFAULTS, 'coco',
                                                origin='ODTK')
    config = train_config.train_config(resolved, 'x', optimizer='nag')
    assert (config.lr_mode, config.lr_min, config.soft_start, config.annealing,
            config.optimizer) == ('soft_start_annealing', 1e-5, 0.2, 0.5, 'nag')


def test_freeze_blocks_on_mobilenet_is_refused_in_one_line(tmp_path):
    out = run(SCRIPT, '--dataset', 'demo', '--gpus', '', '--network', 'mobilenet1.0',
              '--freeze-blocks', '0', cwd=str(tmp_path),
              env=dict(os.environ, GLUONDET_HOME=str(tmp_path)))
    assert out.returncode != 0 and 'Traceback' not in out.stderr
    assert '--freeze-blocks needs a ResNet backbone' in out.stderr


def test_odtk_iteration_schedule_flags():
    script = _script()
    args = _parse('--iters', '1000', '--milestones', '600,800', '--schedule', '0.5',
                  '--val-iters', '100', '--warmup', '50')
    assert script.iteration_schedule(args) == {'max_iters': 500, 'lr_decay_iters': (300, 400),
                                               'val_iters': 100}
    assert args.lr_warmup == 50
    resolved, _ = train_config.dataset_defaults(args, script.DATASET_DEFAULTS, 'coco',
                                                origin='ODTK')
    config = train_config.train_config(resolved, 'x', **script.iteration_schedule(args))
    assert (config.max_iters, config.lr_decay_iters, config.warmup_iters) == (500, (300, 400), 50)
    assert script.iteration_schedule(_parse()) == {}
    with pytest.raises(UserError, match='--milestones go with --iters'):
        script.iteration_schedule(_parse('--milestones', '5'))
