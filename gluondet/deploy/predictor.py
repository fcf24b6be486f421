"""Run a detector on images the same way whatever runs it: Gluon, symbol, ONNX Runtime, TensorRT.

A runtime is wrapped as a *runner*: a callable ``runner(batch) -> (ids, scores,
boxes)`` on a float32 ``N x 3 x H x W`` batch, returning numpy arrays as the
network does (``N x K x 1``, ``N x K x 1``, ``N x K x 4``, boxes in input pixels,
rows padded with -1), with an attribute ``batch_range = (smallest, largest)``
batch it takes (``largest`` None: unbounded). A runner with ``output_fields`` (names)
returns one more ``N x K x ...`` array for each: more per-detection fields (an
embedding), which each image's :class:`Detections` carries by those names; those its
``point_fields`` name (keypoints, in input pixels) are rescaled and clipped as the boxes,
those its ``grid_fields`` name (Mask R-CNN's ``masks``: a grid over each detection's box)
keep their grid, re-gridded where a box is clipped (:meth:`Detections.clipped
<gluondet.detections.Detections.clipped>`).
:class:`~gluondet.deploy.runners.MXNetRunner`,
:class:`~gluondet.deploy.runners.ONNXRuntimeRunner`,
:class:`~gluondet.deploy.tensorrt.TensorRTRunner` and
:class:`~gluondet.deploy.openvino.OpenVINORunner` are runners. :class:`Predictor`
does the rest, the same for every runner: the validation preprocessing the model's
metadata records (:mod:`gluondet.data.preprocess`: a fixed size for SSD, each image
resized keeping its aspect ratio for Faster R-CNN and RetinaNet), batching (a keep-ratio
image padded at the bottom and right to its size rounded up to the model's multiple, or
to the fixed input of a model exported at one size, images of one padded size run
together; a batch smaller than the model takes filled with empty images), and boxes back
in each image's original pixels, clipped to it (:func:`clip_boxes`).

Model sources (:meth:`Predictor.from_model`):

- a model zoo name with ``params=`` (a gluondet or GluonCV ``.params`` file) or
  ``pretrained=True``;
- a training output ``{prefix}_best.params`` (or any params file the engine
  wrote) with its ``.json`` beside it (:mod:`gluondet.metadata`; loaded by
  :func:`~gluondet.deploy.networks.load_network`);
- an MXNet symbol prefix (``{prefix}-symbol.json``, ``{prefix}-0000.params``,
  described by ``{prefix}-meta.json``);
- an ONNX model (``.onnx``; classes and preprocessing from its metadata), run by ONNX
  Runtime or OpenVINO;
- an OpenVINO IR (``.xml``, its ``.bin`` beside; converted from the ONNX model, with its
  metadata);
- a TensorRT engine (``.engine``, ``.plan`` or ``.trt``) described by the json of
  the same stem beside it (``model.engine`` -> ``model.json``).

``gluondet export`` writes the ``-meta.json`` and engine ``.json`` files
(:func:`~gluondet.deploy.sources.model_metadata`); without them ``classes`` and ``data_shape``
must be given (a fixed-size model is assumed). Metadata written before ``preprocessing`` was
recorded (SSD: ``data_shape``, ``mean``, ``std``) reads as the fixed size it describes.
"""
import collections
import logging
import numbers
import os

import numpy as np
from mxnet import gluon
from tqdm import tqdm

from ..data.base import IMAGE_EXTENSIONS, empty_label
from ..detections import Detections
from ..data.preprocess import (check_preprocessing, fixed_size, padded_shape,
                               preprocessing_from_metadata, preprocessing_of, val_transform)
from ..metadata import read_json
from .networks import load_network
from .nms import NMSOptions, configure_network, export_plan
from .openvino import OpenVINORunner
from .runners import MXNetRunner, ONNXRuntimeRunner, _symbol_prefix, _symbol_runner
from .loop import detect_frames
from .streams import ImageFiles, as_image, image_paths
from .sources import (BACKEND_OF, BACKENDS, SOURCES, ModelSource, agree, metadata_path,
                      shape_pair)
from .tensorrt import TensorRTRunner
from .timings import Timings

__all__ = ['Detections', 'Prediction', 'Predictions', 'Predictor', 'clip_boxes', 'list_images',
           'rescale_boxes']

logger = logging.getLogger('gluondet.deploy')

