"""Which MXNet build is installed, and the CUDA libraries of a GPU build, before mxnet loads.

gluondet installs MXNet through an extra: ``gluondet[cpu]`` (``mxnet``) or ``gluondet[cu112]``
(``mxnet-cu112`` plus NVIDIA's CUDA 11 runtime wheels, ``nvidia-*-cu11``). Those wheels put
their libraries in ``site-packages/nvidia/<name>/lib``, where the dynamic loader does not
look, and ``LD_LIBRARY_PATH`` is read only when a process starts. So `prepare` (called by
``import gluondet``, before anything imports mxnet) loads them itself, dependencies first:
once a library with a given soname is loaded, ``libmxnet.so``'s ``NEEDED`` entry for it is
satisfied by that copy. It does so only when the installed build is a CUDA one.
``libcuda.so.1`` is not among them: it is the NVIDIA driver's, installed with the driver.

A program that imports mxnet before gluondet gets none of this (its ``import mxnet`` fails
with ``libcudnn.so.8: cannot open shared object file``); `ld_library_path` gives such
programs an ``LD_LIBRARY_PATH``.
"""
import ctypes
import glob
import importlib.metadata
import importlib.util
import os
import sys
import warnings

# The distributions that install the `mxnet` package (each writes the same files).
MXNET_DISTRIBUTIONS = ('mxnet', 'mxnet-native', 'mxnet-mkl', 'mxnet-cu101', 'mxnet-cu102',
                       'mxnet-cu110', 'mxnet-cu111', 'mxnet-cu112', 'mxnet-cu113',
                       'mxnet-cu114', 'mxnet-cu115', 'mxnet-cu116', 'mxnet-cu117')

# What `readelf -d mxnet/libmxnet.so` of mxnet-cu112 1.9.1 lists as NEEDED from CUDA (besides
# the driver's libcuda.so.1): cudart 11.0, cublas 11, cufft 10, curand 10, cusolver 11,
# nvrtc 11.2, nvToolsExt 1, cudnn 8, nccl 2; with what those need in turn (cublas ->
# cublasLt; cusolver -> cublas, cublasLt; cudnn's six sub-libraries, which libcudnn.so.8
# opens by name; nvrtc's builtins). (wheel folder, file name) in load order: each after the
# libraries it links. The names are CUDA 11 sonames, so CUDA 12 wheels beside them (torch's)
# are never picked up.
CUDA11_LIBRARIES = (
    ('cuda_runtime', 'libcudart.so.11.0'),
    ('cublas', 'libcublasLt.so.11'),
    ('cublas', 'libcublas.so.11'),
    ('cufft', 'libcufft.so.10'),
    ('curand', 'libcurand.so.10'),
    ('cusolver', 'libcusolver.so.11'),
    ('cuda_nvrtc', 'libnvrtc-builtins.so.11.*'),
    ('cuda_nvrtc', 'libnvrtc.so.11.2'),
    ('nvtx', 'libnvToolsExt.so.1'),
    ('cudnn', 'libcudnn_ops_infer.so.8'),
    ('cudnn', 'libcudnn_ops_train.so.8'),
    ('cudnn', 'libcudnn_cnn_infer.so.8'),
    ('cudnn', 'libcudnn_cnn_train.so.8'),
    ('cudnn', 'libcudnn_adv_infer.so.8'),
    ('cudnn', 'libcudnn_adv_train.so.8'),
    ('cudnn', 'libcudnn.so.8'),
    ('nccl', 'libnccl.so.2'),
)

# The CUDA builds whose libraries gluondet loads from the wheels of its `cu112` extra.
CUDA_BUILDS = {'mxnet-cu112': CUDA11_LIBRARIES}

MISSING = (
    "gluondet needs MXNet 1.9.1, and no MXNet is installed. Install gluondet with the build "
    "you want: pip install 'gluondet[cpu]' (CPU) or pip install 'gluondet[cu112]' -c "
    "constraints-cu112.txt (CUDA 11.2 GPUs: brings mxnet-cu112 and NVIDIA's CUDA 11 runtime "
    "wheels; the machine needs only an NVIDIA driver); from a clone, `make venv` (CPU) or "
    "`make venv MXNET=mxnet-cu112`. See docs/install.md.")

