"""Faster and Mask R-CNN's train and validation transforms: resize keeping the aspect ratio,
flip, normalize.

They live in ``data/`` so the R-CNN task and deployment share them (deploy never imports a task;
:mod:`gluondet.data.preprocess` chooses the validation transform from a model's metadata).
"""
import numpy as np

from . import transforms as T
from .instance_masks import InstanceMasks

__all__ = ['MaskRCNNTrainTransform', 'RCNNTrainTransform', 'RCNNValTransform']


def _short(short):
    return (int(short), int(short)) if np.isscalar(short) else (int(short[0]), int(short[1]))


class RCNNTrainTransform:
    """GluonCV's ``FasterRCNNDefaultTrainTransform`` without its target making.

    First ``augment`` (optional, ``(image, label) -> (image, label)`` on the uint8
    image: :class:`~gluondet.data.autoaugment.DetectionAutoAugment`). The shorter side
    goes to ``short`` (or a random integer in ``[short[0], short[1]]``, multi-scale
    training), the longer at most ``max_size`` (bilinear); a horizontal flip with
    probability ``flip_p``; normalization.
    Random draws come from numpy's global RNG, which the engine seeds per sample.

    Returns
    -------
    image : float32 ``3 x H x W``
    label : float32 ``N x 6+`` in the resized image's pixels
    """

    def __init__(self, short=600, max_size=1000, flip_p=0.5, mean=T.IMAGENET_MEAN,
                 std=T.IMAGENET_STD, augment=None):
        self.short, self.max_size, self.flip_p = _short(short), max_size, flip_p
        self.mean, self.std = mean, std
        self.augment = augment

    def __call__(self, image, label):
        if self.augment is not None:
            image, label = self.augment(image, label)
        img, label, _ = self._resize_flip(image, label)
        return T.normalize(img, self.mean, self.std), label

    def _resize_flip(self, image, label, masks=None):
        """The resized and maybe flipped ``(image, label, masks)`` (masks None if not
        given)."""
        low, high = self.short
        short = low if low == high else int(np.random.randint(low, high + 1))
        if masks is None:
            img, label = T.resize_short_within(image, label, short, self.max_size, interp=1)
            img, label, _ = T.random_flip(img, label, self.flip_p)
        else:
            img, label, masks = T.resize_short_within(image, label, short, self.max_size,
                                                      interp=1, masks=masks)
            img, label, _, masks = T.random_flip(img, label, self.flip_p, masks=masks)
        return img, label, masks


class MaskRCNNTrainTransform(RCNNTrainTransform):
    """GluonCV's ``MaskRCNNDefaultTrainTransform`` without its target making: the
    :class:`RCNNTrainTransform` of the image and boxes, the masks moved alike and
    rasterized at the final size (polygons after they are moved, as GluonCV).

    Called as ``(image, label, masks)``, ``masks`` an
    :class:`~gluondet.data.instance_masks.InstanceMasks` with one instance per label row
    (or what it takes: GluonCV's lists of polygons, an ``N x H x W`` array); ``augment``,
    optional, is ``(image, label, masks) -> (image, label, masks)``.

    Returns
    -------
    image : float32 ``3 x H x W``
    label : float32 ``N x 6+`` in the resized image's pixels
    masks : uint8 ``N x H x W``, 1 inside each object
    """

    def __call__(self, image, label, masks):
        if not isinstance(masks, InstanceMasks):
            masks = InstanceMasks(masks)
        if self.augment is not None:
            image, label, masks = self.augment(image, label, masks)
        img, label, masks = self._resize_flip(image, label, masks)
        return (T.normalize(img, self.mean, self.std), label,
                masks.bitmaps(img.shape[0], img.shape[1]))


class RCNNValTransform:
    """Resize keeping the aspect ratio and normalize; the label stays in original pixels.

    ``fit`` ``(height, width)``, optional: if the resized image would not fit a
    network input of that size, it is made as large as fits instead (keeping the ratio).
    Mask R-CNN's too: the masks of a dataset with masks are accepted and not used (mask AP
    reads the ground truth from the COCO json).

    Returns
    -------
    image : float32 ``3 x H x W``
    label : float32 ``N x 6`` in the original image's pixels
    size : float32 ``[original_height, original_width]``
    """

    def __init__(self, short=600, max_size=1000, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD,
                 fit=None):
        self.short, self.max_size = _short(short)[0], max_size
        self.mean, self.std = mean, std
        self.fit = None if fit is None else (int(fit[0]), int(fit[1]))

    def __call__(self, image, label, masks=None):
        h, w = image.shape[:2]
        img, _ = T.resize_short_within(image, None, self.short, self.max_size, interp=1)
        if self.fit is not None and (img.shape[0] > self.fit[0] or img.shape[1] > self.fit[1]):
            scale = min(self.fit[0] / h, self.fit[1] / w)
            size = (min(self.fit[1], max(1, int(round(w * scale)))),
                    min(self.fit[0], max(1, int(round(h * scale)))))
            img, _ = T.resize(image, None, size, interp=1)
        return (T.normalize(img, self.mean, self.std), np.asarray(label, np.float32),
                np.array([h, w], np.float32))