DEFAULT_BATCH_SIZE = 8          # for runners that take any batch

Prediction = collections.namedtuple('Prediction', ['index', 'source', 'image', 'detections'])
Prediction.__doc__ = """One input of :meth:`Predictor.predict` and its detections.

index : position of the input in the list given.
source : the path given, or None for an array.
image : the decoded ``H x W x 3`` uint8 RGB numpy image.
detections : :class:`~gluondet.detections.Detections`.
"""


# ---------------------------------------------------------------- boxes

def rescale_boxes(boxes, sizes, input_sizes):
    """Boxes from network input pixels to original image pixels, each image by its own scale.

    In float32: each coordinate is multiplied by original / input size along its
    axis (as the engine's validation always did). Every row is scaled, padding rows
    too (callers drop those by their id).

    Parameters
    ----------
    boxes : numpy.ndarray
        ``B x K x 4`` in input pixels.
    sizes : numpy.ndarray
        ``B x 2`` original ``[height, width]`` (what the validation transforms return).
    input_sizes : numpy.ndarray
        ``B x 2`` ``[height, width]`` of each resized image in the batch (not the padding).

    Returns
    -------
    numpy.ndarray
        ``B x K x 4`` float32.
    """
    ratio = np.asarray(sizes, np.float32) / np.asarray(input_sizes, np.float32)
    scale = np.stack([ratio[:, 1], ratio[:, 0]] * 2, axis=1)
    return np.asarray(boxes, np.float32) * scale[:, None, :]


def clip_boxes(boxes, sizes):
    """Boxes clipped to their images: ``[0, width - 1] x [0, height - 1]``.

    gluondet's pixel convention is GluonCV's: a box covers the pixels ``xmin ... xmax``
    inclusive, so an image's boxes end at ``width - 1`` at most, as the datasets clip the
    boxes they read (COCO results then have ``x + w <= width``, KITTI lines stay in the
    image). Every detector and backend's boxes go through here (:class:`Predictor`).

    Parameters
    ----------
    boxes : numpy.ndarray
        ``B x K x 4`` in original image pixels.
    sizes : numpy.ndarray
        ``B x 2`` original ``[height, width]``.

    Returns
    -------
    numpy.ndarray
        ``B x K x 4`` float32.
    """
    sizes = np.asarray(sizes, np.float32)
    edges = np.stack([sizes[:, 1], sizes[:, 0]] * 2, axis=1)[:, None] - 1
    return np.clip(np.asarray(boxes, np.float32), 0, edges)


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
    paths = image_paths(path)
    if not paths:
        raise ValueError('no image files (%s) in %s' % (' '.join(IMAGE_EXTENSIONS), path))
    return paths


def _fixed_input(runner):
    """``(height, width)`` of a runner whose ``input_shape`` is fixed, else None."""
    shape = getattr(runner, 'input_shape', None)     # symbolic (ONNX) or -1 (TensorRT): dynamic
    if shape is None or not all(isinstance(v, numbers.Integral) and v > 0 for v in shape[1:]):
        return None
    return tuple(int(v) for v in shape[1:])


# ---------------------------------------------------------------- the predictor

