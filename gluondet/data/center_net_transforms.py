"""CenterNet's training transform (GluonCV's ``CenterNetDefaultTrainTransform``).

A horizontal flip with probability 0.5; an affine warp to the input size of the square of
side ``max(H, W) * s`` (``s`` a normal factor of mean 1 and deviation 0.4, clipped to 0.6 ..
1.4) centered on a random pixel at least a border (128, halved until it fits) away from the
image's edges: a random crop or zoom-out (zero filled) in one step; GluonCV's colour jitter
(brightness, contrast and saturation factors of 1 +- 0.4 in a random order, then AlexNet's PCA
lighting of deviation 0.1); normalization. The boxes are mapped by the same warp to the
network's output map (the input size divided by ``scale_factor``), clipped to it, those left
without area dropped, and turned into the training targets.

Differences from GluonCV: one random generator draws everything (GluonCV draws the geometry
from numpy's global RNG, the order of the colour operations from python's and the colour
factors from a ``RandomState(123)`` made with the transform, so every data worker repeats
the same colours); boxes are clipped to the image first (GluonCV keeps their part beyond it,
over the warp's zero filling) and rows not finite dropped; after the warp, boxes are clipped
to ``W - 1`` horizontally and ``H - 1`` vertically (GluonCV clips the top-left corners to
``W - 1`` and the bottom-right ones to ``H - 1``: the same for a square input). As GluonCV,
the saturation's grey is OpenCV's BGR-to-grey of the RGB image and the PCA lighting's
eigenvectors are in the order of BGR channels (both from CornerNet, which read images with
OpenCV), and the jittered image is not clipped. With the same random choices
(`CenterNetTrainTransform.apply`) the image and targets equal GluonCV's.
Batch the samples with ``batchify.Tuple([batchify.Stack()] * 6)``, as GluonCV.
"""
from dataclasses import dataclass

import cv2
import numpy as np

from . import transforms as T

__all__ = ['CenterNetAugment', 'CenterNetTrainTransform', 'center_affine', 'color_jitter',
           'PCA_EIGVAL', 'PCA_EIGVEC']

# AlexNet's ImageNet PCA lighting, as CornerNet and GluonCV: eigenvalues and eigenvectors
# (columns) of the pixel covariance
PCA_EIGVAL = np.array([0.2141788, 0.01817699, 0.00341571], np.float32)
PCA_EIGVEC = np.array([[-0.58752847, -0.69563484, 0.41340352],
                       [-0.5832747, 0.00994535, -0.81221408],
                       [-0.56089297, 0.71832671, 0.41158938]], np.float32)

COLOR_OPS = ('brightness', 'contrast', 'saturation')


def center_affine(center, scale, size):
    """The 2 x 3 affine matrix that maps the square of side ``scale`` centered on ``center``
    (``(x, y)``) onto an image of ``size`` (``(width, height)``): the square's center to the
    image's, its side to the image's width (GluonCV's ``get_affine_transform`` without
    rotation or shift: from three point pairs in float32 as GluonCV, so the matrices equal).

    Returns
    -------
    numpy.ndarray float64 2 x 3
    """
    width, height = size
    src = _three_points(center, -np.float32(scale) * np.float32(0.5))
    dst = _three_points((width * 0.5, height * 0.5), -width * 0.5)
    return cv2.getAffineTransform(src, dst)


def _three_points(center, up):
    """``center``, the point ``up`` below it (above for a negative ``up``) and that one plus
    the difference of the first two turned by 90 degrees: 3 x 2 float32."""
    points = np.array([center, center], np.float32)
    points[1, 1] += np.float32(up)
    turn = points[0] - points[1]
    return np.vstack([points, points[1] + np.array([-turn[1], turn[0]], np.float32)])


def _border(size, border=128):
    """The border kept between a random center and the image's edges: ``border``, halved
    until twice it is less than ``size``."""
    while size - border <= border:
        border //= 2
    return border


