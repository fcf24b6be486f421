"""A full disk and a folder made read-only (issue 26, item 5), on small tmpfs file systems.

Training (``train_ssd.py``), ``gluondet export`` and ``gluondet convert`` each meet a file
system that fills, or a folder that stops being writable, while they write: the user gets one
line naming the file and the cause, the last good file is intact, no file is left under a
final name half written (nor a temporary one), and a training continues with ``--resume
auto`` once there is space again, ending where a straight run ends.

The disk fills at a chosen moment: the training's child process fills it just before its
second checkpoint (a patch of ``Checkpointer.save``: the command line is the user's); export
and convert meet a disk already full, or with room for their first shard only. A folder
turns read-only mid-training by ``chmod 0555``, in a child process without the capabilities
that let root ignore permission bits (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``): a
read-only remount (``mount -o remount,ro``) is refused while the run's log files are open.
Export and convert meet a tmpfs remounted read-only (EROFS). Needs root (mount); skipped
otherwise; the check that the files gluondet writes for MXNet are MXNet's runs anyway.
"""
import contextlib
import ctypes
import errno
import glob
import hashlib
import json
import os
import subprocess
import sys

import mxnet as mx
import pytest

from gluondet import cli as gluondet_cli
from gluondet.deploy import export_symbol
from gluondet.engine.checkpoint import read_manifest
from gluondet.engine.testing import _max_diff
from gluondet.files import save_ndarrays, save_parameters
from gluondet.model_zoo import get_model

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), 'scripts', 'train_ssd.py')
NAME = 'ssd_300_mobilenet0.25_custom'
TRAIN = ['--dataset', 'demo', '--gpus', '', '--no-pretrained-base', '--backbone', 'mobilenet0.25',
         '--data-shape', '128', '--batch-size', '4', '--epochs', '3', '--val-interval', '3',
         '-j', '0']        # 8 images: 2 steps an epoch, checkpoints at iterations 2, 4, 6
DEMO_SIZES = {'train': 8, 'val': 4}
# Runs a command (a script's path, or "gluondet") on the small demo set; with a fault, makes
# it happen just before the checkpoint of its iteration.
CHILD = '''
import json, os, runpy, sys
sys.path.insert(0, %r)
import gluondet.data.demo as demo
from gluondet.engine import checkpoint
from test_full_disk import DEMO_SIZES, fill
demo.DEFAULT_NUM_IMAGES.update(DEMO_SIZES)
fault, save = json.loads(sys.argv[1]), checkpoint.Checkpointer.save

def save_after_the_fault(self, loop):
    if loop.state.iteration == fault.get('iteration'):
        fault['iteration'] = None
        if fault['kind'] == 'fill':
            fill(fault['path'])
        else:
            os.chmod(fault['path'], 0o555)
    save(self, loop)

checkpoint.Checkpointer.save = save_after_the_fault
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')
''' % HERE


@contextlib.contextmanager
def tmpfs(path, size):
    """A tmpfs of ``size`` at ``path`` (made), unmounted on exit; skips if it cannot mount."""
    if os.geteuid() != 0:
        pytest.skip('mounting a tmpfs needs root (this runs as uid %d)' % os.geteuid())
    os.makedirs(path, exist_ok=True)
    out = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%d' % size, 'tmpfs', path],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip('cannot mount a tmpfs at %s: %s' % (path, out.stderr.strip()))
    try:
        yield path
    finally:
        if subprocess.run(['umount', path]).returncode != 0:
            subprocess.run(['umount', '-l', path], check=True)


def remount(path, options):
    subprocess.run(['mount', '-o', 'remount,' + options, path], check=True)


def fill(path, leave=0):
    """Write the file ``path`` until its file system has only ``leave`` bytes free (0: until
    a write fails with ENOSPC)."""
    stat = os.statvfs(os.path.dirname(path))
    size = stat.f_bavail * stat.f_frsize - leave
    chunk = b'\0' * (1 << 20)
    with open(path, 'wb', buffering=0) as f:
        try:
            while leave == 0 or size > 0:
                size -= f.write(chunk[:size] if leave else chunk)
        except OSError as err:
            if err.errno != errno.ENOSPC or leave:
                raise


