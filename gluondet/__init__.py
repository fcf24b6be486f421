"""gluondet: object detection on Apache MXNet Gluon."""
from . import threads
threads.configure()   # before anything imports mxnet: it reads OMP_NUM_THREADS once
from . import _compat  # noqa: E402,F401  (numpy aliases mxnet 1.9.1 needs; must precede mxnet)
from . import _mxnet  # noqa: E402
_mxnet.prepare()   # which MXNet build; a CUDA build's libraries from the nvidia-* wheels

from .version import __version__  # noqa: E402,F401


def __getattr__(name):
    """``gluondet.Detector`` and ``gluondet.Results`` (:mod:`gluondet.model`), imported when
    first used: ``import gluondet`` stays light."""
    if name in ('Detector', 'Results'):
        from . import model
        return getattr(model, name)
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
