"""Run a detector on images the same way whatever runs it: Gluon, symbol, ONNX Runtime, TensorRT.

A runtime is wrapped as a *runner*: a callable ``runner(batch) -> (ids, scores,
boxes)`` on a float32 ``N x 3 x H x W`` batch, returning numpy arrays as the
network does (``N x K x 1``, ``N x K x 1``, ``N x K x 4``, boxes in input pixels,
rows padded with -1), with an attribute ``batch_range = (smallest, largest)``
batch it takes (``largest`` None: unbounded).
:class:`~gluondet.deploy.runners.MXNetRunner`,
:class:`~gluondet.deploy.runners.ONNXRuntimeRunner` and
:class:`~gluondet.deploy.tensorrt.TensorRTRunner` are runners. :class:`Predictor`
does the rest, the same for every runner: the validation preprocessing
(:class:`~gluondet.tasks.ssd.SSDValTransform`), batching (padding a last batch
smaller than the model takes), and boxes back in original image pixels.

Model sources (:meth:`Predictor.from_model`):

- a model zoo name with ``params=`` (a gluondet or GluonCV ``.params`` file) or
  ``pretrained=True``;
- a training output ``{prefix}_best.params`` (or any params file the engine
  wrote) with its ``.json`` beside it (network, classes, data shape, anchor steps);
- an MXNet symbol prefix (``{prefix}-symbol.json``, ``{prefix}-0000.params``,
  described by ``{prefix}-meta.json``);
- an ONNX model (``.onnx``; classes and input size from its metadata);
- a TensorRT engine (``.engine``, ``.plan`` or ``.trt``) described by the json of
  the same stem beside it (``model.engine`` -> ``model.json``).

``gluondet export`` writes the ``-meta.json`` and engine ``.json`` files
(:func:`model_metadata`); without them ``classes`` and ``data_shape`` must be given.
"""
import collections
import json
import logging
import numbers
import os

import mxnet as mx
import numpy as np
from mxnet import gluon
from tqdm import tqdm

from ..data import transforms as T
from ..data.base import DatasetError, empty_label, read_image
from ..model_zoo import get_model, get_model_info
from ..tasks.ssd import SSDValTransform
from .calibration import IMAGE_EXTENSIONS
from .runners import MXNetRunner, ONNXRuntimeRunner, _symbol_prefix, _symbol_runner
from .tensorrt import TensorRTRunner

__all__ = ['BACKENDS', 'Detections', 'Prediction', 'Predictions', 'Predictor', 'list_images',
           'load_network', 'metadata_path', 'model_metadata', 'rescale_boxes']

logger = logging.getLogger('gluondet.deploy')

BACKENDS = ('mxnet', 'onnxruntime', 'tensorrt')
DEFAULT_BATCH_SIZE = 8          # for runners that take any batch
METADATA_FORMAT = 'gluondet-deploy'
ENGINE_EXTENSIONS = ('.engine', '.plan', '.trt')

Detections = collections.namedtuple('Detections', ['ids', 'scores', 'boxes'])
Detections.__doc__ = """The detections of one image, best first, padding removed.

ids : int64 ``N`` class indices into the predictor's ``classes``.
scores : float32 ``N``.
boxes : float32 ``N x 4`` ``xmin, ymin, xmax, ymax`` in original image pixels.
"""

Prediction = collections.namedtuple('Prediction', ['index', 'source', 'image', 'detections'])
Prediction.__doc__ = """One input of :meth:`Predictor.predict` and its detections.

index : position of the input in the list given.
source : the path given, or None for an array.
image : the decoded ``H x W x 3`` uint8 RGB numpy image.
detections : :class:`Detections`.
"""


# ---------------------------------------------------------------- boxes

