"""Anchor boxes for SSD-style detectors."""
import numpy as np
from mxnet import gluon

__all__ = ['ssd_anchor_shapes', 'ssd_anchors', 'SSDAnchorGenerator']


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


def ssd_anchors(sizes, ratios, step, height, width, offsets=(0.5, 0.5)):
    """Anchors of a ``height x width`` feature map in center format.

    Parameters
    ----------
    sizes, ratios
        See :func:`ssd_anchor_shapes`.
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
    shapes = np.array(ssd_anchor_shapes(sizes, ratios), dtype=np.float64)
    cy = (np.arange(height) + offsets[0]) * step
    cx = (np.arange(width) + offsets[1]) * step
    anchors = np.zeros((height, width, len(shapes), 4), dtype=np.float64)
    anchors[..., 0] = cx[None, :, None]
    anchors[..., 1] = cy[:, None, None]
    anchors[..., 2] = shapes[:, 0]
    anchors[..., 3] = shapes[:, 1]
    return anchors.reshape(height, width, -1).astype(np.float32)


class SSDAnchorGenerator(gluon.HybridBlock):
    """The anchors of one SSD output layer, cropped to its feature map.

    Anchors for an ``alloc_size`` map are computed once and kept as a constant
    parameter; each call crops them to the feature map it is given, so the
    network takes any input size up to ``alloc_size * step`` pixels and
    exports to a static graph.

    Parameters
    ----------
    sizes : pair of float
        ``(size, next_size)``, see :func:`ssd_anchor_shapes`.
    ratios : sequence of float
        Aspect ratios, the first being 1.
    step : float
        Stride of this layer in input pixels.
    alloc_size : pair of int
        Largest feature map (H, W) supported.
    offsets : pair of float
        Center offsets (y, x) in cells.
    clip : bool
        Clip centers and sizes to ``im_size`` (as GluonCV does when asked).
    im_size : pair of int or None
        Input size (H, W), needed when ``clip`` is true.

    Inputs: a feature map ``B x C x H x W``. Output: ``1 x (H * W * num_anchors) x 4``
    anchors in center format, row-major over cells then anchors.
    """

    def __init__(self, sizes, ratios, step, alloc_size=(128, 128), offsets=(0.5, 0.5),
                 clip=False, im_size=None, **kwargs):
        super().__init__(**kwargs)
        if clip and im_size is None:
            raise ValueError('SSDAnchorGenerator: clip=True needs im_size')
        self._num_anchors = len(ssd_anchor_shapes(sizes, ratios))
        self.step = step
        self._clip = clip
        self._im_size = im_size
        anchors = ssd_anchors(sizes, ratios, step, alloc_size[0], alloc_size[1], offsets)
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
