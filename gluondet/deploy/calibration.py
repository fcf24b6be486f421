"""int8 calibration of TensorRT engines: the images, their cache, the calibrator.

Calibration data comes from :class:`CalibrationBatches`, plain numpy: images
are decoded as the datasets decode them and preprocessed exactly as during
validation (:func:`gluondet.data.preprocess.val_transform`). A calibration cache
that already exists is used as it is and no image is read.
:func:`make_calibrator` turns the batches into the TensorRT calibrator that
:func:`gluondet.deploy.tensorrt.build_engine` runs.

This module is also the base of :mod:`gluondet.deploy.tensorrt`, which
imports it: the lazy ``tensorrt`` and cuda-python imports, the device buffer,
and the argument checks live here, used by both.
"""
import numbers
import os
import warnings

import numpy as np

from ..data.base import IMAGE_EXTENSIONS, DatasetError, empty_label, read_image
from ..data.preprocess import fixed_size, val_transform
from ..files import atomic_write
from ..optional import install_hint
from .streams import image_paths

__all__ = ['CalibrationBatches', 'make_calibrator', 'val_preprocess']

MIN_TENSORRT = (8, 5)

_INSTALL_HINT = 'TensorRT is needed for this: ' + install_hint('tensorrt')


# ---------------------------------------------------------------- lazy imports

def _import_tensorrt():
    """``import tensorrt``, or an ImportError that says how to get it."""
    try:
        import tensorrt as trt
    except (ImportError, OSError) as err:   # OSError: bindings present, libnvinfer missing
        raise ImportError('%s (import failed: %s)' % (_INSTALL_HINT, err)) from err
    version = tuple(int(v) for v in trt.__version__.split('.')[:2])
    if version < MIN_TENSORRT:
        raise ImportError('gluondet needs TensorRT >= %d.%d, found %s'
                          % (MIN_TENSORRT + (trt.__version__,)))
    return trt