def rescale_boxes(boxes, sizes, input_size):
    """Boxes from network input pixels to original image pixels, as validation rescales them.

    The numpy form of :func:`gluondet.tasks.ssd.detect_batches`' rescale, in
    float32 like it. Every row is scaled, padding rows too (callers drop those
    by their id).

    Parameters
    ----------
    boxes : numpy.ndarray
        ``B x K x 4`` in input pixels.
    sizes : numpy.ndarray
        ``B x 2`` float32 original ``[height, width]`` (what SSDValTransform returns).
    input_size : (int, int)
        Network input ``(width, height)``.

    Returns
    -------
    numpy.ndarray
        ``B x K x 4`` float32.
    """
    width, height = input_size
    sizes = np.asarray(sizes, np.float32)
    scale = np.stack([sizes[:, 1] / width, sizes[:, 0] / height] * 2, axis=1)
    return np.asarray(boxes, np.float32) * scale[:, None, :]


# ---------------------------------------------------------------- inputs

def list_images(path):
    """The image files ``path`` names: itself if a file, else its image files sorted by name.

    A folder's files are chosen by extension (``.jpg``, ``.png``, ...), without
    looking into subfolders.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a folder holds no image file.
    """
    path = os.fspath(path)
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError('no such image file or folder: %s' % path)
    paths = [os.path.join(path, name) for name in sorted(os.listdir(path))
             if name.lower().endswith(IMAGE_EXTENSIONS)
             and os.path.isfile(os.path.join(path, name))]
    if not paths:
        raise ValueError('no image files (%s) in %s' % (' '.join(IMAGE_EXTENSIONS), path))
    return paths


def _as_image(image, where):
    """An ``H x W x 3`` uint8 numpy image, or ValueError naming ``where``."""
    array = image.asnumpy() if hasattr(image, 'asnumpy') else np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8 or 0 in array.shape:
        raise ValueError('%s: expected an H x W x 3 uint8 RGB image, got %s %s'
                         % (where, array.dtype, array.shape))
    return array


def _pair(data_shape, what='data_shape'):
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


def _agree(known, given, what, source):
    """``known`` (from the model), checked against ``given`` (from the caller); either may
    be None, not both."""
    if known is None and given is None:
        raise ValueError('%s does not record its %s: give %s' % (source, what, what))
    if known is not None and given is not None and known != given:
        raise ValueError('%s has %s %s, but %s was given' % (source, what, known, given))
    return known if known is not None else given


# ---------------------------------------------------------------- metadata

def metadata_path(model):
    """Where the description of a symbol prefix or a TensorRT engine lives.

    ``{prefix}-meta.json`` for a symbol prefix, ``{stem}.json`` for an engine
    file ``{stem}.engine``.
    """
    model = os.fspath(model)
    if model.lower().endswith(ENGINE_EXTENSIONS):
        return os.path.splitext(model)[0] + '.json'
    return model + '-meta.json'


def model_metadata(net, network, data_shape, batch_size=None, **extra):
    """The description of an exported detector, as its ONNX metadata holds it.

    Parameters
    ----------
    net : :class:`gluondet.model_zoo.ssd.SSD`
    network : str
        The model zoo name.
    data_shape : int or (int, int)
        Input ``(height, width)``.
    batch_size : int or None
        The fixed batch, None if the model takes several.
    **extra
        More keys (for example ``precision`` of an engine).

    Returns
    -------
    dict
        JSON-ready: ``format``, ``network``, ``classes``, ``data_shape``
        ``[height, width]``, ``batch_size``, ``nms``, ``mean``, ``std``, then ``extra``.
    """
    nms = net.postprocess
    return dict(format=METADATA_FORMAT, network=network, classes=list(net.classes),
                data_shape=list(_pair(data_shape)), batch_size=batch_size,
                nms={'score_thresh': nms.score_thresh, 'nms_thresh': nms.nms_thresh,
                     'nms_topk': nms.nms_topk, 'post_nms': nms.post_nms},
                mean=list(T.IMAGENET_MEAN), std=list(T.IMAGENET_STD), **extra)


