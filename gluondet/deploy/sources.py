"""Model sources: what a name or path given to deploy is, which backend runs it, and the
metadata an exported model carries.

A source is a model zoo name or a training output ``.params`` (``zoo``: a Gluon network),
an MXNet symbol prefix (``symbol``), an ONNX model (``onnx``: ONNX Runtime by default, or
OpenVINO), a TensorRT engine (``tensorrt``) or an OpenVINO IR ``.xml`` (``openvino``). An
export describes itself (:func:`model_metadata`): an ONNX model in its metadata (an IR in
its ``rt_info``, converted from it), a symbol in ``{prefix}-meta.json``, an engine in the
json of its stem (:func:`metadata_path`).
"""
import dataclasses
import json
import numbers
import os
from typing import Any, Optional, Tuple

from ..data.preprocess import preprocessing_of
from ..model_formats import BACKENDS, SOURCES, source_kind
from .postprocess import postprocess_of

__all__ = ['BACKENDS', 'BACKEND_OF', 'ENGINE_EXTENSIONS', 'METADATA_FORMAT', 'ModelSource',
           'NMS_SETTINGS', 'SOURCES', 'agree', 'decode_metadata', 'metadata_path',
           'model_metadata', 'shape_pair', 'source_kind']

METADATA_FORMAT = 'gluondet-deploy'
ENGINE_EXTENSIONS = SOURCES['tensorrt'].extensions
NMS_SETTINGS = ('score_thresh', 'nms_thresh', 'nms_topk', 'post_nms', 'force_nms')
BACKEND_OF = {kind: row.backends[0] for kind, row in SOURCES.items()}


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A detector to run and how to load it: what every inference entry point takes
    (:meth:`Predictor.from_model <gluondet.deploy.predictor.Predictor.from_model>`,
    ``infer``, ``evaluate_model``, ``benchmark``, :class:`gluondet.Detector` and the
    commands' model flags). The entry points take one, or its fields as keywords.

    Attributes
    ----------
    model : str or HybridBlock
        A model zoo name, a training output ``PREFIX_best.params``, a symbol prefix, an
        ``.onnx``, a TensorRT engine, an OpenVINO IR ``.xml``, or a Gluon detector object
        (run as it is; ``data_shape`` then defaults to its ``base_size``).
    backend : {'mxnet', 'onnxruntime', 'openvino', 'tensorrt'}, optional
        Default: the one the source needs (Gluon networks and symbols run in MXNet,
        ``.onnx`` in ONNX Runtime or OpenVINO, engines in TensorRT, IR ``.xml`` in
        OpenVINO); another is an error.
    params, pretrained
        Weights for a zoo name (see :func:`~gluondet.deploy.networks.load_network`).
    data_shape : int or (int, int), optional
        Input ``(height, width)`` of a fixed-size model (SSD); needed where the source does
        not record it. A Gluon network or symbol can run at another size; an ONNX model or
        engine cannot. A keep-ratio model (Faster R-CNN, RetinaNet) takes each image at its
        own size and refuses it, unless it equals the fixed input of an ONNX model or engine
        exported at one size.
    classes : sequence of str, optional
        Needed where the source does not record them; else checked.
    """
    model: Any
    backend: Optional[str] = None
    params: Optional[str] = None
    pretrained: Any = False
    data_shape: Any = None
    classes: Optional[Tuple[str, ...]] = None

    def __post_init__(self):
        if isinstance(self.model, (str, os.PathLike)):
            object.__setattr__(self, 'model', os.fspath(self.model))
        elif not hasattr(self.model, 'collect_params'):
            raise TypeError('model must be a name, a path or a Gluon detector, got %r'
                            % (self.model,))
        if self.classes is not None:
            object.__setattr__(self, 'classes', tuple(self.classes))

    @classmethod
    def of(cls, model, **fields):
        """``model`` if it is a ModelSource (with the ``fields`` not left at their default
        replaced), else the source of ``model`` and ``fields``; a keyword that is not a field
        is a TypeError naming it."""
        defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.name != 'model'}
        unknown = sorted(set(fields) - set(defaults))
        if unknown:
            raise TypeError('unknown model source keyword %s (the keywords are %s)'
                            % (', '.join(unknown), ', '.join(defaults)))
        if isinstance(model, cls):
            return dataclasses.replace(model, **{key: value for key, value in fields.items()
                                                 if value is not defaults[key]})
        return cls(model, **fields)

    @property
    def kind(self):
        """The source's kind (a key of :data:`SOURCES`; ``zoo`` for a Gluon object)."""
        return source_kind(self.model) if isinstance(self.model, str) else 'zoo'


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
        ``preprocessing``; kept at the top for readers of older metadata), ``grid_fields``
        for a network with outputs that are grids over the boxes (Mask R-CNN's ``masks``),
        then ``extra``.
    """
    kind = postprocess_of(net).kind
    post = net.postprocess
    shape = shape_pair(data_shape)
    preprocessing = preprocessing or preprocessing_of(net, shape)
    nms = {key: getattr(post, key) for key in NMS_SETTINGS if hasattr(post, key)}
    grids = {'grid_fields': list(net.grid_fields)} if getattr(net, 'grid_fields', ()) else {}
    return dict(format=METADATA_FORMAT, network=network, classes=list(net.classes),
                data_shape=list(shape), batch_size=batch_size, nms=nms, postprocess_kind=kind,
                preprocessing=preprocessing, mean=preprocessing['mean'],
                std=preprocessing['std'], **grids, **extra)


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
