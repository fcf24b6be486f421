"""Deployment: MXNet symbol and ONNX export of detectors, and output comparison.

``export_onnx`` and ``UnsupportedOperatorError`` are imported on first use (they import
onnx, or say how to install it).
"""
from ..optional import require
from .compare import DetectionComparison, compare_detections, detecting_random_weights
from .networks import load_network
from .predictor import Detections, Predictor
from .symbol import export_symbol

__all__ = ['export_symbol', 'export_onnx', 'UnsupportedOperatorError', 'compare_detections',
           'DetectionComparison', 'detecting_random_weights', 'Predictor', 'Detections',
           'load_network']

_ONNX_NAMES = ('export_onnx', 'UnsupportedOperatorError')


def __getattr__(name):
    if name in _ONNX_NAMES:
        require('onnx', 'ONNX export')
        from . import onnx
        return getattr(onnx, name)
    raise AttributeError('module %r has no attribute %r' % (__name__, name))
