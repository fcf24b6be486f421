"""YOLOv3's training transform (GluonCV's ``YOLO3DefaultTrainTransform``) and batchify.

Training: colour distortion, zoom-out with probability 0.5 (canvas of the mean
colour), SSD's constrained random crop, resize with a random interpolation,
horizontal flip, normalization; then the training targets, from an injected
function, so that they are made in the loader's workers as GluonCV makes them.
The input size may change per batch (multi-scale training): the transform takes
it as its third argument, which `~gluondet.data.multiscale.SizedTransform`
passes from the engine.

The augmentation draws from numpy's global RNG, which the engine seeds per
sample. It is SSD's; it differs from GluonCV's in what its functions in
:mod:`~gluondet.data.transforms` say (the colour distortion rounds to uint8, so
the zoom-out canvas is the mean colour rounded; the crop draws its trials at once).

Validation: GluonCV's ``YOLO3DefaultValTransform`` resizes to the fixed data shape
(interpolation 9: area to shrink, cubic to enlarge, linear otherwise) and
normalizes, which is the fixed-size preprocessing
(``preprocess.val_transform(preprocess.fixed_size((height, width)))``, the one that
deploy applies) with labels kept in the original image's pixels. Its pixels equal
GluonCV's except where an image is enlarged in both directions: OpenCV 4.11's cubic
resize and the one inside MXNet 1.9.1 round differently (at most 1 of 255, on about
5% of the pixels).
"""

from . import transforms as T
from .batchify import Pad, Stack, Tuple

__all__ = ['YOLO3TrainTransform', 'yolo3_train_batchify']


class YOLO3TrainTransform:
    """YOLOv3's training augmentation and targets.

    Parameters
    ----------
    width, height : int
        The input size when the call gives none.
    targets : callable, optional
        ``targets(height, width, boxes, ids[, mix]) -> tuple of numpy arrays``: the
        training targets of an input of ``height x width`` with ground-truth
        ``boxes`` (float32 ``N x 4`` pixels) of classes ``ids`` (float32 ``N``);
        ``mix`` (float32 ``N``, each box's mixup weight) is given when the label has
        a 7th column (`~gluondet.data.mixup.MixupDetection`), as GluonCV gives
        ``gt_mixratio`` with ``--mixup``. None: no targets (see Returns).
    mean, std : sequence of 3 floats
        RGB normalization (ImageNet's); the zoom-out canvas is ``255 * mean``.
    zoom : bool
        Zoom out and crop; False leaves both out (for data whose objects already come in
        every size and place, such as the demo's).

    Returns
    -------
    With ``targets``: ``(image, *targets(...), boxes)``: ``image`` float32
    ``3 x height x width``, ``boxes`` float32 ``N x 4`` (batched with ``Pad(-1)``,
    see `yolo3_train_batchify`). Without: ``(image, label)``, ``label`` float32
    ``N x 6+`` in the input's pixels.
    """

    def __init__(self, width, height, targets=None, mean=T.IMAGENET_MEAN, std=T.IMAGENET_STD,
                 zoom=True):
        self.size = (int(width), int(height))
        self.targets = targets
        self.mean, self.std = mean, std
        self.zoom = zoom

    def __call__(self, image, label, size=None):
        """Augment ``image`` (``H x W x 3`` uint8 RGB) and ``label`` (``N x 6+``) into an
        input of ``size`` (``(width, height)``; default the transform's)."""
        width, height = self.size if size is None else size
        img, label = T.fixed_size_augment(image, label, (width, height), self.mean, self.std,
                                          self.zoom)
        if self.targets is None:
            return img, label
        boxes, ids = label[:, :4], label[:, 4]
        mix = (label[:, 6],) if label.shape[1] > 6 else ()
        return (img,) + tuple(self.targets(height, width, boxes, ids, *mix)) + (boxes,)


def yolo3_train_batchify(num_targets):
    """The batchify of `YOLO3TrainTransform`'s samples: the image and ``num_targets``
    target arrays stacked, the boxes padded with -1 rows to the batch's most boxes
    (GluonCV's ``Tuple(Stack() x 6, Pad(pad_val=-1))``)."""
    return Tuple([Stack() for _ in range(1 + num_targets)] + [Pad(pad_val=-1)])
