"""Mask R-CNN's box-frame mask probabilities pasted into the image, as GluonCV pastes them
(:func:`paste`; also :mod:`gluondet.masks`'s)."""
import numpy as np

__all__ = ['paste']


def _bilinear(size_in, size_out, keep):
    """Pillow's bilinear resampling ``size_in -> size_out`` for output pixels ``keep``: each
    one's first input pixel and ``K`` weights (0 past its last), as Pillow's
    ``precompute_coeffs`` (its support widens with the reduction when shrinking)."""
    scale = size_in / size_out
    filterscale = max(scale, 1.0)
    support = filterscale
    taps = np.arange(int(np.ceil(support)) * 2 + 1)
    center = (keep + 0.5) * scale
    lo = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    hi = np.minimum(np.trunc(center + support + 0.5), size_in).astype(np.int64)
    arg = np.abs(((taps + lo[:, None]) - center[:, None] + 0.5) * (1.0 / filterscale))
    weights = np.where((arg < 1.0) & (taps < (hi - lo)[:, None]), 1.0 - arg, 0.)
    total = np.zeros(len(keep))
    for tap in taps:                                # summed in Pillow's order
        total += weights[:, tap]
    weights = np.where(total[:, None] != 0, weights / np.where(total, total, 1)[:, None],
                       weights)
    return lo, weights


def _resample(image, size, keep):
    """Pillow's ``Image.resize(size, BILINEAR)`` of a float32 image (mode ``F``) at the
    output rows and columns ``keep``: a horizontal pass, then a vertical one, each summed
    in float64 and stored as float32 (a pass is skipped where the size stays)."""
    for axis in (1, 0):
        image = np.moveaxis(image, axis, 0)
        if size[axis] == len(image):
            image = image[keep[axis]]
        else:
            lo, weights = _bilinear(len(image), size[axis], keep[axis])
            total = np.zeros((len(lo),) + image.shape[1:])
            for tap in range(weights.shape[1]):
                total += image[np.minimum(lo + tap, len(image) - 1)] * weights[:, tap, None]
            image = total.astype(np.float32)
        image = np.moveaxis(image, 0, axis)
    return image


def paste(masks, boxes, image_size, threshold=0.5):
    """Full-image masks of Mask R-CNN's box-frame mask probabilities, as GluonCV pastes them.

    This is GluonCV's ``gluoncv.data.transforms.mask.fill`` with ``fast_fill=True``, the
    path its Mask R-CNN evaluation takes: each ``M x M`` mask, padded by one pixel of 0s,
    covers its box widened by that pixel and rounded to whole pixels; it is resized there
    with Pillow's bilinear filter (float32) and kept where above ``threshold``. Boxes
    partly or wholly outside the image give the part inside (GluonCV fails on some of the
    latter). GluonCV's other path (``fast_fill=False``, SciPy's ``interp2d``, gone from
    SciPy 1.14) is not reproduced.

    Parameters
    ----------
    masks : array-like, N x M x M (or N x M_h x M_w)
        Mask probabilities in each box's frame.
    boxes : array-like, N x 4
        ``xmin, ymin, xmax, ymax`` in image pixels; arithmetic in their float type
        (float32 boxes round as GluonCV's float32 boxes do).
    image_size : (width, height)

    Returns
    -------
    numpy.ndarray
        ``N x height x width`` uint8, 0 or 1.
    """
    masks = np.asarray(masks)
    boxes = np.asarray(boxes)
    if not np.issubdtype(boxes.dtype, np.floating):
        boxes = boxes.astype(np.float64)
    if masks.ndim != 3 or boxes.shape != (len(masks), 4):
        raise ValueError('paste: masks N x M x M and boxes N x 4, got shapes %s and %s'
                         % (masks.shape, boxes.shape))
    if not np.isfinite(boxes).all():
        raise ValueError('paste: boxes must be finite')
    width, height = (int(v) for v in image_size)
    m_h, m_w = masks.shape[1:]
    padded = np.pad(masks, [(0, 0), (1, 1), (1, 1)]).astype(np.float32)
    x1, y1, x2, y2 = boxes.T
    cx, cy, half_w, half_h = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
    half_w = half_w * (float(m_w + 2) / m_w)
    half_h = half_h * (float(m_h + 2) / m_h)
    x1, y1, x2, y2 = (np.round(v).astype(np.int64) for v in
                      (cx - half_w, cy - half_h, cx + half_w, cy + half_h))
    if ((x2 < x1) | (y2 < y1)).any():
        raise ValueError('paste: boxes[%d] has xmax < xmin or ymax < ymin'
                         % np.flatnonzero((x2 < x1) | (y2 < y1))[0])
    out = np.zeros((len(masks), height, width), np.uint8)
    for i in range(len(masks)):
        left, top = max(x1[i], 0), max(y1[i], 0)
        right, bottom = min(x2[i] + 1, width), min(y2[i] + 1, height)
        if right <= left or bottom <= top:
            continue
        values = _resample(padded[i], (y2[i] - y1[i] + 1, x2[i] - x1[i] + 1),
                           (np.arange(top - y1[i], bottom - y1[i]),
                            np.arange(left - x1[i], right - x1[i])))
        out[i, top:bottom, left:right] = values > threshold
    return out
