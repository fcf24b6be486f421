"""Box math on numpy arrays: IoU, format conversions, clipping, box coding, NMS.

Boxes are ``xmin, ymin, xmax, ymax`` in pixels (float32) in the last axis;
extra columns after the first four are carried along where noted. This module
is the leaf every other part of gluondet shares: it imports numpy only, and
mxnet only inside :func:`bbox_nms`.
"""
import numpy as np

__all__ = ['bbox_iou', 'bbox_area', 'bbox_xywh_to_xyxy', 'bbox_xyxy_to_xywh',
           'bbox_clip_xyxy', 'bbox_encode', 'bbox_decode', 'bbox_nms']

_TINY = 1e-6  # smallest width or height used by the box coder, to keep log and division finite


def _as_boxes(boxes, name='boxes', ndim=None):
    """Return ``boxes`` as a float ndarray whose last axis has at least 4 values."""
    arr = np.asarray(boxes)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float32)
    if arr.ndim == 0 or arr.shape[-1] < 4 or (ndim is not None and arr.ndim != ndim):
        want = '%d-D array' % ndim if ndim else 'array'
        raise ValueError('%s must be a %s whose last axis holds at least 4 values '
                         '(xmin, ymin, xmax, ymax), got shape %s' % (name, want, arr.shape))
    return arr


def bbox_area(boxes, offset=0):
    """Area of corner boxes; inverted boxes have area 0.

    Parameters
    ----------
    boxes : array-like, shape (..., 4+)
        Corner boxes.
    offset : float, default 0
        Added to width and height (1 for the inclusive-pixel convention).

    Returns
    -------
    numpy.ndarray, shape (...)
    """
    boxes = _as_boxes(boxes)
    width = np.maximum(boxes[..., 2] - boxes[..., 0] + offset, 0)
    height = np.maximum(boxes[..., 3] - boxes[..., 1] + offset, 0)
    return width * height


def bbox_iou(bbox_a, bbox_b, offset=0):
    """Pairwise intersection over union.

    Parameters
    ----------
    bbox_a : array-like, shape (N, 4+)
    bbox_b : array-like, shape (M, 4+)
    offset : float, default 0
        Added to widths and heights, as GluonCV's ``offset`` (1 for the
        inclusive-pixel convention, 0 for continuous or normalized boxes).
        Intersections are clamped at zero after adding it, so with ``offset=1``
        boxes sharing a pixel column overlap by that column (GluonCV counts 0).

    Returns
    -------
    numpy.ndarray, shape (N, M)
        IoU of each pair; 0 where the union is empty (never NaN).
    """
    bbox_a = _as_boxes(bbox_a, 'bbox_a', ndim=2)
    bbox_b = _as_boxes(bbox_b, 'bbox_b', ndim=2)
    a, b = bbox_a[:, None, :4], bbox_b[None, :, :4]
    inter_w = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + offset
    inter_h = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + offset
    inter = np.maximum(inter_w, 0) * np.maximum(inter_h, 0)
    union = bbox_area(bbox_a, offset)[:, None] + bbox_area(bbox_b, offset)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def bbox_xywh_to_xyxy(xywh, offset=0):
    """Convert ``xmin, ymin, width, height`` to corner boxes.

    Parameters
    ----------
    xywh : array-like, shape (..., 4+)
        Boxes as COCO stores them; columns after the fourth are kept.
    offset : float, default 0
        Subtracted from width and height, as GluonCV's pixel convention when 1
        (``xmax = xmin + max(w - 1, 0)``).

    Returns
    -------
    numpy.ndarray, shape (..., 4+)
    """
    out = _as_boxes(xywh, 'xywh').copy()
    out[..., 2:4] = out[..., 0:2] + np.maximum(out[..., 2:4] - offset, 0)
    return out


def bbox_xyxy_to_xywh(xyxy, offset=0):
    """Convert corner boxes to ``xmin, ymin, width, height``.

    Parameters
    ----------
    xyxy : array-like, shape (..., 4+)
        Corner boxes; columns after the fourth are kept.
    offset : float, default 0
        Added to width and height (GluonCV uses 1).

    Returns
    -------
    numpy.ndarray, shape (..., 4+)
    """
    out = _as_boxes(xyxy, 'xyxy').copy()
    out[..., 2:4] = out[..., 2:4] - out[..., 0:2] + offset
    return out