def _import_cudart():
    """cuda-python's CUDA runtime module (``cuda.bindings.runtime``, or the older ``cudart``)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime
        except ImportError as err:
            raise ImportError('%s (cuda-python is missing: %s)' % (_INSTALL_HINT, err)) from err
    return runtime


def _cuda(rt, result):
    """Check a cuda-python ``(error, *values)`` result; return the value, if any."""
    err, *values = result
    if err != rt.cudaError_t.cudaSuccess:
        raise RuntimeError('CUDA call failed: %r' % (err,))
    return values[0] if values else None


class _DeviceBuffer:
    """``nbytes`` of GPU memory with host copies in and out (on ``stream``, 0 = default)."""

    def __init__(self, rt, nbytes):
        self._rt = rt
        self.nbytes = nbytes
        self.ptr = _cuda(rt, rt.cudaMalloc(nbytes))

    def upload(self, array, stream=0):
        kind = self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        _cuda(self._rt, self._rt.cudaMemcpyAsync(self.ptr, array.ctypes.data, array.nbytes,
                                                 kind, stream))

    def download(self, array, stream=0):
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        _cuda(self._rt, self._rt.cudaMemcpyAsync(array.ctypes.data, self.ptr, array.nbytes,
                                                 kind, stream))

    def free(self):
        if self.ptr:
            _cuda(self._rt, self._rt.cudaFree(self.ptr))
            self.ptr = 0


# ---------------------------------------------------------------- files

def _data_shape(data_shape):
    """``(width, height)`` from an int or a pair, checked positive."""
    size = (data_shape, data_shape) if np.isscalar(data_shape) else tuple(data_shape)
    if len(size) != 2 or not all(_is_positive_int(v) for v in size):
        raise ValueError('data_shape must be a positive int or (width, height), got %r'
                         % (data_shape,))
    return int(size[0]), int(size[1])


def _is_positive_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


def _positive_int(name, value):
    if not _is_positive_int(value):
        raise ValueError('%s must be a positive integer, got %r' % (name, value))
    return int(value)


# ---------------------------------------------------------------- calibration data

def val_preprocess(data_shape, preprocessing=None):
    """The validation preprocessing as a function of the decoded image, at a fixed input.

    Parameters
    ----------
    data_shape : int or (width, height)
        Network input size.
    preprocessing : dict, optional
        The model's (:mod:`gluondet.data.preprocess`); default a fixed size of
        ``data_shape`` (SSD's). A keep-ratio image is resized to fit the input and
        padded with zeros at the bottom and right, as the predictor feeds it.

    Returns
    -------
    callable
        ``image (H x W x 3 uint8 RGB) -> float32 3 x height x width``:
        :func:`~gluondet.data.preprocess.val_transform` (for SSD: resize with the
        automatic interpolation, ImageNet mean/std, channels first).
    """
    width, height = _data_shape(data_shape)
    spec = preprocessing or fixed_size((height, width))
    transform = val_transform(spec, fit=(height, width))

    def preprocess(image):
        data = transform(image, empty_label())[0]
        if data.shape[1:] == (height, width):
            return data
        out = np.zeros((3, height, width), np.float32)
        out[:, :data.shape[1], :data.shape[2]] = data
        return out
    return preprocess


class CalibrationBatches:
    """Preprocessed image batches and the cache of an int8 calibration.

    Iterating yields C-contiguous float32 ``batch_size x 3 x height x width``
    arrays, a new array each time. Images are read in the given order (a
    folder: its image files sorted by name); pass a shuffled list to sample
    a large set. The last partial batch is dropped: padding it with copies or
    zeros would skew the activation histograms the scales come from.
    Unreadable images are skipped, each with a warning naming the file, and
    listed in ``skipped``; a pass that yields no full batch raises ValueError.

    Parameters
    ----------
    images : list of str or str, optional
        Image files, or a folder of them. Not needed when ``cache_path``
        holds a cache.
    data_shape : int or (width, height), optional
        Network input size; required with ``images``.
    batch_size : int
        Images per batch. A fixed-batch engine needs its own batch size.
    num_batches : int, optional
        Stop after this many batches (default: as many as the images give).
    preprocess : callable, optional
        ``image -> float32 3 x height x width`` applied to each decoded RGB
        image; default :func:`val_preprocess` of ``data_shape`` and
        ``preprocessing``. It must be the preprocessing the deployed model is fed with.
    cache_path : str, optional
        Calibration cache: read if present (then no image is read), written
        after a calibration.
    preprocessing : dict, optional
        The model's preprocessing (see :func:`val_preprocess`; default a fixed size).

    Attributes
    ----------
    shape : tuple of int or None
        Shape of each batch (None without images).
    skipped : list of (str, str)
        ``(path, problem)`` of the images skipped during the last pass.
    num_yielded : int
        Batches yielded during the last pass.
    dropped : int
        Images left in the partial last batch of the last pass.
    """

    def __init__(self, images=None, data_shape=None, batch_size=8, num_batches=None,
                 preprocess=None, cache_path=None, preprocessing=None):
        self.batch_size = _positive_int('batch_size', batch_size)
        self.num_batches = (None if num_batches is None
                            else _positive_int('num_batches', num_batches))
        self.cache_path = None if cache_path is None else os.fspath(cache_path)
        self.paths = self._list_images(images)
        self.shape, self.preprocess = None, preprocess
        if self.paths:
            if data_shape is None:
                raise ValueError('calibration images need data_shape (the network input size)')
            width, height = _data_shape(data_shape)
            self.shape = (self.batch_size, 3, height, width)
            self.preprocess = preprocess or val_preprocess((width, height), preprocessing)
        self.skipped, self.num_yielded, self.dropped = [], 0, 0
        self.check()

    @staticmethod
    def _list_images(images):
        if images is None:
            return []
        if isinstance(images, (str, os.PathLike)):
            folder = os.fspath(images)
            if not os.path.isdir(folder):
                raise ValueError('images must be a list of image files or a folder; %r is not a '
                                 'folder' % folder)
            paths = image_paths(folder)
            if not paths:
                raise ValueError('no image files (%s) in %s'
                                 % (' '.join(IMAGE_EXTENSIONS), folder))
            return paths
        return [os.fspath(p) for p in images]

    def check(self):
        """Raise ValueError unless there are images or an existing cache to calibrate from."""
        if not self.paths and self.read_cache() is None:
            where = ('no calibration cache at %s' % self.cache_path if self.cache_path
                     else 'no cache_path')
            raise ValueError('int8 calibration needs images, or an existing calibration cache '
                             '(%s)' % where)

    def read_cache(self):
        """The cache's bytes, or None if there is no cache (or it is empty)."""
        if self.cache_path is None:
            return None
        try:
            with open(self.cache_path, 'rb') as f:
                return f.read() or None
        except FileNotFoundError:
            return None

    def write_cache(self, data):
        """Write the cache atomically; without ``cache_path`` nothing is kept."""
        if self.cache_path is not None:
            atomic_write(self.cache_path, bytes(data))

    def __iter__(self):
        self.skipped, self.num_yielded, self.dropped = [], 0, 0
        if not self.paths:
            raise ValueError('no calibration images, and the cache %s was missing or refused by '
                             'TensorRT' % self.cache_path)
        batch, filled = None, 0
        for path in self.paths:
            if self.num_yielded == self.num_batches:
                return
            try:
                image = read_image(path)
            except DatasetError as err:
                self.skipped.append((path, err.problem))
                warnings.warn('calibration image skipped: %s' % err, stacklevel=2)
                continue
            if batch is None:
                batch = np.empty(self.shape, np.float32)
            batch[filled] = self._preprocessed(image, path)
            filled += 1
            if filled == self.batch_size:
                self.num_yielded += 1
                yield batch
                batch, filled = None, 0
        self.dropped = filled
        if self.num_yielded == 0:
            raise ValueError('no full calibration batch: %d of %d images readable (%d skipped), '
                             'batch_size is %d' % (len(self.paths) - len(self.skipped),
                                                   len(self.paths), len(self.skipped),
                                                   self.batch_size))

    def _preprocessed(self, image, path):
        sample = np.asarray(self.preprocess(image), dtype=np.float32)
        if sample.shape != self.shape[1:]:
            raise ValueError('%s: preprocessing gave shape %s, the calibration batches need %s'
                             % (path, sample.shape, self.shape[1:]))
        return sample


def make_calibrator(batches):
    """A TensorRT ``IInt8EntropyCalibrator2`` fed by ``batches``.

    The class is defined here, at call time, because its base class exists
    only once tensorrt is imported. Errors raised while producing a batch
    (inside a TensorRT callback) are kept in ``error`` for
    :func:`build_engine` to raise; ``close()`` frees the device buffer.

    Parameters
    ----------
    batches : CalibrationBatches

    Returns
    -------
    tensorrt.IInt8EntropyCalibrator2
    """
    trt = _import_tensorrt()
    base = getattr(trt, 'IInt8EntropyCalibrator2', None)
    if base is None:
        raise RuntimeError('TensorRT %s has no IInt8EntropyCalibrator2 (implicit int8 '
                           'calibration was removed in TensorRT 11): use TensorRT 8.5-10.x'
                           % trt.__version__)
    rt = _import_cudart()

    class EntropyCalibrator(base):
        """Entropy calibration over :class:`CalibrationBatches`."""

        def __init__(self):
            base.__init__(self)
            self.batches = batches
            self.error = None
            self._iter = self._device = None

        def get_batch_size(self):
            return self.batches.batch_size

        def get_batch(self, names):
            try:
                if self._iter is None:
                    self._iter = iter(self.batches)
                batch = next(self._iter, None)
                if batch is None:
                    return None
                if self._device is None:
                    self._device = _DeviceBuffer(rt, batch.nbytes)
                self._device.upload(batch)
                _cuda(rt, rt.cudaDeviceSynchronize())
                return [int(self._device.ptr)]
            except Exception as err:  # must not cross into TensorRT (its callbacks are noexcept)
                self.error = err
                return None

        def read_calibration_cache(self):
            return self.batches.read_cache()

        def write_calibration_cache(self, cache):
            self.batches.write_cache(cache)

        def close(self):
            if self._device is not None:
                self._device.free()

    return EntropyCalibrator()
