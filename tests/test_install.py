"""The MXNet build is an extra (`cpu`, `cu112`); gluondet/_mxnet.py finds and loads a CUDA
build's libraries from NVIDIA's wheels, and says what is wrong with an install. What the
README promises on a CPU (ONNX export, onnxruntime, plots) comes with every install; the heavy
or GPU-only parts are extras, which a missing one's error names (gluondet/optional.py)."""
import glob
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import urllib.request
from unittest import mock

import pytest
from packaging.requirements import Requirement

from gluondet import _mxnet, optional
from test_deploy_predictor import (NETWORK, SMALL_SPLIT, SMALL_SPLIT_SIZE,  # noqa: F401
                                   small_bccd, trained_model)
from test_recipes import check_recipes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each wheel folder of _mxnet.CUDA11_LIBRARIES and the distribution that installs it.
WHEELS = {'cuda_runtime': 'nvidia-cuda-runtime-cu11', 'cublas': 'nvidia-cublas-cu11',
          'cufft': 'nvidia-cufft-cu11', 'curand': 'nvidia-curand-cu11',
          'cusolver': 'nvidia-cusolver-cu11', 'cuda_nvrtc': 'nvidia-cuda-nvrtc-cu11',
          'nvtx': 'nvidia-nvtx-cu11', 'cudnn': 'nvidia-cudnn-cu11', 'nccl': 'nvidia-nccl-cu11'}

# What `readelf -d` of mxnet-cu112 1.9.1's libmxnet.so lists as NEEDED from CUDA (the
# driver's libcuda.so.1 aside), and what the CUDA wheels' libraries need among themselves.
MXNET_CU112_NEEDED = ['libcudnn.so.8', 'libnccl.so.2', 'libcudart.so.11.0', 'libcufft.so.10',
                      'libcublas.so.11', 'libcusolver.so.11', 'libcurand.so.10',
                      'libnvrtc.so.11.2', 'libnvToolsExt.so.1']
WHEEL_NEEDED = {
    'libcublas.so.11': ['libcublasLt.so.11'],
    'libcusolver.so.11': ['libcublas.so.11', 'libcublasLt.so.11'],
    'libcudnn_ops_train.so.8': ['libcudnn_ops_infer.so.8'],
    'libcudnn_cnn_infer.so.8': ['libcudnn_ops_infer.so.8'],
    'libcudnn_cnn_train.so.8': ['libcudnn_ops_infer.so.8', 'libcudnn_ops_train.so.8',
                                'libcudnn_cnn_infer.so.8'],
    'libcudnn_adv_infer.so.8': ['libcudnn_ops_infer.so.8'],
    'libcudnn_adv_train.so.8': ['libcudnn_ops_infer.so.8', 'libcudnn_ops_train.so.8',
                                'libcudnn_adv_infer.so.8'],
}


def setup_kwargs():
    """What setup.py passes to setuptools.setup."""
    with mock.patch('setuptools.setup') as setup:
        runpy.run_path(os.path.join(ROOT, 'setup.py'), run_name='__main__')
    return setup.call_args.kwargs


def read_constraints(name):
    """``{name: version}`` of the ``==`` pins in a constraints file (not following ``-c``)."""
    pins = {}
    with open(os.path.join(ROOT, name)) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line and not line.startswith('-'):
                requirement = Requirement(line)
                (spec,) = requirement.specifier
                assert spec.operator == '=='
                pins[requirement.name.lower()] = spec.version
    return pins


