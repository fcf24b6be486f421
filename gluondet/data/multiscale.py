"""Multi-scale training, the dataset's side: a transform told each batch's input size.

A task that declares ``train_sizes`` (see `gluondet.engine`) has every batch made
at one input size; the engine reads each sample with an index whose ``size``
attribute is its batch's ``(width, height)`` (None without per-batch sizes).
`SizedTransform` applies a transform that takes it, in the process that reads
the sample, so nothing is swapped while loader workers prefetch.
"""
from mxnet import gluon

__all__ = ['SizedTransform']


class SizedTransform(gluon.data.Dataset):
    """``dataset`` with ``transform(image, label, size)`` applied lazily.

    Parameters
    ----------
    dataset : gluon.data.Dataset
        Items ``(image, label)``; it is indexed with the index given (so a
        `~gluondet.data.mixup.MixupDetection` below still sees ``mixup``).
    transform : callable
        ``(image, label, size) -> sample``; ``size`` is the index's ``size``
        attribute (``(width, height)``), None when it has none.
    """

    def __init__(self, dataset, transform):
        self._dataset = dataset
        self._transform = transform

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, idx):
        image, label = self._dataset[idx]
        return self._transform(image, label, getattr(idx, 'size', None))
