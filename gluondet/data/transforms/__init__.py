"""Box-consistent image transforms for detection (SSD and Faster R-CNN style).

Images are HxWxC arrays, numpy or ``mx.nd.NDArray`` (converted with
``asnumpy``); every function returns numpy. Labels are float arrays N x 4+
whose first four columns are ``xmin, ymin, xmax, ymax`` in pixels; the other
columns (class id, difficult flag, ...) are carried along. Images keep their
dtype except in :func:`normalize` (float32 CHW) and :func:`random_color_distort`
(float32 unless uint8). Labels come back as new float32 arrays; inputs are
never modified. A label of None is allowed
where only the image matters and comes back as None.

Random transforms take ``rng``: a ``numpy.random.RandomState`` or
``numpy.random.Generator``, or None for the global ``numpy.random``, so a
seeded run repeats exactly. They return what they drew (flip flag, expand or
crop window) as GluonCV's functions do.

The transforms that move boxes (:func:`resize`, :func:`resize_short_within`,
:func:`random_flip`, :func:`random_expand`, :func:`bbox_crop`,
:func:`random_crop_with_constraints`, :func:`fixed_size_augment`) also take
``masks``, an :class:`~gluondet.data.instance_masks.InstanceMasks` with one instance
per label row: given, it comes back moved alike (rows dropped with their boxes) as the
last returned value, and the random draws are the same as without it.

GluonCV's test-time presets (``load_test``, ``transform_test``) are in
:mod:`gluondet.data.transforms.presets` (imported by :mod:`gluondet.data`: the
presets use this module, which so does not import them itself).
"""
import cv2
import numpy as np

from ...bbox import bbox_iou

__all__ = ['IMAGENET_MEAN', 'IMAGENET_STD', 'MEAN_COLOR', 'SSD_CROP_CONSTRAINTS', 'INTERP_AUTO',
           'INTERP_RANDOM', 'imresize', 'bbox_resize',
           'bbox_flip', 'bbox_translate', 'bbox_crop', 'resize', 'resize_short_within',
           'short_within_size',
           'random_flip', 'random_expand', 'random_crop_with_constraints',
           'random_color_distort', 'normalize', 'fixed_size_augment']

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MEAN_COLOR = tuple(255 * m for m in IMAGENET_MEAN)  # RGB 0-255, the SSD expand fill

# The SSD paper's patch samplers (min IoU, max IoU), as GluonCV's defaults.
SSD_CROP_CONSTRAINTS = ((0.1, None), (0.3, None), (0.5, None), (0.7, None), (0.9, None),
                        (None, 1))

INTERP_AUTO = 9     # cubic to enlarge, area to shrink, linear otherwise (as mxnet)
INTERP_RANDOM = 10  # one of the OpenCV methods 0-4 at random

_CV2_DTYPES = ('uint8', 'int8', 'uint16', 'int16', 'int32', 'float32', 'float64')

_GRAY = np.array([0.299, 0.587, 0.114])
_RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114],
                        [0.596, -0.274, -0.321],
                        [0.211, -0.523, 0.311]])
_YIQ_TO_RGB = np.array([[1.0, 0.956, 0.621],
                        [1.0, -0.272, -0.647],
                        [1.0, -1.107, 1.705]])


def _image(img):
    """Return ``img`` as a numpy HxWxC array, checking its shape."""
    if hasattr(img, 'asnumpy'):
        img = img.asnumpy()
    img = np.asarray(img)
    if img.ndim != 3 or img.shape[0] < 1 or img.shape[1] < 1:
        raise ValueError('image must be an HxWxC array with H, W >= 1, got shape %s'
                         % (img.shape,))
    return img


def _label(label):
    """Return a float32 copy of ``label`` (N x 4+), or None."""
    if label is None:
        return None
    if hasattr(label, 'asnumpy'):
        label = label.asnumpy()
    arr = np.array(label, dtype=np.float32)
    if arr.size == 0 and arr.ndim != 2:
        arr = arr.reshape(0, 6)
    if arr.ndim != 2 or arr.shape[1] < 4:
        raise ValueError('label must be an N x 4+ array [xmin, ymin, xmax, ymax, ...], '
                         'got shape %s' % (arr.shape,))
    return arr


