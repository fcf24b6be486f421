"""Batchify functions: turn a list of samples into a batch of NDArrays.

MXNet 1.9 has no ``gluon.data.batchify``; these follow GluonCV's names
(``Stack``, ``Pad``, ``Tuple``). Batches are built in numpy and converted once,
so they work in DataLoader worker processes.
"""
import mxnet as mx
import numpy as np


def _numpy(x):
    return x.asnumpy() if isinstance(x, mx.nd.NDArray) else np.asarray(x)


class Stack:
    """Stack same-shape arrays along a new first axis."""

    def __call__(self, data):
        return mx.nd.array(np.stack([_numpy(x) for x in data]), dtype=_numpy(data[0]).dtype)


class Pad:
    """Pad arrays along axis 0 to the longest one with ``pad_val`` (labels: -1 rows).

    Parameters
    ----------
    pad_val : float
    min_length : int
        Pad to at least this many rows, so batches keep a steady shape.
    """

    def __init__(self, pad_val=-1, min_length=1):
        self.pad_val = pad_val
        self.min_length = min_length

    def __call__(self, data):
        arrays = [_numpy(x) for x in data]
        width = max(a.shape[0] for a in arrays)
        width = max(width, self.min_length)
        out = np.full((len(arrays), width) + arrays[0].shape[1:], self.pad_val,
                      dtype=arrays[0].dtype)
        for i, a in enumerate(arrays):
            out[i, :a.shape[0]] = a
        return mx.nd.array(out, dtype=out.dtype)


class PadImages:
    """Batch ``C x H x W`` images of different sizes, padded at the bottom and right.

    The batch is as high and wide as its largest image, rounded up to a
    multiple of ``multiple`` (32 for a feature pyramid of stride 32, 1
    otherwise), so a device takes several images of different sizes.

    Parameters
    ----------
    multiple : int
    pad_val : float
        Value of the padding (0: the mean colour of a normalized image).

    Returns
    -------
    images : NDArray ``B x C x H x W``
    sizes : NDArray float32 ``B x 2``, each image's real ``[height, width]``
    """

    def __init__(self, multiple=1, pad_val=0.0):
        if int(multiple) != multiple or multiple < 1:
            raise ValueError('PadImages: multiple must be an integer >= 1, got %r' % (multiple,))
        self.multiple = int(multiple)
        self.pad_val = pad_val

    def __call__(self, data):
        arrays = [_numpy(x) for x in data]
        if any(a.ndim != 3 or a.shape[0] != arrays[0].shape[0] for a in arrays):
            raise ValueError('PadImages: images must be C x H x W with one C, got shapes %s'
                             % [a.shape for a in arrays])
        sizes = np.array([a.shape[1:] for a in arrays], np.float32)
        height, width = (-(-int(v) // self.multiple) * self.multiple for v in sizes.max(axis=0))
        out = np.full((len(arrays), arrays[0].shape[0], height, width), self.pad_val,
                      dtype=arrays[0].dtype)
        for i, a in enumerate(arrays):
            out[i, :, :a.shape[1], :a.shape[2]] = a
        return mx.nd.array(out, dtype=out.dtype), mx.nd.array(sizes, dtype=np.float32)


class PadMasks:
    """Batch each image's ``N x H x W`` masks as ``B x N' x H' x W'``, padded with zeros.

    As :class:`Pad` pads labels, images with fewer instances get empty (all-zero) masks up
    to the most instances in the batch (at least ``min_length``); as :class:`PadImages`
    pads images, masks are padded at the bottom and right to the largest height and width,
    rounded up to a multiple of ``multiple``, so ``PadMasks(m)`` matches ``PadImages(m)``
    and ``Pad(-1, n)`` matches ``PadMasks(min_length=n)``.

    Parameters
    ----------
    multiple : int
    min_length : int

    Returns
    -------
    NDArray uint8 ``B x N' x H' x W'``
    """

    def __init__(self, multiple=1, min_length=1):
        if int(multiple) != multiple or multiple < 1:
            raise ValueError('PadMasks: multiple must be an integer >= 1, got %r' % (multiple,))
        self.multiple = int(multiple)
        self.min_length = min_length

    def __call__(self, data):
        arrays = [_numpy(x) for x in data]
        if any(a.ndim != 3 for a in arrays):
            raise ValueError('PadMasks: masks must be N x H x W, got shapes %s'
                             % [a.shape for a in arrays])
        count = max([self.min_length] + [a.shape[0] for a in arrays])
        height, width = (-(-max(a.shape[axis] for a in arrays) // self.multiple) * self.multiple
                         for axis in (1, 2))
        out = np.zeros((len(arrays), count, height, width), np.uint8)
        for i, a in enumerate(arrays):
            out[i, :a.shape[0], :a.shape[1], :a.shape[2]] = a
        return mx.nd.array(out, dtype=np.uint8)


class Tuple:
    """Apply one batchify function per element of tuple samples.

    A function that returns a tuple (`PadImages`: images and sizes) adds
    each of its arrays to the batch in order: ``Tuple(PadImages(32),
    Pad(-1))`` gives ``(images, sizes, labels)``.
    """

    def __init__(self, *fns):
        self.fns = fns[0] if len(fns) == 1 and isinstance(fns[0], (list, tuple)) else fns

    def __call__(self, data):
        if len(data[0]) != len(self.fns):
            raise ValueError('batchify.Tuple: samples have %d elements but %d functions were '
                             'given' % (len(data[0]), len(self.fns)))
        out = []
        for i, fn in enumerate(self.fns):
            batch = fn([sample[i] for sample in data])
            out.extend(batch if isinstance(batch, tuple) else (batch,))
        return tuple(out)
