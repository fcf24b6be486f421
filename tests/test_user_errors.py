"""Every error a user can cause is one line (issue 23): ``PROG: error: MESSAGE`` naming the
flag or file (the user's path, not a temporary one), a non-zero exit status, no traceback;
``--debug`` or ``GLUONDET_DEBUG=1`` shows the traceback. A table of mistakes, walked through
each training script and ``gluondet`` command in this process (their ``main`` behind
`gluondet.errors.run_main`, as the entry points run them), and a few as real commands."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import mxnet as mx
import pytest

from gluondet import cli as gluondet_cli
from gluondet.errors import run_main
from gluondet.model_zoo import get_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, 'scripts')
CARDS = os.path.join(os.path.dirname(ROOT), 'shared', 'datasets', 'cards', 'images')
UNWRITABLE = '/sys/kernel'      # even root cannot create files there
SMALL = {'train_ssd.py': ['--network', 'mobilenet0.25', '--data-shape', '128'],
         'train_faster_rcnn.py': ['--network', 'resnet18_v1b', '--use-fpn', '--image-short',
                                  '128', '--image-max-size', '160'],
         'train_retinanet.py': ['--network', 'resnet18_v1b', '--resize', '128', '--max-size',
                                '160']}


def _script_main(script):
    spec = importlib.util.spec_from_file_location(script[:-3], os.path.join(SCRIPTS, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _one_line_error(capsys, code, prog, expected):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if 'error:' in line]
    assert code != 0, err
    assert 'Traceback' not in err, err
    assert len(lines) == 1 and lines[0].startswith(prog + ': error: '), err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert '.tmp' not in lines[0], lines[0]       # the user's path, not a temporary file
    return lines[0]


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """An SSD's weights and checkpoint manifest, a COCO json, a read-only location."""
    folder = tmp_path_factory.mktemp('files')
    net = get_model('ssd_300_mobilenet0.25_custom', classes=['a'], pretrained_base=False)
    net.initialize()
    net(mx.nd.zeros((1, 3, 128, 128)))
    params = str(folder / 'ssd_300_mobilenet0.25_custom_last-00000001-aaaa.params')
    net.save_parameters(params)
    manifest = {'format': 'gluondet-checkpoint', 'format_version': 1, 'epoch': 1, 'batch': 0,
                'iteration': 1, 'params': os.path.basename(params), 'params_sha1': '0',
                'states': 'x.states', 'states_sha1': '0', 'optimizer': {'name': 'sgd'},
                'hooks': {}, 'meta': {'network': 'ssd_300_mobilenet0.25_custom'}}
    with open(str(folder / 'ssd_last.json'), 'w') as f:
        json.dump(manifest, f)
    net.save_parameters(str(folder / 'ssd_best.params'))     # with the json training writes
    with open(str(folder / 'ssd_best.json'), 'w') as f:
        json.dump({'meta': {'network': 'ssd_300_mobilenet0.25_custom'}}, f)
    voc = get_model('ssd_300_mobilenet0.25_voc', pretrained_base=False)
    voc.initialize()
    voc(mx.nd.zeros((1, 3, 128, 128)))
    voc.save_parameters(str(folder / 'voc.params'))
    with open(str(folder / 'bad.json'), 'w') as f:
        f.write('{"images": [')
    try:
        tempfile.TemporaryFile(dir=UNWRITABLE).close()
        pytest.skip('%s is writable here: no read-only folder to test with' % UNWRITABLE)
    except OSError:
        pass
    return {'params': params, 'best': str(folder / 'ssd_best.params'),
            'manifest': str(folder / 'ssd_last.json'),
            'bad_json': str(folder / 'bad.json'), 'voc_params': str(folder / 'voc.params'),
            'folder': str(folder)}


