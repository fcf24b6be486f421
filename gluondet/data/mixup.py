"""Mixup for detection (Zhang et al., "Bag of Freebies for Training Object Detection").

`MixupDetection` wraps a dataset of ``(image, label)`` items, before the
task's train transform: an item is blended with another random item, both
images placed at the top-left of a canvas as large as the larger of the two
in each direction, ``ratio * image1 + (1 - ratio) * image2``; the labels
are stacked, each row with its image's weight as a 7th column
(``[xmin, ymin, xmax, ymax, class_id, difficult, weight]``). Unmixed items
get weight 1, so every label has seven columns. These are the facts of
GluonCV 0.10.5's ``gluoncv.data.mixup.detection.MixupDetection``.

Whether an item is mixed comes with its index: the training engine indexes
the dataset with a ``SampleIndex`` whose ``mixup`` attribute says whether
the epoch mixes (``TrainConfig.mixup`` and ``no_mixup_epochs``). The draws
(the ratio, the partner) come from numpy's global RNG, which the engine
seeds per sample from ``(seed, epoch, index)``, so a mixed sample is the
same with any number of workers and after a resume. A plain ``int`` index
mixes when ``default`` says so.

A task uses it in ``train_dataset()`` and declares ``supports_mixup = True``::

    def train_dataset(self):
        return MixupDetection(self._train).transform(MyTrainTransform(...))

Its transform must keep label columns past the sixth (gluondet's box
transforms do: they change ``label[:, :4]`` and drop rows). Its losses read
the weight as ``label[..., 6]``; a loss that ignores it (SSD's, today) trains
on the mixed image with both images' boxes at full weight.
"""
import mxnet as mx
import numpy as np
from mxnet import gluon

__all__ = ['MixupDetection']

# YOLOv3's GluonCV recipe (train_yolo3.py --mixup): ratio ~ Beta(1.5, 1.5).
# GluonCV's Faster R-CNN script uses a fixed 0.5 (np.random.uniform(0.5, 0.5)).
DEFAULT_RATIO = (1.5, 1.5)


class MixupDetection(gluon.data.Dataset):
    """Blends each item with a random other one (see the module docstring).

    Parameters
    ----------
    dataset : gluon.data.Dataset
        Items ``(image, label)``: ``image`` HxWx3 uint8 (NDArray or numpy),
        ``label`` N x 6 (or more columns) float.
    ratio : float or (float, float)
        The weight of the item's own image: a fixed value in ``[0, 1]``, or
        the ``(a, b)`` of a Beta distribution it is drawn from per item.
    default : bool
        Whether to mix when the index carries no ``mixup`` attribute.

    Returns
    -------
    image : mx.nd.NDArray, ``H x W x 3`` uint8
        ``H, W`` the larger of the two images' (the item's own when unmixed).
    label : numpy float32 ``(N1 + N2) x 7``
    """

    def __init__(self, dataset, ratio=DEFAULT_RATIO, default=False):
        if np.isscalar(ratio):
            if not 0 <= ratio <= 1:
                raise ValueError('mixup ratio must be in [0, 1], got %r' % (ratio,))
        elif len(ratio) != 2 or min(ratio) <= 0:
            raise ValueError('mixup ratio must be a number or the (a, b) > 0 of a Beta '
                             'distribution, got %r' % (ratio,))
        if len(dataset) < 2:
            raise ValueError('mixup needs at least 2 items, the dataset has %d' % len(dataset))
        self._dataset = dataset
        self.ratio = ratio
        self.default = default

    def __len__(self):
        return len(self._dataset)

    def __getitem__(self, idx):
        image, label = self._dataset[idx]
        if not getattr(idx, 'mixup', self.default):
            return image, _weighted(label, 1.0)
        ratio = float(self.ratio if np.isscalar(self.ratio) else np.random.beta(*self.ratio))
        other = np.random.randint(len(self) - 1)
        other += other >= int(idx)       # any item but this one
        image2, label2 = self._dataset[int(other)]
        return (_blend(image, image2, ratio),
                np.vstack([_weighted(label, ratio), _weighted(label2, 1.0 - ratio)]))


def _numpy(image):
    return image.asnumpy() if isinstance(image, mx.nd.NDArray) else np.asarray(image)


def _blend(image1, image2, ratio):
    """Both images at the top-left of one canvas, weighted; truncated to uint8 as GluonCV."""
    a, b = _numpy(image1), _numpy(image2)
    canvas = np.zeros((max(a.shape[0], b.shape[0]), max(a.shape[1], b.shape[1]), 3), np.float32)
    canvas[:a.shape[0], :a.shape[1]] = a.astype(np.float32) * ratio
    canvas[:b.shape[0], :b.shape[1]] += b.astype(np.float32) * (1.0 - ratio)
    return mx.nd.array(canvas.astype(np.uint8), dtype=np.uint8)


def _weighted(label, weight):
    label = _numpy(label).astype(np.float32)
    if label.ndim != 2:
        raise ValueError('mixup: a label must be N x 6 (or more columns), got shape %s'
                         % (label.shape,))
    return np.hstack([label, np.full((label.shape[0], 1), weight, np.float32)])