def test_base_package_requires_no_mxnet_and_extras_choose_one():
    kwargs = setup_kwargs()
    names = [Requirement(r).name for r in kwargs['install_requires']]
    assert not [n for n in names if n.startswith('mxnet')]
    extras = kwargs['extras_require']
    assert extras['cpu'] == ['mxnet==1.9.1']
    cu112 = {Requirement(r).name: Requirement(r) for r in extras['cu112']}
    assert str(cu112['mxnet-cu112'].specifier) == '==1.9.1'
    assert 'mxnet' not in cu112
    assert set(cu112) == {'mxnet-cu112'} | set(WHEELS.values())
    assert '8.9.6.50' in cu112['nvidia-cudnn-cu11'].specifier
    assert '9.1.0.70' not in cu112['nvidia-cudnn-cu11'].specifier    # no libcudnn.so.8
    # the CPU install: training, evaluation with plots, ONNX export and onnxruntime
    cpu = kwargs['install_requires'] + extras['cpu']
    assert sorted(cpu) == sorted(['mxnet==1.9.1', 'numpy<1.24', 'scipy', 'opencv-python',
                                  'pillow', 'defusedxml', 'filelock', 'requests', 'tqdm',
                                  'tensorboardX', 'pyyaml', 'onnx', 'onnxruntime', 'ml_dtypes',
                                  'matplotlib'])


def _name(requirement):
    """The normalized name (PEP 503) of a requirement or distribution."""
    return re.sub(r'[-_.]+', '-', Requirement(requirement).name).lower()


def test_constraints_pin_every_requirement_but_tensorrt():
    """TensorRT installs from NVIDIA's index on GPU machines only: not pinned here."""
    pins = {_name(name) for name in read_constraints('constraints.txt')}
    kwargs = setup_kwargs()
    for extra, requirements in [('base', kwargs['install_requires'])] + sorted(
            kwargs['extras_require'].items()):
        if extra not in ('cu112', 'tensorrt'):
            assert not {_name(r) for r in requirements} - pins, extra


def test_optional_packages_name_the_extra_that_installs_them():
    kwargs = setup_kwargs()
    for module, (distribution, extra) in optional.PACKAGES.items():
        requirements = kwargs['install_requires'] if extra is None else \
            kwargs['extras_require'][extra]
        assert _name(distribution) in {_name(r) for r in requirements}, module
    assert not optional.PACKAGES.keys() & {'mxnet', 'numpy', 'gluoncv'}


def test_constraints_pin_every_gpu_requirement_and_keep_the_cpu_set():
    cpu, gpu = read_constraints('constraints.txt'), read_constraints('constraints-cu112.txt')
    assert cpu['mxnet'] == '1.9.1' and cpu['numpy'] == '1.23.5'
    assert not [name for name in cpu if name.startswith(('mxnet-', 'nvidia-cu')) or
                re.match(r'nvidia-.*-cu11$', name)]
    with open(os.path.join(ROOT, 'constraints-cu112.txt')) as f:
        assert '-c constraints.txt' in f.read().splitlines()
    for line in setup_kwargs()['extras_require']['cu112']:
        requirement = Requirement(line)
        assert requirement.specifier.contains(gpu[requirement.name]), line
    assert gpu['nvidia-cudnn-cu11'].startswith('8.')


def test_preload_list_covers_what_libmxnet_needs_in_dependency_order():
    files = [re.sub(r'\.\*$', '.8', name) for _, name in _mxnet.CUDA11_LIBRARIES]
    assert set(MXNET_CU112_NEEDED) <= set(files)
    for name, needed in WHEEL_NEEDED.items():
        assert all(files.index(n) < files.index(name) for n in needed), name
    # every folder comes from a wheel of the cu112 extra
    extra = {Requirement(r).name for r in setup_kwargs()['extras_require']['cu112']}
    assert {WHEELS[folder] for folder, _ in _mxnet.CUDA11_LIBRARIES} <= extra
    assert _mxnet.CUDA_BUILDS == {'mxnet-cu112': _mxnet.CUDA11_LIBRARIES}


def _touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, 'wb').close()
    return path