def drop_dac_capabilities():
    """In a child before exec: root loses the capabilities to ignore permission bits."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):           # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:       # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), 'prctl(PR_CAPBSET_DROP)')


def run(argv, home, fault=None, **kwargs):
    """``python argv...`` on the small demo set (see CHILD), output captured."""
    return subprocess.run([sys.executable, '-c', CHILD, json.dumps(fault or {})] + argv,
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, GLUONDET_HOME=home), **kwargs)


def one_line_error(err, prog, *expected):
    """The one ``PROG: error: ...`` line of ``err``: no traceback, the user's paths."""
    lines = [line for line in err.splitlines() if 'error' in line.lower()]
    assert 'Traceback' not in err, err
    assert len(lines) == 1 and lines[0].startswith(prog + ': error: '), err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert '.tmp' not in lines[0], lines[0]
    return lines[0]


def no_temporary_files(folder):
    assert not glob.glob(os.path.join(folder, '*.tmp*')), os.listdir(folder)


def digests(paths):
    result = {}
    for path in paths:
        with open(path, 'rb') as f:
            result[path] = hashlib.sha1(f.read()).hexdigest()
    return result


def fails_keeping(argv, capsys, prog, reason, named, files, before, disk):
    """``gluondet argv`` fails with one line of ``reason`` naming ``named``, and ``files`` keep
    their ``before`` digests, with no temporary file left on ``disk``."""
    assert gluondet_cli.main(argv) == 1
    one_line_error(capsys.readouterr().err, prog, reason, named)
    assert digests(files) == before
    no_temporary_files(disk)


def test_mxnet_files_written_by_python_are_mxnets_bytes(tmp_path):
    arrays = {'w': mx.nd.arange(6).reshape(2, 3), 'b:0': mx.nd.ones(4, dtype='float16'),
              'i': mx.nd.array([1, 2], dtype='int64'), 'é': mx.nd.ones(1)}
    for data in (arrays, {}):
        mx.nd.save(str(tmp_path / 'mxnet'), data)
        save_ndarrays(str(tmp_path / 'python'), data)
        assert (tmp_path / 'mxnet').read_bytes() == (tmp_path / 'python').read_bytes()
    net = get_model(NAME, classes=['a', 'b'], pretrained_base=False)
    net.initialize()
    export_symbol(net, str(tmp_path / 'python'), 128)       # runs the net once
    net.export(str(tmp_path / 'mxnet'))
    assert ((tmp_path / 'python-symbol.json').read_text()
            == (tmp_path / 'mxnet-symbol.json').read_text())
    ours, theirs = (mx.nd.load(str(tmp_path / (n + '-0000.params'))) for n in ('python', 'mxnet'))
    assert sorted(ours) == sorted(theirs)
    assert all((ours[k] == theirs[k]).min() == 1 for k in ours)
    net.save_parameters(str(tmp_path / 'mxnet'))
    save_parameters(net, str(tmp_path / 'python'))
    assert (tmp_path / 'mxnet').read_bytes() == (tmp_path / 'python').read_bytes()


@pytest.fixture(scope='module')
def straight(tmp_path_factory):
    """``(save prefix, demo home)`` of the straight 3-epoch run the others compare with."""
    folder = tmp_path_factory.mktemp('straight')
    home = str(folder / 'home')
    out = run([SCRIPT, '--save-prefix', str(folder / 'run') + '/'] + TRAIN, home)
    assert out.returncode == 0, out.stderr[-3000:]
    return str(folder / 'run' / NAME), home


def assert_last_good_checkpoint(prefix, iteration):
    """The manifest names ``iteration``; its files match their sha1 and load; nothing else
    is under a checkpoint's name; no temporary files."""
    manifest = read_manifest(prefix + '_last.json')
    assert manifest['iteration'] == iteration
    folder = os.path.dirname(prefix)
    for kind in ('params', 'states'):
        path = os.path.join(folder, manifest[kind])
        assert digests([path])[path] == manifest[kind + '_sha1']
        assert mx.nd.load(path)
    names = {manifest['params'], manifest['states']}
    assert {os.path.basename(p) for p in glob.glob(prefix + '_last-*')} == names
    no_temporary_files(folder)


def test_training_on_a_disk_that_fills_stops_with_one_line_and_resumes(straight, tmp_path):
    reference, home = straight
    with tmpfs(str(tmp_path / 'disk'), 64 << 20) as disk:
        prefix = os.path.join(disk, 'run', NAME)
        filler = os.path.join(disk, 'filler')
        argv = [SCRIPT, '--save-prefix', os.path.dirname(prefix) + '/'] + TRAIN
        out = run(argv, home, {'iteration': 4, 'kind': 'fill', 'path': filler})
        assert out.returncode == 1, out.stderr[-3000:]
        one_line_error(out.stderr, 'train_ssd.py', 'cannot write the checkpoint of iteration 4',
                       'No space left on device', prefix + '_last-00000004.params',
                       'the last good checkpoint, %s_last.json, is intact' % prefix,
                       '--resume auto')
        assert_last_good_checkpoint(prefix, 2)

        os.remove(filler)
        out = run(argv + ['--resume', 'auto'], home)
        assert out.returncode == 0, out.stderr[-3000:]
        assert 'Resumed from %s_last.json: epoch 1, batch 0, iteration 2' % prefix in out.stderr
        assert_last_good_checkpoint(prefix, 6)
        assert _max_diff(prefix, reference, 'params') == 0
        assert _max_diff(prefix, reference, 'states') == 0