def bbox_clip_xyxy(xyxy, width, height, offset=0):
    """Clip corner boxes to the image ``[0, width - offset] x [0, height - offset]``.

    Parameters
    ----------
    xyxy : array-like, shape (..., 4+)
        Corner boxes; columns after the fourth are kept.
    width, height : float
        Image size in pixels.
    offset : float, default 0
        1 clips to the last pixel index, as GluonCV.

    Returns
    -------
    numpy.ndarray, shape (..., 4+)
    """
    out = _as_boxes(xyxy, 'xyxy').copy()
    upper = np.array([width, height, width, height], dtype=out.dtype) - offset
    out[..., :4] = np.clip(out[..., :4], 0, np.maximum(upper, 0))
    return out


def _center_size(boxes):
    """Corner boxes (..., 4) -> centre x, centre y, width, height (widths at least _TINY)."""
    width = np.maximum(boxes[..., 2] - boxes[..., 0], _TINY)
    height = np.maximum(boxes[..., 3] - boxes[..., 1], _TINY)
    return boxes[..., 0] + 0.5 * width, boxes[..., 1] + 0.5 * height, width, height


def _coder_params(means, stds, dtype):
    means = np.asarray(means, dtype=dtype)
    stds = np.asarray(stds, dtype=dtype)
    if means.shape != (4,) or stds.shape != (4,):
        raise ValueError('means and stds must each hold 4 values, got %s and %s'
                         % (means.shape, stds.shape))
    return means, stds


def bbox_encode(boxes, anchors, means=(0., 0., 0., 0.), stds=(0.1, 0.1, 0.2, 0.2)):
    """Encode corner boxes as normalized centre offsets from corner anchors.

    The targets of GluonCV's ``NormalizedBoxCenterEncoder`` (SSD, Faster R-CNN):
    ``t_x = ((g_x - a_x) / a_w - mean_x) / std_x``,
    ``t_w = (log(g_w / a_w) - mean_w) / std_w``, centres and sizes without +1.
    Widths and heights below 1e-6 are raised to 1e-6 so targets stay finite.

    Parameters
    ----------
    boxes : array-like, shape (..., 4)
        Ground-truth corner boxes (extra columns are ignored).
    anchors : array-like, shape (..., 4)
        Corner anchors, broadcastable against ``boxes``.
    means, stds : sequence of 4 float
        Normalization; SSD's defaults are zero means and (0.1, 0.1, 0.2, 0.2).

    Returns
    -------
    numpy.ndarray, shape (..., 4)
    """
    boxes = _as_boxes(boxes)
    anchors = _as_boxes(anchors, 'anchors')
    gx, gy, gw, gh = _center_size(boxes)
    ax, ay, aw, ah = _center_size(anchors)
    raw = np.stack([(gx - ax) / aw, (gy - ay) / ah, np.log(gw / aw), np.log(gh / ah)], axis=-1)
    means, stds = _coder_params(means, stds, raw.dtype)
    return (raw - means) / stds


def bbox_decode(codes, anchors, means=(0., 0., 0., 0.), stds=(0.1, 0.1, 0.2, 0.2), clip=None):
    """Invert :func:`bbox_encode`: offsets and corner anchors -> corner boxes.

    Same formulas as GluonCV's ``NormalizedBoxCenterDecoder`` (which has no
    means; zero means here give identical results).

    Parameters
    ----------
    codes : array-like, shape (..., 4)
        Encoded offsets.
    anchors : array-like, shape (..., 4)
        Corner anchors, broadcastable against ``codes``.
    means, stds : sequence of 4 float
        The values the codes were encoded with.
    clip : float, optional
        Upper bound on the log-scale width and height deltas before ``exp``,
        as GluonCV's ``clip`` (e.g. ``log(1000 / 16)``). None: no bound.

    Returns
    -------
    numpy.ndarray, shape (..., 4)
    """
    codes = _as_boxes(codes, 'codes')[..., :4]
    anchors = _as_boxes(anchors, 'anchors')
    means, stds = _coder_params(means, stds, codes.dtype)
    deltas = codes * stds + means
    ax, ay, aw, ah = _center_size(anchors)
    dw, dh = deltas[..., 2], deltas[..., 3]
    if clip is not None:
        dw, dh = np.minimum(dw, clip), np.minimum(dh, clip)
    cx = deltas[..., 0] * aw + ax
    cy = deltas[..., 1] * ah + ay
    half_w = 0.5 * np.exp(dw) * aw
    half_h = 0.5 * np.exp(dh) * ah
    return np.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=-1)