def _read_json(path, what):
    try:
        with open(path, encoding='utf-8') as f:
            data = json.load(f)
    except OSError as err:
        raise FileNotFoundError('cannot read %s %s: %s' % (what, path, err.strerror)) from None
    except ValueError as err:
        raise ValueError('%s %s is not valid JSON: %s' % (what, path, err)) from None
    if not isinstance(data, dict):
        raise ValueError('%s %s: expected a JSON object' % (what, path))
    return data


def _training_meta(params):
    """The task meta of a params file the engine wrote (from the ``.json`` beside), or None."""
    path = os.path.splitext(params)[0] + '.json'
    if not os.path.isfile(path):
        return None
    meta = _read_json(path, 'params description').get('meta')
    if not isinstance(meta, dict) or 'network' not in meta:
        raise ValueError('%s does not describe a network (no meta.network): is it the json the '
                         'training wrote beside %s?' % (path, params))
    return meta


# ---------------------------------------------------------------- loading networks

def load_network(model, params=None, pretrained=False, classes=None, data_shape=None, ctx=None):
    """A model zoo network with its weights, from a zoo name or a training output.

    Parameters
    ----------
    model : str
        A zoo name (``ssd_300_mobilenet0.25_voc``), or a ``.params`` file with the
        training's ``.json`` beside it.
    params : str, optional
        Weights for a zoo name (gluondet or GluonCV ``.params``); if the training's
        ``.json`` is beside it, its classes, data shape and anchor steps are used.
    pretrained : bool
        Load the zoo name's published weights instead.
    classes : sequence of str, optional
        Class names of a ``*_custom`` name without a training json; otherwise
        checked against the network's.
    data_shape : int or (int, int), optional
        Input ``(height, width)``; default the training's, else the zoo's.
    ctx : Context, optional
        Default: the CPU.

    Returns
    -------
    net : :class:`gluondet.model_zoo.ssd.SSD`
        Hybridized, weights loaded.
    info : dict
        ``network``, ``classes`` (tuple) and ``data_shape`` ``(height, width)``.
    """
    ctx = ctx or mx.cpu()
    if model.lower().endswith('.params'):
        if params is not None or pretrained:
            raise ValueError('%s is already a params file: give params/pretrained only with a '
                             'model zoo name' % model)
        if not os.path.isfile(model):
            raise FileNotFoundError('params file not found: %s' % model)
        meta = _training_meta(model)
        if meta is None:
            raise ValueError('%s has no training json (%s) beside it: give the model zoo name, '
                             'with this file as its params'
                             % (model, os.path.splitext(model)[0] + '.json'))
        network, params = meta['network'], model
    else:
        network, meta = model, None
        get_model_info(network)     # an unknown name fails first, with suggestions
        if (params is None) == (not pretrained):
            raise ValueError('%s: give the weights, either params (a .params file) or '
                             'pretrained (the published ones), not %s'
                             % (model, 'both' if pretrained else 'neither'))
        if params is not None:
            if not os.path.isfile(params):
                raise FileNotFoundError('params file not found: %s' % params)
            meta = _training_meta(params)
            if meta is not None and meta['network'] != network:
                raise ValueError('%s was trained as %s, not %s' % (params, meta['network'],
                                                                   network))
    info = get_model_info(network)
    source = params or network
    known = info.classes or (tuple(meta['classes']) if meta else None)
    classes = _agree(known, None if classes is None else tuple(classes), 'classes', source)
    if pretrained and not info.has_weights:
        raise ValueError('%s has no published weights: give params' % network)
    kwargs = {}
    if info.classes is None:
        kwargs['classes'] = classes
    if meta and meta.get('steps'):
        kwargs['steps'] = meta['steps']
    net = get_model(network, pretrained=pretrained, pretrained_base=False, ctx=ctx, **kwargs)
    if params is not None:
        net.load_parameters(params, ctx=ctx)
    net.hybridize()
    shape = data_shape or (meta['data_shape'] if meta else info.data_shape)
    return net, {'network': network, 'classes': classes, 'data_shape': _pair(shape)}


