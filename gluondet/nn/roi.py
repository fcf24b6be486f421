"""Region features: ROI Align / ROI pooling on one feature map or on an FPN pyramid."""
from mxnet import autograd, gluon

from .roi_align import SPARSE_ROI_ALIGN

__all__ = ['ROIExtractor', 'fpn_levels', 'roi_rows', 'finite_rois']


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


def finite_rois(F, rois):
    """``(rois, penalty)``: the ``R x 5`` rows with each non-finite row made a zero box of
    image 0, and ``R`` values, 0 where a row was finite and -inf where not.

    MXNet's ROI Align reads memory out of bounds at a NaN or infinite coordinate (a
    segmentation fault); pooling the zero box instead and adding the penalty to that row's
    features lets the losses become non-finite, and training stop there with its one line.
    """
    finite = F.min((rois - rois) == 0, axis=1)              # inf - inf and NaN are NaN
    rois = F.where(F.broadcast_like(finite.reshape((-1, 1)), rois), rois, F.zeros_like(rois))
    return rois, F.log(finite)


class ROIExtractor(gluon.HybridBlock):
    """Fixed-size features of each ROI, from one map or from the level that fits it.

    With several maps (an FPN), each ROI's features come only from the level
    :func:`fpn_levels` gives it: each level pools its own ROIs (see
    :meth:`_pool_own`; ROI pooling pools all) and the other rows are selected
    away with ``where``. GluonCV marks the other levels' ROIs with batch index
    -1 too, but without reordering them and the selection, which is wrong on
    CPUs: MXNet 1.9's CPU ROI Align leaves such ROIs' rows unset and zeroes
    part of the first ROI's.

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

    Attributes: ``sparse_backward`` (False) trains ROI Align through
    :mod:`gluondet.nn.roi_align`, same outputs, a faster backward on CPUs (set before the
    graph is built, as :class:`~gluondet.tasks.FasterRCNNTask` does on CPU contexts).

    Inputs: ``rois`` ``R x 5`` ``(batch index, xmin, ymin, xmax, ymax)`` in input
    pixels, then the maps. Output ``R x C x size``. In training a ROI with a NaN or infinite
    coordinate pools features of -inf (:func:`finite_rois`), never reaching ROI Align.
    """

    def __init__(self, size, strides, mode='align', min_level=2, **kwargs):
        super().__init__(**kwargs)
        if mode not in ('align', 'pool'):
            raise ValueError("ROI mode must be 'align' or 'pool', got %r" % (mode,))
        self.size = tuple(size)
        self.strides = tuple(strides)
        self.mode = mode
        self.min_level = min_level
        self.sample_ratio = 2
        self.sparse_backward = False

    def _pool(self, F, feature, rois, stride):
        if self.mode == 'pool':
            return F.ROIPooling(feature, rois, self.size, 1.0 / stride)
        if self.sparse_backward and autograd.is_training():
            # ``* 1`` (an operator without oneDNN kernels) hands the custom operator plain
            # arrays, forward and backward: MXNet 1.9 converts a oneDNN-blocked input of a
            # custom operator into a temporary that it frees before the operator runs,
            # unless the graph is hybridized with static_alloc (then: a segfault or NaNs)
            pooled = F.Custom(feature * 1, rois * 1, op_type=SPARSE_ROI_ALIGN,
                              pooled_size=self.size, spatial_scale=1.0 / stride,
                              sample_ratio=self.sample_ratio)
            return pooled * 1
        return F.contrib.ROIAlign(feature, rois, self.size, 1.0 / stride,
                                  sample_ratio=self.sample_ratio)

    def hybrid_forward(self, F, rois, *maps):
        if not autograd.is_training():
            return self._pool_levels(F, rois, maps)
        rois, penalty = finite_rois(F, rois)
        return F.broadcast_add(self._pool_levels(F, rois, maps), penalty.reshape((-1, 1, 1, 1)))

    def _pool_levels(self, F, rois, maps):
        if len(maps) == 1:
            return self._pool(F, maps[0], rois, self.strides[0])
        levels = fpn_levels(F, rois, self.min_level, self.min_level + len(maps) - 1)
        pooled = []
        for i, (feature, stride) in enumerate(zip(maps, self.strides)):
            mine = (levels == self.min_level + i).reshape((-1, 1))
            if self.mode == 'pool':
                out = self._pool(F, feature, rois, stride)
            else:
                out = self._pool_own(F, feature, rois, mine, stride)
            mine = F.broadcast_like(mine.reshape((-1, 1, 1, 1)), out)
            pooled.append(F.where(mine, out, F.zeros_like(out)))
        return F.add_n(*pooled)

    def _pool_own(self, F, feature, rois, mine, stride):
        """ROI Align of the ROIs where ``mine``; the other rows are garbage (masked later).

        The others get batch index -1, so ROI Align skips them forward and
        backward (pooling every ROI on every level made ROI Align's backward
        half of a training step). MXNet 1.9's CPU kernel then leaves their rows
        unset and writes a zero at flat output position ``r`` for each skipped
        ROI ``r``, inside the rows of earlier ROIs. So the skipped ROIs go first:
        position ``r`` lies in row ``r // (C * h * w) <= r``, a skipped one, however
        many ROIs there are. GPUs and ONNX Runtime zero skipped ROIs.
        """
        own = F.where(F.broadcast_like(mine, rois), rois, F.ones_like(rois) * -1)
        order = F.argsort(mine.reshape((-1,)))                     # this level's ROIs last
        out = self._pool(F, feature, F.take(own, order), stride)
        return F.take(out, F.argsort(order))
