"""gluondet: object detection on Apache MXNet Gluon."""
from . import _compat  # noqa: F401  (numpy aliases mxnet 1.9.1 needs; must precede mxnet)

__version__ = '0.1.0'
