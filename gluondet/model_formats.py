"""The kinds of model gluondet runs, the exported ones being ``gluondet export``'s formats: one
table the command line, deploy and `gluondet.Detector` read (standard library only, so the
command line's help imports nothing heavy).

>>> from gluondet.model_formats import FORMATS, SOURCES, source_kind
>>> FORMATS
('symbol', 'onnx', 'tensorrt', 'openvino')
>>> source_kind('model.plan'), SOURCES['onnx'].backends
('tensorrt', ('onnxruntime', 'openvino'))
"""
import collections
import os

__all__ = ['Source', 'SOURCES', 'FORMATS', 'BACKENDS', 'source_kind', 'export_path']

Source = collections.namedtuple('Source', 'kind name extensions backends')
Source.__doc__ = """One kind of model: what messages call it, the file endings it is known by
(the first is an export's default; a symbol is a path prefix), the backends that run it (its
default first)."""

SOURCES = {row.kind: row for row in [
    Source('zoo', 'a Gluon network', ('.params',), ('mxnet',)),     # or a model zoo name
    Source('symbol', 'an MXNet symbol', (), ('mxnet',)),
    Source('onnx', 'an ONNX model', ('.onnx',), ('onnxruntime', 'openvino')),
    Source('tensorrt', 'a TensorRT engine', ('.engine', '.plan', '.trt'), ('tensorrt',)),
    Source('openvino', 'an OpenVINO IR', ('.xml',), ('openvino',)),
]}
FORMATS = tuple(kind for kind in SOURCES if kind != 'zoo')
BACKENDS = tuple(dict.fromkeys(b for row in SOURCES.values() for b in row.backends))


def source_kind(model):
    """``'onnx'``, ``'tensorrt'``, ``'openvino'``, ``'symbol'`` (a prefix whose
    ``-symbol.json`` exists, or that file) or ``'zoo'`` (a zoo name or a ``.params``)."""
    lower = os.fspath(model).lower()
    for row in SOURCES.values():
        if row.kind != 'zoo' and lower.endswith(row.extensions):
            return row.kind
    if lower.endswith('-symbol.json') or os.path.isfile(os.fspath(model) + '-symbol.json'):
        return 'symbol'
    return 'zoo'


def export_path(stem, fmt):
    """Where an export of format ``fmt`` goes by default: ``stem`` with its extension (a
    symbol, or a format that is none: ``stem``, which the export then refuses)."""
    row = SOURCES.get(fmt)
    return stem + (row.extensions[0] if row and row.extensions else '')