class Predictor:
    """A detector run on images: preprocessing, batching, boxes in original pixels.

    Every backend goes through this class; only the runner differs.

    Parameters
    ----------
    runner : callable
        ``runner(batch) -> (ids, scores, boxes, *fields)`` with a ``batch_range``
        attribute, and ``output_fields`` naming the ``fields`` if any, ``point_fields``
        those of them holding points, ``grid_fields`` those holding grids over the boxes
        (see the module docstring). An ``input_shape``
        attribute ``(3, H, W)`` of integers marks a fixed network input: a fixed-size model's
        ``data_shape`` must be it; keep-ratio images are resized to fit it and padded to it.
    classes : sequence of str
        Class names; detection ``ids`` index them.
    preprocessing : dict, int or (int, int)
        See :mod:`gluondet.data.preprocess`; an int or ``(height, width)`` is a fixed
        size with ImageNet's mean and std.
    backend : str
        The runtime's name, for messages.
    nms : HostNMS or NMSOptions, optional
        What is done to each image's rows of the runner on the host
        (:mod:`gluondet.deploy.nms`): a :class:`~gluondet.deploy.nms.HostNMS`
        (:meth:`from_model` makes it), or options (None: the model's own) resolved against
        the runner's ``metadata`` (an export's; without one, its rows are detections).

    Attributes
    ----------
    preprocessing : dict
    data_shape : (int, int) or None
        The network input ``(height, width)`` if it is fixed (a fixed-size model, or
        a fixed-size export of a keep-ratio one), else None (each image its own size).
    transform : callable
        The validation transform: ``(image, label) -> (data, label, original [h, w])``.
    batch_range : (int, int or None)
        Smallest and largest batch the runner takes.
    nonfinite : int
        Detections left out so far for a NaN or infinite score or box.
    timings : Timings
        Seconds spent so far in preprocessing, the network and postprocessing
        (:mod:`gluondet.deploy.timings`).
    """

    def __init__(self, runner, classes, preprocessing, backend='mxnet', nms=None):
        self.runner = runner
        if nms is None or isinstance(nms, NMSOptions):
            nms = export_plan(nms, getattr(runner, 'metadata', None) or {},
                              'the %s model' % backend)
        self.nms = nms
        self.classes = tuple(classes)
        self.backend = backend
        preprocessing = (check_preprocessing(preprocessing) if isinstance(preprocessing, dict)
                         else fixed_size(shape_pair(preprocessing)))
        self.preprocessing = preprocessing
        fixed = _fixed_input(runner)
        if preprocessing['resize'] == 'fixed':
            shape = tuple(preprocessing['data_shape'])
            if fixed is not None and fixed != shape:
                raise ValueError('the %s model takes inputs of 3 x %d x %d, not 3 x %d x %d: its '
                                 'data_shape is fixed' % ((backend,) + fixed + shape))
            fixed = shape
        self.data_shape = fixed
        self.batch_range = tuple(runner.batch_range)
        self.transform = val_transform(preprocessing, fit=fixed)
        self.nonfinite = 0
        self.timings = Timings()

    def __repr__(self):
        spec = self.preprocessing
        size = ('data_shape %dx%d' % self.data_shape if self.data_shape else
                'short %d, max size %s, multiple %d' % (spec['short'], spec['max_size'],
                                                        spec['multiple']))
        return '%s(%s, %d classes, %s, batches %s)' % (
            type(self).__name__, self.backend, len(self.classes), size, self._batches_text())

    def _batches_text(self):
        low, high = self.batch_range
        if low == high:
            return 'of exactly %d' % low
        return 'of %d to %s' % (low, high or 'any size')

    @property
    def grid_fields(self):
        """The fields of the detections holding grids over their boxes (``('masks',)`` for
        Mask R-CNN), as the runner says."""
        return tuple(getattr(self.runner, 'grid_fields', ()))

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
        images = [as_image(image, 'image %d' % i) for i, image in enumerate(images)]
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
        """Detections of at most a batch of decoded images."""
        with self.timings('preprocess'):
            samples = [self.transform(image, empty_label()) for image in images]
        return self.detect_samples(samples)

    def detect_samples(self, samples):
        """Detections of at most a batch of images already through :attr:`transform`.

        Images are run padded to their own input size (:func:`~gluondet.data.preprocess.
        padded_shape`), those of one size together: padding changes a network's features
        (all of them, through an FPN's top-down path), so an image's detections must not
        depend on the other images of its batch. Boxes are clipped to their image
        (:func:`clip_boxes`; a network's own clipping, if any, is to its input, padding
        included), their grid fields re-gridded to the clipped boxes.

        Parameters
        ----------
        samples : list of tuple
            ``(data, label, original [h, w])`` as :attr:`transform` returns them.

        Returns
        -------
        list of :class:`Detections`
            One per sample, in original image pixels.
        """
        groups = collections.OrderedDict()
        for i, (data, _, _) in enumerate(samples):
            shape = padded_shape(self.preprocessing, data.shape[1:], self.data_shape)
            groups.setdefault(shape, []).append(i)
        detections = [None] * len(samples)
        for shape, indices in groups.items():
            found = self._run_padded([samples[i] for i in indices], shape)
            for i, item in zip(indices, found):
                detections[i] = item
        return detections

    def _run_padded(self, samples, shape):
        """Detections of samples padded to one ``(height, width)``, in one runner call."""
        count = len(samples)
        with self.timings('preprocess'):
            batch = np.zeros((max(count, self.batch_range[0]), 3) + shape, np.float32)
            for i, (data, _, _) in enumerate(samples):
                batch[i, :, :data.shape[1], :data.shape[2]] = data
        with self.timings('network'):
            outputs = [np.asarray(o)[:count] for o in self.runner(batch)]
        with self.timings('postprocess'):
            return self._detections(samples, outputs)

    def _detections(self, samples, outputs):
        """Each sample's :class:`Detections` from the runner's ``outputs`` of their batch."""
        count = len(samples)
        names = tuple(getattr(self.runner, 'output_fields', ()))
        if len(outputs) != 3 + len(names):
            raise ValueError('the %s model gave %d outputs, not ids, scores, boxes%s' % (
                self.backend, len(outputs), ''.join(', ' + name for name in names)))
        ids, scores, boxes = outputs[:3]
        fields = dict(zip(names, outputs[3:]))      # more per-detection rows
        points = tuple(getattr(self.runner, 'point_fields', ()))
        grids = self.grid_fields
        ids = self._without_nonfinite(ids, scores, boxes)
        originals = np.stack([s[2] for s in samples])
        with np.errstate(over='ignore', invalid='ignore'):     # huge boxes: clipped below
            rescaled = rescale_boxes(boxes, originals, [s[0].shape[1:] for s in samples])
            scaled = clip_boxes(rescaled, originals)
        detections = []
        for i in range(count):
            if self.nms is None:
                keep = np.flatnonzero(ids[i, :, 0] >= 0)
                found = scores[i, keep, 0].astype(np.float32)
            else:       # in input pixels, as the network's NMS
                keep, found = self.nms(ids[i, :, 0], scores[i, :, 0], boxes[i])
            image = Detections(ids[i, keep, 0].astype(np.int64), found, rescaled[i, keep],
                               points, grids,
                               **{name: rows[i, keep] for name, rows in fields.items()})
            image = image.clipped(scaled[i, keep])      # grids re-gridded to the kept boxes
            if points:      # input to original pixels, as rescale_boxes and clip_boxes
                height, width = originals[i]
                scale = np.float32(originals[i]) / np.float32(samples[i][0].shape[1:])
                image = image.mapped_points(scale[::-1], size=(width, height))
            detections.append(image)
        return detections

    def _without_nonfinite(self, ids, scores, boxes):
        """``ids`` with -1 (no detection) for the rows whose score or box is NaN or
        infinite: an untrained or broken network overflowed. The first time, a warning says
        how many; :attr:`nonfinite` counts them all."""
        bad = (ids[..., 0] >= 0) & ~(np.isfinite(scores[..., 0]) & np.isfinite(boxes).all(-1))
        if not bad.any():
            return ids
        if not self.nonfinite:
            logger.warning('%s: %d detections with a NaN or infinite score or box left out: the '
                           "network's outputs overflowed (are its weights trained?)",
                           self.backend, int(bad.sum()))
        self.nonfinite += int(bad.sum())
        ids = ids.copy()
        ids[bad, 0] = -1
        return ids

    @classmethod
    def from_model(cls, model, backend=None, ctx=None, threads=None, nms=None, **source):
        """A predictor for a model zoo name, a training output, or an exported model.

        Parameters
        ----------
        model : str, HybridBlock or ModelSource
            See :class:`~gluondet.deploy.sources.ModelSource` (and the module docstring for
            the sources).
        backend, **source
            The :class:`~gluondet.deploy.sources.ModelSource`'s other fields (``backend``,
            ``params``, ``pretrained``, ``data_shape``, ``classes``), by keyword.
        ctx : Context, optional
            MXNet's device (default the CPU).
        threads : int, optional
            ONNX Runtime's intra-op threads or OpenVINO's inference threads (default
            theirs: one per physical core).
            MXNet's OpenMP threads are set before it is imported (:mod:`gluondet.threads`).
        nms : NMSOptions, optional
            The final NMS's options (:mod:`gluondet.deploy.nms`: where each runs); a
            Gluon network's NMS settings are changed for them. Default: the model's own.

        Returns
        -------
        Predictor
        """
        source = ModelSource.of(model, backend=backend, **source)
        model, backend, params = source.model, source.backend, source.params
        kind, shape, classes = source.kind, source.data_shape, source.classes
        name = type(model).__name__ if isinstance(model, gluon.Block) else model
        needed = backend or BACKEND_OF[kind]
        if needed not in SOURCES[kind].backends:
            if backend not in BACKENDS:
                raise ValueError('backend must be one of %s, got %r' % (', '.join(BACKENDS),
                                                                        backend))
            hint = {'tensorrt': ' (export an engine from it with gluondet export --format '
                                'tensorrt)',
                    'openvino': ' (export it with gluondet export --format openvino or onnx)'}
            raise ValueError('%s is %s: it runs with backend %s, not %r%s'
                             % (name, SOURCES[kind].name, ' or '.join(
                                 repr(b) for b in SOURCES[kind].backends), backend,
                                hint.get(backend, '')))
        shape = None if shape is None else shape_pair(shape)
        if isinstance(model, gluon.Block):
            classes = agree(getattr(model, 'classes', None), classes, 'classes', name)
            spec = _sized(preprocessing_of(model, shape), shape, name)
            return cls(MXNetRunner(model, ctx), classes, spec, 'mxnet',
                       configure_network(model, nms))
        if kind == 'zoo':
            if os.sep in model and not model.lower().endswith('.params'):
                raise FileNotFoundError('no model at %s: expected a .params, .onnx or engine '
                                        'file, or a symbol prefix (%s-symbol.json)'
                                        % (model, model))
            net, info = load_network(model, params, source.pretrained, classes, shape, ctx)
            spec = _sized(info['preprocessing'], shape, model)
            return cls(MXNetRunner(net, ctx), info['classes'], spec, 'mxnet',
                       configure_network(net, nms))
        if params is not None or source.pretrained:
            raise ValueError('params and pretrained go with a model zoo name, not with %s (%s)'
                             % (SOURCES[kind].name, model))
        if kind in ('onnx', 'openvino'):
            runner = (OpenVINORunner if needed == 'openvino' else ONNXRuntimeRunner)(
                model, threads=threads)
            meta = runner.metadata
        else:
            path = metadata_path(_symbol_prefix(model) if kind == 'symbol' else model)
            meta = read_json(path, 'model description') if os.path.isfile(path) else {}
            if not meta and (classes is None or shape is None):
                raise ValueError('%s is not described by %s (gluondet export writes it): give '
                                 'classes and data_shape' % (model, path))
            runner = _symbol_runner(model, ctx) if kind == 'symbol' else TensorRTRunner(model)
        spec = preprocessing_from_metadata(meta, model)
        fixed = None if kind == 'symbol' else _fixed_input(runner)
        if fixed is not None and shape not in (None, fixed):
            raise ValueError('%s takes inputs of %d x %d (fixed at export), not %d x %d'
                             % ((model,) + fixed + shape))
        if spec is None or spec['resize'] == 'fixed':
            known = None if spec is None else tuple(spec['data_shape'])
            if kind == 'symbol':    # a symbol runs at any input size, like the network
                size = shape or agree(known, None, 'data_shape', model)
            else:
                size = agree(fixed or known, shape, 'data_shape', model)
            spec = fixed_size(size, *((spec['mean'], spec['std']) if spec else ()))
        elif fixed is None:
            spec = _sized(spec, shape, model)
        classes = agree(tuple(meta['classes']) if 'classes' in meta else None, classes,
                         'classes', model)
        runner.grid_fields = tuple(f for f in meta.get('grid_fields', ())
                                   if f in runner.output_fields)
        return cls(runner, classes, spec, needed, export_plan(nms, meta, model))


def _sized(spec, shape, source):
    """``spec`` with a caller's ``data_shape``: a fixed size takes it, keep-ratio refuses it."""
    if shape is None:
        return spec
    if spec['resize'] == 'fixed':
        return fixed_size(shape, spec['mean'], spec['std'])
    raise ValueError('%s resizes each image keeping its aspect ratio (short side %d, max size '
                     '%s): data_shape is for fixed-size models and exports'
                     % (source, spec['short'], spec['max_size']))


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
        self._frames = ImageFiles(inputs, 'inputs')
        self.skipped = self._frames.skipped     # filled while iterating

    def __len__(self):
        return len(self.inputs)

    def __iter__(self):
        done = 0
        with tqdm(total=len(self.inputs), disable=not self.progress, unit='image',
                  desc='detect (%s)' % self.predictor.backend) as bar:
            for frame, found in detect_frames(self.predictor, self._frames, self.batch_size):
                yield Prediction(frame.index, frame.name, frame.image, found)
                bar.update(frame.index + 1 - done)
                done = frame.index + 1
            bar.update(len(self.inputs) - done)
