"""Region features: ROI Align / ROI pooling on one feature map or on an FPN pyramid."""
from mxnet import gluon

__all__ = ['ROIExtractor', 'fpn_levels', 'roi_rows']


def roi_rows(F, boxes):
    """``B x N x 4`` boxes -> ``(B * N) x 5`` ROI rows ``(batch index, box)``."""
    index = F.contrib.arange_like(boxes, axis=0).reshape((-1, 1, 1))
    index = F.broadcast_like(index, F.slice_axis(boxes, axis=-1, begin=0, end=1))
    return F.concat(index, boxes, dim=-1).reshape((-1, 5))


def fpn_levels(F, rois, min_level, max_level, canonical_size=224.0, canonical_level=4,
               eps=1e-6):
    """The pyramid level of each ROI: ``floor(4 + log2(sqrt(area) / 224))``, clipped.

    Areas use inclusive pixels (``(xmax - xmin + 1) * (ymax - ymin + 1)``) as
    GluonCV's FPN. Input ``R x 5`` rows; output ``R`` levels (float).
    """
    _, xmin, ymin, xmax, ymax = F.split(rois, axis=-1, num_outputs=5)
    size = F.sqrt((xmax - xmin + 1) * (ymax - ymin + 1))
    level = F.floor(canonical_level + F.log2(size / canonical_size + eps))
    return F.clip(level, min_level, max_level).reshape((-1,))


class ROIExtractor(gluon.HybridBlock):
    """Fixed-size features of each ROI, from one map or from the level that fits it.

    With several maps (an FPN), each ROI's features come only from the level
    :func:`fpn_levels` gives it: every level pools every ROI and the other
    levels' outputs are selected away with ``where``. (Marking the other
    levels' ROIs with batch index -1 instead, as GluonCV does, is wrong on
    CPUs: MXNet 1.9's CPU ROI Align leaves the output of such ROIs unset and
    also overwrites part of the output of the ROI before them.)

    Parameters
    ----------
    size : (int, int)
        Output (height, width).
    strides : sequence of int
        Stride of each map, finest first.
    mode : {'align', 'pool'}
        ROI Align (``sample_ratio`` 2, not pixel-aligned, as GluonCV) or ROI pooling.
    min_level : int
        Pyramid level of the first map (FPN: 2).

    Inputs: ``rois`` ``R x 5`` ``(batch index, xmin, ymin, xmax, ymax)`` in input
    pixels, then the maps. Output ``R x C x size``.
    """

    def __init__(self, size, strides, mode='align', min_level=2, **kwargs):
        super().__init__(**kwargs)
        if mode not in ('align', 'pool'):
            raise ValueError("ROI mode must be 'align' or 'pool', got %r" % (mode,))
        self.size = tuple(size)
        self.strides = tuple(strides)
        self.mode = mode
        self.min_level = min_level

    def _pool(self, F, feature, rois, stride):
        if self.mode == 'pool':
            return F.ROIPooling(feature, rois, self.size, 1.0 / stride)
        return F.contrib.ROIAlign(feature, rois, self.size, 1.0 / stride, sample_ratio=2)

    def hybrid_forward(self, F, rois, *maps):
        if len(maps) == 1:
            return self._pool(F, maps[0], rois, self.strides[0])
        levels = fpn_levels(F, rois, self.min_level, self.min_level + len(maps) - 1)
        pooled = []
        for i, (feature, stride) in enumerate(zip(maps, self.strides)):
            out = self._pool(F, feature, rois, stride)
            mine = F.broadcast_like((levels == self.min_level + i).reshape((-1, 1, 1, 1)), out)
            pooled.append(F.where(mine, out, F.zeros_like(out)))
        return F.add_n(*pooled)
