"""What the four presets share: read, resize the shorter side within a cap, normalize.

GluonCV's presets differ only in their defaults and, for YOLO, in rounding the sides to a
multiple of ``stride``. The resize is MXNet's own (``mx.image.imresize``, the OpenCV built
into libmxnet) with OpenCV's bicubic interpolation, as GluonCV's: the ``cv2`` wheel's bicubic
resize differs from it by one level in a few percent of the pixels.
"""
import os

import numpy as np

from .. import normalize, short_within_size

# GluonCV's presets call its resize_short_within with its default interp=2: OpenCV's
# INTER_CUBIC (mxnet passes the number to cv::resize unchanged).
INTERP = 2


def _images(imgs):
    """``imgs`` as a list of H x W x C NDArrays, and whether it was a single image."""
    import mxnet as mx
    single = isinstance(imgs, (mx.nd.NDArray, np.ndarray))
    out = []
    for img in [imgs] if single else imgs:
        if isinstance(img, np.ndarray):
            img = mx.nd.array(img, dtype=img.dtype)
        if not isinstance(img, mx.nd.NDArray):
            raise TypeError('transform_test: expected an image (mx.nd.NDArray or numpy array '
                            'H x W x C) or a list of them, got %s' % type(img).__name__)
        if img.ndim != 3:
            raise ValueError('transform_test: expected an image H x W x C, got shape %s'
                             % (img.shape,))
        out.append(img)
    return out


def _per_channel(values, channels, what):
    """``mean`` or ``std`` as one value per channel (a single value serves them all, as
    ``mx.nd.image.normalize`` allows)."""
    values = np.asarray(values, dtype=np.float32).reshape(-1)
    if values.size == 1:
        values = np.repeat(values, channels)
    if values.size != channels:
        raise ValueError('transform_test: %s needs 1 or %d values, got %d'
                         % (what, channels, values.size))
    return values


def transform_test(imgs, short, max_size, mult_base, mean, std):
    """Each image resized and normalized, the presets' ``transform_test``.

    Parameters
    ----------
    imgs : mx.nd.NDArray or numpy.ndarray (H x W x 3, RGB 0-255), or a list of them
    short : int
        Length the shorter side is resized to, keeping the aspect ratio.
    max_size : int
        Cap on the longer side: an image that would exceed it is resized so that its longer
        side is ``max_size`` (rounded down to a multiple of ``mult_base``).
    mult_base : int
        Both sides are rounded to its multiples (YOLO's ``stride``; 1 for the others).
    mean, std : sequence of floats (one, or one per channel)
        ``(x / 255 - mean) / std`` normalizes the network input.

    Returns
    -------
    tensor : mx.nd.NDArray, 1 x 3 x H x W float32
        The network input.
    image : numpy.ndarray, H x W x 3 uint8
        The resized image, to draw the detections on.
    Given a list of two or more images, two lists (``zip`` pairs them); a list of one
    gives one pair, as in GluonCV.
    """
    import mxnet as mx
    tensors, origs = [], []
    for img in _images(imgs):
        height, width, channels = img.shape
        new_w, new_h = short_within_size(width, height, short, max_size, mult_base)
        resized = mx.image.imresize(img, new_w, new_h, interp=INTERP).asnumpy()
        data = normalize(resized, _per_channel(mean, channels, 'mean'),
                         _per_channel(std, channels, 'std'))
        tensors.append(mx.nd.array(data[np.newaxis], dtype=np.float32))
        origs.append(resized.astype(np.uint8))
    # as GluonCV: one image, even in a list, gives a pair of single values
    if len(tensors) == 1:
        return tensors[0], origs[0]
    return tensors, origs


def read(filenames):
    """The image files, RGB uint8 NDArrays read with ``mx.image.imread`` (as GluonCV; EXIF
    orientation ignored)."""
    import mxnet as mx
    if isinstance(filenames, (str, os.PathLike)):
        filenames = [filenames]
    imgs = []
    for name in filenames:
        name = os.fspath(name)
        if not os.path.isfile(name):
            raise FileNotFoundError('load_test: no image file %r' % name)
        imgs.append(mx.image.imread(name))
    return imgs