SEVERAL = (
    "several MXNet distributions are installed: {found}. They all write the same `mxnet` "
    "package, so the files on disk are {owner}, and uninstalling either one deletes files "
    "the other needs. Keep one: pip uninstall -y {names}, then pip install 'gluondet[cpu]' "
    "(CPU) or 'gluondet[cu112]' -c constraints-cu112.txt (GPU).")


def installed_builds():
    """The installed distributions among `MXNET_DISTRIBUTIONS`: ``[(name, version)]``."""
    found = []
    for name in MXNET_DISTRIBUTIONS:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _library_owner(names):
    """Which of the distributions `names` wrote the ``mxnet/libmxnet.so`` on disk: the one
    whose RECORD gives the file's size (the builds' libraries differ: 49 MB CPU, 891 MB
    cu112), or None if no RECORD matches."""
    for name in names:
        files = importlib.metadata.distribution(name).files or ()
        for record in files:
            if record.name == 'libmxnet.so' and record.size:
                path = record.locate()
                if os.path.isfile(path) and os.path.getsize(path) == record.size:
                    return name
    return None


def active_build(found=None):
    """The name of the MXNet distribution whose files are installed (warning if there are
    several), None if mxnet is importable without one (a source build on ``sys.path``).
    Raises ImportError if there is no MXNet at all."""
    found = installed_builds() if found is None else found
    names = [name for name, _ in found]
    if not names:
        if importlib.util.find_spec('mxnet') is None:
            raise ImportError(MISSING)
        return None
    if len(names) == 1:
        return names[0]
    owner = _library_owner(names)
    warnings.warn(SEVERAL.format(
        found=', '.join('%s %s' % item for item in found),
        owner="%s's" % owner if owner else 'those of whichever was installed last',
        names=' '.join(names)), RuntimeWarning, stacklevel=3)
    return owner


def cuda_libraries(libraries=CUDA11_LIBRARIES, paths=None):
    """The files of `libraries` (``(folder, file name pattern)``) found in
    ``<path>/nvidia/<folder>/lib`` for the first of `paths` (default ``sys.path``) that has
    each, in the order of `libraries`. A library found nowhere is left out: the loader may
    still find it on the system (a CUDA toolkit in ``LD_LIBRARY_PATH``)."""
    paths = sys.path if paths is None else paths
    found = []
    for folder, pattern in libraries:
        for path in paths:
            matches = sorted(glob.glob(os.path.join(path or os.curdir, 'nvidia', folder, 'lib',
                                                    pattern)))
            if matches:
                found.append(matches[-1])
                break
    return found


def library_folders(files):
    """The folders of `files`, each once, in order (an ``LD_LIBRARY_PATH``)."""
    return list(dict.fromkeys(os.path.dirname(path) for path in files))


def preload(files):
    """Load `files` in order with ``RTLD_GLOBAL``; return the handles."""
    handles = []
    for path in files:
        try:
            handles.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
        except OSError as error:
            raise ImportError('gluondet could not load %s, a CUDA library that mxnet needs: %s'
                              % (path, error)) from error
    return handles


_loaded = []   # the handles `prepare` loaded: kept for the life of the process


def prepare():
    """Check the MXNet install and, for a CUDA build, load its CUDA libraries from the
    ``nvidia-*`` wheels (called by ``import gluondet``). Returns the files loaded. Does
    nothing once mxnet is imported: then it is too late, and mxnet's import worked."""
    if 'mxnet' in sys.modules:
        return []
    libraries = CUDA_BUILDS.get(active_build())
    if libraries is None or _loaded:
        return []
    files = cuda_libraries(libraries)
    _loaded.extend(preload(files))
    return files


def ld_library_path():
    """An ``LD_LIBRARY_PATH`` with the CUDA wheels' folders before the current one, for a
    program that imports mxnet before gluondet (and for building Horovod against
    mxnet-cu112): ``LD_LIBRARY_PATH="$(python -c 'import gluondet._mxnet as m;
    print(m.ld_library_path())')" python other.py``."""
    libraries = CUDA_BUILDS.get(active_build(), ())
    folders = library_folders(cuda_libraries(libraries))
    current = os.environ.get('LD_LIBRARY_PATH', '').split(os.pathsep)
    return os.pathsep.join(folders + [path for path in current if path and path not in folders])
