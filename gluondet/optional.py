"""Packages imported where they are used, and the install that brings each.

:func:`require` imports one; when it (or a package it imports) is not installed, the
ImportError is one line naming what needed it and the ``pip install`` of the gluondet
extra that brings it. ONNX, ONNX Runtime, matplotlib and TensorBoard come with every
install (``gluondet[cpu]`` or ``gluondet[cu112]``); Horovod, DALI, TensorRT and OpenVINO with
their own extras.
"""
import importlib

__all__ = ['PACKAGES', 'install_hint', 'require']

# top-level module -> (its distribution, the gluondet extra that installs it; None: every
# install). setup.py holds the same (tests/test_install.py checks it).
PACKAGES = {
    'onnx': ('onnx', None),
    'onnxruntime': ('onnxruntime', None),
    'ml_dtypes': ('ml_dtypes', None),
    'matplotlib': ('matplotlib', None),
    'tensorboardX': ('tensorboardX', None),
    'horovod': ('horovod', 'horovod'),
    'nvidia.dali': ('nvidia-dali-cuda110', 'dali'),
    'tensorrt': ('tensorrt', 'tensorrt'),
    'openvino': ('openvino', 'openvino'),
    'cuda': ('cuda-python', 'tensorrt'),
    'pycocotools': ('pycocotools', 'test'),
}
_NOTES = {
    'horovod': ' with HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 and --no-build-isolation after '
               'MXNet (docs/install.md; `make venv` does it)',
    'tensorrt': ' on a machine with an NVIDIA GPU and its driver (TensorRT has no CPU mode)',
}


def _entry(module):
    """The key of :data:`PACKAGES` that ``module`` belongs to, or None."""
    while module and module not in PACKAGES:
        module = module.rpartition('.')[0]
    return module or None


def install_hint(module):
    """The ``pip install`` that brings ``module``, naming its gluondet extra."""
    distribution, extra = PACKAGES[_entry(module)]
    if extra is None:
        return ("pip install 'gluondet[cpu]' (or 'gluondet[cu112]'), which installs %s"
                % distribution)
    return "pip install 'gluondet[%s]'%s" % (extra, _NOTES.get(extra, ''))


def require(module, purpose):
    """``import module``, or an ImportError of one line that says how to install it.

    Parameters
    ----------
    module : str
        The module, e.g. ``'onnxruntime.quantization'``.
    purpose : str
        What needs it, the start of the message (``'ONNX export'``).

    Returns
    -------
    module
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        # the missing one may be a package the module imports (ml_dtypes for quantization)
        missing = module if not err.name or module.startswith(err.name + '.') else err.name
        if _entry(missing) is None:
            raise
        raise ImportError('%s needs %s, which is not installed: %s' % (
            purpose, PACKAGES[_entry(missing)][0], install_hint(missing))) from err