def test_cuda_libraries_found_in_wheel_layout(tmp_path):
    first, second, empty = tmp_path / 'user', tmp_path / 'site', tmp_path / 'empty'
    empty.mkdir()
    expected = []
    for folder, name in _mxnet.CUDA11_LIBRARIES:
        name = name.replace('*', '8')
        root = first if folder == 'cudnn' else second
        expected.append(_touch(os.path.join(root, 'nvidia', folder, 'lib', name)))
    # ignored: a later copy of cudnn, CUDA 12 and cuDNN 9 files (torch's wheels), other files
    _touch(os.path.join(second, 'nvidia', 'cudnn', 'lib', 'libcudnn.so.8'))
    for other in ('cuda_runtime/lib/libcudart.so.12', 'cudnn/lib/libcudnn.so.9',
                  'cuda_runtime/lib/libOpenCL.so.1', 'cublas/lib/libnvblas.so.11'):
        _touch(os.path.join(second, 'nvidia', other))
    paths = [str(empty), str(first), str(second)]
    assert _mxnet.cuda_libraries(paths=paths) == expected
    assert _mxnet.library_folders(expected) == [
        os.path.join(second, 'nvidia', f, 'lib') for f in
        ('cuda_runtime', 'cublas', 'cufft', 'curand', 'cusolver', 'cuda_nvrtc', 'nvtx')] + [
        os.path.join(first, 'nvidia', 'cudnn', 'lib'),
        os.path.join(second, 'nvidia', 'nccl', 'lib')]
    # a library absent from every path is left out (the system loader may have it)
    os.remove(expected[-1])
    assert _mxnet.cuda_libraries(paths=paths) == expected[:-1]
    assert _mxnet.cuda_libraries(paths=[str(empty)]) == []


# --- real (tiny) shared libraries, and a fake site-packages, in `python -S` subprocesses ---

def _cc():
    return shutil.which('cc') or shutil.which('gcc')