def _rng(rng):
    return np.random if rng is None else rng


def _check_masks(label, masks):
    """Raise ValueError unless ``masks`` (if given) has one instance per label row."""
    if masks is not None and label is not None and len(masks) != len(label):
        raise ValueError('masks must have one instance per label row: %d masks, %d rows'
                         % (len(masks), len(label)))


def _and_masks(result, masks):
    """``result`` with ``masks`` appended, when masks were given."""
    return result if masks is None else result + (masks,)


def _randint(rng, high):
    """An integer in [0, high) from a RandomState, a Generator or numpy.random."""
    draw = getattr(rng, 'integers', None) or rng.randint
    return int(draw(0, high))


def _interp_method(interp, old_hw, new_hw, rng):
    if interp == INTERP_AUTO:
        if new_hw[0] > old_hw[0] and new_hw[1] > old_hw[1]:
            return cv2.INTER_CUBIC
        if new_hw[0] < old_hw[0] and new_hw[1] < old_hw[1]:
            return cv2.INTER_AREA
        return cv2.INTER_LINEAR
    if interp == INTERP_RANDOM:
        return _randint(_rng(rng), 5)
    if interp not in (0, 1, 2, 3, 4):
        raise ValueError('interp must be an OpenCV method 0-4, 9 (auto) or 10 (random), '
                         'got %r' % (interp,))
    return interp


def imresize(src, w, h, interp=1, rng=None):
    """Resize an image with OpenCV.

    Parameters
    ----------
    src : numpy.ndarray or mx.nd.NDArray, HxWxC
    w, h : int
        Output width and height (at least 1).
    interp : int, default 1
        OpenCV method (0 nearest, 1 linear, 2 cubic, 3 area, 4 Lanczos), 9 for
        automatic or 10 for random, as mxnet/GluonCV number them.
    rng : RandomState or Generator, optional
        Used by ``interp=10``.

    Returns
    -------
    numpy.ndarray, h x w x C, the dtype of ``src``
    """
    src = _image(src)
    w, h = int(w), int(h)
    if w < 1 or h < 1:
        raise ValueError('imresize: output size must be at least 1x1, got w=%d h=%d' % (w, h))
    method = _interp_method(interp, src.shape[:2], (h, w), rng)
    out = cv2.resize(src, (w, h), interpolation=method)
    return out.reshape(h, w, src.shape[2])


def bbox_resize(label, in_size, out_size):
    """Scale boxes from an image of ``in_size`` to ``out_size``, both (width, height)."""
    label = _label(label)
    if label is None:
        return None
    scale = np.array([out_size[0] / in_size[0], out_size[1] / in_size[1]] * 2, np.float32)
    label[:, :4] *= scale
    return label


def bbox_flip(label, size, flip_x=False, flip_y=False):
    """Mirror boxes in an image of ``size`` (width, height) horizontally and/or vertically."""
    label = _label(label)
    if label is None:
        return None
    if flip_x:
        label[:, [0, 2]] = size[0] - label[:, [2, 0]]
    if flip_y:
        label[:, [1, 3]] = size[1] - label[:, [3, 1]]
    return label


def bbox_translate(label, x_offset=0, y_offset=0):
    """Shift boxes by ``(x_offset, y_offset)`` pixels."""
    label = _label(label)
    if label is None:
        return None
    label[:, :4] += np.array([x_offset, y_offset, x_offset, y_offset], np.float32)
    return label


def _crop_keep(boxes, windows, allow_outside_center):
    """Which boxes survive each crop window: K x N booleans (windows K x 4, corners)."""
    win = windows[:, None, :]
    lo = np.maximum(boxes[None, :, :2], win[..., :2])
    hi = np.minimum(boxes[None, :, 2:4], win[..., 2:4])
    keep = (lo < hi).all(axis=2)
    if not allow_outside_center:
        centre = 0.5 * (boxes[None, :, :2] + boxes[None, :, 2:4])
        keep &= ((win[..., :2] <= centre) & (centre < win[..., 2:4])).all(axis=2)
    return keep


