"""gluondet: object detection on Apache MXNet Gluon."""
from . import threads
threads.configure()   # before anything imports mxnet: it reads OMP_NUM_THREADS once
from . import _compat  # noqa: E402,F401  (numpy aliases mxnet 1.9.1 needs; must precede mxnet)

__version__ = '0.1.0'