def _source_kind(model):
    """``'onnx'``, ``'tensorrt'``, ``'symbol'`` or ``'zoo'`` (a zoo name or params file)."""
    lower = model.lower()
    if lower.endswith('.onnx'):
        return 'onnx'
    if lower.endswith(ENGINE_EXTENSIONS):
        return 'tensorrt'
    if lower.endswith('-symbol.json') or os.path.isfile(model + '-symbol.json'):
        return 'symbol'
    return 'zoo'


_BACKEND_OF = {'zoo': 'mxnet', 'symbol': 'mxnet', 'onnx': 'onnxruntime', 'tensorrt': 'tensorrt'}
_WHAT = {'zoo': 'a Gluon network', 'symbol': 'an MXNet symbol', 'onnx': 'an ONNX model',
         'tensorrt': 'a TensorRT engine'}


# ---------------------------------------------------------------- the predictor

class Predictor:
    """A detector run on images: preprocessing, batching, boxes in original pixels.

    Every backend goes through this class; only the runner differs.

    Parameters
    ----------
    runner : callable
        ``runner(batch) -> (ids, scores, boxes)`` with a ``batch_range``
        attribute (see the module docstring); an ``input_shape`` attribute
        ``(3, H, W)``, if present, must match ``data_shape``.
    classes : sequence of str
        Class names; detection ``ids`` index them.
    data_shape : int or (int, int)
        Network input ``(height, width)``: images are resized to it.
    backend : str
        The runtime's name, for messages.
    mean, std : 3 floats
        Input normalization (default ImageNet's, as in training).

    Attributes
    ----------
    batch_range : (int, int or None)
        Smallest and largest batch the runner takes.
    """

    def __init__(self, runner, classes, data_shape, backend, mean=T.IMAGENET_MEAN,
                 std=T.IMAGENET_STD):
        self.runner = runner
        self.classes = tuple(classes)
        self.data_shape = _pair(data_shape)
        self.backend = backend
        height, width = self.data_shape
        input_shape = getattr(runner, 'input_shape', None)
        if input_shape is not None and tuple(input_shape) != (3, height, width):
            raise ValueError('the %s model takes inputs of %s, not 3 x %d x %d: its data_shape is '
                             'fixed' % (backend, ' x '.join(map(str, input_shape)), height, width))
        self.batch_range = tuple(runner.batch_range)
        self.transform = SSDValTransform(width, height, mean, std)

    def __repr__(self):
        return '%s(%s, %d classes, data_shape %dx%d, batches %s)' % (
            type(self).__name__, self.backend, len(self.classes), self.data_shape[0],
            self.data_shape[1], self._batches_text())

    def _batches_text(self):
        low, high = self.batch_range
        if low == high:
            return 'of exactly %d' % low
        return 'of %d to %s' % (low, high or 'any size')

    def batch_size(self, batch_size=None):
        """The batch to run: ``batch_size`` checked against the model, or the default.

        The default is the largest batch the model takes, or 8 if it takes any.

        Raises
        ------
        ValueError
            If the model cannot take batches of ``batch_size`` (a model exported
            with a fixed batch takes only that one).
        """
        low, high = self.batch_range
        if batch_size is None:
            return high or max(low, DEFAULT_BATCH_SIZE)
        if not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError('batch_size must be a positive integer, got %r' % (batch_size,))
        if batch_size < low or (high is not None and batch_size > high):
            hint = (' (it was exported with a fixed batch: export it again with that batch '
                    'size, or with a dynamic batch)' if low == high else '')
            raise ValueError('this %s model takes batches %s, not %d%s'
                             % (self.backend, self._batches_text(), batch_size, hint))
        return int(batch_size)

    def detect(self, images, batch_size=None):
        """Detect objects in decoded images.

        Parameters
        ----------
        images : list of array
            ``H x W x 3`` uint8 RGB images (numpy or NDArray, any sizes).
        batch_size : int, optional
            See :meth:`batch_size`.

        Returns
        -------
        list of :class:`Detections`
            One per image, in original image pixels.
        """
        size = self.batch_size(batch_size)
        images = [_as_image(image, 'image %d' % i) for i, image in enumerate(images)]
        detections = []
        for start in range(0, len(images), size):
            detections.extend(self._run(images[start:start + size]))
        return detections

    def predict(self, inputs, batch_size=None, progress=False):
        """Detect objects in image files or arrays, skipping files that cannot be read.

        Parameters
        ----------
        inputs : list of str or array
            Image paths (JPEG, PNG, BMP, TIFF, WebP, PPM) or ``H x W x 3`` uint8
            RGB arrays, or a single path.
        batch_size : int, optional
            See :meth:`batch_size`.
        progress : bool
            Show a progress bar (tqdm, on stderr).

        Returns
        -------
        Predictions
            Iterate it (once) for one :class:`Prediction` per readable input.
        """
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        return Predictions(self, list(inputs), self.batch_size(batch_size), progress)

    def _run(self, images):
        """Detections of at most a batch of images (padded up to the smallest batch)."""
        samples = [self.transform(image, empty_label()) for image in images]
        height, width = self.data_shape
        count = len(samples)
        batch = np.zeros((max(count, self.batch_range[0]), 3, height, width), np.float32)
        for i, (data, _, _) in enumerate(samples):
            batch[i] = data
        ids, scores, boxes = (np.asarray(o)[:count] for o in self.runner(batch))
        boxes = rescale_boxes(boxes, np.stack([s[2] for s in samples]), (width, height))
        detections = []
        for i in range(count):
            keep = ids[i, :, 0] >= 0
            detections.append(Detections(ids[i, keep, 0].astype(np.int64),
                                         scores[i, keep, 0].astype(np.float32), boxes[i, keep]))
        return detections

    @classmethod
    def from_model(cls, model, backend=None, params=None, pretrained=False, data_shape=None,
                   classes=None, ctx=None):
        """A predictor for a model zoo name, a training output, or an exported model.

        Parameters
        ----------
        model : str or HybridBlock
            See the module docstring for the sources; a Gluon detector object
            is run as it is (``data_shape`` then defaults to its ``base_size``).
        backend : {'mxnet', 'onnxruntime', 'tensorrt'}, optional
            Default: the one the source needs (Gluon networks and symbols run
            in MXNet, ``.onnx`` in ONNX Runtime, engines in TensorRT); another
            is an error.
        params, pretrained
            Weights for a zoo name (see :func:`load_network`).
        data_shape : int or (int, int), optional
            Input ``(height, width)``; needed where the source does not record
            it. A Gluon network or symbol can run at another size; an ONNX model
            or engine cannot.
        classes : sequence of str, optional
            Needed where the source does not record them; else checked.
        ctx : Context, optional
            MXNet's device (default the CPU).

        Returns
        -------
        Predictor
        """
        if isinstance(model, gluon.Block):
            kind, name = 'zoo', type(model).__name__
        else:
            model = os.fspath(model)
            kind, name = _source_kind(model), model
        needed = _BACKEND_OF[kind]
        if backend is not None and backend != needed:
            if backend not in BACKENDS:
                raise ValueError('backend must be one of %s, got %r' % (', '.join(BACKENDS),
                                                                        backend))
            hint = (' (export an engine from it with gluondet export --format tensorrt)'
                    if backend == 'tensorrt' else '')
            raise ValueError('%s is %s: it runs with backend %r, not %r%s'
                             % (name, _WHAT[kind], needed, backend, hint))
        classes = None if classes is None else tuple(classes)
        shape = None if data_shape is None else _pair(data_shape)
        if isinstance(model, gluon.Block):
            base = getattr(model, 'base_size', None)
            shape = shape or _agree(None if base is None else _pair(base), None, 'data_shape',
                                    name)
            classes = _agree(getattr(model, 'classes', None), classes, 'classes', name)
            return cls(MXNetRunner(model, ctx), classes, shape, 'mxnet')
        if kind == 'zoo':
            if os.sep in model and not model.lower().endswith('.params'):
                raise FileNotFoundError('no model at %s: expected a .params, .onnx or engine '
                                        'file, or a symbol prefix (%s-symbol.json)'
                                        % (model, model))
            net, info = load_network(model, params, pretrained, classes, shape, ctx)
            return cls(MXNetRunner(net, ctx), info['classes'], info['data_shape'], 'mxnet')
        if params is not None or pretrained:
            raise ValueError('params and pretrained go with a model zoo name, not with %s (%s)'
                             % (_WHAT[kind], model))
        if kind == 'onnx':
            runner = ONNXRuntimeRunner(model)
            meta = runner.metadata
        else:
            path = metadata_path(_symbol_prefix(model) if kind == 'symbol' else model)
            meta = _read_json(path, 'model description') if os.path.isfile(path) else {}
            if not meta and (classes is None or shape is None):
                raise ValueError('%s is not described by %s (gluondet export writes it): give '
                                 'classes and data_shape' % (model, path))
            runner = _symbol_runner(model, ctx) if kind == 'symbol' else TensorRTRunner(model)
        known = meta.get('data_shape')
        known = None if known is None else _pair(known)
        if kind == 'symbol':    # a symbol runs at any input size, like the network
            shape = shape or _agree(known, None, 'data_shape', model)
        else:
            fixed = getattr(runner, 'input_shape', None)
            known = tuple(fixed[1:]) if fixed else known
            if known is not None and shape not in (None, known):
                raise ValueError('%s takes inputs of %d x %d (fixed at export), not %d x %d'
                                 % ((model,) + known + shape))
            shape = _agree(known, shape, 'data_shape', model)
        classes = _agree(tuple(meta['classes']) if 'classes' in meta else None, classes,
                         'classes', model)
        return cls(runner, classes, shape, needed, meta.get('mean', T.IMAGENET_MEAN),
                   meta.get('std', T.IMAGENET_STD))