def _apply_crop(label, window, keep):
    label = label[keep]
    label[:, :4] = np.clip(label[:, :4], np.tile(window[:2], 2), np.tile(window[2:], 2))
    label[:, :4] -= np.tile(window[:2], 2)
    return label


def bbox_crop(label, crop_box, allow_outside_center=True, masks=None):
    """Boxes seen through a crop window, as GluonCV's ``bbox.crop``.

    Boxes are clipped to the window and shifted to its origin; boxes left
    with no area are dropped, and so are boxes whose centre is outside the
    window (left/top edge inclusive, right/bottom exclusive) unless
    ``allow_outside_center``.

    Parameters
    ----------
    label : array, N x 4+
    crop_box : tuple
        ``(x, y, width, height)`` of the window in pixels.
    allow_outside_center : bool, default True
    masks : InstanceMasks, optional
        Needs ``label``.

    Returns
    -------
    label : numpy.ndarray, M x 4+ float32 with M <= N
    masks : InstanceMasks, if given: the M kept instances, cropped alike
    """
    label = _label(label)
    _check_masks(label, masks)
    if label is None:
        if masks is not None:
            raise ValueError('bbox_crop: masks need the label (which rows the crop keeps)')
        return None
    x, y, w, h = crop_box
    window = np.array([x, y, x + w, y + h], np.float32)
    keep = _crop_keep(label[:, :4], window[None], allow_outside_center)[0]
    if masks is None:
        return _apply_crop(label, window, keep)
    return _apply_crop(label, window, keep), masks[np.flatnonzero(keep)].crop(crop_box)


def resize(img, label, size, interp=1, rng=None, masks=None):
    """Resize to a fixed size and scale the boxes with it.

    Parameters
    ----------
    img : numpy.ndarray or mx.nd.NDArray, HxWxC
    label : array N x 4+ or None
    size : int or (width, height)
    interp : int, default 1
        See :func:`imresize`.
    rng : RandomState or Generator, optional
        Used by ``interp=10``.
    masks : InstanceMasks, optional

    Returns
    -------
    img : numpy.ndarray, height x width x C
    label : numpy.ndarray float32 or None
    masks : InstanceMasks, if given
    """
    img = _image(img)
    _check_masks(label, masks)
    w, h = (size, size) if np.isscalar(size) else size
    out = imresize(img, w, h, interp, rng)
    in_size = (img.shape[1], img.shape[0])
    return _and_masks((out, bbox_resize(label, in_size, (w, h))),
                      None if masks is None else masks.resize(in_size, (w, h)))


def short_within_size(width, height, short, max_size=None, mult_base=1):
    """The ``(width, height)`` :func:`resize_short_within` resizes a ``width`` x ``height``
    image to: the scale that brings the shorter side to ``short``, or, if the longer side would
    then (rounded) exceed ``max_size``, the one that brings it to ``max_size`` rounded down to a
    multiple of ``mult_base``; both sides rounded to multiples of ``mult_base`` (at least 1).
    GluonCV's arithmetic."""
    side_min, side_max = min(height, width), max(height, width)
    scale = float(short) / side_min
    if max_size is not None and np.round(scale * side_max / mult_base) * mult_base > max_size:
        scale = float(np.floor(max_size / mult_base) * mult_base) / side_max
    return (max(1, int(np.round(width * scale / mult_base) * mult_base)),
            max(1, int(np.round(height * scale / mult_base) * mult_base)))


