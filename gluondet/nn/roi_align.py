"""ROI Align whose backward is a sparse product, for training on CPUs.

MXNet 1.9's CPU ROI Align backward is one serial loop over the ROIs' samples, writing
into ``NCHW`` features a channel apart: on the small FPN Faster R-CNN of the demo it was a
third of a training step (0.29 s of 0.85 at batch 8). The same gradient is the transpose
of a sparse matrix, each pooled cell's row holding the bilinear weights of its samples'
four neighbours, applied to the output gradient with the channels contiguous: a fifth of
the time. The forward is MXNet's own kernel, so outputs are unchanged.
"""
import mxnet as mx
import numpy as np

__all__ = ['SPARSE_ROI_ALIGN', 'bilinear_weights']

SPARSE_ROI_ALIGN = 'gluondet_sparse_roi_align'

# output-gradient values the backward copies out of MXNet at a time (16 MB): the ROIs go in
# chunks, and only those of the map (an FPN level pools its own ROIs, the others skipped)
CHUNK_VALUES = 1 << 22


def _axis_samples(coords, size):
    """MXNet's bilinear rule along one axis: ``(low, high, weight of low, weight of high,
    outside)`` of each sample coordinate on an axis of ``size`` cells."""
    outside = (coords < -1) | (coords > size)
    coords = np.maximum(coords, 0)
    low = coords.astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0, coords - low).astype(np.float32)
    return low, high, np.float32(1) - frac, frac, outside


def bilinear_weights(rois, shape, size, scale, ratio):
    """The ROI Align of MXNet's CPU kernel (not pixel-aligned) as a sparse matrix.

    Parameters
    ----------
    rois : ``R x 5`` float32 array
        ``(batch index, xmin, ymin, xmax, ymax)`` in input pixels; a negative batch index
        pools nothing.
    shape : (int, int, int)
        ``(B, H, W)`` of the feature map.
    size : (int, int)
        Pooled ``(height, width)``.
    scale : float
        Feature cells per input pixel.
    ratio : int
        Samples per bin along each axis (> 0).

    Returns
    -------
    scipy.sparse.csr_matrix
        ``(B * H * W) x (R * height * width)``: column ``(r * height + i) * width + j`` holds
        the weights of feature cell ``(b * H + y) * W + x`` in pooled cell ``(r, i, j)``.
    """
    import scipy.sparse  # pylint: disable=import-outside-toplevel
    if ratio <= 0:
        raise ValueError('bilinear_weights needs a fixed sample ratio, got %r' % (ratio,))
    batch, height, width = shape
    ph, pw = size
    f32 = np.float32
    valid = np.nonzero(rois[:, 0] >= 0)[0]
    r = rois[valid].astype(f32)
    x0, y0 = r[:, 1] * f32(scale), r[:, 2] * f32(scale)
    roi_w = np.maximum(r[:, 3] * f32(scale) - x0, f32(1))
    roi_h = np.maximum(r[:, 4] * f32(scale) - y0, f32(1))
    steps = (np.arange(ratio, dtype=f32) + f32(.5)) / f32(ratio)

    def samples(start, extent, bins, cells):
        step = (extent / f32(bins))[:, None, None]
        coords = (start[:, None, None] + np.arange(bins, dtype=f32)[None, :, None] * step
                  + steps[None, None, :] * step)                  # V x bins x ratio
        return _axis_samples(coords, cells)

    ylo, yhi, ywl, ywh, yout = (a[:, :, None, :, None] for a in samples(y0, roi_h, ph, height))
    xlo, xhi, xwl, xwh, xout = (a[:, None, :, None, :] for a in samples(x0, roi_w, pw, width))
    base = (r[:, 0].astype(np.int64) * (height * width))[:, None, None, None, None]
    cells = np.stack([base + ylo * width + xlo, base + ylo * width + xhi,
                      base + yhi * width + xlo, base + yhi * width + xhi], -1)
    inside = ~(yout | xout)
    weights = np.stack([ywl * xwl, ywl * xwh, ywh * xwl, ywh * xwh], -1)
    weights = weights * (inside / f32(ratio * ratio))[..., None]
    pooled = (valid[:, None, None] * (ph * pw) + np.arange(ph)[None, :, None] * pw
              + np.arange(pw)[None, None, :])[:, :, :, None, None, None]
    pooled = np.broadcast_to(pooled, cells.shape)
    return scipy.sparse.csr_matrix(
        (weights.ravel(), (cells.ravel(), pooled.ravel())),
        shape=(batch * height * width, len(rois) * ph * pw))


class _SparseROIAlign(mx.operator.CustomOp):
    """MXNet's ROI Align forward; the backward of :func:`bilinear_weights`."""

    def __init__(self, size, scale, ratio):
        super().__init__()
        self.size, self.scale, self.ratio = size, scale, ratio

    def forward(self, is_train, req, in_data, out_data, aux):
        out = mx.nd.contrib.ROIAlign(in_data[0], in_data[1], self.size, self.scale,
                                     sample_ratio=self.ratio)
        self.assign(out_data[0], req[0], out)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        batch, channels, height, width = in_data[0].shape
        rois = in_data[1].asnumpy()
        pooled = out_grad[0]
        valid = np.nonzero(rois[:, 0] >= 0)[0]         # an FPN level's own ROIs
        features = np.zeros((batch * height * width, channels), np.float32)
        step = max(1, CHUNK_VALUES // max(1, pooled[0].size))
        for start in range(0, len(valid), step):
            rows = valid[start:start + step]
            weights = bilinear_weights(rois[rows], (batch, height, width), self.size,
                                       self.scale, self.ratio)
            grad = mx.nd.take(pooled, mx.nd.array(rows, ctx=pooled.context)).asnumpy()
            features += weights @ grad.transpose(0, 2, 3, 1).reshape(-1, channels)
        features = features.reshape(batch, height, width, channels).transpose(0, 3, 1, 2)
        self.assign(in_grad[0], req[0], mx.nd.array(features, ctx=in_data[0].context))
        self.assign(in_grad[1], req[1], mx.nd.zeros_like(in_data[1]))


@mx.operator.register(SPARSE_ROI_ALIGN)
class _SparseROIAlignProp(mx.operator.CustomOpProp):
    """``F.Custom(data, rois, op_type=SPARSE_ROI_ALIGN, pooled_size=(h, w),
    spatial_scale=s, sample_ratio=n)``: ``contrib.ROIAlign``'s arguments and output."""

    def __init__(self, pooled_size, spatial_scale, sample_ratio):
        super().__init__(need_top_grad=True)
        self.size = tuple(int(v) for v in str(pooled_size).strip('()[] ').split(',') if v)
        self.scale, self.ratio = float(spatial_scale), int(sample_ratio)

    def list_arguments(self):
        return ['data', 'rois']

    def infer_shape(self, in_shape):
        data, rois = in_shape
        return [data, rois], [(rois[0], data[1]) + self.size], []

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        return [out_grad[0], in_data[0], in_data[1]]

    def create_operator(self, ctx, shapes, dtypes):
        return _SparseROIAlign(self.size, self.scale, self.ratio)