def test_training_in_a_folder_made_read_only_stops_with_one_line_and_resumes(straight, tmp_path):
    reference, home = straight
    with tmpfs(str(tmp_path / 'disk'), 64 << 20) as disk:
        folder = os.path.join(disk, 'run')
        prefix = os.path.join(folder, NAME)
        argv = [SCRIPT, '--save-prefix', folder + '/'] + TRAIN
        out = run(argv, home, {'iteration': 4, 'kind': 'chmod', 'path': folder},
                  preexec_fn=drop_dac_capabilities)
        assert out.returncode == 1, out.stderr[-3000:]
        one_line_error(out.stderr, 'train_ssd.py', 'cannot write the checkpoint of iteration 4',
                       'Permission denied', prefix + '_last-00000004.params', '--resume auto')
        assert_last_good_checkpoint(prefix, 2)

        os.chmod(folder, 0o755)
        out = run(argv + ['--resume', 'auto'], home, preexec_fn=drop_dac_capabilities)
        assert out.returncode == 0, out.stderr[-3000:]
        assert _max_diff(prefix, reference, 'params') == 0
        assert _max_diff(prefix, reference, 'states') == 0


EXPORTS = {'onnx': ('model.onnx', ['']),
           'symbol': ('model', ['-symbol.json', '-0000.params', '-meta.json'])}


@pytest.mark.parametrize('fmt', sorted(EXPORTS))
def test_export_to_a_full_or_read_only_disk_keeps_the_last_model(fmt, straight, tmp_path, capsys):
    if fmt == 'onnx':
        pytest.importorskip('onnx')
    model = straight[0] + '_best.params'
    name, suffixes = EXPORTS[fmt]
    with tmpfs(str(tmp_path / 'disk'), 32 << 20) as disk:
        output = os.path.join(disk, name)
        argv = ['export', '--network', model, '--format', fmt, '-o', output]
        assert gluondet_cli.main(argv) == 0
        files = [output + suffix for suffix in suffixes]
        before = digests(files)
        capsys.readouterr()

        fill(os.path.join(disk, 'filler'))
        fails_keeping(argv, capsys, 'gluondet export', 'No space left on device', output,
                      files, before, disk)

        os.remove(os.path.join(disk, 'filler'))
        remount(disk, 'ro')
        fails_keeping(argv, capsys, 'gluondet export', 'Read-only file system', output,
                      files, before, disk)
        if fmt == 'symbol':     # the kept model loads
            mx.gluon.SymbolBlock.imports(files[0], ['data'], files[1])


def test_convert_on_a_disk_that_fills_or_is_read_only_keeps_the_last_records(straight, tmp_path,
                                                                           capsys, monkeypatch):
    monkeypatch.setenv('GLUONDET_HOME', straight[1])
    monkeypatch.setattr('gluondet.data.demo.DEFAULT_NUM_IMAGES', dict(DEMO_SIZES))
    with tmpfs(str(tmp_path / 'disk'), 4 << 20) as disk:
        prefix = os.path.join(disk, 'demo')
        argv = ['convert', '--dataset', 'demo', '--num-shards', '2', '-o', prefix]
        assert gluondet_cli.main(argv) == 0
        capsys.readouterr()
        files = sorted(glob.glob(prefix + '*'))
        assert len(files) == 5      # 2 .rec, 2 .idx, the json
        before = digests(files)
        first = [p for p in files if '-shard-00000-' in p]
        room = sum(os.path.getsize(p) for p in first)
        # room for the first shard (and a page more) but not the second: full mid-run
        fill(os.path.join(disk, 'filler'), leave=room + 8192)
        fails_keeping(argv, capsys, 'gluondet convert', 'No space left on device',
                      prefix + '-fold-000-of-001-shard-00001-of-00002.', files, before, disk)
        assert sorted(glob.glob(prefix + '*')) == files

        os.remove(os.path.join(disk, 'filler'))
        remount(disk, 'ro')
        fails_keeping(argv, capsys, 'gluondet convert', 'Read-only file system', prefix,
                      files, before, disk)