def resize_short_within(img, label, short, max_size=None, mult_base=1, interp=1, rng=None,
                        masks=None):
    """Resize keeping the aspect ratio: shorter side to ``short``, longer side at most ``max_size``.

    The Faster R-CNN resize, with GluonCV's rounding: sides are rounded to
    multiples of ``mult_base``.

    Parameters
    ----------
    img : numpy.ndarray or mx.nd.NDArray, HxWxC
    label : array N x 4+ or None
    short : int
        Target length of the shorter side.
    max_size : int, optional
        Cap on the longer side; None for no cap.
    mult_base : int, default 1
    interp : int, default 1
        See :func:`imresize`.
    rng : RandomState or Generator, optional
        Used by ``interp=10``.
    masks : InstanceMasks, optional

    Returns
    -------
    img : numpy.ndarray
    label : numpy.ndarray float32 or None
    masks : InstanceMasks, if given
    """
    img = _image(img)
    size = short_within_size(img.shape[1], img.shape[0], short, max_size, mult_base)
    return resize(img, label, size, interp, rng, masks)


def random_flip(img, label, px=0.5, rng=None, masks=None):
    """Mirror the image and its boxes (and masks) left-right with probability ``px``.

    Returns
    -------
    img : numpy.ndarray
    label : numpy.ndarray float32 or None
    flipped : bool
    masks : InstanceMasks, if given
    """
    img = _image(img)
    _check_masks(label, masks)
    flipped = bool(_rng(rng).uniform(0, 1) < px)
    if not flipped:
        return _and_masks((img.copy(), _label(label), False), masks)
    if img.dtype.name in _CV2_DTYPES:
        out = cv2.flip(img, 1).reshape(img.shape)
    else:
        out = np.ascontiguousarray(img[:, ::-1])
    size = (img.shape[1], img.shape[0])
    return _and_masks((out, bbox_flip(label, size, flip_x=True), True),
                      None if masks is None else masks.flip(size, flip_x=True))


def _fill_value(fill, img):
    fill = np.asarray(fill, dtype=np.float64)
    if fill.ndim != 0 and fill.shape != (img.shape[2],):
        raise ValueError('fill must be a number or one value per channel (%d), got %s'
                         % (img.shape[2], fill.shape))
    return np.round(fill) if img.dtype.kind in 'ui' else fill


def _pad(img, top, bottom, left, right, fill):
    """``img`` with constant borders of colour ``fill`` (OpenCV when it can, numpy otherwise)."""
    h, w, c = img.shape
    if img.dtype.name in _CV2_DTYPES and c <= 4:
        value = tuple(np.broadcast_to(fill, (c,)).tolist()) + (0,) * (4 - c)
        out = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=value)
        return out.reshape(h + top + bottom, w + left + right, c)
    out = np.empty((h + top + bottom, w + left + right, c), dtype=img.dtype)
    out[...] = fill
    out[top:top + h, left:left + w] = img
    return out


def random_expand(img, label, max_ratio=4, fill=MEAN_COLOR, keep_ratio=True, rng=None,
                  masks=None):
    """Place the image at a random spot of a canvas up to ``max_ratio`` times larger (SSD zoom-out).

    Parameters
    ----------
    img : numpy.ndarray or mx.nd.NDArray, HxWxC
    label : array N x 4+ or None
    max_ratio : float, default 4
        Largest canvas side over image side; <= 1 leaves the image as it is.
    fill : float or sequence of C floats, default MEAN_COLOR
        Canvas colour (the ImageNet mean in 0-255 RGB); rounded for integer images.
    keep_ratio : bool, default True
        Use one ratio for both axes.
    rng : RandomState or Generator, optional
    masks : InstanceMasks, optional

    Returns
    -------
    img : numpy.ndarray, the dtype of the input
    label : numpy.ndarray float32 or None
    window : tuple
        ``(x_offset, y_offset, canvas_width, canvas_height)``.
    masks : InstanceMasks, if given
    """
    img = _image(img)
    _check_masks(label, masks)
    h, w = img.shape[:2]
    if max_ratio <= 1:
        return _and_masks((img.copy(), _label(label), (0, 0, w, h)), masks)
    rng = _rng(rng)
    ratio_x = rng.uniform(1, max_ratio)
    ratio_y = ratio_x if keep_ratio else rng.uniform(1, max_ratio)
    out_h, out_w = int(h * ratio_y), int(w * ratio_x)
    off_y = _randint(rng, out_h - h + 1)
    off_x = _randint(rng, out_w - w + 1)
    canvas = _pad(img, off_y, out_h - h - off_y, off_x, out_w - w - off_x, _fill_value(fill, img))
    window = (off_x, off_y, out_w, out_h)
    return _and_masks((canvas, bbox_translate(label, off_x, off_y), window),
                      None if masks is None else masks.expand((w, h), window))