def _build(path, soname, needed=(), search=()):
    """A tiny shared object with `soname` that links `needed` (found in `search` when linking;
    no RPATH, so at run time only what is loaded already or on the system satisfies them)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    source = path + '.c'
    with open(source, 'w') as f:
        f.write('int %s(void) { return 1; }\n' % re.sub(r'\W', '_', soname))
    command = [_cc(), '-shared', '-fPIC', '-o', path, source, '-Wl,-soname,' + soname,
               '-Wl,--no-as-needed']
    command += ['-L' + folder for folder in search] + ['-l:' + name for name in needed]
    subprocess.run(command, check=True, capture_output=True)
    os.remove(source)


def _dist_info(site, name, size=None):
    folder = os.path.join(site, '%s-1.9.1.dist-info' % name.replace('-', '_'))
    os.makedirs(folder)
    with open(os.path.join(folder, 'METADATA'), 'w') as f:
        f.write('Metadata-Version: 2.1\nName: %s\nVersion: 1.9.1\n' % name)
    with open(os.path.join(folder, 'RECORD'), 'w') as f:
        f.write('mxnet/__init__.py,,\nmxnet/libmxnet.so,sha256=x,%d\n' % (size or 1))


@pytest.fixture(scope='module')
def fake_site(tmp_path_factory):
    """A site-packages with real tiny CUDA 11 libraries in NVIDIA's wheel layout, and an
    ``mxnet`` package whose ``libmxnet.so`` links them like mxnet-cu112's does (no
    dist-info: each test adds the ones it needs in a copy)."""
    if _cc() is None:
        pytest.skip('no C compiler to build shared libraries')
    site = str(tmp_path_factory.mktemp('site'))
    where, todo = {}, [(folder, name.replace('*', '8')) for folder, name in
                       _mxnet.CUDA11_LIBRARIES]
    while todo:     # each after what it links, whatever the order of the list under test
        folder, name = todo.pop(0)
        needed = WHEEL_NEEDED.get(name, ())
        if not set(needed) <= set(where):
            todo.append((folder, name))
            continue
        path = os.path.join(site, 'nvidia', folder, 'lib', name)
        _build(path, name, needed, {where[n] for n in needed})
        where[name] = os.path.dirname(path)
    _build(os.path.join(site, 'mxnet', 'libmxnet.so'), 'libmxnet.so', MXNET_CU112_NEEDED,
           {where[n] for n in MXNET_CU112_NEEDED})
    with open(os.path.join(site, 'mxnet', '__init__.py'), 'w') as f:
        f.write('import ctypes, os\n_LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), '
                '"libmxnet.so"), ctypes.RTLD_LOCAL)\n')
    # numpy (gluondet/_compat.py imports it) without the rest of the venv's site-packages
    import numpy
    numpy_site = str(tmp_path_factory.mktemp('numpy_site'))
    for name in ('numpy', 'numpy.libs'):
        source = os.path.join(os.path.dirname(os.path.dirname(numpy.__file__)), name)
        if os.path.exists(source):
            os.symlink(source, os.path.join(numpy_site, name))
    return site, numpy_site


def _site_copy(fake_site, tmp_path, builds=(), mxnet=True):
    site = str(tmp_path / 'site')
    shutil.copytree(fake_site[0], site, symlinks=True)
    if not mxnet:
        shutil.rmtree(os.path.join(site, 'mxnet'))
    size = os.path.getsize(os.path.join(fake_site[0], 'mxnet', 'libmxnet.so'))
    for name, owns in builds:
        _dist_info(site, name, size if owns else size + 1)
    return site


def _run(code, *paths):
    """Run `code` under ``python -S`` with only `paths`, gluondet and numpy on sys.path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(list(paths)), LD_LIBRARY_PATH='')
    return subprocess.run([sys.executable, '-S', '-c', code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_cuda_build_imports_with_the_wheels_libraries_loaded(fake_site, tmp_path):
    site = _site_copy(fake_site, tmp_path, [('mxnet-cu112', True)])
    # without gluondet the loader cannot find the wheels' libraries
    bare = _run('import mxnet', site, ROOT, fake_site[1])
    assert bare.returncode != 0 and 'cannot open shared object file' in bare.stderr
    done = _run('import gluondet, json, mxnet; from gluondet import _mxnet\n'
                'print(json.dumps([_mxnet.active_build(), len(_mxnet._loaded)]))',
                site, ROOT, fake_site[1])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ['mxnet-cu112', len(_mxnet.CUDA11_LIBRARIES)]
    # the order matters: a library loaded before the ones it links does not load (in a
    # process where `import gluondet` loaded nothing: mxnet without a distribution)
    source = _site_copy(fake_site, tmp_path / 'source')
    wrong = _run('from gluondet import _mxnet; assert not _mxnet._loaded\n'
                 '_mxnet.preload(_mxnet.cuda_libraries()[::-1])', source, ROOT, fake_site[1])
    assert wrong.returncode != 0
    assert ('ImportError: gluondet could not load %s' % os.path.join(
        source, 'nvidia', 'cudnn', 'lib', 'libcudnn_adv_train.so.8')) in wrong.stderr
    assert 'libcudnn_ops_infer.so.8: cannot open shared object file' in wrong.stderr
    # programs that import mxnet first get an LD_LIBRARY_PATH
    path = _run('from gluondet import _mxnet; print(_mxnet.ld_library_path())',
                site, ROOT, fake_site[1]).stdout.strip().split(os.pathsep)
    assert path == _mxnet.library_folders(_mxnet.cuda_libraries(paths=[site]))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, ROOT, fake_site[1]]),
               LD_LIBRARY_PATH=os.pathsep.join(path))
    assert subprocess.run([sys.executable, '-S', '-c', 'import mxnet'], env=env).returncode == 0


def test_cpu_build_loads_no_cuda_library(fake_site, tmp_path):
    site = _site_copy(fake_site, tmp_path, [('mxnet', True)])
    done = _run('import gluondet, json; from gluondet import _mxnet\n'
                'print(json.dumps([_mxnet.active_build(), _mxnet.prepare(), len(_mxnet._loaded),'
                ' "/nvidia/" in open("/proc/self/maps").read()]))', site, ROOT, fake_site[1])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ['mxnet', [], 0, False]