def color_jitter(img, order, factors, lighting):
    """GluonCV's ``np_random_color_distort`` with its random values given, in place.

    Parameters
    ----------
    img : numpy.ndarray float32 H x W x 3, in [0, 1]
    order : sequence of 3 ints
        The order of the operations, indices into ``COLOR_OPS`` (brightness: times ``a``;
        contrast: blend with the grey image's mean; saturation: blend with the grey image).
    factors : sequence of 3 floats
        The factor ``a`` of each operation of ``COLOR_OPS`` (blends: ``a img + (1 - a) grey``).
    lighting : sequence of 3 floats
        The PCA lighting's weights of the eigenvectors (times the eigenvalues).

    Returns
    -------
    img
    """
    grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    grey_mean = grey.mean()
    for op in order:
        factor = float(factors[op])
        img *= factor
        if COLOR_OPS[op] == 'contrast':
            img += grey_mean * (1 - factor)
        elif COLOR_OPS[op] == 'saturation':
            img += (grey * (1 - factor))[:, :, None]
    img += np.dot(PCA_EIGVEC, PCA_EIGVAL * np.asarray(lighting, np.float64))
    return img


@dataclass
class CenterNetAugment:
    """The random choices of one `CenterNetTrainTransform` sample.

    Attributes
    ----------
    flip : bool
        Mirror the image first.
    center : (float, float)
        The center ``(x, y)`` of the warped square, in pixels of the (flipped) image.
    scale : float
        The square's side in pixels.
    order, factors, lighting
        Of `color_jitter`.
    """
    flip: bool
    center: tuple
    scale: float
    order: tuple
    factors: tuple
    lighting: tuple