def _sample_windows(rng, width, height, count, min_scale, max_scale, max_aspect_ratio):
    """``count`` random crop windows (corners, float32) as the SSD sampler draws them."""
    scale = rng.uniform(min_scale, max_scale, count)
    ratio = rng.uniform(np.maximum(1.0 / max_aspect_ratio, scale ** 2),
                        np.minimum(max_aspect_ratio, 1.0 / scale ** 2))
    crop_w = np.clip((width * scale * np.sqrt(ratio)).astype(np.int64), 1, width)
    crop_h = np.clip((height * scale / np.sqrt(ratio)).astype(np.int64), 1, height)
    left = (rng.uniform(0, 1, count) * (width - crop_w + 1)).astype(np.int64)
    top = (rng.uniform(0, 1, count) * (height - crop_h + 1)).astype(np.int64)
    return np.stack([left, top, left + crop_w, top + crop_h], axis=1).astype(np.float32)


def _constraint_bounds(constraints):
    bounds = np.array([(-np.inf if lo is None else lo, np.inf if hi is None else hi)
                       for lo, hi in constraints], dtype=np.float64)
    return bounds.reshape(-1, 2)


def _check_crop_args(min_scale, max_scale, max_aspect_ratio, max_trial):
    if not 0 < min_scale <= max_scale <= 1:
        raise ValueError('crop scales must satisfy 0 < min_scale <= max_scale <= 1, got %r, %r'
                         % (min_scale, max_scale))
    if max_aspect_ratio < 1 or max_trial < 1:
        raise ValueError('max_aspect_ratio must be >= 1 and max_trial >= 1, got %r, %r'
                         % (max_aspect_ratio, max_trial))