def _skip_unless_cpu_venv():
    if _mxnet.active_build() != 'mxnet':
        pytest.skip('this venv has %s, not the CPU build' % _mxnet.active_build())


def test_the_installed_cpu_mxnet_still_imports_with_gluondet():
    _skip_unless_cpu_venv()
    code = ('import gluondet, mxnet as mx; from gluondet import _mxnet\n'
            'assert _mxnet.active_build() == "mxnet" and not _mxnet._loaded\n'
            'assert mx.nd.ones((2, 3)).sum().asscalar() == 6\n'
            'maps = open("/proc/self/maps").read()\n'
            'assert "libmxnet.so" in maps and "libcudart" not in maps and "libcudnn" not in maps\n'
            'print(mx.__version__)')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '1.9.1'


def test_no_mxnet_says_which_extra_to_install(fake_site, tmp_path):
    site = _site_copy(fake_site, tmp_path, mxnet=False)
    done = _run('import gluondet', site, ROOT, fake_site[1])
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith('ImportError: gluondet needs MXNet 1.9.1, and no MXNet is installed')
    assert "pip install 'gluondet[cpu]' (CPU)" in last
    assert "pip install 'gluondet[cu112]' -c constraints-cu112.txt (CUDA 11.2 GPUs" in last
    # an mxnet built from source, on sys.path without a distribution, is accepted
    source = _site_copy(fake_site, tmp_path / 'source')
    done = _run('import gluondet; from gluondet import _mxnet; print(_mxnet.active_build())',
                source, ROOT, fake_site[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == 'None'


def test_two_builds_installed_are_named_with_the_fix(fake_site, tmp_path):
    site = _site_copy(fake_site, tmp_path, [('mxnet', False), ('mxnet-cu112', True)])
    done = _run('import gluondet, mxnet; from gluondet import _mxnet; print(len(_mxnet._loaded))',
                site, ROOT, fake_site[1])
    assert done.returncode == 0, done.stderr
    assert 'RuntimeWarning: several MXNet distributions are installed: mxnet 1.9.1, ' \
           'mxnet-cu112 1.9.1' in done.stderr
    assert "the files on disk are mxnet-cu112's" in done.stderr
    assert 'pip uninstall -y mxnet mxnet-cu112' in done.stderr
    # the files are the CUDA build's, so its libraries were loaded and mxnet imported
    assert done.stdout.strip() == str(len(_mxnet.CUDA11_LIBRARIES))
    # the CPU build's files: nothing loaded
    site = _site_copy(fake_site, tmp_path / 'cpu', [('mxnet', True), ('mxnet-cu112', False)])
    done = _run('import gluondet; from gluondet import _mxnet; print(len(_mxnet._loaded))',
                site, ROOT, fake_site[1])
    assert "the files on disk are mxnet's" in done.stderr
    assert done.stdout.strip() == '0'


# --- pip resolves the pins ---

def _project(tmp_path, package=False):
    """A copy of what setup.py packages (`package`: the whole package, else its
    ``__init__.py`` and ``version.py``, enough to resolve the requirements)."""
    project = tmp_path / 'project'
    if package:
        shutil.copytree(os.path.join(ROOT, 'gluondet'), str(project / 'gluondet'),
                        ignore=shutil.ignore_patterns('__pycache__'))
    else:
        (project / 'gluondet').mkdir(parents=True)
        for name in ('__init__.py', 'version.py'):
            shutil.copy(os.path.join(ROOT, 'gluondet', name), str(project / 'gluondet'))
    for name in ('setup.py', 'README.md'):
        shutil.copy(os.path.join(ROOT, name), str(project / name))
    return project


def _pip_dry_run(tmp_path, extras, constraints, *options):
    """``pip install --dry-run`` of a copy of the project with `extras`; the report."""
    project = _project(tmp_path)
    report = tmp_path / 'report.json'
    done = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '--dry-run', '--no-build-isolation', '-q',
         '--disable-pip-version-check', '--report', str(report), '-c',
         os.path.join(ROOT, constraints), *options, '%s[%s]' % (project, extras)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    with open(report) as f:
        return {item['metadata']['name'].lower(): item['metadata']['version']
                for item in json.load(f)['install']}


def test_cpu_install_changes_nothing_in_the_venv(tmp_path):
    """This venv was built from constraints.txt; the `cpu` extra asks for nothing else."""
    _skip_unless_cpu_venv()
    assert _pip_dry_run(tmp_path, 'cpu,test,dali', 'constraints.txt') == {
        'gluondet': '0.1.0'}


def _succeed(command, **kwargs):
    """Run ``command``; its stdout (it must succeed)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    return done.stdout


# --- docs/install.md's wheel, installed as the page says ---

INSTALL_PAGE = os.path.join(ROOT, 'docs', 'install.md')
WHEEL = 'gluondet-%s-py3-none-any.whl' % setup_kwargs()['version']


def wheel_section():
    """docs/install.md's section "The wheel": ``(its text, [its shell blocks])``."""
    with open(INSTALL_PAGE, encoding='utf-8') as f:
        page = f.read()
    section = page.split('\n## The wheel\n', 1)[1].split('\n## ', 1)[0]
    return section, re.findall(r'^```\n(.*?)^```$', section, re.M | re.S)


def test_the_docs_install_the_wheel_this_checkout_builds():
    """The wheel section has the two blocks `installed` runs, the first building the wheel
    that the second and the GPU line install, and the pages name that wheel."""
    section, blocks = wheel_section()
    assert len(blocks) == 2, blocks
    assert 'pip wheel' in blocks[0] and 'cp constraints.txt constraints-cu112.txt dist/' in \
        blocks[0]
    assert "'dist/%s[cpu]' -c dist/constraints.txt" % WHEEL in blocks[1]
    assert "'dist/%s[cu112]' -c dist/constraints-cu112.txt" % WHEEL in ' '.join(
        section.split())
    for path in glob.glob(os.path.join(ROOT, 'docs', '*.md')) + [os.path.join(ROOT, 'README.md')]:
        with open(path, encoding='utf-8') as f:
            for found in re.findall(r'gluondet-[^\s/\[\]\'`]*\.whl', f.read()):
                assert found == WHEEL, (path, found)


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """docs/install.md's wheel section run as written: its first block in a copy of the
    checkout (with a pip on PATH), its second in a fresh folder holding a copy of the first's
    ``dist/``; ``(that folder, its venv, the environment)``."""
    top = tmp_path_factory.mktemp('installed')
    checkout, outside = _project(top, package=True), top / 'outside'
    for name in ('constraints.txt', 'constraints-cu112.txt'):
        shutil.copy(os.path.join(ROOT, name), str(checkout / name))
    build, install = wheel_section()[1]
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env['PATH']
    _succeed(['bash', '-e', '-c', build], cwd=str(checkout), env=env)
    outside.mkdir()
    shutil.copytree(str(checkout / 'dist'), str(outside / 'dist'))
    printed = _succeed(['bash', '-e', '-c', install], cwd=str(outside), env=env)
    from gluondet.version import __version__
    assert printed.strip().splitlines()[-1] == 'gluondet ' + __version__
    venv = outside / 'venv'
    env['PATH'] = str(venv / 'bin') + os.pathsep + env['PATH']     # as activated
    return outside, venv, env


@pytest.mark.slow
def test_cpu_install_exports_infers_and_draws(installed, trained_model, bccd_root):
    """docs/install.md's wheel of this checkout, installed with the pins into a fresh venv
    as the page says; there, from the folder outside the checkout, what the README promises
    on a CPU: train (``gluondet train ssd``, ``gluondet train -e SPEC``: the training
    commands are in the package), export a zoo SSD to ONNX, infer and evaluate with ONNX
    Runtime, draw the evaluation's pictures."""
    import onnx
    from gluondet.deploy.commands import evaluate_model
    outside, venv, env = installed
    python, gluondet = str(venv / 'bin' / 'python'), str(venv / 'bin' / 'gluondet')
    _succeed([python, '-m', 'pip', 'check'], env=env)
    env = dict(env)

    def command(*args):
        return _succeed([gluondet] + list(args), cwd=str(outside), env=env)

    assert _succeed([python, '-c', 'import gluondet; print(gluondet.__file__)'],
                    cwd=str(outside), env=env).startswith(str(venv))
    env['GLUONDET_HOME'] = str(outside / 'home')        # the demo images, drawn once
    small = ['--network', 'mobilenet0.25', '--data-shape', '128', '--dataset', 'demo',
             '--epochs', '1', '--no-pretrained-base', '--gpus', '', '-j', '0', '--batch-size',
             '16', '--val-interval', '1']
    printed = command('train', 'ssd', *small, '--save-prefix', 'run/')
    assert 'final: ' in printed and (outside / 'run' / 'ssd_300_mobilenet0.25_custom_best.params'
                                    ).exists()
    with open(str(outside / 'spec.yaml'), 'w') as f:
        f.write('detector: ssd\nnetwork: mobilenet0.25\ndata_shape: 128\ndataset: demo\n'
                'epochs: 1\nno-pretrained-base: true\ngpus: ""\nnum_workers: 0\n'
                'batch_size: 16\n')
    assert 'final: ' in command('train', '-e', 'spec.yaml', '-r', 'results')
    assert (outside / 'results' / 'resolved_spec.json').exists()

    params = trained_model[0]
    voc, _ = small_bccd(bccd_root, trained_model[2])
    images = outside / 'images'
    images.mkdir()
    with open(os.path.join(voc, 'ImageSets', 'Main', SMALL_SPLIT + '.txt')) as f:
        for name in f.read().split():
            os.symlink(os.path.join(voc, 'JPEGImages', name + '.jpg'), str(images / name) + '.jpg')

    command('export', '--network', NETWORK, '--params', params, '--format', 'onnx',
            '-o', 'ssd.onnx')
    model = str(outside / 'ssd.onnx')
    meta = {p.key: json.loads(p.value) for p in onnx.load(model).metadata_props}
    assert meta['network'] == NETWORK and len(meta['classes']) == 8

    command('infer', '-m', 'ssd.onnx', '--images', 'images', '--output', 'det.json')
    with open(str(outside / 'det_images.json')) as f:
        assert len(json.load(f)['images']) == SMALL_SPLIT_SIZE
    with open(str(outside / 'det.json')) as f:
        detections = json.load(f)
    assert {d['image_id'] for d in detections} == set(range(1, SMALL_SPLIT_SIZE + 1))

    printed = command('evaluate', '-m', 'ssd.onnx', '--dataset', 'voc', '--dataset-root', voc,
                      '--split', SMALL_SPLIT, '--plots', 'plots')
    here = evaluate_model(model, 'voc', voc, SMALL_SPLIT, progress=False)
    assert 'VOC07 mAP (IoU 0.5) of ssd.onnx (onnxruntime) on %d images: %.4f' % (
        SMALL_SPLIT_SIZE, here['mAP']) in printed
    assert here['mAP'] > 0      # it finds cells
    for name in ('pr_curves.png', 'confusion_matrix.png', 'ap_per_class.png'):
        with open(str(outside / 'plots' / name), 'rb') as f:
            assert f.read(8) == b'\x89PNG\r\n\x1a\n', name


@pytest.mark.slow
def test_cpu_install_trains_mask_rcnn_and_infers_its_masks(installed):
    """From the installed wheel, outside the checkout: ``gluondet train mask_rcnn`` on the
    demo shapes (box and mask AP printed), its model's masks as COCO segmentations from
    ``gluondet infer``, and its ONNX export with a masks output."""
    import onnx
    outside, venv, env = installed
    env = dict(env, GLUONDET_HOME=str(outside / 'home'))

    def command(*args):
        return _succeed([str(venv / 'bin' / 'gluondet')] + list(args), cwd=str(outside), env=env)

    # `gluondet train` on 16 demo images (the installed package's demo, made smaller)
    small = ('import sys, gluondet.data.demo as demo; from gluondet.cli import main; '
             'demo.DEFAULT_NUM_IMAGES.update(train=16, val=8); sys.exit(main(sys.argv[1:]))')
    printed = _succeed([str(venv / 'bin' / 'python'), '-c', small, 'train', 'mask_rcnn',
                        '--network', 'resnet18_v1b', '--use-fpn',
                        '--dataset', 'demo', '--epochs', '1', '--no-pretrained-base', '--gpus',
                        '', '-j', '0', '--batch-size', '4', '--image-short', '96',
                        '--image-max-size', '128', '--save-prefix', 'masks/'],
                       cwd=str(outside), env=env)
    assert 'final: ' in printed and 'mask_AP=' in printed
    params = str(outside / 'masks' / 'mask_rcnn_fpn_resnet18_v1b_custom_best.params')
    image = sorted(glob.glob(str(outside / 'home' / 'demo' / '*' / 'val-8' / '*.jpg')))[0]
    command('infer', '-m', params, '--images', image, '--output', 'masks.json')
    with open(str(outside / 'masks.json')) as f:
        found = json.load(f)
    assert found and all(d['segmentation']['size'] == [256, 256] for d in found)
    command('export', '--network', params, '--format', 'onnx', '-o', 'masks.onnx')
    outputs = [o.name for o in onnx.load(str(outside / 'masks.onnx')).graph.output]
    assert outputs == ['ids', 'scores', 'boxes', 'masks']


@pytest.mark.slow
def test_the_gpu_line_finds_its_wheel_and_pins(installed):
    """The page's GPU line, in the same folder: its wheel and constraints-cu112.txt (which
    reads constraints.txt beside it) resolve, with everything installed already; the cu112
    extra is left out (its CUDA wheels: `test_gpu_pins_resolve_from_pypi`)."""
    outside, _, env = installed
    line = re.search(r"`(pip install '[^`]*\[cu112\]' -c [^`]*)`",
                     ' '.join(wheel_section()[0].split())).group(1)
    argv = shlex.split(line.replace('[cu112]', ''))
    printed = _succeed(argv[:2] + ['--dry-run'] + argv[2:], cwd=str(outside), env=env)
    would = ' '.join(re.findall(r'^Would install (.*)$', printed, re.M)).split()
    assert all(name.startswith('gluondet-') for name in would), printed     # the pins agree


@pytest.mark.slow
def test_the_recipes_parse_with_the_installed_package(installed, tmp_path):
    """Every model_zoo/*.sh, copied outside the checkout, runs a ``gluondet train`` that the
    wheel's gluondet parses (tests/test_recipes.py)."""
    _, venv, _ = installed
    source = check_recipes(str(venv / 'bin' / 'python'), tmp_path)
    assert source.startswith(str(venv)), source


def _pypi_reachable():
    try:
        urllib.request.urlopen('https://pypi.org/simple/mxnet-cu112/', timeout=15).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_gpu_pins_resolve_from_pypi(tmp_path):
    if not _pypi_reachable():
        pytest.skip('PyPI is not reachable')
    found = _pip_dry_run(tmp_path, 'cu112', 'constraints-cu112.txt', '--ignore-installed')
    gpu, cpu = read_constraints('constraints-cu112.txt'), read_constraints('constraints.txt')
    for name, version in gpu.items():
        assert found.get(name) == version, name
    assert 'mxnet' not in found
    # the nested `-c constraints.txt` applies: unpinned, scipy would be a newer release
    for name in ('numpy', 'scipy', 'opencv-python', 'requests'):
        assert found[name] == cpu[name], name