class Predictions:
    """What :meth:`Predictor.predict` returns: predictions made while iterating.

    Inputs are read in order and run in batches; a file that cannot be read
    (missing, truncated, not an image) is skipped with a warning naming it and
    recorded in :attr:`skipped`. Iterate once.

    Attributes
    ----------
    inputs : list
        The paths or arrays given; ``len()`` is their number.
    skipped : list of (str, str)
        ``(path, problem)`` of the files skipped so far.
    """

    def __init__(self, predictor, inputs, batch_size, progress):
        self.predictor = predictor
        self.inputs = inputs
        self.batch_size = batch_size
        self.progress = progress
        self.skipped = []

    def __len__(self):
        return len(self.inputs)

    def __iter__(self):
        pending, done = [], 0
        with tqdm(total=len(self.inputs), disable=not self.progress, unit='image',
                  desc='detect (%s)' % self.predictor.backend) as bar:
            for index, item in enumerate(self.inputs):
                source, image = self._read(index, item)
                if image is not None:
                    pending.append((index, source, image))
                last = index == len(self.inputs) - 1
                if pending and (len(pending) == self.batch_size or last):
                    detections = self.predictor._run([image for _, _, image in pending])
                    for (i, source, image), found in zip(pending, detections):
                        yield Prediction(i, source, image, found)
                    bar.update(index + 1 - done)
                    pending, done = [], index + 1
            bar.update(len(self.inputs) - done)

    def _read(self, index, item):
        """``(path or None, image)``: a decoded file (image None if unreadable) or an array."""
        if not isinstance(item, (str, os.PathLike)):
            return None, _as_image(item, 'input %d' % index)
        path = os.fspath(item)
        try:
            return path, read_image(path).asnumpy()
        except DatasetError as err:
            self.skipped.append((path, err.problem))
            logger.warning('image skipped: %s', err)
            return path, None