def random_crop_with_constraints(img, label, min_scale=0.3, max_scale=1, max_aspect_ratio=2,
                                 constraints=None, max_trial=50, rng=None, masks=None):
    """SSD random crop: a patch whose IoU with every box meets a sampled constraint.

    For each ``(min_iou, max_iou)`` constraint (None: unbounded), up to
    ``max_trial`` windows are drawn (area scale in [min_scale, max_scale] of
    the image, aspect ratio within [1/max_aspect_ratio, max_aspect_ratio]);
    the first whose IoU with every box lies in the bounds becomes a
    candidate, as does the whole image. One candidate that keeps at least one
    box is chosen at random (an image without boxes may get any candidate).
    Boxes whose centre falls outside the window are dropped, the rest
    clipped to it. If no candidate keeps a box, the whole image is returned
    with the boxes cut to it (possibly none). Trials are drawn all at once,
    so the choice has GluonCV's distribution but not its random stream.

    Parameters
    ----------
    img : numpy.ndarray or mx.nd.NDArray, HxWxC
    label : array N x 4+ or None
    min_scale, max_scale : float, default 0.3, 1
    max_aspect_ratio : float, default 2
    constraints : sequence of (min_iou, max_iou), optional
        Default: the SSD paper's ``SSD_CROP_CONSTRAINTS``.
    max_trial : int, default 50
    rng : RandomState or Generator, optional
    masks : InstanceMasks, optional
        Needs ``label``.

    Returns
    -------
    img : numpy.ndarray, the window's pixels
    label : numpy.ndarray float32 or None
    window : tuple
        ``(x, y, width, height)`` of the crop in the input image.
    masks : InstanceMasks, if given: the kept instances, cropped alike
    """
    img = _image(img)
    label = _label(label)
    _check_masks(label, masks)
    if masks is not None and label is None:
        raise ValueError('random_crop_with_constraints: masks need the label (which rows '
                         'the crop keeps)')
    _check_crop_args(min_scale, max_scale, max_aspect_ratio, max_trial)
    rng = _rng(rng)
    h, w = img.shape[:2]
    bounds = _constraint_bounds(SSD_CROP_CONSTRAINTS if constraints is None else constraints)
    trials = _sample_windows(rng, w, h, len(bounds) * max_trial, min_scale, max_scale,
                             max_aspect_ratio).reshape(len(bounds), max_trial, 4)
    boxes = np.zeros((0, 4), np.float32) if label is None else label[:, :4]
    if boxes.shape[0] == 0:
        ok = np.ones(trials.shape[:2], dtype=bool)
    else:
        iou = bbox_iou(trials.reshape(-1, 4), boxes).reshape(len(bounds), max_trial, -1)
        ok = (iou.min(axis=2) >= bounds[:, :1]) & (iou.max(axis=2) <= bounds[:, 1:])
    found = ok.any(axis=1)
    windows = np.concatenate([np.array([[0, 0, w, h]], np.float32),
                              trials[found, ok[found].argmax(axis=1)]])
    keep = _crop_keep(boxes, windows, allow_outside_center=False)
    usable = np.flatnonzero(keep.any(axis=1) | (boxes.shape[0] == 0))
    pick = usable[_randint(rng, len(usable))] if len(usable) else 0
    x0, y0, x1, y1 = (int(v) for v in windows[pick])
    out = img[y0:y1, x0:x1].copy()
    if label is not None:
        label = _apply_crop(label, windows[pick], keep[pick])
    window = (x0, y0, x1 - x0, y1 - y0)
    return _and_masks((out, label, window),
                      None if masks is None else masks[np.flatnonzero(keep[pick])].crop(window))


def _color_transform(rng, brightness_delta, contrast, saturation, hue_delta):
    """Draw the jitter as one affine colour map ``rgb -> matrix @ rgb + bias``."""
    matrix, bias = np.eye(3), np.zeros(3)

    def then(mat, add=0.0):
        nonlocal matrix, bias
        matrix, bias = mat @ matrix, mat @ bias + add

    def brightness():
        if rng.uniform(0, 1) > 0.5:
            then(np.eye(3), rng.uniform(-brightness_delta, brightness_delta))

    def contrast_op():
        if rng.uniform(0, 1) > 0.5:
            then(rng.uniform(*contrast) * np.eye(3))

    def saturation_op():
        if rng.uniform(0, 1) > 0.5:
            alpha = rng.uniform(*saturation)
            then(alpha * np.eye(3) + (1 - alpha) * np.outer(np.ones(3), _GRAY))

    def hue():
        if rng.uniform(0, 1) > 0.5:
            angle = np.deg2rad(rng.uniform(-hue_delta, hue_delta))
            cos, sin = np.cos(angle), np.sin(angle)
            rotate = np.array([[1.0, 0.0, 0.0], [0.0, cos, -sin], [0.0, sin, cos]])
            then(_YIQ_TO_RGB @ rotate @ _RGB_TO_YIQ)

    brightness()
    order = (contrast_op, saturation_op, hue) if _randint(rng, 2) else \
        (saturation_op, hue, contrast_op)
    for step in order:
        step()
    return matrix, bias


