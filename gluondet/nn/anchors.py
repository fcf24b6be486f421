"""Anchor boxes of single-stage detectors (SSD, RetinaNet): a few shapes repeated on a grid."""
import numpy as np
from mxnet import gluon

__all__ = ['ssd_anchor_shapes', 'retina_anchor_shapes', 'grid_anchors', 'ssd_anchors',
           'GridAnchorGenerator', 'SSDAnchorGenerator']


def ssd_anchor_shapes(sizes, ratios):
    """Widths and heights of the anchors at one position, in SSD's order.

    Parameters
    ----------
    sizes : pair of float
        ``(size, next_size)`` of this layer: the anchors are a ``size`` square,
        a ``sqrt(size * next_size)`` square, then ``size`` at each ratio of
        ``ratios[1:]`` (``ratios[0]`` is the square, 1).
    ratios : sequence of float
        Aspect ratios (width / height).

    Returns
    -------
    list of (float, float)
        ``(width, height)`` per anchor.
    """
    if len(sizes) != 2:
        raise ValueError('SSD anchor sizes must be a pair (size, next_size), got %r' % (sizes,))
    small, big = sizes[0], np.sqrt(sizes[0] * sizes[1])
    shapes = [(small, small), (big, big)]
    for ratio in ratios[1:]:
        root = np.sqrt(ratio)
        shapes.append((small * root, small / root))
    return shapes


def retina_anchor_shapes(stride, ratios=(0.5, 1, 2), scales=(1, 2 ** (1 / 3), 2 ** (2 / 3)),
                         base=4):
    """Widths and heights of RetinaNet's anchors at one position (Lin et al. 2017).

    Each anchor has the area of a ``base * stride * scale`` square and the aspect
    ``ratio`` (height / width, as ODTK and TAO); scales vary slowest (ODTK's order).

    Returns
    -------
    list of (float, float)
        ``(width, height)``, ``len(scales) * len(ratios)`` of them.
    """
    shapes = []
    for scale in scales:
        size = base * stride * scale
        for ratio in ratios:
            shapes.append((size / np.sqrt(ratio), size * np.sqrt(ratio)))
    return shapes


def grid_anchors(shapes, step, height, width, offsets=(0.5, 0.5)):
    """Anchors of a ``height x width`` feature map in center format.

    Parameters
    ----------
    shapes : sequence of (float, float)
        ``(width, height)`` of the anchors of one cell.
    step : float
        Distance in input pixels between neighbouring feature-map cells.
    height, width : int
        Feature-map size.
    offsets : pair of float
        Center offset of the first cell as (y, x), in cells.

    Returns
    -------
    numpy.ndarray
        float32 array ``height x width x (num_anchors * 4)``, each anchor
        ``(center_x, center_y, width, height)`` in input pixels.
    """
    shapes = np.array(shapes, dtype=np.float64)
    cy = (np.arange(height) + offsets[0]) * step
    cx = (np.arange(width) + offsets[1]) * step
    anchors = np.zeros((height, width, len(shapes), 4), dtype=np.float64)
    anchors[..., 0] = cx[None, :, None]
    anchors[..., 1] = cy[:, None, None]
    anchors[..., 2] = shapes[:, 0]
    anchors[..., 3] = shapes[:, 1]
    return anchors.reshape(height, width, -1).astype(np.float32)


def ssd_anchors(sizes, ratios, step, height, width, offsets=(0.5, 0.5)):
    """SSD's :func:`grid_anchors` of ``ssd_anchor_shapes(sizes, ratios)``."""
    return grid_anchors(ssd_anchor_shapes(sizes, ratios), step, height, width, offsets)


class GridAnchorGenerator(gluon.HybridBlock):
    """The anchors of one output layer, cropped to its feature map.

    Anchors for an ``alloc_size`` map are computed once and kept as a constant
    parameter; each call crops them to the feature map it is given, so the
    network takes any input size up to ``alloc_size * step`` pixels and
    exports to a static graph.

    Parameters
    ----------
    shapes : sequence of (float, float)
        ``(width, height)`` of the anchors of one cell.
    step : float
        Stride of this layer in input pixels.
    alloc_size : pair of int
        Largest feature map (H, W) supported.
    offsets : pair of float
        Center offsets (y, x) in cells.
    clip : bool
        Clip centers and sizes to ``im_size`` (as GluonCV's SSD does when asked).
    im_size : pair of int or None
        Input size (H, W), needed when ``clip`` is true.

    Inputs: a feature map ``B x C x H x W``. Output: ``1 x (H * W * num_anchors) x 4``
    anchors in center format, row-major over cells then anchors.
    """

    def __init__(self, shapes, step, alloc_size=(128, 128), offsets=(0.5, 0.5), clip=False,
                 im_size=None, **kwargs):
        super().__init__(**kwargs)
        if clip and im_size is None:
            raise ValueError('%s: clip=True needs im_size' % type(self).__name__)
        self._num_anchors = len(shapes)
        self.step = step
        self._clip = clip
        self._im_size = im_size
        anchors = grid_anchors(shapes, step, alloc_size[0], alloc_size[1], offsets)
        self.anchors = self.params.get_constant('anchors', anchors[None, None])

    @property
    def num_anchors(self):
        """Number of anchors per feature-map cell."""
        return self._num_anchors

    def hybrid_forward(self, F, x, anchors):
        a = F.slice_like(anchors, x, axes=(2, 3)).reshape((1, -1, 4))
        if self._clip:
            height, width = self._im_size
            cx, cy, w, h = F.split(a, axis=-1, num_outputs=4)
            a = F.concat(cx.clip(0, width), cy.clip(0, height),
                         w.clip(0, width), h.clip(0, height), dim=-1)
        return a


class SSDAnchorGenerator(GridAnchorGenerator):
    """SSD's anchors of one layer: :class:`GridAnchorGenerator` of
    ``ssd_anchor_shapes(sizes, ratios)`` (``sizes`` a pair ``(size, next_size)``, ``ratios``
    starting with 1); the other arguments as there."""

    def __init__(self, sizes, ratios, step, alloc_size=(128, 128), offsets=(0.5, 0.5),
                 clip=False, im_size=None, **kwargs):
        super().__init__(ssd_anchor_shapes(sizes, ratios), step, alloc_size, offsets, clip,
                         im_size, **kwargs)