# (scripts, flags, what the line says); FILES: names of `files`
SCRIPT_MISTAKES = [
    (('train_ssd.py', 'train_faster_rcnn.py', 'train_retinanet.py'), ['--gpus', '0'],
     ["--gpus (gpus) 0 asks for GPU 0, but this machine has no GPU", "--gpus '' trains"]),
    (('train_ssd.py', 'train_faster_rcnn.py', 'train_retinanet.py'), ['--gpus', '0;1'],
     ['--gpus (gpus) takes comma-separated GPU ids', "'0;1'"]),
    (('train_ssd.py', 'train_faster_rcnn.py', 'train_retinanet.py'),
     ['--save-prefix', UNWRITABLE + '/run/'], ['--save-prefix %s/run/: cannot write in'
                                               % UNWRITABLE]),
    (('train_faster_rcnn.py',), ['--resume', '{manifest}'],
     ['{manifest} is a checkpoint of ssd_300_mobilenet0.25_custom, not of '
      'faster_rcnn_fpn_resnet18_v1b_custom']),
    (('train_faster_rcnn.py',), ['--resume', '{params}'],
     ['{params} holds the weights of another network, not of this FasterRCNN']),
    (('train_faster_rcnn.py',), ['--resume', '{best}'],
     ['{best} holds the weights of a trained ssd_300_mobilenet0.25_custom, not of this '
      'FasterRCNN']),
    (('train_retinanet.py',), ['--fine-tune', '{params}'],
     ['{params} holds the weights of another network, not of this RetinaNet']),
    (('train_retinanet.py',), ['--fine-tune', '{best}'],
     ['{best} is a ssd_300_mobilenet0.25_custom, not a retinanet_resnet18_v1b_custom']),
    (('train_ssd.py',), ['--resume', 'nowhere.json'], ['no such file nowhere.json']),
    (('train_ssd.py',), ['--resume', 'weights.txt'], ["resume must be '', 'auto'"]),
    (('train_ssd.py', 'train_retinanet.py'), ['--dataset', 'voc', '--dataset-root', 'nowhere',
                                              '--classes', 'a'], ['nowhere']),
    (('train_ssd.py',), ['--train-json', '{bad_json}'], ['--train-json and --val-json']),
    (('train_retinanet.py',), ['--train-json', '{bad_json}', '--val-json', '{bad_json}'],
     ['{bad_json}']),
    (('train_ssd.py', 'train_faster_rcnn.py'), ['--lr', '-1'], ['--lr must be > 0']),
    (('train_ssd.py',), ['--lr-decay-epoch', '3,x'], ['--lr-decay-epoch must be comma']),
    (('train_ssd.py',), ['--batch-size', '0'], ['--batch-size must be >= 1']),
    (('train_ssd.py',), ['--data-shape', '100', '--network', 'vgg16_atrous'],
     ['--data-shape 100 is too small for ssd_300_vgg16_atrous']),
    (('train_ssd.py',), ['--network', 'resnet18'], ["unknown --network 'resnet18'"]),
    (('train_retinanet.py',), ['--pruned-model', 'nowhere.params'], ['--pruned-model']),
    (('train_ssd.py',), ['--kv-store', 'dist_sync'], ['kv_store dist_sync: this process was '
                                                     'not started by a parameter-server']),
]


@pytest.mark.parametrize('script, flags, expected', [
    (script, flags, expected) for scripts, flags, expected in SCRIPT_MISTAKES
    for script in scripts])