def random_color_distort(img, brightness_delta=32, contrast_low=0.5, contrast_high=1.5,
                         saturation_low=0.5, saturation_high=1.5, hue_delta=18, rng=None):
    """SSD photometric distortion, as GluonCV's ``random_color_distort``.

    Brightness first, then contrast, saturation and hue, with contrast either
    first or last at random; each step is applied with probability 0.5.
    Hue rotates the chroma plane of YIQ by up to ``hue_delta`` degrees
    (GluonCV multiplies its draw by pi, which turns any hue_delta >= 1 into a
    uniformly random hue). The steps are composed into one colour matrix, so
    the image is touched once; a uint8 image comes back as uint8 (rounded,
    saturated), other images as float32 clipped to [0, 255].

    Parameters
    ----------
    img : numpy.ndarray or mx.nd.NDArray, HxWx3 RGB in 0-255
    brightness_delta : float, default 32
    contrast_low, contrast_high : float, default 0.5, 1.5
    saturation_low, saturation_high : float, default 0.5, 1.5
    hue_delta : float, default 18
    rng : RandomState or Generator, optional

    Returns
    -------
    numpy.ndarray, HxWx3, uint8 for uint8 input, float32 otherwise
    """
    img = _image(img)
    if img.shape[2] != 3:
        raise ValueError('random_color_distort needs an RGB image (HxWx3), got shape %s'
                         % (img.shape,))
    matrix, bias = _color_transform(_rng(rng), brightness_delta, (contrast_low, contrast_high),
                                    (saturation_low, saturation_high), hue_delta)
    if img.dtype != np.uint8:
        img = img.astype(np.float32)
    if np.array_equal(matrix, np.eye(3)) and not bias.any():
        out = img.copy()
    else:
        affine = np.hstack([matrix, bias[:, None]]).astype(np.float32)
        out = cv2.transform(img, affine).reshape(img.shape)
    return out if out.dtype == np.uint8 else np.clip(out, 0, 255, out=out)


def normalize(img, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Scale 0-255 pixels to [0, 1], standardize per channel and move channels first.

    ``mx.nd.image.to_tensor`` followed by ``normalize``, in numpy.

    Parameters
    ----------
    img : numpy.ndarray or mx.nd.NDArray, HxWxC in 0-255
    mean, std : sequence of C floats
        Defaults: ImageNet RGB statistics.

    Returns
    -------
    numpy.ndarray, CxHxW float32
    """
    img = _image(img)
    mean = np.asarray(mean, dtype=np.float32).reshape(-1)
    std = np.asarray(std, dtype=np.float32).reshape(-1)
    if mean.size != img.shape[2] or std.size != img.shape[2] or not (std > 0).all():
        raise ValueError('normalize: mean and std need one value per channel (%d) and std > 0, '
                         'got %s and %s' % (img.shape[2], mean.tolist(), std.tolist()))
    scale, shift = 1.0 / (255.0 * std), mean / std
    out = np.empty((img.shape[2],) + img.shape[:2], dtype=np.float32)
    for c in range(img.shape[2]):
        np.multiply(img[:, :, c], scale[c], out=out[c], casting='unsafe')
        out[c] -= shift[c]
    return out


def fixed_size_augment(img, label, size, mean=IMAGENET_MEAN, std=IMAGENET_STD, zoom=True,
                       masks=None):
    """The training augmentation of the fixed-size detectors (GluonCV's SSD and YOLOv3
    presets): colour jitter; with ``zoom`` a zoom-out with probability 0.5 (canvas of the
    mean colour) and a constrained random crop; resize to ``size`` (``(width, height)``) with
    a random interpolation; horizontal flip; normalization. Draws from numpy's global RNG.

    Returns
    -------
    image : float32 ``3 x height x width``
    label : the boxes in the resized image's pixels (other columns kept)
    masks : InstanceMasks, if given: moved alike (not rasterized)
    """
    def step(transform, *args, **kwargs):
        """``transform``'s results without the masks, which it moves."""
        nonlocal masks
        if masks is None:
            return transform(*args, **kwargs)
        *out, masks = transform(*args, masks=masks, **kwargs)
        return tuple(out)

    img = random_color_distort(img)
    if zoom:
        if np.random.uniform() > 0.5:
            img, label, _ = step(random_expand, img, label, fill=[255 * m for m in mean])
        img, label, _ = step(random_crop_with_constraints, img, label)
    img, label = step(resize, img, label, size, interp=INTERP_RANDOM)
    img, label, _ = step(random_flip, img, label)
    return _and_masks((normalize(img, mean, std), label), masks)
