"""Deployment: MXNet symbol and ONNX export of detectors, and output comparison.

``export_onnx`` and ``UnsupportedOperatorError`` need the ``onnx`` extra
(``pip install gluondet[onnx]``); they are imported on first use.
"""
from .compare import DetectionComparison, compare_detections, detecting_random_weights
from .predictor import Detections, Predictor, load_network
from .symbol import export_symbol

__all__ = ['export_symbol', 'export_onnx', 'UnsupportedOperatorError', 'compare_detections',
           'DetectionComparison', 'detecting_random_weights', 'Predictor', 'Detections', 'load_network']

_ONNX_NAMES = ('export_onnx', 'UnsupportedOperatorError')


def __getattr__(name):
    if name in _ONNX_NAMES:
        from . import onnx
        return getattr(onnx, name)
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