def test_a_script_mistake_is_one_line(script, flags, expected, files, tmp_path, capsys,
                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('GLUONDET_HOME', os.path.join(files['folder'], 'home'))
    argv = ['--dataset', 'demo', '--gpus', '', '--no-pretrained-base', '--epochs', '1',
            '-j', '0'] + SMALL[script] + [flag.format(**files) for flag in flags]
    code = run_main(_script_main(script), argv, script)
    _one_line_error(capsys, code, script, [e.format(**files) for e in expected])


def test_training_without_the_imagenet_weights_offline_says_what_to_do(files, tmp_path,
                                                                       capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('GLUONDET_HOME', os.path.join(files['folder'], 'home'))
    monkeypatch.setenv('MXNET_HOME', str(tmp_path / 'mxnet'))
    monkeypatch.setenv('GLUONDET_REPO_URL', 'http://127.0.0.1:9')     # the discard port
    monkeypatch.setattr('gluondet.model_zoo.store.RETRY_WAIT', 0)
    code = run_main(_script_main('train_ssd.py'), ['--dataset', 'demo', '--gpus', '', '-j', '0',
                                                   '--epochs', '1'] + SMALL['train_ssd.py'],
                    'train_ssd.py')
    _one_line_error(capsys, code, 'train_ssd.py', [
        'put mobilenet0.25-', str(tmp_path / 'mxnet' / 'models'),
        '--no-pretrained-base in the training scripts) trains it from scratch'])


def test_a_class_that_no_annotation_names_gets_a_did_you_mean(tmp_path, capsys, monkeypatch):
    if not os.path.isdir(CARDS):
        pytest.skip('the cards dataset is not at %s' % CARDS)
    monkeypatch.chdir(tmp_path)
    code = run_main(_script_main('train_ssd.py'), [
        '--dataset', 'voc', '--dataset-root', CARDS, '--train-split', 'train', '--val-split',
        'test', '--classes', 'nine,ten,jakc,queen,king,ace', '--gpus', '', '-j', '0'] +
        SMALL['train_ssd.py'], 'train_ssd.py')
    _one_line_error(capsys, code, 'train_ssd.py', ["'jakc' (did you mean 'jack'?)",
                                                   '--allow-missing-classes'])


GLUONDET_MISTAKES = [
    (['evaluate', '--model', 'nowhere_best.params', '--dataset', 'voc'], ['nowhere_best']),
    (['evaluate', '--model', 'ssd_300_mobilenet0.25_voc', '--dataset', 'voc'],
     ['give its weights, --params FILE']),
    (['evaluate', '--model', 'ssd_300_mobilenet0.25_voc', '--params', '{voc_params}',
      '--dataset', 'coco', '--annotation-file', '{bad_json}'], ['{bad_json}']),
    (['infer', '--model', 'nowhere.onnx', '--images', '.'], ['nowhere.onnx']),
    (['infer', '--model', 'ssd_300_mobilenet0.25_voc', '--params', '{voc_params}',
      '--images', 'no_such_folder'], ['no_such_folder']),
    (['export', '--network', 'ssd_300_mobilenet0.25_voc', '--output', 'model.txt'],
     ['must end with .onnx, got model.txt']),
    (['export', '--network', 'ssd_300_mobilenet0.25_voc', '--params', '{voc_params}',
      '--output', UNWRITABLE + '/model.onnx'], [UNWRITABLE + '/model.onnx']),
    (['export', '--network', 'ssd_300_mobilenet0.25_vocc', '--output', 'm.onnx'],
     ['ssd_300_mobilenet0.25_vocc']),
    (['prune', '--model', 'nowhere_best.params', '--output', 'pruned'], ['nowhere_best']),
    (['plot', 'no_such_run', '-o', 'curves.png'], ['no_such_run']),
    (['benchmark', '--model', 'nowhere.onnx'], ['nowhere.onnx']),
    (['train', '-e', 'nowhere.yaml', '-r', 'results'], ['nowhere.yaml']),
    (['convert', '--dataset', 'voc', '--dataset-root', 'nowhere', '--classes', 'a',
      '--output', 'rec/data'], ['nowhere']),
    (['launch', '-n', '0', '--', 'python', 'x.py'], ['need at least one worker']),
]


@pytest.mark.parametrize('argv, expected', GLUONDET_MISTAKES,
                         ids=[m[0][0] + '-' + str(i) for i, m in enumerate(GLUONDET_MISTAKES)])
def test_a_gluondet_command_mistake_is_one_line(argv, expected, files, tmp_path, capsys,
                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = gluondet_cli.main([a.format(**files) for a in argv])
    _one_line_error(capsys, code, 'gluondet ' + argv[0], [e.format(**files) for e in expected])


@pytest.mark.parametrize('argv', [['--dataset', 'vocc'], ['--gpus'], ['--batch-size', 'x']])
def test_a_malformed_command_line_is_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        _script_main('train_ssd.py')(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and ': error: argument ' in err, err
    assert err.strip().endswith('(see --help)')
    with pytest.raises(SystemExit):
        gluondet_cli.main(['evaluate'] + argv)
    err = capsys.readouterr().err
    assert err.startswith('gluondet evaluate: error: ') and len(err.strip().splitlines()) == 1


def test_debug_shows_the_traceback(files, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ['evaluate', '--model', 'nowhere_best.params', '--dataset', 'voc']
    with pytest.raises(OSError):
        gluondet_cli.main(argv + ['--debug'])
    monkeypatch.setenv('GLUONDET_DEBUG', '1')
    with pytest.raises(OSError):
        gluondet_cli.main(argv)


def test_a_bug_shows_its_traceback_and_asks_for_a_report(capsys):
    def main(argv):
        return {}['missing']
    assert run_main(main, [], 'train_x.py') == 1
    err = capsys.readouterr().err
    assert 'Traceback' in err and "KeyError: 'missing'" in err
    assert err.strip().endswith('train_x.py: this is a bug in gluondet; please report it with '
                                'the traceback above')


def test_ctrl_c_before_training_is_one_line(capsys):
    def main(argv):
        raise KeyboardInterrupt
    assert run_main(main, [], 'train_x.py') == 130
    assert capsys.readouterr().err == 'train_x.py: interrupted\n'


@pytest.mark.parametrize('command', [
    [os.path.join(SCRIPTS, 'train_faster_rcnn.py'), '--gpus', '0', '--dataset', 'demo'],
    ['-m', 'gluondet', 'evaluate', '--model', 'nowhere_best.params', '--dataset', 'voc'],
])
def test_as_a_command(command, tmp_path):
    out = subprocess.run([sys.executable] + command, cwd=str(tmp_path), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 1 and 'Traceback' not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