class CenterNetTrainTransform:
    """CenterNet's training augmentation and targets (see the module's docstring).

    Parameters
    ----------
    width, height : int
        The network's input size.
    num_class : int
    scale_factor : int
        The network's output stride (4): the targets are ``height // scale_factor x width //
        scale_factor``.
    mean, std : sequence of 3 floats
        RGB normalization (ImageNet's).
    targets : callable, optional
        ``targets(num_class, output_width, output_height) -> generator``, such as
        `~gluondet.nn.CenterNetTargetGenerator`; ``generator(boxes, ids)`` returns the target
        arrays of boxes in output-map pixels. None: no targets (see Returns).
    zoom_sigma : float
        The spread of the random zoom: the square's side is the image's longest side times
        ``1 + zoom_sigma * N(0, 1)``, clipped to [0.6, 1.4] (GluonCV's 0.4).
    max_shift : float, optional
        The square's center is within ``max_shift`` times the image's size of the image's
        middle; None (GluonCV's): anywhere but a border of the image.
    seed : None, int or numpy.random.RandomState / Generator
        What draws the random choices: None numpy's global RNG (which the engine seeds per
        sample, so that any number of workers gives the same samples); an int a
        ``RandomState`` of it, owned by the transform (each data worker gets a copy of it).

    Returns
    -------
    With ``targets``: ``(image, *generator(boxes, ids))``: ``image`` float32 ``3 x height x
    width``, then (`~gluondet.nn.CenterNetTargetGenerator`) ``heatmap, wh_target, wh_mask,
    center_reg, center_reg_mask``. Without: ``(image, label)``, ``label`` float32 ``N x 6+``
    in the input's pixels (clipped; rows not finite or left without area dropped).
    """

    def __init__(self, width, height, num_class, scale_factor=4, mean=T.IMAGENET_MEAN,
                 std=T.IMAGENET_STD, targets=None, zoom_sigma=0.4, max_shift=None, seed=None):
        self.size = (int(width), int(height))
        self.zoom_sigma, self.max_shift = float(zoom_sigma), max_shift
        self.num_class = int(num_class)
        self.output_size = (self.size[0] // scale_factor, self.size[1] // scale_factor)
        self.mean = np.array(mean, np.float32).reshape((1, 1, 3))
        self.std = np.array(std, np.float32).reshape((1, 1, 3))
        self.targets = None if targets is None else targets(self.num_class, *self.output_size)
        # None stays None (numpy's global RNG at each draw), so the transform pickles
        self.rng = np.random.RandomState(seed) if isinstance(seed, (int, np.integer)) else seed

    def draw(self, width, height):
        """The random choices for an image of ``width x height``: a `CenterNetAugment`."""
        rng = T._rng(self.rng)
        flip = bool(rng.uniform() < 0.5)
        if self.max_shift is None:
            center = tuple(float(border + T._randint(rng, size - 2 * border)) for border, size
                           in ((_border(width), width), (_border(height), height)))
        else:
            center = tuple(float(size * (0.5 + rng.uniform(-self.max_shift, self.max_shift)))
                           for size in (width, height))
        zoom = np.clip(rng.standard_normal() * self.zoom_sigma + 1, 0.6, 1.4)
        scale = max(width, height) * float(zoom)
        order = tuple(int(k) for k in rng.permutation(len(COLOR_OPS)))
        factors = tuple(float(f) for f in 1 + rng.uniform(-0.4, 0.4, size=len(COLOR_OPS)))
        lighting = tuple(float(a) for a in rng.normal(scale=0.1, size=3))
        return CenterNetAugment(flip, center, scale, order, factors, lighting)

    def __call__(self, image, label):
        """Augment ``image`` (``H x W x 3`` uint8 RGB, numpy or NDArray) and ``label`` (``N x
        6+``, boxes in its pixels) with new random choices."""
        image = T._image(image)
        return self.apply(image, label, self.draw(image.shape[1], image.shape[0]))

    def apply(self, image, label, aug):
        """Augment ``image`` and ``label`` with the choices ``aug`` (a `CenterNetAugment`)."""
        img, label = T._image(image), T._label(label)
        label = label[np.isfinite(label[:, :4]).all(axis=1)]
        label[:, :4] = np.clip(label[:, :4], 0, [img.shape[1], img.shape[0]] * 2)
        if self.targets is not None and label.shape[1] < 5:
            raise ValueError('CenterNetTrainTransform: labels need a class id column (N x 5+),'
                             ' got shape %s' % (label.shape,))
        if aug.flip:
            img = np.ascontiguousarray(img[:, ::-1])
            label = T.bbox_flip(label, (img.shape[1], img.shape[0]), flip_x=True)
        warp = center_affine(aug.center, aug.scale, self.size)
        img = cv2.warpAffine(img, warp, self.size, flags=cv2.INTER_LINEAR)
        img = img.astype(np.float32) / 255
        color_jitter(img, aug.order, aug.factors, aug.lighting)
        img = np.ascontiguousarray(((img - self.mean) / self.std).transpose(2, 0, 1))
        if self.targets is None:
            return img, _warp_boxes(label, warp, self.size)
        boxes = _warp_boxes(label, center_affine(aug.center, aug.scale, self.output_size),
                            self.output_size)
        return (img,) + tuple(self.targets(boxes[:, :4], boxes[:, 4]))


def _warp_boxes(label, warp, size):
    """The rows of ``label`` with their corners mapped by ``warp`` (2 x 3) and clipped to
    ``[0, size - 1]`` (as GluonCV), those left without a positive width and height dropped."""
    corners = label[:, :4].reshape(-1, 2).astype(np.float64)
    label[:, :4] = (corners @ warp[:, :2].T + warp[:, 2]).reshape(-1, 4)
    label[:, [0, 2]] = np.clip(label[:, [0, 2]], 0, size[0] - 1)
    label[:, [1, 3]] = np.clip(label[:, [1, 3]], 0, size[1] - 1)
    return label[(label[:, 2] > label[:, 0]) & (label[:, 3] > label[:, 1])]
