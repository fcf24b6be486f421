"""scripts/train_retinanet.py: its flags (ODTK's and TAO's names), their translation into the
task and config, refusals in one line, and the documented CPU command run as written."""
import importlib.util
import os
import subprocess
import sys

import pytest

from gluondet.tasks import cli

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, '..', 'scripts', 'train_retinanet.py')


def _script():
    spec = importlib.util.spec_from_file_location('train_retinanet', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parse(*argv):
    return _script().parse_args(list(argv))


def test_defaults_and_odtk_flags():
    args = _parse()
    assert (args.network, args.batch_size, args.resize, args.max_size, args.jitter) == (
        'resnet50_v1b', 2, None, None, None)
    assert (args.focal_alpha, args.focal_gamma, args.smoothl1_beta, args.loss_loc_weight) == (
        0.25, 2.0, 0.11, 1.0)
    args = _parse('--backbone', 'resnet18_v1b', '--jitter', '640', '800', '--anchor-scales',
                  '1,1.5', '--anchor-ratios', '0.5,1', '--class-weights', 'car=2,person=0.5')
    assert args.network == 'resnet18_v1b' and args.jitter == [640, 800]
    assert _script().model_kwargs(args) == {'scales': (1.0, 1.5), 'ratios': (0.5, 1.0)}
    assert args.class_weights == {'car': 2.0, 'person': 0.5}
    assert _script().weights_of(('person', 'car', 'bike'), args.class_weights) == [0.5, 2.0, 1.0]
    with pytest.raises(SystemExit, match='--class-weights names dog'):
        _script().weights_of(('person',), {'dog': 1.0})


@pytest.mark.parametrize('argv', [('--class-weights', 'car'), ('--class-weights', 'car=-1'),
                                  ('--anchor-scales', '1,x'), ('--jitter', '640')])
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
    with pytest.raises(SystemExit, match='no RetinaNet on --network vgg16'):
        script.network_name(_parse('--network', 'vgg16'))


def test_dataset_defaults_are_odtks_and_say_so():
    resolved, message = cli.dataset_defaults(_parse('--dataset', 'demo', '--lr', '0.02'),
                                             _script().DATASET_DEFAULTS, 'coco', origin='ODTK')
    assert resolved.lr == 0.02 and resolved.epochs == 12 and resolved.lr_warmup == 1000
    assert message.startswith('ODTK has none for --dataset demo; its coco defaults')


def _run(*argv, **kwargs):
    return subprocess.run([sys.executable] + list(argv), capture_output=True, text=True,
                          timeout=900, **kwargs)


@pytest.mark.parametrize('argv, message', [
    (('--amp',), '--amp: not available'),
    (('--horovod',), '--horovod: not available'),
    (('--network', 'vgg16'), 'no RetinaNet on --network vgg16 in gluondet'),
])
def test_refusals_are_one_line_without_a_traceback(argv, message, tmp_path):
    out = _run(SCRIPT, '--dataset', 'demo', '--gpus', '', *argv, cwd=str(tmp_path),
               env=dict(os.environ, GLUONDET_HOME=str(tmp_path)))
    assert out.returncode != 0 and 'Traceback' not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


# The documented CPU command, as written; only the demo set is smaller (patched in the process).
CPU_COMMAND = ['--network', 'resnet18_v1b', '--dataset', 'demo', '--gpus', '', '--epochs', '1',
               '--no-pretrained-base', '--resize', '128', '--max-size', '256']
SMALL_DEMO = ('import runpy, sys; import gluondet.data.demo as demo; '
              'demo.DEFAULT_NUM_IMAGES.update(train=8, val=4); '
              'sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")')


def test_cpu_command_trains_validates_and_logs_its_defaults(tmp_path):
    out = _run('-c', SMALL_DEMO, SCRIPT, *CPU_COMMAND, cwd=str(tmp_path),
               env=dict(os.environ, GLUONDET_HOME=str(tmp_path / 'home')))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith('final: ') and 'mAP=' in out.stdout
    name = 'retinanet_resnet18_v1b_custom'
    with open(str(tmp_path / (name + '_train.log'))) as f:
        log = f.read()
    assert 'ODTK has none for --dataset demo; its coco defaults for the flags left unset' in log
    assert 'epochs=1, ' in log and 'batch_size=2, ' in log
    assert (tmp_path / (name + '_0000_%s.params' % out.stdout.split('mAP=')[1][:6])).exists()
