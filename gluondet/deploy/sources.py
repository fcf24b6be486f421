"""Model sources: what a name or path given to deploy is, which backend runs it, and the
metadata an exported model carries.

A source is a model zoo name or a training output ``.params`` (``zoo``: a Gluon network),
an MXNet symbol prefix (``symbol``), an ONNX model (``onnx``: ONNX Runtime by default, or
OpenVINO), a TensorRT engine (``tensorrt``) or an OpenVINO IR ``.xml`` (``openvino``). An
export describes itself (:func:`model_metadata`): an ONNX model in its metadata (an IR in
its ``rt_info``, converted from it), a symbol in ``{prefix}-meta.json``, an engine in the
json of its stem (:func:`metadata_path`).
"""
import json
import numbers
import os

from ..data.preprocess import preprocessing_of
from ..model_formats import BACKENDS, SOURCES, source_kind
from .postprocess import postprocess_of

__all__ = ['BACKENDS', 'BACKEND_OF', 'ENGINE_EXTENSIONS', 'METADATA_FORMAT', 'NMS_SETTINGS',
           'SOURCES', 'agree', 'decode_metadata', 'metadata_path',
           'model_metadata', 'shape_pair', 'source_kind']

METADATA_FORMAT = 'gluondet-deploy'
ENGINE_EXTENSIONS = SOURCES['tensorrt'].extensions
NMS_SETTINGS = ('score_thresh', 'nms_thresh', 'nms_topk', 'post_nms', 'force_nms')
BACKEND_OF = {kind: row.backends[0] for kind, row in SOURCES.items()}


def shape_pair(data_shape, what='data_shape'):
    """``(height, width)`` from an int or a pair, checked positive."""
    pair = (data_shape, data_shape) if isinstance(data_shape, numbers.Integral) else data_shape
    try:
        height, width = (int(v) for v in pair)
        ok = height >= 1 and width >= 1 and all(float(v) == int(v) for v in pair)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError('%s must be a positive int or (height, width), got %r'
                         % (what, data_shape))
    return height, width


def agree(known, given, what, source):
    """``known`` (from the model), checked against ``given`` (from the caller); either may
    be None, not both."""
    if known is None and given is None:
        raise ValueError('%s does not record its %s: give %s' % (source, what, what))
    if known is not None and given is not None and known != given:
        raise ValueError('%s has %s %s, but %s was given' % (source, what, known, given))
    return known if known is not None else given


def metadata_path(model):
    """Where the description of a symbol prefix or a TensorRT engine lives.

    ``{prefix}-meta.json`` for a symbol prefix, ``{stem}.json`` for an engine
    file ``{stem}.engine``.
    """
    model = os.fspath(model)
    if model.lower().endswith(ENGINE_EXTENSIONS):
        return os.path.splitext(model)[0] + '.json'
    return model + '-meta.json'


def model_metadata(net, network, data_shape, batch_size=None, preprocessing=None, **extra):
    """The description of an exported detector, as its ONNX metadata holds it.

    Parameters
    ----------
    net : DetectionNet (:mod:`gluondet.model_zoo`)
        Of a ``postprocess_kind`` deploy knows (:mod:`gluondet.deploy.postprocess`).
    network : str
        The model zoo name.
    data_shape : int or (int, int)
        Input ``(height, width)`` of the export (a fixed-size ONNX model's or engine's
        input, the largest input of one that takes any size, the size a symbol was traced
        at).
    batch_size : int or None
        The fixed batch, None if the model takes several.
    preprocessing : dict, optional
        Default: :func:`~gluondet.data.preprocess.preprocessing_of` the network (an SSD
        at ``data_shape``; a Faster R-CNN with its ``short`` and ``max_size``).
    **extra
        More keys (for example ``precision`` of an engine).

    Returns
    -------
    dict
        JSON-ready: ``format``, ``network``, ``classes``, ``data_shape`` ``[height,
        width]``, ``batch_size``, ``nms`` (the network's settings of :data:`NMS_SETTINGS`),
        ``postprocess_kind``, ``preprocessing``, ``mean``, ``std`` (also inside
        ``preprocessing``; kept at the top for readers of older metadata), then ``extra``.
    """
    kind = postprocess_of(net).kind
    post = net.postprocess
    shape = shape_pair(data_shape)
    preprocessing = preprocessing or preprocessing_of(net, shape)
    nms = {key: getattr(post, key) for key in NMS_SETTINGS if hasattr(post, key)}
    return dict(format=METADATA_FORMAT, network=network, classes=list(net.classes),
                data_shape=list(shape), batch_size=batch_size, nms=nms, postprocess_kind=kind,
                preprocessing=preprocessing, mean=preprocessing['mean'],
                std=preprocessing['std'], **extra)


def decode_metadata(props, source):
    """An ONNX model's metadata decoded, or ValueError naming ``source``.

    ``props``: ONNX's ``ModelProto.metadata_props`` or ONNX Runtime's
    ``custom_metadata_map`` (``{key: JSON text}``).
    """
    pairs = props.items() if hasattr(props, 'items') else ((p.key, p.value) for p in props)
    try:
        return {key: json.loads(value) for key, value in pairs}
    except ValueError as err:
        raise ValueError("%s: metadata is not gluondet's JSON: %s" % (source, err)) from None