def _nms_input(data, scores, ids):
    """Stack detections into a (B, N, 6) float32 array [id, score, x1, y1, x2, y2]."""
    if scores is None:
        data = np.asarray(data, dtype=np.float32)
        if data.ndim != 3 or data.shape[-1] != 6:
            raise ValueError('bbox_nms: data must be B x N x 6 [id, score, xmin, ymin, xmax, '
                             'ymax] (or N x 6), got shape %s' % (data.shape,))
        return data
    boxes = np.asarray(data, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32).reshape(boxes.shape[:-1] + (1,))
    if ids is None:
        ids = np.zeros_like(scores)
    ids = np.asarray(ids, dtype=np.float32).reshape(scores.shape)
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise ValueError('bbox_nms: boxes must be B x N x 4 (or N x 4), got shape %s'
                         % (boxes.shape,))
    return np.concatenate([ids, scores, boxes], axis=-1)


def bbox_nms(data, scores=None, ids=None, overlap_thresh=0.45, valid_thresh=0.01, topk=-1,
             post_nms=-1, force_suppress=False, background_id=-1):
    """Batched non-maximum suppression with ``mx.nd.contrib.box_nms``.

    Detections scoring ``<= valid_thresh`` or with class ``background_id`` are
    dropped; of the rest, the ``topk`` best of each image (over all classes)
    go through NMS, which suppresses a box overlapping a better one of the same
    class (of any class if ``force_suppress``) by IoU ``> overlap_thresh``.

    Parameters
    ----------
    data : numpy.ndarray or mx.nd.NDArray
        Either B x N x 6 ``[id, score, xmin, ymin, xmax, ymax]`` (when
        ``scores`` is None) or B x N x 4 boxes. A 2-D input is one image.
    scores : array, shape (B, N) or (B, N, 1), optional
        Scores, when ``data`` holds boxes only.
    ids : array, shape (B, N) or (B, N, 1), optional
        Class ids of ``data`` boxes; None means one class.
    overlap_thresh, valid_thresh : float
        IoU above which a box is suppressed; score a box must exceed.
    topk : int, default -1
        Boxes per image kept before NMS, by score; -1 keeps all.
    post_nms : int, default -1
        Rows returned per image; -1 returns N.
    force_suppress : bool, default False
        True: class-agnostic NMS.
    background_id : int, default -1
        Class id that is always dropped (-1 also drops padding rows).

    Returns
    -------
    ids, scores, boxes : arrays of shape (B, K, 1), (B, K, 1), (B, K, 4)
        Kept detections by descending score, then rows of -1 (GluonCV's
        detector output). Same type as ``data`` (numpy or NDArray); without
        the batch axis when the input had none.
    """
    import mxnet as mx
    if post_nms == 0 or post_nms < -1:
        raise ValueError('bbox_nms: post_nms must be -1 (all rows) or positive, got %r' % post_nms)
    is_nd = isinstance(data, mx.nd.NDArray)
    def as_np(x):
        return x.asnumpy() if isinstance(x, mx.nd.NDArray) else x
    single = np.ndim(data) == 2
    arrays = [None if x is None else as_np(x) for x in (data, scores, ids)]
    if single:
        arrays = [None if x is None else np.asarray(x)[None] for x in arrays]
    dets = _nms_input(*arrays)
    keep = dets.shape[1] if post_nms < 0 else min(post_nms, dets.shape[1])
    if dets.shape[1] > 0:
        dets = mx.nd.contrib.box_nms(
            mx.nd.array(dets, dtype='float32'), overlap_thresh=overlap_thresh,
            valid_thresh=valid_thresh, topk=topk, coord_start=2, score_index=1, id_index=0,
            background_id=background_id, force_suppress=force_suppress).asnumpy()
    dets = dets[:, :keep]
    if single:
        dets = dets[0]
    out = (dets[..., 0:1], dets[..., 1:2], dets[..., 2:6])
    if is_nd:
        out = tuple(mx.nd.array(x, ctx=data.context) for x in out)
    return out
