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


class Tuple:
    """Apply one batchify function per element of tuple samples."""

    def __init__(self, *fns):
        self.fns = fns[0] if len(fns) == 1 and isinstance(fns[0], (list, tuple)) else fns

    def __call__(self, data):
        if len(data[0]) != len(self.fns):
            raise ValueError('batchify.Tuple: samples have %d elements but %d functions were '
                             'given' % (len(data[0]), len(self.fns)))
        return tuple(fn([sample[i] for sample in data]) for i, fn in enumerate(self.fns))
